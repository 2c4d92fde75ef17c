//! With `RUST_LOG=info`, the 17-case rehearsal through the core writes one `call ended`
//! event per attempt to stderr, in order, carrying that attempt's digest (or `null`) and its
//! reason string; stdout stays the report alone.

use std::process::Command;

use serde_json::Value;

/// The value of `key="…"` in one event line's own fields (after the span's).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let own = line.split("call ended").nth(1)?;
    let start = own.find(&format!(" {key}=\""))? + key.len() + 3;
    let rest = &own[start..];
    Some(&rest[..rest.find('"')?])
}

#[test]
fn one_dispatch_event_per_attempt_with_its_digest_and_reason() {
    let out = Command::new(env!("CARGO_BIN_EXE_aml-testkit"))
        .args(["rehearse", "guarded-tool", "--adapter", "core"])
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is the report alone");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let events: Vec<&str> = stderr.lines().filter(|l| l.contains("call ended")).collect();

    // Every attempt that reached the boundary (a receipt, or a host error), in order; an
    // attempt Rust's types rule out never runs.
    let mut expected = Vec::new();
    for case in report["cases"].as_array().unwrap() {
        for attempt in case["attempts"].as_array().unwrap() {
            if attempt.get("statically_ruled_out").is_some() {
                continue;
            }
            let digest = attempt["proposal_sha256"].as_str().unwrap_or("null").to_owned();
            let reason = match attempt["reason"].as_str() {
                Some(reason) => reason.to_owned(),
                None => {
                    assert!(attempt["adapter_error"].is_string(), "{attempt}");
                    "host_error".to_owned()
                }
            };
            expected.push((digest, reason));
        }
    }
    assert_eq!(expected.len(), 18);
    let seen: Vec<(String, String)> = events
        .iter()
        .map(|l| {
            (
                field(l, "digest").expect("a digest field").to_owned(),
                field(l, "reason").expect("a reason field").to_owned(),
            )
        })
        .collect();
    assert_eq!(seen, expected);
    assert!(events
        .iter()
        .all(|l| l.contains(" INFO ") && field(l, "adapter") == Some("core")));
}

#[test]
fn without_rust_log_nothing_is_traced() {
    let out = Command::new(env!("CARGO_BIN_EXE_aml-testkit"))
        .args(["rehearse", "guarded-tool", "--adapter", "core"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("call ended"));
}

//! `aml-mcp-gate` relaying answers that are not strict JSON (issue 28): the server answered,
//! so the call was made. The answer reaches the client as the server wrote it, with the
//! verdict added; the call is recorded `dispatched` with a digest of the result's text, and
//! the verdict says why the result is not strict JSON. The server is the relay fixture's
//! `verbatim` tool, which writes the result text the test gives it.

use std::collections::HashMap;

use aml_testkit::wire::{fixture_dir, WireGate};
use serde_json::value::RawValue;
use serde_json::{json, Value};

const FIXTURE: &str = env!("CARGO_BIN_EXE_aml-testkit");
const VERDICT: &str = "aml.action-boundary/verdict";

/// The verdict of an answer that a JSON parser into values may refuse (it holds the server's
/// own text): read through raw members down to `_meta`.
fn verdict_of_raw(line: &str) -> Value {
    let message: HashMap<&str, &RawValue> = serde_json::from_str(line).unwrap();
    let result: HashMap<&str, &RawValue> = serde_json::from_str(message["result"].get()).unwrap();
    let meta: HashMap<&str, Value> = serde_json::from_str(result["_meta"].get()).unwrap();
    meta[VERDICT].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_call_whose_answer_is_not_strict_json_is_relayed_and_recorded_dispatched() {
    let dir = fixture_dir("relay-answers", "not-strict").unwrap();
    crate::bins::gate(); // in_front_of_fixture runs it
    let mut gate = WireGate::in_front_of_fixture(FIXTURE, &dir, &[]).unwrap();
    gate.initialize().await.unwrap();
    let deep = format!(
        r#"{{"content":[],"structuredContent":{{"x":{}{}}}}}"#,
        "[".repeat(130),
        "]".repeat(130)
    );
    let cases = [
        (deep.as_str(), "AML_JSON_TOO_DEEP", "returned"),
        // What Node writes for a string cut in the middle of an emoji.
        (
            r#"{"content":[{"type":"text","text":"cut \ud83d"}]}"#,
            "AML_JSON_LONE_SURROGATE",
            "returned",
        ),
        (
            r#"{"content":[],"structuredContent":{"a":1,"a":2}}"#,
            "AML_JSON_DUPLICATE_KEY",
            "returned",
        ),
        (
            r#"{"content":[],"structuredContent":{"n":9007199254740993}}"#,
            "9007199254740993",
            "returned",
        ),
        (
            r#"{"content":[],"structuredContent":{"n":1e400},"isError":true}"#,
            "NON_FINITE",
            "tool_error",
        ),
    ];
    let mut digests = Vec::new();
    for (n, (result, why, status)) in cases.iter().enumerate() {
        gate.send_json(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                               "params": {"name": "verbatim", "arguments": {"result": result}}}))
            .await;
        let line = gate.recv_raw().await.unwrap();
        // The server's own bytes reach the client, with the verdict added under `_meta`.
        assert!(
            line.contains(&result[1..]),
            "{result} was not relayed as sent: {line}"
        );
        let verdict = verdict_of_raw(&line);
        assert_eq!(verdict["mcp_result_status"], *status, "{line}");
        assert_eq!(verdict["receipt"]["execution_status"], "dispatched", "{line}");
        let note = verdict["result_not_strict"].as_str().unwrap();
        assert!(note.contains(why), "{note}");
        // Taken over the result's exact text, written as one JSON string (ADR 007).
        let text = serde_json::to_string(result).unwrap();
        let digest = json!({"sha256": aml_core::Sha256Digest::of(text.as_bytes()).to_string(),
                            "bytes": text.len()});
        assert_eq!(verdict["result_digest"], digest, "{line}");
        digests.push(digest);
    }
    // A strict answer keeps the digest of its JSON (compact, keys sorted) and no note.
    let strict = json!({"result": r#"{"structuredContent":{"b":1,"a":[1.50]},"content":[]}"#});
    let answer = gate.call(json!("strict"), "verbatim", strict).await.unwrap();
    let verdict = &answer["result"]["_meta"][VERDICT];
    assert!(verdict.get("result_not_strict").is_none(), "{answer}");
    let canonical = r#"{"content":[],"structuredContent":{"a":[1.5],"b":1}}"#;
    assert_eq!(
        verdict["result_digest"]["sha256"],
        aml_core::Sha256Digest::of(canonical.as_bytes()).to_string()
    );
    let (status, dir) = gate.finish().await.unwrap();
    assert_eq!(status.code(), Some(0));
    let receipts = aml_testkit::mcp::read_json_lines(&dir.join("receipts.jsonl")).unwrap();
    assert_eq!(receipts.len(), cases.len() + 1);
    for (r, digest) in receipts.iter().zip(&digests) {
        assert_eq!(r["receipt"]["execution_status"], "dispatched", "{r}");
        assert_eq!(&r["result"], digest, "{r}");
    }
}

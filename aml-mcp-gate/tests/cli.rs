//! `aml-mcp-gate` refuses bad command lines and bad policies with a clear message, before
//! starting anything, and never writes to stdout (the MCP channel).

use std::process::Command;

fn gate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_aml-mcp-gate"))
        .args(args)
        .output()
        .unwrap()
}

fn temp(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("aml-mcp-cli-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn usage_errors_exit_2_and_say_why() {
    for (args, why) in [
        (&[][..], "missing `--`"),
        (&["--policy", "p.json", "--"][..], "missing the server command"),
        (&["--", "server"][..], "--policy is required"),
        (&["--policy", "a", "--policy", "b", "--", "s"][..], "given twice"),
        (&["--bogus", "x", "--", "s"][..], "unknown option"),
    ] {
        let out = gate(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains(why), "{args:?}");
    }
}

#[test]
fn a_malformed_policy_or_registry_is_refused_at_start() {
    let bad_policy = temp(
        "bad-policy.json",
        r#"{"protocol": "aml-action-policy/1", "rules": [{"tool": "t"}]}"#,
    );
    let out = gate(&["--policy", &bad_policy, "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid policy"));

    let policy = temp(
        "policy.json",
        r#"{"protocol": "aml-action-policy/1", "rules": []}"#,
    );
    let dup = temp("dup.json", r#"{"tools": [], "tools": []}"#);
    let out = gate(&["--policy", &policy, "--tools", &dup, "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("AML_JSON_DUPLICATE_KEY"));

    let missing = gate(&["--policy", "/nonexistent/policy.json", "--", "true"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read"));
}

//! `aml-mcp-gate`'s command line: usage errors name the argument and exit 2 before anything
//! starts, bad files exit 2, an upstream that is not an MCP server ends the gate (exit 1)
//! within the handshake limit, and stdout (the MCP channel) stays empty.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cli_support;

use cli_support::{gate, temp, GATE};

fn policy() -> String {
    temp(
        "policy.json",
        r#"{"protocol": "aml-action-policy/1", "rules": []}"#,
    )
}

#[test]
fn usage_errors_exit_2_and_name_the_argument() {
    let policy = policy();
    for (args, why) in [
        (vec![], "--policy"),
        (vec!["--policy", &policy], "SERVER_COMMAND"),
        (vec!["--", "server"], "--policy"),
        (vec!["--policy", "a", "--policy", "b", "--", "s"], "--policy"),
        (vec!["--bogus", "x", "--", "s"], "--bogus"),
        (
            vec!["--policy", &policy, "--approve", "email", "--", "s"],
            "email",
        ),
        (
            vec![
                "--policy",
                &policy,
                "--approval-port",
                "99999",
                "--approve",
                "web",
                "--",
                "s",
            ],
            "99999",
        ),
        (
            vec!["--policy", &policy, "--approval-port", "8080", "--", "s"],
            "--approve",
        ),
        (
            vec![
                "--policy",
                &policy,
                "--approve",
                "tty",
                "--approval-port",
                "8080",
                "--",
                "s",
            ],
            "--approve web",
        ),
        (
            vec!["--policy", &policy, "--approver-key", "k.json", "--", "s"],
            "--approve",
        ),
        (
            vec!["--policy", &policy, "--upstream-timeout", "0", "--", "s"],
            "--upstream-timeout",
        ),
        (
            vec!["--policy", &policy, "--sampling", "maybe", "--", "s"],
            "maybe",
        ),
    ] {
        let out = gate(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
}

#[test]
fn version_and_help_work_anywhere() {
    let out = gate(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("aml-mcp-gate {}", env!("CARGO_PKG_VERSION"))
    );
    let out = gate(&["--policy", "p.json", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--upstream-timeout",
        "--handshake-timeout",
        "--sampling",
        "--elicitation",
        "--max-message-bytes",
        "Exit status",
    ] {
        assert!(help.contains(flag), "{flag}: {help}");
    }
}

#[test]
fn unreadable_or_malformed_files_exit_2_before_the_server_starts() {
    let marker = aml_test_support::scratch_dir("gate-cli", "unstarted").join("started");
    let server = format!("touch {}", marker.display());
    let bad_policy = temp(
        "bad-policy.json",
        r#"{"protocol": "aml-action-policy/1", "rules": [{"tool": "t"}]}"#,
    );
    let out = gate(&["--policy", &bad_policy, "--", "sh", "-c", &server]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid policy"));

    let policy = policy();
    let dup = temp("dup.json", r#"{"tools": [], "tools": []}"#);
    let out = gate(&["--policy", &policy, "--tools", &dup, "--", "sh", "-c", &server]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("AML_JSON_DUPLICATE_KEY"));

    let missing = gate(&["--policy", "/nonexistent/policy.json", "--", "sh", "-c", &server]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read"));
    assert!(!marker.exists(), "no server was started");
}

/// The gate in front of `server`, with the client's `initialize` already sent; its stdin
/// stays open. The gate's exit status and stderr, waited for at most 20 s.
async fn handshake(server: &[&str], limit: &str) -> (Option<i32>, String, Duration) {
    use tokio::io::AsyncWriteExt;
    let policy = policy();
    let started = Instant::now();
    let mut child = tokio::process::Command::new(GATE)
        .args(["--policy", &policy, "--handshake-timeout", limit, "--"])
        .args(server)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    stdin.write_all(init).await.unwrap();
    stdin.write_all(b"\n").await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("the gate ends by itself")
        .unwrap();
    drop(stdin);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let answer: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_default();
    assert_eq!(answer["id"], 1, "the client's initialize is answered: {stdout}");
    assert!(answer["error"]["code"].is_i64(), "{stdout}");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test]
async fn an_upstream_that_does_not_complete_the_handshake_ends_the_gate_with_a_clear_message() {
    // `cat` sends the initialize back; `sleep` never answers; `true` exits.
    for (server, limit, why) in [
        (vec!["cat"], "30", "sent the client's initialize back"),
        (
            vec!["sleep", "30"], // simulates a server that never answers
            "1",
            "did not answer the client's initialize within 1s",
        ),
        (vec!["true"], "30", "is gone"),
    ] {
        let (code, stderr, took) = handshake(&server, limit).await;
        assert_eq!(code, Some(1), "{server:?}: {stderr}");
        assert!(stderr.contains(why), "{server:?}: {stderr}");
        assert!(took < Duration::from_secs(10), "{server:?} took {took:?}");
    }
    let out = gate(&["--policy", &policy(), "--", "/nonexistent/server"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot start"));
}

#[test]
fn started_by_hand_on_a_terminal_the_gate_checks_the_server_at_once() {
    // `script` gives the gate a terminal on stdin, as a person running it by hand.
    let command = format!("{GATE} --policy {} -- cat", policy());
    let started = Instant::now();
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) runs the gate on a terminal");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("sent the gate's ping back"), "{shown}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_config_file_is_checked_like_flags_and_flags_win() {
    let dir = aml_test_support::scratch_dir("gate-cli", "config");
    std::fs::write(
        dir.join("policy.json"),
        r#"{"protocol": "aml-action-policy/1", "rules": []}"#,
    )
    .unwrap();
    let config = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let unknown = config("unknown.toml", "policy = \"policy.json\"\npolicee = 1\n");
    let out = gate(&["--config", &unknown]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("policee"));

    let no_server = config("no-server.toml", "policy = \"policy.json\"\n");
    let out = gate(&["--config", &no_server]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("server command is required"));

    let port = config(
        "port.toml",
        "policy = \"policy.json\"\nserver = [\"s\"]\n[approval]\nport = 8080\n",
    );
    let out = gate(&["--config", &port]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--approve web"));

    // The policy path is relative to the file; a flag wins over the file.
    let bad = config("bad-policy.json", "{");
    let relative = config(
        "relative.toml",
        "policy = \"bad-policy.json\"\nserver = [\"s\"]\n",
    );
    let out = gate(&["--config", &relative, "--state", "memory"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&bad));
    let good = dir.join("policy.json").display().to_string();
    let out = gate(&[
        "--config",
        &relative,
        "--policy",
        &good,
        "--state",
        "memory",
        "--handshake-timeout",
        "1",
    ]);
    assert_ne!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn journal_commands_answer_bad_input_clearly_and_never_create_state() {
    let dir = aml_test_support::scratch_dir("gate-cli", "journal");
    let missing = dir.join("none.sqlite3").display().to_string();
    for (args, code, why) in [
        (
            vec!["journal", "receipts", "--since", "5w", "--state", &missing],
            2,
            "unit",
        ),
        (
            vec!["journal", "receipts", "--since", "-3", "--state", &missing],
            2,
            "'-3'",
        ),
        (
            vec!["journal", "reconcile", "x", "--note", "n", "--state", &missing],
            2,
            "'x'",
        ),
        (
            vec!["journal", "reconcile", "1", "--state", &missing],
            2,
            "--note",
        ),
        (
            vec!["journal", "frobnicate", "--state", &missing],
            2,
            "frobnicate",
        ),
        (
            vec!["journal", "unresolved", "--state", &missing],
            1,
            "does not exist",
        ),
        (
            vec!["journal", "unresolved", "--state", "memory"],
            1,
            "memory keeps no journal",
        ),
        (
            vec!["journal", "unresolved", "--state", ""],
            2,
            "--state is empty",
        ),
    ] {
        let started = Instant::now();
        let out = gate(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?}");
    }
    assert!(!dir.join("none.sqlite3").exists(), "reading created no state");
    // Looking at a state does not write its WAL out for commits (a serving gate does).
    let empty = dir.join("empty.sqlite3");
    std::fs::write(&empty, b"").unwrap();
    let out = gate(&["journal", "unresolved", "--state", &empty.display().to_string()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wal = std::fs::metadata(dir.join("empty.sqlite3-wal")).map_or(0, |m| m.len());
    assert!(wal < 1 << 20, "journal unresolved left a WAL of {wal} bytes");
}

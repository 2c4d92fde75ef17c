//! Who asks, from outside: a call that needs approval, made over HTTP with a named bearer
//! token by the official Python SDK client (which names itself in its `initialize`), shows
//! the approver its caller and client on the approval page; the person declines; the record
//! names the caller, and `journal receipts --caller` lists that caller's calls only.

use crate::session;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use session::*;

const TOKEN: &str = "ci-bot-token-0123456789abcdef";

#[test]
fn the_approval_page_shows_the_callers_name_and_client_and_the_journal_filters_by_caller() {
    let dir = work("http-requester");
    write_config(&dir, Some(true));
    write(&dir.join("tokens"), &format!("ci-bot {TOKEN}\n"));
    let path = |file: &str| dir.join(file).display().to_string();
    let state = path("state.sqlite3");
    let mut command = Command::new(GATE);
    command
        .args(["--policy", &path("policy.json"), "--tools", &path("tools.json")])
        .args(["--state", &state, "--tokens", &path("tokens")])
        .args(["--approve", "web", "--approval-timeout", "60"])
        .args(["--listen", "127.0.0.1:0", "--"])
        .arg(python())
        .arg(repo().join("scripts/interop/mcp_notice_server.py"))
        .env("AML_NOTICE_AUDIT", dir.join("audit.jsonl"))
        .stderr(Stdio::piped());
    let (mut gate, url) = listening("the HTTP gate", &mut command);
    let log = gate.stderr_lines();
    let line = log.wait_for(" at http://", WAIT);
    let page_url = line.split(" at http://").nth(1).unwrap().trim().to_owned();
    let (origin, page_token) = page_url.split_once("/?t=").unwrap();

    let arguments = json!({"to": TO, "body": "Deploy?"});
    let client = Child::spawn(
        "the Python SDK client",
        Command::new(python())
            .arg(repo().join("scripts/interop/mcp_replicas_client.py"))
            .arg(json!([{"url": url, "token": TOKEN}]).to_string())
            .args(["1", "send_notice", &arguments.to_string()])
            .env("AML_CLIENT_NAME", "release-agent")
            .env("AML_CLIENT_VERSION", "4.2.0")
            .stdout(Stdio::piped()),
    );
    let asked = pending(origin, page_token);
    assert_eq!(
        asked["requester"],
        json!({"caller": "ci-bot", "client_name": "release-agent", "client_version": "4.2.0",
               "session": null, "server": null}),
        "{asked}"
    );
    decide(origin, page_token, &asked, "deny");
    let out = client.output(Duration::from_secs(120));
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        outcome(&report["results"][0]),
        ("blocked".to_owned(), "approval_missing_or_mismatched".to_owned())
    );
    assert!(
        !dir.join("audit.jsonl").exists(),
        "a declined call reached the server"
    );
    // A clean exit stores every record before it ends.
    let ended = gate.terminate(WAIT);
    assert!(ended.success(), "{ended:?}: {}", log.so_far().join("\n"));

    let receipts = |caller: &str| -> Vec<Value> {
        let out = Command::new(GATE)
            .args(["journal", "receipts", "--caller", caller, "--state", &state])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let ci = receipts("ci-bot");
    assert_eq!(ci.len(), 1, "{ci:?}");
    assert_eq!(ci[0]["caller"], "ci-bot");
    assert_eq!(ci[0]["receipt"]["reason"], "approval_missing_or_mismatched");
    assert!(
        receipts("local").is_empty(),
        "no call of the host's own agent was made"
    );
}

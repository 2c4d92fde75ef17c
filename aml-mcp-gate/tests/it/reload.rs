//! A live policy, driven the way a user meets it: the official Python MCP SDK client keeps one
//! session open through `aml-mcp-gate` to a server built with the official Python SDK that
//! records every call it receives (`scripts/interop/mcp_notice_server.py`), while the test
//! edits `policy.json`, sends `SIGHUP`, and approves on the approval page.
//!
//! `scripts/interop-setup` installs the Python SDK into `target/interop`; without it these
//! tests fail, naming the setup to run.

use crate::session;

use serde_json::Value;
use session::*;

#[test]
fn a_rule_removed_and_sighup_sent_blocks_the_next_call_and_a_bad_file_fails_closed() {
    let dir = work("sighup");
    let mut session = Session::start(&dir, Some(false), &[]);
    let pid = session.gate_pid();
    let policy_path = dir.join("policy.json");

    assert_eq!(session.call(), pair("dispatched", "host_dispatch_returned"));
    assert_eq!(session.reached_server(), 1);

    write(&policy_path, &policy(None));
    hangup(&pid);
    session.wait_log("reloaded (SIGHUP)");
    assert_eq!(session.call(), pair("blocked", "no_exact_rule"));

    write(&policy_path, r#"{"protocol": "aml-action-policy/1", "rules": [}"#);
    hangup(&pid);
    let why = session.wait_log("reload (SIGHUP) failed");
    assert!(why.contains("policy.json"), "the log names the file: {why}");
    assert_eq!(session.call(), pair("blocked", "invalid_policy"));

    // No signal this time: the file watch sees the change.
    write(&policy_path, &policy(Some(false)));
    session.wait_log("reloaded (the files changed)");
    assert_eq!(session.call(), pair("dispatched", "host_dispatch_returned"));
    assert_eq!(
        session.reached_server(),
        2,
        "only the two allowed calls reached the server"
    );

    session.close();
    let reasons: Vec<Value> = receipts(&dir)
        .iter()
        .map(|r| r["receipt"]["reason"].clone())
        .collect();
    assert_eq!(
        reasons,
        [
            "host_dispatch_returned",
            "no_exact_rule",
            "invalid_policy",
            "host_dispatch_returned"
        ]
    );
}

#[test]
fn a_rule_revoked_while_its_call_waits_for_approval_ends_policy_changed_and_never_runs() {
    let dir = work("pending");
    let mut session = Session::start(
        &dir,
        Some(true),
        &["--approve", "web", "--approval-timeout", "60"],
    );
    // The page starts before the policy is put in force: its line comes first.
    let (origin, token) = page(&session);
    let pid = session.gate_pid();

    session.send();
    let proposal = pending(&origin, &token);

    write(&dir.join("policy.json"), &policy(None));
    hangup(&pid);
    session.wait_log("reloaded (SIGHUP)");

    // The approver, who has not seen the revocation, approves.
    approve(&origin, &token, &proposal);

    assert_eq!(outcome(&session.answer()), pair("blocked", "policy_changed"));
    assert_eq!(
        session.reached_server(),
        0,
        "the revoked call never reached the server"
    );
    session.close();
    let receipts = receipts(&dir);
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0]["receipt"]["reason"], "policy_changed");
    assert_eq!(
        receipts[0]["plan"]["proposal_sha256"],
        proposal["proposal_sha256"]
    );
}

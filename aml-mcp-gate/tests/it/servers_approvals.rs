//! `[[servers]]` (ADR 033) with approvals: one gate in front of two servers built with the
//! official Python SDK, driven by the official Python SDK client. A call to the server whose
//! tool needs no approval runs at once; one to the other waits on the approval page under
//! its exposed name, and reaches only its own server once approved, never once denied.
//! (Two gates sharing a state in front of two servers each: `replicas.rs`.)

use crate::session;

use serde_json::{json, Value};
use session::*;

fn order(tool: &str, body: &str) -> Value {
    json!({"call": tool, "arguments": {"to": TO, "body": body}})
}

#[test]
fn an_approval_through_a_gate_of_two_servers_reaches_only_the_tools_server() {
    let dir = work("servers-approvals");
    let mut session = Session::start_listed(&dir, &["--approve", "web", "--approval-timeout", "20"]);
    let (origin, token) = page(&session);

    session.order(order("a__send_notice", "No approval needed."));
    assert_eq!(
        outcome(&session.answer()),
        pair("dispatched", "host_dispatch_returned")
    );
    assert_eq!(
        (session.reached("audit-a.jsonl"), session.reached("audit-b.jsonl")),
        (1, 0)
    );

    session.order(order("b__send_notice", "Deploy?"));
    let asked = pending(&origin, &token);
    assert_eq!(
        asked["tool"], "b__send_notice",
        "the approver sees the exposed name: {asked}"
    );
    approve(&origin, &token, &asked);
    assert_eq!(
        outcome(&session.answer()),
        pair("dispatched", "host_dispatch_returned")
    );
    assert_eq!(
        (session.reached("audit-a.jsonl"), session.reached("audit-b.jsonl")),
        (1, 1)
    );

    session.order(order("b__send_notice", "Deploy again?"));
    let asked = pending(&origin, &token);
    decide(&origin, &token, &asked, "deny");
    assert_eq!(
        outcome(&session.answer()),
        pair("blocked", "approval_missing_or_mismatched")
    );
    assert_eq!(
        (session.reached("audit-a.jsonl"), session.reached("audit-b.jsonl")),
        (1, 1),
        "a denied call reaches no server"
    );
    session.close();

    let records = receipts(&dir);
    let named: Vec<(&str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["tool"].as_str().unwrap(),
                r["server"].as_str().unwrap_or("none"),
            )
        })
        .collect();
    assert_eq!(
        named,
        [
            ("a__send_notice", "a"),
            ("b__send_notice", "b"),
            ("b__send_notice", "b")
        ]
    );
}

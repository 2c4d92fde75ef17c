//! Callers on protocol 2026-07-28 (no sessions): requests from two named tokens are each
//! decided for their own caller — the Cedar principal is the token's name — and each record
//! names its caller; a caller the policy does not permit reaches
//! nothing.

use crate::common;
use crate::stateless;

use common::*;
use serde_json::{json, Value};
use stateless::*;

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";

#[test]
fn each_tokens_stateless_calls_are_decided_and_recorded_as_its_callers() {
    let dir = work("stateless-callers");
    std::fs::write(dir.join("tokens"), format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    std::fs::write(
        dir.join("policy.cedar"),
        "@id(\"alice-echoes\")\npermit(principal == Caller::\"alice\", action == Action::\"echo\", resource);\n",
    )
    .unwrap();
    let tokens = dir.join("tokens").display().to_string();
    let gate = gate_with_policy(&dir, "policy.cedar", &["--tokens", &tokens], true);
    let echo = |token: &str, id: u64, message: &str| {
        let bearer = format!("Bearer {token}");
        let mut headers = call_headers("echo", JSON_AND_SSE);
        headers.push(("authorization", bearer.as_str()));
        let body = call(json!(id), "echo", json!({"message": message}), None);
        let reply = request(gate.addr, "POST", &headers, &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let answer: Value = events(&reply.body)
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| serde_json::from_str(&reply.body).unwrap());
        answer
    };
    let alice = echo(ALICE, 1, "from alice");
    assert_eq!(
        alice["result"]["content"][0]["text"], "Echo: from alice",
        "{alice}"
    );
    let bob = echo(BOB, 1, "from bob");
    assert_eq!(bob["result"]["isError"], true, "{bob}");
    // A tools/call without an id is refused before the gate (nothing to answer) and still
    // recorded as bob's.
    let mut idless: Value =
        serde_json::from_str(&call(json!(9), "echo", json!({"message": "no id"}), None)).unwrap();
    idless.as_object_mut().unwrap().remove("id");
    let bearer = format!("Bearer {BOB}");
    let mut headers = call_headers("echo", JSON_AND_SSE);
    headers.push(("authorization", bearer.as_str()));
    let reply = request(gate.addr, "POST", &headers, &idless.to_string());
    assert_eq!(reply.status, 202, "{}", reply.body);
    let again = echo(ALICE, 2, "alice again");
    assert_eq!(
        again["result"]["content"][0]["text"], "Echo: alice again",
        "{again}"
    );
    // Only alice's calls reached the server.
    let reached = read(&dir, "reached.log");
    assert!(
        reached.contains("from alice") && reached.contains("alice again"),
        "{reached}"
    );
    assert!(
        !reached.contains("from bob") && !reached.contains("no id"),
        "{reached}"
    );
    drop(gate);
    let records: Vec<Value> = read(&dir, "receipts.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["record"] == "aml-call-record/1")
        .collect();
    assert_eq!(records[2]["refusal"], "malformed_request", "{:?}", records[2]);
    let seen: Vec<(&str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["caller"].as_str().unwrap_or("-"),
                r["receipt"]["reason"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("alice", "host_dispatch_returned"),
            ("bob", "no_permit"),
            ("bob", "-"),
            ("alice", "host_dispatch_returned")
        ]
    );
}

/// Sessions and 2026-07-28 relays each have a server of their own, so they share
/// `--max-sessions`: with one allowed and alice's relay open, bob's `initialize` gets 503;
/// bob's own 2026-07-28 call then takes the place of alice's idle relay.
#[test]
fn sessions_and_callers_relays_share_the_session_limit() {
    let dir = work("stateless-callers-cap");
    std::fs::write(dir.join("tokens"), format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    std::fs::write(
        dir.join("policy.cedar"),
        "permit(principal, action == Action::\"echo\", resource);\n",
    )
    .unwrap();
    let tokens = dir.join("tokens").display().to_string();
    let extra = ["--tokens", tokens.as_str(), "--max-sessions", "1"];
    let gate = gate_with_policy(&dir, "policy.cedar", &extra, true);
    let post = |token: &str, body: String, headers: Vec<(&str, &str)>| {
        let bearer = format!("Bearer {token}");
        let mut headers = headers;
        headers.push(("authorization", bearer.as_str()));
        request(gate.addr, "POST", &headers, &body)
    };
    let echo = |token: &str, id: u64| {
        let body = call(json!(id), "echo", json!({"message": "capped"}), None);
        post(token, body, call_headers("echo", JSON_AND_SSE))
    };
    assert_eq!(echo(ALICE, 1).status, 200);
    let refused = post(BOB, initialize_body(1), vec![JSON_AND_SSE, CONTENT_JSON]);
    assert_eq!(refused.status, 503, "{}", refused.body);
    let bobs = echo(BOB, 2);
    assert_eq!(bobs.status, 200, "alice's idle relay gave way: {}", bobs.body);
}

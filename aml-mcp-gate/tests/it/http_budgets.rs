//! Callers and budgets from outside: two gate processes (`--listen`, named `--tokens`) on one
//! PostgreSQL database, a Cedar policy that names callers and reads `context.usage`, and the
//! official Python MCP SDK sending 64 calls at once through both. One caller's first 20
//! sends in the hour run, every later one asks for approval (none is given: this gate has no
//! approver), whichever replica takes it; another caller is denied by the principal; the
//! server sees exactly the 20; the receipts name the caller and the usage each call was
//! decided on.

use crate::session;

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use session::*;

const ALICE_TOKEN: &str = "alice-token-0123456789abcdef";
const BOB_TOKEN: &str = "bob-token-0123456789abcdef";

/// A gate serving HTTP on a free port of 127.0.0.1; ended when dropped.
struct Replica {
    child: Child,
    url: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        if self.child.exited().is_none() {
            self.child.signal("TERM");
            let _ = self.child.wait_within(WAIT);
        }
    }
}

fn replica(dir: &std::path::Path, name: &str, state: &str) -> Replica {
    let path = |file: &str| dir.join(file).display().to_string();
    let mut command = Command::new(GATE);
    command
        .args(["--policy", &path("budget.cedar"), "--tools", &path("tools.json")])
        .args(["--receipts", &path(&format!("receipts-{name}.jsonl"))])
        .args(["--state", state, "--tokens", &path("tokens")])
        .args(["--listen", "127.0.0.1:0", "--"])
        .arg(python())
        .arg(repo().join("scripts/interop/mcp_notice_server.py"))
        .env("AML_NOTICE_AUDIT", dir.join("audit.jsonl"));
    let (child, url) = listening(&format!("replica {name}"), &mut command);
    Replica { child, url }
}

/// `count` identical sends at once from the token's caller, alternating between replicas.
fn send_at_once(replicas: &[&Replica], token: &str, count: usize, nonce: u128) -> Vec<(String, String)> {
    let targets: Vec<Value> = replicas
        .iter()
        .map(|r| json!({"url": r.url, "token": token}))
        .collect();
    let arguments = json!({"to": TO, "body": format!("Status {nonce}")});
    let client = Child::spawn(
        "the Python replicas client",
        Command::new(python())
            .arg(repo().join("scripts/interop/mcp_replicas_client.py"))
            .arg(Value::Array(targets).to_string())
            .args([&count.to_string(), "send_notice", &arguments.to_string()])
            .stdout(Stdio::piped()),
    );
    let out = client.output(Duration::from_secs(300));
    assert!(out.status.success(), "the client failed");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), count);
    results.iter().map(outcome).collect()
}

#[test]
fn a_budget_named_by_caller_is_shared_by_two_replicas_and_64_sends_at_once_over_run_it_by_none() {
    let dir = work("http-budgets");
    write_config(&dir, None);
    // Callers this run alone uses: the database keeps every run's counts for a day.
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    let (alice, bob) = (format!("alice-{nonce}"), format!("bob-{nonce}"));
    write(
        &dir.join("tokens"),
        &format!("{alice} {ALICE_TOKEN}\n{bob} {BOB_TOKEN}\n"),
    );
    write(
        &dir.join("budget.cedar"),
        &format!(
            r#"
@id("alice-under-budget")
permit(principal == Caller::"{alice}", action == Action::"send_notice", resource)
when {{ context.usage.hour < 20 }};
@id("alice-over-budget")
@approval("required")
permit(principal == Caller::"{alice}", action == Action::"send_notice", resource)
when {{ context.usage.hour >= 20 }};
"#
        ),
    );
    let state = postgres_url();
    let a = replica(&dir, "a", &state);
    let b = replica(&dir, "b", &state);
    let outcomes = send_at_once(&[&a, &b], ALICE_TOKEN, 64, nonce);
    let ran = outcomes.iter().filter(|(s, _)| s == "dispatched").count();
    let asked = outcomes
        .iter()
        .filter(|o| *o == &("blocked".to_owned(), "approval_unavailable".to_owned()))
        .count();
    assert_eq!((ran, asked), (20, 44), "{outcomes:?}");
    // The 65th, on either replica, asks too.
    let later = send_at_once(&[&b], ALICE_TOKEN, 1, nonce);
    assert_eq!(later, [("blocked".to_owned(), "approval_unavailable".to_owned())]);
    // Bob has no permit.
    let bobs = send_at_once(&[&a], BOB_TOKEN, 1, nonce);
    assert_eq!(bobs, [("blocked".to_owned(), "no_permit".to_owned())]);
    let reached = std::fs::read_to_string(dir.join("audit.jsonl")).map_or(0, |t| t.lines().count());
    assert_eq!(
        reached, 20,
        "exactly the 20 sends under the budget reached the server"
    );
    drop((a, b));
    let records = replica_records(&dir, &["a", "b"]);
    assert_eq!(records.len(), 66, "one record per call");
    let by = |caller: &str| records.iter().filter(|r| r["caller"] == caller).count();
    assert_eq!((by(&alice), by(&bob)), (65, 1));
    let mut hours: Vec<u64> = records
        .iter()
        .filter(|r| r["receipt"]["execution_status"] == "dispatched")
        .map(|r| r["usage"]["hour"].as_u64().unwrap())
        .collect();
    hours.sort_unstable();
    assert_eq!(
        hours,
        (0..20).collect::<Vec<_>>(),
        "each run send was decided on its own count"
    );
    assert!(records
        .iter()
        .filter(|r| r["receipt"]["reason"] == "approval_unavailable")
        .all(|r| r["usage"]["hour"].as_u64() >= Some(20) && r["policies"] == json!(["alice-over-budget"])));
}

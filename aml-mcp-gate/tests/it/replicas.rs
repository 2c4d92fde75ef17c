//! Several gates on one state: a proposal a person approved once is dispatched once, whichever
//! gate receives it. Two gate processes share one SQLite file (and, in the second test, one
//! PostgreSQL database); 64 identical calls arrive at once, half through each gate; a person
//! approves one of them on one gate's page. Exactly one call reaches the server (it counts),
//! and every other call ends blocked. The same with two gates each in front of two servers
//! (`[[servers]]`, ADR 033): the one call reaches only its tool's server. Driven with the
//! official Python MCP SDK client.

use crate::session;

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use session::*;

/// Where the calls go: a gate in front of one server, or of two (the call to the second's
/// tool, which needs the approval).
#[derive(Clone, Copy)]
enum Servers {
    One,
    Two,
}

impl Servers {
    fn start(self, dir: &std::path::Path, flags: &[&str]) -> Session {
        match self {
            Servers::One => Session::start(dir, Some(true), flags),
            Servers::Two => Session::start_listed(dir, flags),
        }
    }

    fn tool(self) -> &'static str {
        match self {
            Servers::One => "send_notice",
            Servers::Two => "b__send_notice",
        }
    }

    /// How many calls reached the tool's server, and how many any other.
    fn reached(self, dir: &std::path::Path) -> (usize, usize) {
        let count = |file: &str| std::fs::read_to_string(dir.join(file)).map_or(0, |t| t.lines().count());
        match self {
            Servers::One => (count("audit.jsonl"), 0),
            Servers::Two => (count("audit-b.jsonl"), count("audit-a.jsonl")),
        }
    }
}

fn race(tag: &str, state: &str, servers: Servers) {
    let dir = work(tag);
    let flags = ["--state", state, "--approve", "web", "--approval-timeout", "5"];
    let mut a = servers.start(&dir, &flags);
    let mut b = servers.start(&dir, &flags);
    let (origin, token) = page(&a);
    // One proposal for this run only: a shared database outlives runs.
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    let order = json!({"call": servers.tool(), "times": 32,
                       "arguments": {"to": TO, "body": format!("Deploy {nonce}?")}});
    a.order(order.clone());
    b.order(order);
    let first = pending(&origin, &token);
    approve(&origin, &token, &first);

    let mut outcomes = Vec::new();
    for session in [&a, &b] {
        let answer = session.answer();
        outcomes.extend(answer["results"].as_array().unwrap().iter().map(outcome));
    }
    assert_eq!(outcomes.len(), 64);
    let mut counts = std::collections::BTreeMap::new();
    for (status, reason) in &outcomes {
        *counts.entry(format!("{status}/{reason}")).or_insert(0) += 1;
    }
    eprintln!("{tag}: {counts:?}");
    let dispatched: Vec<_> = outcomes
        .iter()
        .filter(|(status, _)| status == "dispatched")
        .collect();
    assert_eq!(dispatched.len(), 1, "{outcomes:?}");
    for (status, reason) in &outcomes {
        assert!(
            status == "dispatched"
                || (status == "blocked"
                    && ["approval_error", "approval_reused_or_expired"].contains(&reason.as_str())),
            "{status} {reason}"
        );
    }
    assert_eq!(
        servers.reached(&dir),
        (1, 0),
        "exactly one call reached the server, the tool's"
    );
    a.close();
    b.close();
    let mine: Vec<Value> = receipts(&dir)
        .into_iter()
        .filter(|r| r["receipt"]["execution_status"] == "dispatched")
        .collect();
    assert_eq!(mine.len(), 1, "one dispatched receipt between the two gates");
}

#[test]
fn two_gates_on_one_sqlite_file_dispatch_an_approved_proposal_once() {
    let dir = work("replicas-sqlite-state");
    race(
        "replicas-sqlite",
        &dir.join("shared.sqlite3").display().to_string(),
        Servers::One,
    );
}

#[test]
fn two_gates_on_one_postgres_database_dispatch_an_approved_proposal_once() {
    race("replicas-postgres", &postgres_url(), Servers::One);
}

#[test]
fn two_gates_of_two_servers_on_one_sqlite_file_dispatch_an_approved_proposal_once() {
    let dir = work("replicas-servers-sqlite-state");
    race(
        "replicas-servers-sqlite",
        &dir.join("shared.sqlite3").display().to_string(),
        Servers::Two,
    );
}

#[test]
fn two_gates_of_two_servers_on_one_postgres_database_dispatch_an_approved_proposal_once() {
    race("replicas-servers-postgres", &postgres_url(), Servers::Two);
}

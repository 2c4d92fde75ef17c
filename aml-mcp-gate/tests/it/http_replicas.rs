//! Replicas over Streamable HTTP: two gate processes (`--listen`) on one PostgreSQL database,
//! a client (the official Python MCP SDK) that alternates between them, 64 concurrent copies of
//! one proposal, one approval on one gate's page: one dispatch, whichever replica claims the
//! grant; the server counts what reaches it (ADR 017).

use crate::session;

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use session::*;

/// A gate serving HTTP on a free port of 127.0.0.1; killed when dropped.
struct Replica {
    child: Child,
    url: String,
    page: (String, String),
}

impl Drop for Replica {
    fn drop(&mut self) {
        if self.child.exited().is_none() {
            self.child.signal("TERM");
            // Bounded; past it the guard kills it.
            let _ = self.child.wait_within(WAIT);
        }
    }
}

fn replica(dir: &std::path::Path, name: &str, state: &str) -> Replica {
    let mut command = Command::new(GATE);
    command
        .args(["--policy", &dir.join("policy.json").display().to_string()])
        .args(["--tools", &dir.join("tools.json").display().to_string()])
        .args([
            "--receipts",
            &dir.join(format!("receipts-{name}.jsonl")).display().to_string(),
        ])
        .args(["--state", state, "--approve", "web", "--approval-timeout", "5"])
        .args(["--listen", "127.0.0.1:0", "--"])
        .arg(python())
        .arg(repo().join("scripts/interop/mcp_notice_server.py"))
        .env("AML_NOTICE_AUDIT", dir.join("audit.jsonl"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = Child::spawn(&format!("replica {name}"), &mut command);
    let out = child.stdout_lines();
    let log = child.stderr_lines();
    // Its readiness line: where it listens.
    let url = out
        .next(WAIT)
        .trim()
        .strip_prefix("aml-mcp-gate: MCP at ")
        .expect("an MCP URL")
        .to_owned();
    let line = log.wait_for(" at http://", WAIT);
    let (_, url_of_page) = line.split_once(" at http://").unwrap();
    let (origin, token) = url_of_page.trim().split_once("/?t=").unwrap();
    let page = (origin.to_owned(), token.to_owned());
    Replica { child, url, page }
}

#[test]
fn two_http_replicas_on_one_postgres_database_dispatch_64_copies_of_an_approved_proposal_once() {
    let dir = work("http-replicas");
    write_config(&dir, Some(true));
    let state = postgres_url();
    let a = replica(&dir, "a", &state);
    let b = replica(&dir, "b", &state);
    // One proposal for this run only: the database outlives runs.
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    let arguments = json!({"to": TO, "body": format!("Release {nonce}?")});
    let client = Child::spawn(
        "the Python replicas client",
        Command::new(python())
            .arg(repo().join("scripts/interop/mcp_replicas_client.py"))
            .arg(json!([a.url, b.url]).to_string())
            .args(["64", "send_notice", &arguments.to_string()])
            .stdout(Stdio::piped()),
    );
    // The person approves the first copy the first page shows.
    let (origin, token) = &a.page;
    let first = pending(origin, token);
    approve(origin, token, &first);
    let out = client.output(Duration::from_secs(300));
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 64);
    assert_eq!(
        results.iter().filter(|r| r["target"] == 1).count(),
        32,
        "alternating"
    );
    let outcomes: Vec<(String, String)> = results.iter().map(outcome).collect();
    let dispatched = outcomes.iter().filter(|(s, _)| s == "dispatched").count();
    assert_eq!(dispatched, 1, "{outcomes:?}");
    assert!(outcomes.iter().all(|(s, r)| s == "dispatched"
        || (s == "blocked" && (r == "approval_error" || r == "approval_reused_or_expired"))));
    let reached = std::fs::read_to_string(dir.join("audit.jsonl")).map_or(0, |t| t.lines().count());
    assert_eq!(reached, 1, "exactly one copy reached the server");
    drop((a, b));
    let stored = replica_records(&dir, &["a", "b"]);
    assert_eq!(stored.len(), 64, "one receipt per copy, between the two replicas");
}

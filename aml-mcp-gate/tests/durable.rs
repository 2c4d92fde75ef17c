//! Durable by default: a gate killed (SIGKILL) while the server runs an approved call leaves
//! the call's intent in its state, the spent grant stays spent, and the journal commands show
//! and reconcile it. Driven with the official Python MCP SDK client and a server built with
//! the official Python SDK (see `session`).

mod session;

use std::process::Command;
use std::time::{Duration, Instant};

use aml_core::{ClaimStatus, GrantRef, GrantStore, Sha256Digest};
use serde_json::Value;
use session::*;

fn journal(state: &str, args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let out = Command::new(GATE)
        .arg("journal")
        .args(args)
        .args(["--state", state])
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (
        out.status.code(),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_gate_killed_during_a_call_leaves_its_intent_and_the_grant_stays_spent() {
    let dir = work("sigkill");
    let state = dir.join("state.sqlite3").display().to_string();
    let mut session = Session::start_with(
        &dir,
        Some(true),
        &["--approve", "web", "--approval-timeout", "60"],
        // The server holds the call long enough for the gate to be killed inside it.
        &[("AML_NOTICE_HOLD", "15")],
    );
    let (origin, token) = page(&session);
    let pid = session.gate_pid();
    session.send();
    let proposal = pending(&origin, &token);
    approve(&origin, &token, &proposal);
    let deadline = Instant::now() + WAIT;
    while session.reached_server() == 0 {
        assert!(Instant::now() < deadline, "the call never reached the server");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap()
        .success());
    let _ = session.client.kill();

    // After the restart the state says what may have happened.
    let restarted = Session::start(&dir, Some(true), &["--state", &state]);
    let (code, unresolved, stderr) = journal(&state, &["unresolved"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(unresolved.len(), 1, "{unresolved:?}");
    let intent = &unresolved[0];
    assert_eq!(intent["proposal_sha256"], proposal["proposal_sha256"]);
    assert_eq!(intent["grant_id"], proposal["grant_id"]);
    assert_eq!(intent["tool"], "send_notice");
    restarted.close();

    // The signed approval, replayed: its grant was spent by the killed gate's claim.
    let (code, records, stderr) = journal(&state, &["receipts"]);
    assert_eq!(code, Some(0), "{stderr}");
    let approval = records
        .iter()
        .find(|r| r["record"] == "aml-approval-record/1")
        .unwrap_or_else(|| panic!("the signed decision is among the receipts: {records:?}"));
    assert_eq!(approval["grant_id"], proposal["grant_id"]);
    let signed = approval["statement"].to_string();
    assert!(
        signed.contains(proposal["grant_id"].as_str().unwrap()),
        "{signed}"
    );
    let grant = GrantRef {
        approval_id: Some(approval["grant_id"].as_str().unwrap().to_owned()),
        proposal_sha256: approval["proposal_sha256"]
            .as_str()
            .unwrap()
            .parse::<Sha256Digest>()
            .unwrap(),
    };
    let store = aml_grants::SqliteStore::open(&state).unwrap();
    let replay = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(store.claim(&grant))
        .unwrap();
    assert_eq!(replay, ClaimStatus::AlreadyClaimed);
    assert_eq!(restarted_reached(&dir), 1, "nothing re-sent the call");

    // The host checks with the server, then reconciles; nothing is unresolved after that.
    let id = intent["id"].to_string();
    let (code, _, stderr) = journal(&state, &["reconcile", &id, "--note", "the notice was sent once"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(journal(&state, &["unresolved"]).1.is_empty());
    let (code, _, stderr) = journal(&state, &["reconcile", &id, "--note", "again"]);
    assert_eq!(
        code,
        Some(1),
        "a reconciled intent is not reconciled twice: {stderr}"
    );
}

fn restarted_reached(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("audit.jsonl")).map_or(0, |t| t.lines().count())
}

/// The gate's tasks let go of the receipt sink when the session ends: the gate exits at once,
/// with every record written (a reloader that held the sink once made every exit wait 5 s).
#[test]
fn a_gate_whose_client_leaves_exits_promptly_with_its_records_written() {
    let dir = work("exit");
    std::fs::write(dir.join("policy.json"), policy(None)).unwrap();
    let started = Instant::now();
    let out = Command::new(GATE)
        .args(["--policy", &dir.join("policy.json").display().to_string()])
        .args(["--state", &dir.join("state.sqlite3").display().to_string()])
        .arg("--")
        .arg(python())
        .arg(repo().join("scripts/interop/mcp_notice_server.py"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("not written"), "{stderr}");
    assert!(
        stderr.contains("state: SQLite file"),
        "the gate says where its state is: {stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_gate_on_postgres_state_journals_its_call_and_its_receipt() {
    let dir = work("postgres");
    let url = postgres_url();
    let mut session = Session::start(&dir, Some(false), &["--state", &url]);
    // One proposal for this run only: the database outlives runs.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    session.order(serde_json::json!({"call": "send_notice",
                                     "arguments": {"to": TO, "body": format!("Build {nonce} passed.")}}));
    let answer = session.answer();
    assert_eq!(outcome(&answer), pair("dispatched", "host_dispatch_returned"));
    let digest = answer["verdict"]["plan"]["proposal_sha256"].clone();
    session.close();

    // The database is shared with other runs: look for this call's digest.
    let (code, records, stderr) = journal(&url, &["receipts", "--since", "10m"]);
    assert_eq!(code, Some(0), "{stderr}");
    let mine: Vec<&Value> = records
        .iter()
        .filter(|r| r["plan"]["proposal_sha256"] == digest)
        .collect();
    assert_eq!(mine.len(), 1, "one receipt for the call: {records:?}");
    assert_eq!(mine[0]["receipt"]["execution_status"], "dispatched");
    let (code, unresolved, stderr) = journal(&url, &["unresolved"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        unresolved.iter().all(|i| i["proposal_sha256"] != digest),
        "the call's intent has its outcome: {unresolved:?}"
    );
}

//! Durable by default: a gate killed (SIGKILL) while the server runs an approved call leaves
//! the call's intent in its state, the spent grant stays spent, and the journal commands show
//! and reconcile it. Driven with the official Python MCP SDK client and a server built with
//! the official Python SDK (see `session`). With group commit, a gate killed at random
//! points of 1,000 pipelined calls (a raw JSON-RPC client, see `pipelined`) loses no call,
//! re-sends none, and leaves unresolved exactly the calls whose outcome was not yet durable;
//! a gate stopped by SIGTERM leaves none for an answered call.

use crate::pipelined;
use crate::session;

use std::process::Command;
use std::time::{Duration, Instant};

use aml_core::{ClaimStatus, GrantRef, GrantStore, Sha256Digest};
use serde_json::Value;
use session::*;

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
    wait_until("the call to reach the server", WAIT, || {
        (session.reached_server() > 0).then_some(())
    });
    assert!(Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap()
        .success());
    let _ = session.client.process().kill();

    // After the restart the state says what may have happened.
    let restarted = Session::start(&dir, Some(true), &["--state", &state]);
    let (code, unresolved, stderr) = journal(&state, &["unresolved"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(unresolved.len(), 1, "{unresolved:?}");
    let intent = &unresolved[0];
    assert_eq!(intent["proposal_sha256"], proposal["proposal_sha256"]);
    assert_eq!(intent["grant_id"], proposal["grant_id"]);
    assert_eq!(intent["tool"], "send_notice");
    // What an operator needs before reconciling: what it acted on, when (UTC, and how long
    // ago), and who approved it.
    assert_eq!(intent["resource"], session::TO, "{intent}");
    let at = intent["intent_at"].as_str().unwrap();
    assert!(
        at.len() == 24 && at.ends_with('Z') && at.as_bytes()[10] == b'T',
        "{intent}"
    );
    assert!(intent["age"].as_str().unwrap().ends_with('s'), "{intent}");
    assert_eq!(intent["approved"]["by"], "aml-mcp-gate-session", "{intent}");
    assert!(
        intent["approved"]["decided_at"].as_str().unwrap().ends_with('Z'),
        "{intent}"
    );
    assert!(stderr.is_empty(), "{stderr}");
    let help = Command::new(GATE).args(["journal", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let words = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("proposal_sha256 is the SHA-256 of the call's canonical proposal"),
        "{help}"
    );
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
    // The note is among the receipts, once, beside what the gate recorded.
    let (code, records, stderr) = journal(&state, &["receipts"]);
    assert_eq!(code, Some(0), "{stderr}");
    let notes: Vec<&Value> = records
        .iter()
        .filter(|r| r["record"] == "aml-reconcile-record/1")
        .collect();
    assert_eq!(notes.len(), 1, "{records:?}");
    assert_eq!(notes[0]["note"], "the notice was sent once");
    assert_eq!(notes[0]["intent_id"], intent["id"]);
    assert_eq!(notes[0]["proposal_sha256"], intent["proposal_sha256"]);
    assert_eq!(notes[0]["resource"], session::TO);
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

/// 50..950, different for each round and each run (printed, so a failure can be replayed
/// by reading the log).
fn kill_point(round: u64) -> usize {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    50 + ((nanos / 1000 + round * 7919) % 900) as usize
}

/// The call whose proposal is `digest`, among the run's 1,000.
fn calls_by_digest(run: &str) -> std::collections::HashMap<String, String> {
    (1..=1000)
        .map(|n| pipelined::body(run, n))
        .map(|body| (pipelined::digest(&body), body))
        .collect()
}

/// What must hold after any stop: one intent for every call the server saw and for no
/// other; a resolved intent is a call the server saw and answered, with exactly one receipt.
/// Returns (resolved, unresolved) digests.
fn check_journal(seen: &pipelined::Seen, run: &str) -> (Vec<String>, Vec<String>) {
    let calls = calls_by_digest(run);
    for (body, times) in &seen.server {
        assert_eq!(*times, 1, "the server saw {body:?} {times} times");
        assert!(
            seen.intents.contains_key(&pipelined::digest(body)),
            "the server saw {body:?}, which has no intent"
        );
    }
    for body in seen.answered.keys() {
        assert!(
            seen.server.contains_key(body),
            "{body:?} was answered without reaching the server"
        );
    }
    let (mut resolved, mut unresolved) = (vec![], vec![]);
    for (digest, intents) in &seen.intents {
        let body = calls
            .get(digest)
            .unwrap_or_else(|| panic!("an intent for no call of this run: {digest}"));
        assert_eq!(intents.len(), 1, "{body:?} has {} intents", intents.len());
        let receipts = seen.receipts.get(digest).cloned().unwrap_or_default();
        match &intents[0].1 {
            Some(outcome) => {
                assert_eq!(outcome, "dispatched", "{body:?}");
                assert!(
                    seen.server.contains_key(body),
                    "{body:?} resolved without reaching the server"
                );
                assert_eq!(receipts, ["dispatched"], "{body:?}: one receipt with its outcome");
                resolved.push(digest.clone());
            }
            None => unresolved.push(digest.clone()),
        }
    }
    let reached = unresolved
        .iter()
        .filter(|d| seen.server.contains_key(&calls[*d]))
        .count();
    assert_eq!(
        seen.server.len(),
        resolved.len() + reached,
        "the calls the server saw are the resolved ones and the unresolved ones that reached it"
    );
    (resolved, unresolved)
}

/// After the restart the journal lists exactly `unresolved`, and a gate started again on the
/// state sends the server nothing.
fn check_restart(dir: &std::path::Path, state: &std::path::Path, unresolved: &[String]) {
    let audit = || {
        std::fs::read_to_string(dir.join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    let before = audit();
    let out = pipelined::gate_command(dir, state, &[])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(audit(), before, "a restarted gate re-sent a call");
    let (code, listed, stderr) = journal(&state.display().to_string(), &["unresolved"]);
    assert_eq!(code, Some(0), "{stderr}");
    let mut listed: Vec<String> = listed
        .iter()
        .map(|i| i["proposal_sha256"].as_str().unwrap().to_owned())
        .collect();
    let mut expected = unresolved.to_vec();
    listed.sort();
    expected.sort();
    assert_eq!(
        listed, expected,
        "journal unresolved lists exactly the unresolved intents"
    );
}

#[test]
fn sigkill_at_random_points_of_1000_pipelined_calls_loses_and_resends_nothing() {
    for round in 0..4 {
        let dir = pipelined::run_dir(&format!("sigkill-pipelined-{round}"));
        let state = dir.join("state.sqlite3");
        let run = format!("kill round {round}");
        let stop_after = kill_point(round);
        let gate = pipelined::start_gate(&dir, &state);
        let (answered, _) = pipelined::pipeline(gate, &run, 1000, stop_after, "-KILL");
        let seen = pipelined::seen(&dir, &state, &run, answered);
        let (resolved, unresolved) = check_journal(&seen, &run);
        let calls = calls_by_digest(&run);
        for digest in &unresolved {
            assert!(
                !seen.receipts.contains_key(digest),
                "{:?}: an unresolved call has no receipt (outcome and record commit together)",
                calls[digest]
            );
        }
        for digest in seen.receipts.keys() {
            assert!(
                resolved.contains(digest),
                "a receipt without its durable outcome: {digest}"
            );
        }
        let answered_unresolved = unresolved
            .iter()
            .filter(|d| seen.answered.contains_key(&calls[*d]))
            .count();
        eprintln!(
            "round {round}: SIGKILL after {stop_after} answers; answered {}, server saw {}, intents {} \
             ({} resolved, {} unresolved: {} of them answered, {} in flight)",
            seen.answered.len(),
            seen.server.len(),
            seen.intents.len(),
            resolved.len(),
            unresolved.len(),
            answered_unresolved,
            unresolved.len() - answered_unresolved
        );
        check_restart(&dir, &state, &unresolved);
    }
}

#[test]
fn sigterm_during_1000_pipelined_calls_leaves_no_answered_call_unresolved() {
    let dir = pipelined::run_dir("sigterm-pipelined");
    let state = dir.join("state.sqlite3");
    let run = "term round";
    let stop_after = kill_point(0);
    let gate = pipelined::start_gate(&dir, &state);
    let (answered, log) = pipelined::pipeline(gate, run, 1000, stop_after, "-TERM");
    let seen = pipelined::seen(&dir, &state, run, answered);
    let (resolved, unresolved) = check_journal(&seen, run);
    let calls = calls_by_digest(run);
    for body in seen.answered.keys() {
        let digest = pipelined::digest(body);
        assert!(
            resolved.contains(&digest),
            "{body:?} was answered, but its intent is unresolved"
        );
    }
    for digest in &unresolved {
        // Calls in flight at the signal are recorded as abandoned (outcome unknown).
        let receipts = seen.receipts.get(digest).cloned().unwrap_or_default();
        assert!(
            receipts.is_empty() || receipts == ["unknown"],
            "{:?}: {receipts:?}",
            calls[digest]
        );
    }
    // The calls in flight at once shared commits.
    let (writes, commits) =
        pipelined::commits(&log).unwrap_or_else(|| panic!("no commit count in the log: {log}"));
    assert!(
        writes >= 2 * resolved.len() as u64 && commits * 4 < writes,
        "{writes} writes in {commits} commits"
    );
    eprintln!(
        "SIGTERM after {stop_after} answers; answered {}, server saw {}, intents {} ({} resolved, {} unresolved, none answered); {writes} writes in {commits} commits",
        seen.answered.len(),
        seen.server.len(),
        seen.intents.len(),
        resolved.len(),
        unresolved.len()
    );
    check_restart(&dir, &state, &unresolved);
}

//! SQLite: the one-use contract, expiry, races across threads and across processes, many
//! processes creating one file, claim and intent in one transaction, a crash after the claim
//! and inside the tool callback, and error causes.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aml_core::{ClaimStatus, GrantStore, ReceiptReason};
use aml_grants::{
    GrantIssuer, GrantLifetimes, JournaledExecutor, JournaledGrants, ManualClock, ReceiptJournal, SqliteStore,
};
use common::*;

#[test]
fn sqlite_store_is_one_use_and_durable_across_reopening() {
    let path = temp_db("contract");
    rt().block_on(async {
        let store = SqliteStore::open(&path).unwrap();
        one_use_contract(&store, "sqlite").await;
        named_issue_contract(&store, "sqlite").await;
        let d = digest("survives");
        let id = store.issue(d, None).await.unwrap();
        drop(store);
        let reopened = SqliteStore::open(&path).unwrap();
        assert_eq!(
            reopened.claim(&grant(d, &id)).await.unwrap(),
            ClaimStatus::Claimed
        );
        assert_eq!(reopened.is_consumed(&id).await.unwrap(), Some(true));
    });
}

#[test]
fn sqlite_grants_expire_by_the_injected_clock() {
    let path = temp_db("expiry");
    let clock = Arc::new(ManualClock::new(5_000_000));
    let store = SqliteStore::open_with(&path, clock.clone(), GrantLifetimes::default()).unwrap();
    rt().block_on(async {
        let d = digest("expiring");
        let id = store.issue(d, Some(Duration::from_secs(10))).await.unwrap();
        clock.advance_ms(10_000);
        assert_eq!(store.claim(&grant(d, &id)).await.unwrap(), ClaimStatus::Expired);
    });
}

#[test]
fn sixty_four_threads_racing_for_one_grant_dispatch_once() {
    let path = temp_db("threads");
    let calls = Arc::new(AtomicUsize::new(0));
    let id = rt()
        .block_on(SqliteStore::open(&path).unwrap().issue(args_digest(), None))
        .unwrap();
    let barrier = Arc::new(std::sync::Barrier::new(64));
    let handles: Vec<_> = (0..64)
        .map(|_| {
            let (path, id, calls, barrier) =
                (path.clone(), id.clone(), Arc::clone(&calls), Arc::clone(&barrier));
            std::thread::spawn(move || {
                // Each thread has its own connection: the database decides, not a lock here.
                let store: Arc<dyn GrantStore> = Arc::new(SqliteStore::open(&path).unwrap());
                let tool = tool_with_grant(store, id, calls);
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                barrier.wait();
                rt.block_on(tool.call(&args())).unwrap().receipt().reason()
            })
        })
        .collect();
    let reasons: Vec<ReceiptReason> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(count(&reasons, ReceiptReason::HostDispatchReturned), 1);
    assert_eq!(count(&reasons, ReceiptReason::ApprovalReusedOrExpired), 63);
}

/// Child role for the process race (run only by it, through `--ignored`): claims the grant
/// named in the environment and prints whether this process dispatched.
#[test]
#[ignore = "a child role of eight_processes_racing_on_one_sqlite_file_dispatch_once"]
fn child_claimant() {
    let path = std::env::var("AML_GRANT_DB").expect("started by the process race");
    let id = std::env::var("AML_GRANT_ID").expect("started by the process race");
    let calls = Arc::new(AtomicUsize::new(0));
    let store: Arc<dyn GrantStore> = Arc::new(SqliteStore::open(&path).unwrap());
    let tool = tool_with_grant(store, id, Arc::clone(&calls));
    let start_at: u64 = std::env::var("AML_GRANT_START").unwrap().parse().unwrap();
    hold_until(start_at);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reason = rt.block_on(tool.call(&args())).unwrap().receipt().reason();
    println!(
        "AML_CHILD_RESULT reason={reason} calls={}",
        calls.load(Ordering::SeqCst)
    );
}

/// The processes' shared start line: holds until the wall clock reads `at_ms`, so that they
/// all start at one instant (a rendezvous at a deadline, not a wait for a condition).
fn hold_until(at_ms: u64) {
    std::thread::sleep(Duration::from_millis(at_ms.saturating_sub(now_ms())));
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn child(test: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    // The test's name in this binary: its module's path, then its own.
    let test = format!("sqlite::{test}");
    cmd.args([
        test.as_str(),
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd
}

#[test]
fn eight_processes_racing_on_one_sqlite_file_dispatch_once() {
    let path = temp_db("processes");
    let id = rt()
        .block_on(SqliteStore::open(&path).unwrap().issue(args_digest(), None))
        .unwrap();
    let start_at = (now_ms() + 1500).to_string();
    let children: Vec<_> = (0..8)
        .map(|_| {
            child("child_claimant")
                .env("AML_GRANT_DB", &path)
                .env("AML_GRANT_ID", &id)
                .env("AML_GRANT_START", &start_at)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<String> = children
        .into_iter()
        .map(|c| wait_bounded(c, Duration::from_secs(60)))
        .collect();
    let results: Vec<&str> = outputs
        .iter()
        .filter_map(|o| {
            o.split("AML_CHILD_RESULT ")
                .nth(1)
                .and_then(|rest| rest.lines().next())
        })
        .collect();
    assert_eq!(results.len(), 8, "{outputs:?}");
    let dispatched = results
        .iter()
        .filter(|r| r.contains("reason=host_dispatch_returned calls=1"))
        .count();
    let refused = results
        .iter()
        .filter(|r| r.contains("reason=approval_reused_or_expired calls=0"))
        .count();
    assert_eq!((dispatched, refused), (1, 7), "{results:?}");
}

/// Child role for the crash test (run only by it, through `--ignored`): dispatches through
/// a journaled tool that writes a marker and then hangs inside the callback until killed.
#[test]
#[ignore = "a child role of a_crash_inside_the_tool_leaves_an_unknown_intent_and_a_spent_grant"]
fn child_hangs_inside_the_tool() {
    let path = std::env::var("AML_CRASH_DB").expect("started by the crash test");
    let id = std::env::var("AML_CRASH_GRANT").expect("started by the crash test");
    let marker = std::env::var("AML_CRASH_MARKER").expect("started by the crash test");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let hanging = aml_core::tool_fn(move |_| {
        let marker = marker.clone();
        async move {
            std::fs::write(&marker, b"inside the tool").unwrap();
            std::thread::sleep(Duration::from_secs(600)); // hangs (simulated) until killed
            Ok(serde_json::json!(null))
        }
    });
    let journaled = JournaledExecutor::new(Arc::new(hanging), store.clone());
    let tool = tool_with_grant_and(store, id, Arc::new(journaled));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _ = rt.block_on(tool.call(&args()));
}

fn wait_for(path: &Path) {
    aml_test_support::wait_until(&format!("{path:?} to appear"), Duration::from_secs(30), || {
        path.exists().then_some(())
    });
}

#[test]
fn a_crash_inside_the_tool_leaves_an_unknown_intent_and_a_spent_grant() {
    let path = temp_db("crash");
    let marker = path.with_file_name("inside-tool");
    let id = rt()
        .block_on(SqliteStore::open(&path).unwrap().issue(args_digest(), None))
        .unwrap();
    let mut victim = child("child_hangs_inside_the_tool")
        .env("AML_CRASH_DB", &path)
        .env("AML_CRASH_GRANT", &id)
        .env("AML_CRASH_MARKER", &marker)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&marker);
    victim.kill().unwrap(); // SIGKILL: no destructor, no outcome record.
    victim.wait().unwrap();

    rt().block_on(async {
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let unresolved = store.unresolved().await.unwrap();
        assert_eq!(unresolved.len(), 1, "{unresolved:?}");
        assert_eq!(unresolved[0].proposal_sha256, args_digest().to_string());
        assert_eq!(unresolved[0].grant_id.as_deref(), Some(id.as_str()));
        assert_eq!(
            unresolved[0].resource.as_deref(),
            Some(args_proposal().resource())
        );
        assert_eq!(store.is_consumed(&id).await.unwrap(), Some(true));

        // A replay of the same approval is refused by the claim; nothing runs again.
        let calls = Arc::new(AtomicUsize::new(0));
        let replay = tool_with_grant(store.clone(), id.clone(), Arc::clone(&calls));
        let out = replay.call(&args()).await.unwrap();
        assert_eq!(out.receipt().reason(), ReceiptReason::ApprovalReusedOrExpired);
        assert_eq!(calls.load(Ordering::SeqCst), 0);

        // The host reconciles it once, with a note.
        assert!(store
            .reconcile(unresolved[0].id, "provider shows one message sent")
            .await
            .unwrap());
        assert!(!store.reconcile(unresolved[0].id, "again").await.unwrap());
        assert!(store.unresolved().await.unwrap().is_empty());
    });
}

#[test]
fn journaled_dispatches_record_their_outcomes() {
    let path = temp_db("journal");
    rt().block_on(async {
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let ok: Arc<dyn aml_core::ToolExecutor> =
            Arc::new(aml_core::tool_fn(|_| async { Ok(serde_json::json!(1)) }));
        let fails: Arc<dyn aml_core::ToolExecutor> = Arc::new(aml_core::tool_fn(|_| async {
            Err(aml_core::ToolError::new("smtp reset"))
        }));
        for (tool, expected) in [
            (ok, ReceiptReason::HostDispatchReturned),
            (fails, ReceiptReason::HostDispatchError),
        ] {
            let id = store.issue(args_digest(), None).await.unwrap();
            let journaled = Arc::new(JournaledExecutor::new(tool, store.clone()));
            let t = tool_with_grant_and(store.clone(), id, journaled);
            assert_eq!(t.call(&args()).await.unwrap().receipt().reason(), expected);
        }
        // Both outcomes recorded: nothing unresolved.
        assert!(store.unresolved().await.unwrap().is_empty());
    });
}

/// A commit that grows the WAL costs about a second flush (the file's new length goes
/// through the filesystem's journal): an open writes the WAL out to the length at which
/// SQLite checkpoints it, and commits then rewrite it in place.
#[test]
fn an_open_writes_the_wal_out_and_commits_then_rewrite_it() {
    const FRAME: u64 = 4096 + 24;
    let path = temp_db("wal-written-out");
    let wal = path.with_file_name("boundary.db-wal");
    let length = || std::fs::metadata(&wal).unwrap().len();
    rt().block_on(async {
        // A command that only looks at a state does not write it out.
        let looked = SqliteStore::open_for_inspection(&path).unwrap();
        assert!(
            length() < 32 + 1000 * FRAME,
            "inspection wrote {} bytes",
            length()
        );
        drop(looked);
        let store = SqliteStore::open(&path).unwrap();
        let opened = length();
        assert!(
            opened >= 32 + 1000 * FRAME,
            "the WAL is {opened} bytes after the open"
        );
        // More commits than one checkpoint's worth of frames.
        for n in 0..1200 {
            let d = digest(&format!("wal {n}"));
            let id = store.issue(d, None).await.unwrap();
            assert_eq!(store.claim(&grant(d, &id)).await.unwrap(), ClaimStatus::Claimed);
        }
        let after = length();
        assert!(
            after <= opened + 8 * FRAME,
            "the WAL grew from {opened} to {after} bytes"
        );
    });
}

/// Child role for the first-open race (run only by it, through `--ignored`): opens each of
/// the round files at its round's start time and prints how many opens failed.
#[test]
#[ignore = "a child role of sixteen_processes_creating_one_file_twenty_times_all_open_it"]
fn child_opens_new_files() {
    let dir = PathBuf::from(std::env::var("AML_OPEN_DIR").expect("started by the open race"));
    let start_at: u64 = std::env::var("AML_OPEN_START").unwrap().parse().unwrap();
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        hold_until(start_at + round * ROUND_MS);
        if let Err(e) = SqliteStore::open(dir.join(format!("round-{round}.db"))) {
            failures.push(e.to_string());
        }
    }
    println!("AML_CHILD_RESULT failed={} {failures:?}", failures.len());
}

const ROUNDS: u64 = 20;
const ROUND_MS: u64 = 250;

#[test]
fn sixteen_processes_creating_one_file_twenty_times_all_open_it() {
    let dir = temp_db("first-open").with_file_name("");
    let start_at = (now_ms() + 2000).to_string();
    let children: Vec<_> = (0..16)
        .map(|_| {
            child("child_opens_new_files")
                .env("AML_OPEN_DIR", &dir)
                .env("AML_OPEN_START", &start_at)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let results: Vec<String> = children
        .into_iter()
        .map(|c| wait_bounded(c, Duration::from_secs(120)))
        .map(|out| {
            out.split("AML_CHILD_RESULT ")
                .nth(1)
                .and_then(|rest| rest.lines().next())
                .unwrap_or("no result")
                .to_owned()
        })
        .collect();
    assert!(
        results.iter().all(|r| r.starts_with("failed=0 ")),
        "every one of 320 opens must succeed: {results:?}"
    );
}

#[test]
fn claim_and_intent_commit_together_and_the_outcome_resolves_the_intent() {
    let path = temp_db("claim-intent");
    rt().block_on(async {
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let journaled = JournaledGrants::new(store.clone());
        let id = aml_grants::new_grant_id().unwrap();
        store.issue_for(&id, &args_proposal(), None).await.unwrap();

        // The claim alone leaves an intent naming the grant and the tool it was issued for.
        assert_eq!(
            aml_core::GrantStore::claim(&journaled, &grant(args_digest(), &id))
                .await
                .unwrap(),
            ClaimStatus::Claimed
        );
        let open = store.unresolved().await.unwrap();
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(
            (
                open[0].grant_id.as_deref(),
                open[0].tool.as_str(),
                open[0].resource.as_deref()
            ),
            (
                Some(id.as_str()),
                "send_message",
                Some(args_proposal().resource())
            )
        );
        // A losing claim writes nothing.
        assert_eq!(
            aml_core::GrantStore::claim(&journaled, &grant(args_digest(), &id))
                .await
                .unwrap(),
            ClaimStatus::AlreadyClaimed
        );
        assert_eq!(store.unresolved().await.unwrap().len(), 1);
        store
            .reconcile(open[0].id, "test: claimed by hand")
            .await
            .unwrap();

        // Through the boundary: the claim writes the intent, the tool's return resolves it.
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&calls);
        let counting = aml_core::tool_fn(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(serde_json::json!({"sent": true})) }
        });
        let id = aml_grants::new_grant_id().unwrap();
        store.issue_for(&id, &args_proposal(), None).await.unwrap();
        let tool = tool_with_policy(
            policy(),
            Arc::new(journaled.clone()),
            id.clone(),
            Arc::new(journaled.executor(Arc::new(counting))),
        );
        let out = tool.call(&args()).await.unwrap();
        assert_eq!(out.receipt().reason(), ReceiptReason::HostDispatchReturned);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(store.unresolved().await.unwrap().is_empty());
    });
}

/// A policy that reads the fixed policy, except that once the grant in the database is
/// spent — i.e. at the boundary's re-check right after the claim — it writes a marker and
/// hangs, so the test can kill the process between the claim and the tool.
#[derive(Debug)]
struct HangAfterClaim {
    db: PathBuf,
    grant: String,
    marker: PathBuf,
}

impl aml_core::PolicySource for HangAfterClaim {
    fn current(&self) -> Arc<aml_core::Policy> {
        let conn = rusqlite::Connection::open(&self.db).unwrap();
        let spent: bool = conn
            .query_row(
                "SELECT consumed_at IS NOT NULL FROM aml_grants WHERE id = ?1",
                [&self.grant],
                |r| r.get(0),
            )
            .unwrap();
        if spent {
            std::fs::write(&self.marker, b"claimed").unwrap();
            std::thread::sleep(Duration::from_secs(600)); // hangs (simulated) until killed
        }
        policy()
    }
}

/// Child role for the kill test (run only by it, through `--ignored`).
#[test]
#[ignore = "a child role of a_kill_right_after_the_claim_leaves_an_unresolved_intent"]
fn child_is_killed_after_the_claim() {
    let path = PathBuf::from(std::env::var("AML_KILL_DB").expect("started by the kill test"));
    let id = std::env::var("AML_KILL_GRANT").unwrap();
    let marker = PathBuf::from(std::env::var("AML_KILL_MARKER").unwrap());
    let entered = marker.with_file_name("tool-entered");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let journaled = JournaledGrants::new(store);
    let tool = aml_core::tool_fn(move |_| {
        let entered = entered.clone();
        async move {
            std::fs::write(&entered, b"entered").unwrap();
            Ok(serde_json::json!(null))
        }
    });
    let policy = HangAfterClaim {
        db: path,
        grant: id.clone(),
        marker,
    };
    let guarded = tool_with_policy(
        policy,
        Arc::new(journaled.clone()),
        id,
        Arc::new(journaled.executor(Arc::new(tool))),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _ = rt.block_on(guarded.call(&args()));
}

#[test]
fn a_kill_right_after_the_claim_leaves_an_unresolved_intent() {
    let path = temp_db("kill-after-claim");
    let marker = path.with_file_name("claimed");
    let id = aml_grants::new_grant_id().unwrap();
    rt().block_on(
        SqliteStore::open(&path)
            .unwrap()
            .issue_for(&id, &args_proposal(), None),
    )
    .unwrap();
    let mut victim = child("child_is_killed_after_the_claim")
        .env("AML_KILL_DB", &path)
        .env("AML_KILL_GRANT", &id)
        .env("AML_KILL_MARKER", &marker)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&marker);
    victim.kill().unwrap(); // SIGKILL between the claim and the tool.
    victim.wait().unwrap();
    assert!(!marker.with_file_name("tool-entered").exists());

    rt().block_on(async {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.is_consumed(&id).await.unwrap(), Some(true));
        let unresolved = store.unresolved().await.unwrap();
        assert_eq!(
            unresolved.len(),
            1,
            "the spent grant must have an intent: {unresolved:?}"
        );
        assert_eq!(unresolved[0].grant_id.as_deref(), Some(id.as_str()));
        assert_eq!(unresolved[0].proposal_sha256, args_digest().to_string());
        assert_eq!(unresolved[0].tool, "send_message");
        assert_eq!(
            unresolved[0].resource.as_deref(),
            Some(args_proposal().resource())
        );
    });
}

#[test]
fn a_failing_claim_reports_the_database_cause() {
    let path = temp_db("cause");
    rt().block_on(async {
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let id = store.issue(args_digest(), None).await.unwrap();
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch("DROP TABLE aml_grants;")
            .unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let out = tool_with_grant(store, id, Arc::clone(&calls))
            .call(&args())
            .await
            .unwrap();
        assert_eq!(out.receipt().reason(), ReceiptReason::ApprovalConsumeError);
        let detail = out.detail().unwrap();
        assert!(
            detail.contains("sqlite claim failed") && detail.contains("no such table: aml_grants"),
            "{detail}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    });
}

/// SQLite's "unable to open database file" names no cause: the store names the usual ones.
#[test]
fn a_file_that_cannot_be_opened_is_refused_with_the_usual_causes_named() {
    let path = temp_db("cannot-open");
    std::fs::create_dir_all(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err().to_string();
    assert!(err.contains("unable to open database file"), "{err}");
    assert!(
        err.contains("-wal and -shm") && err.contains("is a directory"),
        "{err}"
    );
}

/// A granted call's outcome finds its intent through the grant index, not by reading the
/// whole journal; a new file indexes only granted intents.
#[test]
fn the_outcome_of_a_granted_call_finds_its_intent_by_index() {
    let path = temp_db("index");
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN UPDATE aml_journal SET outcome = 'dispatched'
             WHERE grant_id = 'g' AND outcome IS NULL",
        )
        .unwrap()
        .query_map([], |r| r.get::<_, String>(3))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(
        plan.iter()
            .any(|step| step.contains("USING INDEX aml_journal_grant_id")),
        "{plan:?}"
    );
    let index: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'aml_journal_grant_id'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(index.contains("WHERE grant_id IS NOT NULL"), "{index}");
}

#[test]
fn a_file_from_before_resources_opens_and_its_intents_list_without_one() {
    let path = temp_db("before-resources");
    {
        // The tables as the first release made them: no tool or resource on grants, no
        // resource on intents.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE aml_grants (id TEXT PRIMARY KEY, digest TEXT NOT NULL,
                 issued_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, consumed_at INTEGER);
             CREATE TABLE aml_journal (id INTEGER PRIMARY KEY, digest TEXT NOT NULL, grant_id TEXT,
                 tool TEXT NOT NULL, intent_at INTEGER NOT NULL, outcome TEXT, detail TEXT,
                 outcome_at INTEGER, reconciled_at INTEGER, reconcile_note TEXT);
             INSERT INTO aml_journal (digest, grant_id, tool, intent_at)
                 VALUES ('old-digest', NULL, 'send_message', 1);",
        )
        .unwrap();
    }
    rt().block_on(async {
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let id = aml_grants::new_grant_id().unwrap();
        store.issue_for(&id, &args_proposal(), None).await.unwrap();
        let journaled = JournaledGrants::new(store.clone());
        assert_eq!(
            GrantStore::claim(&journaled, &grant(args_digest(), &id))
                .await
                .unwrap(),
            ClaimStatus::Claimed
        );
        let listed: Vec<_> = store
            .unresolved()
            .await
            .unwrap()
            .into_iter()
            .map(|u| (u.proposal_sha256, u.resource))
            .collect();
        assert_eq!(
            listed,
            [
                ("old-digest".to_owned(), None),
                (
                    args_digest().to_string(),
                    Some(args_proposal().resource().to_owned())
                ),
            ]
        );
    });
}

//! PostgreSQL (feature `postgres`): the one-use contract, expiry by the database clock,
//! connections racing for one grant under every isolation level, reconnection after the
//! server ends a connection, claim and intent in one statement, error causes, and the
//! journal. The server's address comes from
//! `AML_POSTGRES_URL` (`scripts/test` sets it for the machine's server on 127.0.0.1:5432);
//! without a reachable server these tests fail, saying so.
#![cfg(feature = "postgres")]

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aml_core::{ClaimStatus, GrantStore, ReceiptReason};
use aml_grants::{
    DecisionJournal, DecisionRecord, GrantIssuer, GrantLifetimes, IntentEntry, JournaledGrants,
    PostgresStore, ReceiptJournal, RecordedOutcome,
};
use common::*;

fn url() -> String {
    std::env::var("AML_POSTGRES_URL").expect(
        "AML_POSTGRES_URL is not set: point it at a PostgreSQL server (scripts/test uses \
         host=127.0.0.1 port=5432 user=postgres dbname=test)",
    )
}

async fn connect() -> PostgresStore {
    connect_with("").await
}

/// Connects with extra connection parameters appended to `AML_POSTGRES_URL`.
async fn connect_with(extra: &str) -> PostgresStore {
    let config = format!("{} {extra}", url());
    PostgresStore::connect(&config, GrantLifetimes::default())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {:?} is unreachable: {e}", url()))
}

/// A plain connection for the test's own queries.
async fn admin() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {:?} is unreachable: {e}", url()));
    tokio::spawn(connection);
    client
}

fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{tag}-{}-{nanos}", std::process::id())
}

#[tokio::test]
async fn postgres_store_is_one_use() {
    let store = connect().await;
    one_use_contract(&store, &unique("contract")).await;
    named_issue_contract(&store, &unique("named")).await;
}

#[tokio::test]
async fn postgres_grants_expire_by_the_database_clock() {
    let store = connect().await;
    let d = digest(&unique("expiry"));
    let id = store.issue(d, Some(Duration::from_millis(200))).await.unwrap();
    // The database's own clock passes the grant's expiry (a claim's `now()` comes later).
    let admin = admin().await;
    aml_test_support::wait_until_async(
        "the database clock to pass the grant's expiry",
        Duration::from_secs(10),
        || async {
            let past: bool = admin
                .query_one(
                    "SELECT expires_at < clock_timestamp() FROM aml_grants WHERE id = $1",
                    &[&id],
                )
                .await
                .unwrap()
                .get(0);
            past.then_some(())
        },
    )
    .await;
    assert_eq!(store.claim(&grant(d, &id)).await.unwrap(), ClaimStatus::Expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_connections_racing_for_one_grant_dispatch_once() {
    race(8, "").await;
}

/// Under `REPEATABLE READ` and `SERIALIZABLE` a claimant that waited for the winner's row
/// lock gets a serialization failure from the server: it must still be told the grant is
/// spent (`approval_reused_or_expired`), not that the store failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_losers_are_refused_under_every_isolation_level() {
    for level in ["read committed", "repeatable read", "serializable"] {
        // Spaces in a server option are escaped with a backslash, itself escaped once more
        // inside the quoted connection parameter.
        let extra = format!(
            "options='-c default_transaction_isolation={}'",
            level.replace(' ', r"\\ ")
        );
        let (client, connection) =
            tokio_postgres::connect(&format!("{} {extra}", url()), tokio_postgres::NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        let in_force: String = client
            .query_one("SHOW transaction_isolation", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(in_force, level);
        race(16, &extra).await;
    }
}

/// `n` connections (each its own store) race for one grant: one dispatch, `n - 1` refusals.
async fn race(n: usize, extra: &str) {
    let issuer = connect_with(extra).await;
    let id = issuer.issue(args_digest(), None).await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut tools = Vec::new();
    for _ in 0..n {
        let store: Arc<dyn GrantStore> = Arc::new(connect_with(extra).await);
        tools.push(Arc::new(tool_with_grant(store, id.clone(), Arc::clone(&calls))));
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = tools
        .into_iter()
        .map(|tool| {
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                tool.call(&args()).await.unwrap().receipt().reason()
            })
        })
        .collect();
    let mut reasons = Vec::new();
    for t in tasks {
        reasons.push(t.await.unwrap());
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "{extra}: {reasons:?}");
    assert_eq!(count(&reasons, ReceiptReason::HostDispatchReturned), 1, "{extra}");
    assert_eq!(
        count(&reasons, ReceiptReason::ApprovalReusedOrExpired),
        n - 1,
        "{extra}: {reasons:?}"
    );
    assert_eq!(issuer.is_consumed(&id).await.unwrap(), Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_ended_is_replaced_and_the_next_claim_succeeds() {
    // A name of our own, so only this test's backends are terminated.
    let name = unique("aml-grants-test");
    let store = connect_with(&format!("application_name={name}")).await;
    let d = digest(&unique("reconnect"));
    let before = store.issue(d, None).await.unwrap();
    let admin = admin().await;
    let ours = "SELECT pid FROM pg_stat_activity WHERE application_name = $1";
    let old: Vec<i32> = admin
        .query(ours, &[&name])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!old.is_empty(), "the store holds a connection");
    let ended: i64 = admin
        .query_one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))
             FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended, old.len() as i64);

    // The pooled connection is dead; the claim runs on a new one.
    assert_eq!(
        store.claim(&grant(d, &before)).await.unwrap(),
        ClaimStatus::Claimed
    );
    let after = store.issue(d, None).await.unwrap();
    assert_eq!(
        store.claim(&grant(d, &after)).await.unwrap(),
        ClaimStatus::Claimed
    );
    let now: Vec<i32> = admin
        .query(ours, &[&name])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        !now.is_empty() && now.iter().all(|pid| !old.contains(pid)),
        "{old:?} then {now:?}"
    );
}

#[tokio::test]
async fn claim_and_intent_are_written_together() {
    let store = Arc::new(connect().await);
    let journaled = JournaledGrants::new(store.clone());
    let id = aml_grants::new_grant_id().unwrap();
    store.issue_for(&id, &args_proposal(), None).await.unwrap();
    let mine = |list: Vec<aml_grants::UnresolvedIntent>, id: &str| {
        list.into_iter()
            .filter(|u| u.grant_id.as_deref() == Some(id))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        journaled.claim(&grant(args_digest(), &id)).await.unwrap(),
        ClaimStatus::Claimed
    );
    let open = mine(store.unresolved().await.unwrap(), &id);
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0].tool, "send_message");
    assert_eq!(open[0].resource.as_deref(), Some(args_proposal().resource()));
    assert_eq!(
        journaled.claim(&grant(args_digest(), &id)).await.unwrap(),
        ClaimStatus::AlreadyClaimed
    );
    assert_eq!(
        mine(store.unresolved().await.unwrap(), &id).len(),
        1,
        "a loser writes no intent"
    );
    assert!(store
        .reconcile(open[0].id, "test: claimed by hand")
        .await
        .unwrap());

    // The wrapped tool's return resolves it.
    let id = aml_grants::new_grant_id().unwrap();
    store.issue_for(&id, &args_proposal(), None).await.unwrap();
    let ok = Arc::new(aml_core::tool_fn(|_| async { Ok(serde_json::json!(1)) }));
    let tool = tool_with_policy(
        policy(),
        Arc::new(journaled.clone()),
        id.clone(),
        Arc::new(journaled.executor(ok)),
    );
    let out = tool.call(&args()).await.unwrap();
    assert_eq!(out.receipt().reason(), ReceiptReason::HostDispatchReturned);
    assert!(mine(store.unresolved().await.unwrap(), &id).is_empty());
}

#[tokio::test]
async fn failures_report_the_database_cause_and_never_the_password() {
    // A claim the server refuses: the receipt's detail says why.
    let store: Arc<dyn GrantStore> = Arc::new(connect().await);
    let calls = Arc::new(AtomicUsize::new(0));
    let out = tool_with_grant(store, "nul\0byte".into(), Arc::clone(&calls))
        .call(&args())
        .await
        .unwrap();
    assert_eq!(out.receipt().reason(), ReceiptReason::ApprovalConsumeError);
    let detail = out.detail().unwrap();
    assert!(
        detail.contains("postgres claim failed") && detail.contains("invalid byte sequence"),
        "{detail}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // A store that cannot set up its tables says so, without the connection's password.
    let secret = unique("s3cret");
    let refused = PostgresStore::connect(
        &format!(
            "{} password={secret} options='-c default_transaction_read_only=on'",
            url()
        ),
        GrantLifetimes::default(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(refused.contains("read-only transaction"), "{refused}");
    assert!(!refused.contains(&secret), "{refused}");
}

#[tokio::test]
async fn the_journal_lists_and_reconciles_intents_without_outcomes() {
    let store = connect().await;
    let d = digest(&unique("journal"));
    let entry = IntentEntry {
        proposal_sha256: d,
        grant_id: Some("g".into()),
        tool: "send_message".into(),
        resource: "ops@example.com".into(),
    };
    let finished = store.intent(&entry).await.unwrap();
    store
        .outcome(finished, RecordedOutcome::Dispatched, None)
        .await
        .unwrap();
    let open = store.intent(&entry).await.unwrap();
    let mine = |list: Vec<aml_grants::UnresolvedIntent>| {
        list.into_iter()
            .filter(|u| u.proposal_sha256 == d.to_string())
            .map(|u| (u.id, u.resource))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        mine(store.unresolved().await.unwrap()),
        [(open, Some("ops@example.com".to_owned()))]
    );
    assert!(store.reconcile(open, "checked with the provider").await.unwrap());
    assert!(mine(store.unresolved().await.unwrap()).is_empty());
}

#[tokio::test]
async fn decisions_are_kept_beside_the_receipts() {
    let store = connect().await;
    let d = digest(&unique("decision")).to_string();
    for decision in ["deny", "approve"] {
        let record = DecisionRecord {
            proposal_sha256: d.clone(),
            grant_id: format!("g-{decision}"),
            approver_key_id: "alice".into(),
            decision: decision.into(),
            statement_json: format!(r#"{{"decision":"{decision}"}}"#),
        };
        store.record_decision(&record).await.unwrap();
    }
    let kept = store.decisions_for(&d).await.unwrap();
    assert_eq!(
        kept.iter().map(|(dec, _)| dec.as_str()).collect::<Vec<_>>(),
        ["deny", "approve"]
    );
}

type Pending<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// A current-thread runtime: the store's writer cannot run before every write is queued.
#[tokio::test]
async fn writes_queued_at_once_share_one_pipelined_transaction() {
    let store = Arc::new(connect().await);
    let tag = unique("grouped");
    let before = store.commit_stats();
    let intents: Vec<Pending<i64>> = (0..64)
        .map(|n| {
            let (store, label) = (Arc::clone(&store), format!("{tag}-{n}"));
            Box::pin(async move { store.intent(&entry(&label)).await.unwrap() }) as Pending<i64>
        })
        .collect();
    let ids = all_queued(intents).await;
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 64, "{ids:?}");
    let grouped = store.commit_stats();
    assert_eq!(
        (
            grouped.transactions - before.transactions,
            grouped.writes - before.writes
        ),
        (1, 64)
    );

    // Outcomes are accepted at once and committed together by the flush.
    for id in &ids {
        store
            .outcome(*id, RecordedOutcome::Dispatched, None)
            .await
            .unwrap();
    }
    ReceiptJournal::flush(&*store).await.unwrap();
    let flushed = store.commit_stats();
    assert_eq!(
        (
            flushed.transactions - grouped.transactions,
            flushed.writes - grouped.writes
        ),
        (1, 64)
    );
    let mine: Vec<_> = store
        .unresolved()
        .await
        .unwrap()
        .into_iter()
        .filter(|u| ids.contains(&u.id))
        .collect();
    assert!(mine.is_empty(), "{mine:?}");
}

/// Sixteen claims of one grant in one pipelined transaction: one wins; a claim the server
/// refuses fails alone, and the others are committed without it.
#[tokio::test]
async fn claims_of_one_grant_queued_at_once_dispatch_once() {
    let store = Arc::new(connect().await);
    let journaled = JournaledGrants::new(store.clone());
    let id = aml_grants::new_grant_id().unwrap();
    store.issue_for(&id, &args_proposal(), None).await.unwrap();
    let label = unique("beside-the-claims");
    let mut writes: Vec<Pending<String>> = (0..16)
        .map(|_| {
            let (journaled, id) = (journaled.clone(), id.clone());
            Box::pin(
                async move { format!("{:?}", journaled.claim(&grant(args_digest(), &id)).await.unwrap()) },
            ) as Pending<String>
        })
        .collect();
    let refused = journaled.clone();
    writes.push(Box::pin(async move {
        match refused.claim(&grant(args_digest(), "nul\0byte")).await {
            Ok(status) => format!("{status:?}"),
            Err(e) => format!("error: {e}"),
        }
    }));
    let beside = Arc::clone(&store);
    writes.push(Box::pin(async move {
        beside
            .intent(&entry(&label))
            .await
            .map(|_| "intent".to_owned())
            .unwrap()
    }));
    let results = all_queued(writes).await;
    let claimed = results.iter().filter(|r| *r == "Claimed").count();
    let refused = results.iter().filter(|r| *r == "AlreadyClaimed").count();
    assert_eq!((claimed, refused), (1, 15), "{results:?}");
    assert!(
        results[16].contains("postgres claim failed") && results[16].contains("invalid byte sequence"),
        "{}",
        results[16]
    );
    assert_eq!(results[17], "intent");
    let intents: Vec<_> = store
        .unresolved()
        .await
        .unwrap()
        .into_iter()
        .filter(|u| u.grant_id.as_deref() == Some(id.as_str()))
        .collect();
    assert_eq!(intents.len(), 1, "one claim, one intent: {intents:?}");
}

//! PostgreSQL (feature `postgres`): the one-use contract, expiry by the database clock, eight
//! connections racing for one grant, and the journal. The server's address comes from
//! `AML_POSTGRES_URL` (`scripts/test` sets it for the machine's server on 127.0.0.1:5432);
//! without a reachable server these tests fail, saying so.
#![cfg(feature = "postgres")]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aml_core::{ClaimStatus, GrantStore, ReceiptReason};
use aml_grants::{
    DecisionJournal, DecisionRecord, GrantIssuer, GrantLifetimes, IntentEntry, PostgresStore, ReceiptJournal,
    RecordedOutcome,
};
use common::*;

fn url() -> String {
    std::env::var("AML_POSTGRES_URL").expect(
        "AML_POSTGRES_URL is not set: point it at a PostgreSQL server (scripts/test uses \
         host=127.0.0.1 port=5432 user=postgres dbname=test)",
    )
}

async fn connect() -> PostgresStore {
    PostgresStore::connect(&url(), GrantLifetimes::default())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {:?} is unreachable: {e}", url()))
}

fn unique(tag: &str) -> String {
    format!("{tag}-{}-{:?}", std::process::id(), std::time::SystemTime::now())
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
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.claim(&grant(d, &id)).await.unwrap(), ClaimStatus::Expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_connections_racing_for_one_grant_dispatch_once() {
    let issuer = connect().await;
    let id = issuer.issue(args_digest(), None).await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut tools = Vec::new();
    for _ in 0..8 {
        let store: Arc<dyn GrantStore> = Arc::new(connect().await);
        tools.push(Arc::new(tool_with_grant(store, id.clone(), Arc::clone(&calls))));
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
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
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(count(&reasons, ReceiptReason::HostDispatchReturned), 1);
    assert_eq!(count(&reasons, ReceiptReason::ApprovalReusedOrExpired), 7);
    assert_eq!(issuer.is_consumed(&id).await.unwrap(), Some(true));
}

#[tokio::test]
async fn the_journal_lists_and_reconciles_intents_without_outcomes() {
    let store = connect().await;
    let d = digest(&unique("journal"));
    let entry = IntentEntry {
        proposal_sha256: d,
        grant_id: Some("g".into()),
        tool: "send_message".into(),
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
            .map(|u| u.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(mine(store.unresolved().await.unwrap()), [open]);
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

//! The in-memory store keeps the same contract as the durable ones.

use crate::common;

use std::sync::Arc;

use aml_core::{ClaimStatus, GrantStore};
use aml_grants::{GrantIssuer, GrantLifetimes, ManualClock, MemoryGrants};
use common::*;

#[tokio::test]
async fn memory_store_is_one_use() {
    one_use_contract(&MemoryGrants::default(), "memory").await;
    named_issue_contract(&MemoryGrants::default(), "memory").await;
}

#[tokio::test]
async fn memory_grants_expire_by_the_injected_clock() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let store = MemoryGrants::new(clock.clone(), GrantLifetimes::default());
    let d = digest("expiring");
    let id = store.issue(d, None).await.unwrap();
    clock.advance_ms(59_999);
    let early = store.issue(d, None).await.unwrap();
    assert_eq!(
        store.claim(&grant(d, &early)).await.unwrap(),
        ClaimStatus::Claimed
    );
    clock.advance_ms(1);
    assert_eq!(store.claim(&grant(d, &id)).await.unwrap(), ClaimStatus::Expired);
}

/// A journal that cannot write an intent.
#[derive(Debug)]
struct Unwritable;

#[aml_core::async_trait]
impl aml_grants::ReceiptJournal for Unwritable {
    async fn intent(&self, _: &aml_grants::IntentEntry) -> Result<i64, aml_grants::StoreError> {
        Err(aml_grants::StoreError::Lost {
            backend: "sqlite",
            count: 1,
        })
    }
    async fn outcome(
        &self,
        _: i64,
        _: aml_grants::RecordedOutcome,
        _: Option<&str>,
    ) -> Result<(), aml_grants::StoreError> {
        unreachable!("no intent was written")
    }
    async fn unresolved(&self) -> Result<Vec<aml_grants::UnresolvedIntent>, aml_grants::StoreError> {
        Ok(vec![])
    }
    async fn reconcile(&self, _: i64, _: &str) -> Result<bool, aml_grants::StoreError> {
        Ok(false)
    }
}

#[tokio::test]
async fn an_intent_the_journal_refuses_blocks_the_call_unentered_and_spends_its_grant() {
    let entered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = Arc::clone(&entered);
    let inner = aml_core::tool_fn(move |_| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok(serde_json::json!(null)) }
    });
    let executor = aml_grants::JournaledExecutor::new(Arc::new(inner), Arc::new(Unwritable));
    let store = Arc::new(MemoryGrants::default());
    let id = store.issue(args_digest(), None).await.unwrap();
    let tool = tool_with_grant_and(store.clone(), id.clone(), Arc::new(executor));
    let out = tool.call(&args()).await.unwrap();
    assert_eq!(
        out.receipt().execution_status(),
        aml_core::ExecutionStatus::Blocked
    );
    assert_eq!(out.receipt().reason().as_str(), "host_dispatch_not_entered");
    assert!(
        out.detail().unwrap_or_default().contains("could not be stored"),
        "{:?}",
        out.detail()
    );
    assert_eq!(entered.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(
        store.claim(&grant(args_digest(), &id)).await.unwrap(),
        ClaimStatus::AlreadyClaimed,
        "the grant stays spent"
    );
}

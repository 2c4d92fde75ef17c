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

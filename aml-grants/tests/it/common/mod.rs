//! Shared scenarios: one contract every grant store must keep.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aml_core::testing;
use aml_core::{
    tool_fn, ClaimStatus, GrantRef, GrantStore, GuardedTool, Policy, ReceiptReason, Sha256Digest,
    ToolExecutor,
};
use aml_grants::{GrantIssuer, StoreError};
use serde_json::json;

pub(crate) fn digest(label: &str) -> Sha256Digest {
    Sha256Digest::of(label.as_bytes())
}

pub(crate) fn grant(digest: Sha256Digest, id: &str) -> GrantRef {
    GrantRef {
        proposal_sha256: digest,
        approval_id: Some(id.to_owned()),
    }
}

/// Issue, claim once, refuse the replay, refuse other digests and unknown ids.
pub(crate) async fn one_use_contract<S: GrantIssuer + GrantStore>(store: &S, tag: &str) {
    let d = digest(&format!("{tag}/proposal"));
    let id = store.issue(d, None).await.unwrap();
    assert_eq!(
        store
            .claim(&grant(digest(&format!("{tag}/other")), &id))
            .await
            .unwrap(),
        ClaimStatus::NotIssued
    );
    assert_eq!(store.claim(&grant(d, &id)).await.unwrap(), ClaimStatus::Claimed);
    assert_eq!(
        store.claim(&grant(d, &id)).await.unwrap(),
        ClaimStatus::AlreadyClaimed
    );
    assert_eq!(
        store.claim(&grant(d, "no-such-grant")).await.unwrap(),
        ClaimStatus::NotIssued
    );
    let unnamed = GrantRef {
        proposal_sha256: d,
        approval_id: None,
    };
    assert_eq!(store.claim(&unnamed).await.unwrap(), ClaimStatus::NotIssued);
    assert!(matches!(
        store.issue(d, Some(Duration::from_secs(24 * 3600))).await,
        Err(StoreError::TtlTooLong { .. })
    ));
}

/// A policy with one approval-required rule for `send_message` to `team@example.test`.
pub(crate) fn policy() -> Arc<Policy> {
    testing::send_message_policy(true)
}

/// A guarded tool whose approval always names grant `id`, claimed from `store`, counting
/// tool entries in `calls`.
pub(crate) fn tool_with_grant(
    store: Arc<dyn GrantStore>,
    id: String,
    calls: Arc<AtomicUsize>,
) -> GuardedTool {
    let counting = tool_fn(move |_| {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok(json!({"sent": true})) }
    });
    tool_with_grant_and(store, id, Arc::new(counting))
}

/// Like [`tool_with_grant`], dispatching to `executor`.
pub(crate) fn tool_with_grant_and(
    store: Arc<dyn GrantStore>,
    id: String,
    executor: Arc<dyn ToolExecutor>,
) -> GuardedTool {
    tool_with_policy(policy(), store, id, executor)
}

pub(crate) fn args() -> serde_json::Value {
    testing::send_message_args()
}

/// The frozen proposal the tool above makes of [`args`].
pub(crate) fn args_proposal() -> aml_core::FrozenProposal {
    aml_core::FrozenProposal::from_value(&json!({"protocol": "aml-proposed-action/1", "tool": testing::SEND_MESSAGE,
        "effect": "send", "resource": testing::TEAM, "purpose": testing::SEND_MESSAGE_PURPOSE, "arguments": args()}))
    .unwrap()
}

/// The digest the tool above computes for [`args`].
pub(crate) fn args_digest() -> Sha256Digest {
    testing::send_message_digest()
}

/// A guarded tool like [`tool_with_grant`], reading its policy from `policy`.
pub(crate) fn tool_with_policy(
    policy: impl aml_core::PolicySource + 'static,
    store: Arc<dyn GrantStore>,
    id: String,
    executor: Arc<dyn ToolExecutor>,
) -> GuardedTool {
    testing::send_message(policy)
        .approval(testing::approve_with_grant(id))
        .grants_arc(store)
        .executor_arc(executor)
        .build()
        .unwrap()
}

/// Waits for `child` at most `limit` (killing it then, and failing); its stdout.
pub(crate) fn wait_bounded(child: std::process::Child, limit: Duration) -> String {
    use std::io::Read;
    /// Kills the child if the wait fails (the panic unwinds through it).
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            if self.0.try_wait().ok().flatten().is_none() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
    let mut child = Killed(child);
    aml_test_support::wait_until("a child process to finish", limit, || child.0.try_wait().unwrap());
    let mut out = String::new();
    if let Some(mut stdout) = child.0.stdout.take() {
        stdout.read_to_string(&mut out).unwrap();
    }
    out
}

/// Counts how the attempts ended.
pub(crate) fn count(reasons: &[ReceiptReason], reason: ReceiptReason) -> usize {
    reasons.iter().filter(|r| **r == reason).count()
}

/// Named issuance: the chosen id works once and cannot be issued twice.
pub(crate) async fn named_issue_contract<S: GrantIssuer + GrantStore>(store: &S, tag: &str) {
    let d = digest(&format!("{tag}/named"));
    let id = aml_grants::new_grant_id().unwrap();
    store.issue_named(&id, d, None).await.unwrap();
    assert!(matches!(
        store.issue_named(&id, d, None).await,
        Err(StoreError::Duplicate(_))
    ));
    assert_eq!(store.claim(&grant(d, &id)).await.unwrap(), ClaimStatus::Claimed);
    assert!(matches!(
        store.issue_named(&id, d, None).await,
        Err(StoreError::Duplicate(_))
    ));
}

/// Runs `tasks` on the current thread, in order, and their results: each runs until it
/// waits — a write queued — before the next starts, so on a current-thread runtime a store's
/// writer finds them all queued at once.
pub(crate) async fn all_queued<T: Send + 'static>(
    tasks: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>>,
) -> Vec<T> {
    let spawned: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
    let mut results = Vec::with_capacity(spawned.len());
    for task in spawned {
        results.push(task.await.unwrap());
    }
    results
}

/// A fresh database file for test `tag`.
pub(crate) fn temp_db(tag: &str) -> std::path::PathBuf {
    aml_test_support::scratch_dir("grants", tag).join("boundary.db")
}

/// A runtime with worker threads, for tests that block on one.
pub(crate) fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An intent for proposal `label`, without a grant.
pub(crate) fn entry(label: &str) -> aml_grants::IntentEntry {
    aml_grants::IntentEntry {
        proposal_sha256: digest(label),
        grant_id: None,
        tool: "send_message".into(),
        resource: "ops@example.com".into(),
    }
}

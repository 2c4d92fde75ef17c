//! Claim and intent in one transaction, for stores that keep both (ADR 010).
//!
//! With the grant store and the journal in one database, the claim that spends a grant also
//! writes the dispatch intent, atomically: whatever kills the process afterwards, a spent
//! grant always has an intent, which [`ReceiptJournal::unresolved`] lists until an outcome
//! or the host's reconciliation resolves it.

use std::sync::Arc;

use aml_core::{async_trait, ClaimError, ClaimStatus, GrantRef, GrantStore, ToolExecutor};

use crate::grant::StoreError;
use crate::journal::{IntentEntry, JournaledExecutor, ReceiptJournal, RecordedOutcome};
use crate::settle::CallOutcomes;

/// A grant store that is also the receipt journal, and can spend a grant and record the
/// dispatch intent in one transaction.
///
/// ```
/// use std::sync::Mutex;
/// use aml_core::{async_trait, ClaimError, ClaimStatus, GrantRef, GrantStore};
/// use aml_grants::{ClaimsWithIntent, IntentEntry, ReceiptJournal, RecordedOutcome, StoreError, UnresolvedIntent};
///
/// /// Everything in one mutex: one lock is this store's transaction.
/// #[derive(Debug, Default)]
/// struct Locked(Mutex<(Vec<GrantRef>, Vec<UnresolvedIntent>)>);
///
/// #[async_trait]
/// impl GrantStore for Locked {
///     async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
///         self.claim_with_intent(grant).await
///     }
/// }
///
/// #[async_trait]
/// impl ReceiptJournal for Locked {
///     async fn intent(&self, _: &IntentEntry) -> Result<i64, StoreError> { Ok(0) }
///     async fn outcome(&self, _: i64, _: RecordedOutcome, _: Option<&str>) -> Result<(), StoreError> { Ok(()) }
///     async fn unresolved(&self) -> Result<Vec<UnresolvedIntent>, StoreError> {
///         Ok(self.0.lock().unwrap().1.clone())
///     }
///     async fn reconcile(&self, _: i64, _: &str) -> Result<bool, StoreError> { Ok(false) }
/// }
///
/// #[async_trait]
/// impl ClaimsWithIntent for Locked {
///     async fn claim_with_intent(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
///         let mut state = self.0.lock().map_err(|_| ClaimError::new("poisoned"))?;
///         if state.0.contains(grant) {
///             return Ok(ClaimStatus::AlreadyClaimed);
///         }
///         state.0.push(grant.clone());
///         let id = state.1.len() as i64;
///         state.1.push(UnresolvedIntent {
///             id,
///             proposal_sha256: grant.proposal_sha256.to_string(),
///             grant_id: grant.approval_id.clone(),
///             tool: String::new(),
///             resource: None,
///             intent_at_ms: 0,
///         });
///         Ok(ClaimStatus::Claimed)
///     }
///     async fn outcome_for_grant(&self, entry: &IntentEntry, _: RecordedOutcome, _: Option<&str>) -> Result<(), StoreError> {
///         self.0.lock().unwrap().1.retain(|u| u.grant_id != entry.grant_id);
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait ClaimsWithIntent: GrantStore + ReceiptJournal {
    /// Spends `grant` like [`GrantStore::claim`] and, when this call spent it, records the
    /// intent to dispatch under it in the same transaction: digest, grant id, and the tool
    /// and resource the grant was issued for ([`GrantIssuer::issue_for`](crate::GrantIssuer::issue_for)).
    async fn claim_with_intent(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError>;

    /// Records how the dispatch under `entry.grant_id` ended. If its claim wrote no intent
    /// (another store claimed it), a complete record is written instead, so the tool's
    /// entry is never lost.
    async fn outcome_for_grant(
        &self,
        entry: &IntentEntry,
        outcome: RecordedOutcome,
        detail: Option<&str>,
    ) -> Result<(), StoreError>;
}

/// The boundary's grant store when grants and journal share a database: every claim also
/// writes the dispatch intent, atomically; [`executor`](Self::executor) wraps the tool so
/// the outcome resolves that intent.
///
/// ```no_run
/// # async fn host() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use aml_core::{approval_fn, tool_fn, Approval, ArgumentSnapshot, Effect, GuardedTool, Policy};
/// use aml_grants::{IssuingApproval, JournaledGrants, SqliteStore};
///
/// let store = Arc::new(SqliteStore::open("/var/lib/my-host/boundary.db")?);
/// let journaled = JournaledGrants::new(store.clone());
/// let person = Arc::new(approval_fn(|req| async move { Ok(Approval::approve(req.proposal().digest())) }));
/// let tool = GuardedTool::builder("send_message", Effect::Send, "Send a status update", Arc::new(Policy::empty()))
///     .resource_for(|a: &ArgumentSnapshot| Ok(a.str("to").unwrap_or_default().to_owned()))
///     .approval(IssuingApproval::new(person, store.clone()))
///     .grants(journaled.clone())
///     .executor(journaled.executor(Arc::new(tool_fn(|_| async { Ok(serde_json::json!(null)) }))))
///     .build()?;
/// # let _ = tool; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct JournaledGrants {
    store: Arc<dyn ClaimsWithIntent>,
    settled_by: Option<CallOutcomes>,
}

impl JournaledGrants {
    /// Claims in `store`, writing intents there too.
    pub fn new(store: Arc<dyn ClaimsWithIntent>) -> Self {
        JournaledGrants {
            store,
            settled_by: None,
        }
    }

    /// The executors leave each outcome in `outcomes` instead of writing it, for the receipt
    /// sink that stores it with the call's record in one transaction
    /// ([`StoredReceipts::settling`](crate::StoredReceipts::settling)): a crash then leaves
    /// a call with both or with neither.
    ///
    /// ```no_run
    /// # async fn host() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use aml_grants::{JournaledGrants, SqliteStore, StoredReceipts};
    ///
    /// let store = Arc::new(SqliteStore::open("/var/lib/my-host/boundary.db")?);
    /// let (receipts, _task) = StoredReceipts::settling(store.clone());
    /// let journaled = JournaledGrants::new(store.clone()).settled_by(receipts.outcomes().unwrap());
    /// // `receipts` is the boundary's sink, `journaled` its grant store and executor wrapper.
    /// # let _ = journaled; Ok(()) }
    /// ```
    pub fn settled_by(mut self, outcomes: CallOutcomes) -> Self {
        self.settled_by = Some(outcomes);
        self
    }

    /// `tool`, journaled: for a granted call only the outcome is written (the claim wrote
    /// the intent); for a call without a grant (an `allow` rule), intent then outcome.
    pub fn executor(&self, tool: Arc<dyn ToolExecutor>) -> JournaledExecutor {
        JournaledExecutor::after_claims(tool, Arc::clone(&self.store), self.settled_by.clone())
    }
}

#[async_trait]
impl GrantStore for JournaledGrants {
    async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        self.store.claim_with_intent(grant).await
    }
}

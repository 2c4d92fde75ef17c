//! The receipt journal: an *intent* record before the tool is entered, an outcome record
//! after. An intent with no outcome — the process died inside the tool — is `unknown`: the
//! host must reconcile it, and nothing retries it.

use std::sync::Arc;

use aml_core::{async_trait, Sha256Digest, ToolCall, ToolError, ToolExecutor};
use serde_json::Value;

use crate::grant::StoreError;
use crate::intent_claims::ClaimsWithIntent;
use crate::settle::CallOutcomes;

/// What the journal records before the tool is entered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentEntry {
    /// The frozen proposal's digest.
    pub proposal_sha256: Sha256Digest,
    /// The spent grant, for approval-required rules.
    pub grant_id: Option<String>,
    /// The tool.
    pub tool: String,
    /// The proposal's resource (what the host policy matched), so that an operator who
    /// reconciles an unresolved intent knows what to check.
    pub resource: String,
}

/// How a dispatch ended, as the journal records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecordedOutcome {
    /// `"dispatched"`: the tool returned.
    Dispatched,
    /// `"unknown"`: the tool failed after entry.
    Unknown,
    /// `"not_entered"`: the executor failed before any of the call reached the tool
    /// ([`ToolError::not_entered`]): nothing to reconcile.
    NotEntered,
}

impl RecordedOutcome {
    /// The stored string.
    pub const fn as_str(self) -> &'static str {
        match self {
            RecordedOutcome::Dispatched => "dispatched",
            RecordedOutcome::Unknown => "unknown",
            RecordedOutcome::NotEntered => "not_entered",
        }
    }
}

/// Which intent an outcome resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IntentRef {
    /// The intent written before the tool was entered ([`ReceiptJournal::intent`]'s id).
    Id(i64),
    /// The intent its grant's claim wrote ([`ClaimsWithIntent`]), found by the entry's grant
    /// id; when that claim wrote none, the entry is recorded whole.
    Claimed(IntentEntry),
}

/// How one journaled dispatch ended, for the intent it resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentOutcome {
    /// The intent.
    pub intent: IntentRef,
    /// How it ended.
    pub outcome: RecordedOutcome,
    /// The tool's error, for an `unknown` outcome.
    pub detail: Option<String>,
}

/// An intent with no outcome and no reconciliation: its dispatch is `unknown`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnresolvedIntent {
    /// Journal id, for [`ReceiptJournal::reconcile`].
    pub id: i64,
    /// The proposal digest (hex).
    pub proposal_sha256: String,
    /// The spent grant.
    pub grant_id: Option<String>,
    /// The tool (empty when the grant was issued without its proposal, by
    /// [`GrantIssuer::issue_named`](crate::GrantIssuer::issue_named), and the intent was
    /// written by its claim).
    pub tool: String,
    /// The proposal's resource; `None` when the intent was written by a version that did not
    /// record it, or by the claim of a grant issued without its proposal.
    pub resource: Option<String>,
    /// When the tool was about to be entered, or the grant was claimed (ms since the epoch).
    pub intent_at_ms: i64,
}

/// A durable, append-only record of what the boundary did.
///
/// An intent is durable when [`intent`](Self::intent) returns (the tool may be entered). A
/// store that commits in groups (`SqliteStore`, `PostgresStore`) may return from
/// [`outcome`](Self::outcome) as soon as the outcome is queued: it becomes durable with the
/// store's next commit, and [`flush`](Self::flush) waits for that. A crash before then leaves
/// the intent unresolved — reported `unknown`, never lost.
///
/// ```
/// use aml_core::async_trait;
/// use aml_grants::{IntentEntry, ReceiptJournal, RecordedOutcome, StoreError, UnresolvedIntent};
///
/// /// A journal that forgets everything (for a host that keeps no records): every intent
/// /// it ever returns is immediately resolved.
/// #[derive(Debug)]
/// struct Forgetful;
///
/// #[async_trait]
/// impl ReceiptJournal for Forgetful {
///     async fn intent(&self, _: &IntentEntry) -> Result<i64, StoreError> { Ok(0) }
///     async fn outcome(&self, _: i64, _: RecordedOutcome, _: Option<&str>) -> Result<(), StoreError> { Ok(()) }
///     async fn unresolved(&self) -> Result<Vec<UnresolvedIntent>, StoreError> { Ok(vec![]) }
///     async fn reconcile(&self, _: i64, _: &str) -> Result<bool, StoreError> { Ok(false) }
/// }
/// ```
#[async_trait]
pub trait ReceiptJournal: Send + Sync + core::fmt::Debug {
    /// Records that the tool is about to be entered; the record's id.
    async fn intent(&self, entry: &IntentEntry) -> Result<i64, StoreError>;
    /// Records how intent `id` ended (durable when this returns, or by the next commit or
    /// [`flush`](Self::flush) for a store that commits in groups).
    async fn outcome(
        &self,
        id: i64,
        outcome: RecordedOutcome,
        detail: Option<&str>,
    ) -> Result<(), StoreError>;
    /// Intents with neither an outcome nor a reconciliation, oldest first.
    async fn unresolved(&self) -> Result<Vec<UnresolvedIntent>, StoreError>;
    /// Marks intent `id` reconciled by the host, with a note; whether it was unresolved.
    async fn reconcile(&self, id: i64, note: &str) -> Result<bool, StoreError>;
    /// Waits until every write this journal accepted before the call is durable; fails when
    /// some write it accepted without waiting (an outcome, a record) could not be stored
    /// since the last flush. By default there is nothing to wait for.
    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A verified approval decision, as the journal records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    /// The decided proposal digest (hex).
    pub proposal_sha256: String,
    /// The grant the decision names.
    pub grant_id: String,
    /// The approver key that signed it.
    pub approver_key_id: String,
    /// `"approve"` or `"deny"`.
    pub decision: String,
    /// The whole signed statement, as JSON text.
    pub statement_json: String,
}

/// Where verified approval decisions are kept, beside the receipts.
///
/// ```
/// use aml_core::async_trait;
/// use aml_grants::{DecisionJournal, DecisionRecord, StoreError};
///
/// /// Decisions printed for an operator's log collector.
/// #[derive(Debug)]
/// struct Printed;
///
/// #[async_trait]
/// impl DecisionJournal for Printed {
///     async fn record_decision(&self, record: &DecisionRecord) -> Result<(), StoreError> {
///         println!("{} {} by {}", record.decision, record.proposal_sha256, record.approver_key_id);
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait DecisionJournal: Send + Sync + core::fmt::Debug {
    /// Appends one decision.
    async fn record_decision(&self, record: &DecisionRecord) -> Result<(), StoreError>;
}

/// A tool wrapped so every dispatch is journaled: intent first, then the tool, then the
/// outcome.
///
/// If the intent cannot be written, the tool is not entered, and the call is blocked
/// (`host_dispatch_not_entered`, [`ToolError::not_entered`]); a grant it claimed stays spent.
/// If the outcome cannot be written, the intent stays unresolved and is reported as
/// `unknown` on restart.
///
/// Built with [`new`](Self::new), the intent is written here, after the claim: a process
/// that dies between the two leaves a spent grant and no intent. Built by
/// [`JournaledGrants::executor`](crate::JournaledGrants::executor), the claim already wrote
/// the intent of every granted call in its own transaction, and only the outcome is written
/// here (ADR 010).
#[derive(Debug, Clone)]
pub struct JournaledExecutor {
    inner: Arc<dyn ToolExecutor>,
    journal: Journal,
    /// Where outcomes wait for their call's record, instead of being written here.
    settled_by: Option<CallOutcomes>,
}

#[derive(Debug, Clone)]
enum Journal {
    /// Intents are written before the tool is entered.
    AtDispatch(Arc<dyn ReceiptJournal>),
    /// Granted calls' intents were written by the claim.
    AtClaim(Arc<dyn ClaimsWithIntent>),
}

impl JournaledExecutor {
    /// Journals every call of `inner` in `journal`, writing the intent before the tool.
    pub fn new(inner: Arc<dyn ToolExecutor>, journal: Arc<dyn ReceiptJournal>) -> Self {
        JournaledExecutor {
            inner,
            journal: Journal::AtDispatch(journal),
            settled_by: None,
        }
    }

    pub(crate) fn after_claims(
        inner: Arc<dyn ToolExecutor>,
        store: Arc<dyn ClaimsWithIntent>,
        settled_by: Option<CallOutcomes>,
    ) -> Self {
        JournaledExecutor {
            inner,
            journal: Journal::AtClaim(store),
            settled_by,
        }
    }

    /// Records how the dispatch under `intent` ended: held for the call's record when a
    /// sink settles it, written (queued, for a store that commits in groups) otherwise.
    async fn resolve(&self, digest: Sha256Digest, intent: IntentRef, result: &Result<Value, ToolError>) {
        let (outcome, detail) = describe(result);
        if let Some(held) = &self.settled_by {
            return held.hold(
                digest,
                IntentOutcome {
                    intent,
                    outcome,
                    detail,
                },
            );
        }
        // Losing this record leaves the intent unresolved, i.e. reported as unknown.
        let _ = match (&intent, &self.journal) {
            (IntentRef::Claimed(entry), Journal::AtClaim(store)) => {
                store.outcome_for_grant(entry, outcome, detail.as_deref()).await
            }
            (IntentRef::Id(id), Journal::AtClaim(store)) => {
                store.outcome(*id, outcome, detail.as_deref()).await
            }
            (IntentRef::Id(id), Journal::AtDispatch(journal)) => {
                journal.outcome(*id, outcome, detail.as_deref()).await
            }
            (IntentRef::Claimed(_), Journal::AtDispatch(_)) => Ok(()),
        };
    }
}

#[async_trait]
impl ToolExecutor for JournaledExecutor {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
        let entry = IntentEntry {
            proposal_sha256: call.proposal().digest(),
            grant_id: call.grant().and_then(|g| g.grant().approval_id.clone()),
            tool: call.proposal().tool().to_owned(),
            resource: call.proposal().resource().to_owned(),
        };
        let refused = |e| ToolError::not_entered("the journal refused the intent record", e);
        let digest = entry.proposal_sha256;
        let intent = match (&self.journal, entry.grant_id.is_some()) {
            // The claim wrote the intent in its own transaction (ADR 010).
            (Journal::AtClaim(_), true) => IntentRef::Claimed(entry),
            (journal, _) => {
                let journal: &dyn ReceiptJournal = match journal {
                    Journal::AtDispatch(j) => j.as_ref(),
                    Journal::AtClaim(s) => s.as_ref(),
                };
                IntentRef::Id(journal.intent(&entry).await.map_err(refused)?)
            }
        };
        let result = self.inner.execute(call).await;
        self.resolve(digest, intent, &result).await;
        result
    }
}

fn describe(result: &Result<Value, ToolError>) -> (RecordedOutcome, Option<String>) {
    match result {
        Ok(_) => (RecordedOutcome::Dispatched, None),
        Err(e) if !e.entered() => (RecordedOutcome::NotEntered, Some(e.to_string())),
        Err(e) => (RecordedOutcome::Unknown, Some(e.to_string())),
    }
}

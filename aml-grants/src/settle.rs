//! A call's outcome stored with its receipt record, in one transaction.
//!
//! The journaled forward ([`JournaledGrants::settled_by`](crate::JournaledGrants::settled_by))
//! does not write the outcome itself: it leaves it in [`CallOutcomes`], and the receipt sink
//! ([`StoredReceipts::settling`](crate::StoredReceipts::settling)) stores it with the call's
//! record, which follows a moment later. Whatever kills the process, a call then has both
//! (its intent resolved, and exactly one receipt) or neither (its intent unresolved, no
//! receipt).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aml_core::{async_trait, ReceiptReason, Record, Sha256Digest};

use crate::grant::StoreError;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::group::Later;
use crate::journal::{IntentOutcome, ReceiptJournal, RecordedOutcome};
use crate::receipts::ReceiptStore;

/// What is stored of one call after its answer: its receipt record, its intent's outcome,
/// or both, always together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The record, as JSON text.
    pub record: Option<String>,
    /// The outcome of the call's intent.
    pub outcome: Option<IntentOutcome>,
}

/// A store that keeps the journal and the receipt records in one database, and stores a
/// call's outcome and record in one transaction.
///
/// ```
/// use std::sync::Mutex;
/// use aml_core::async_trait;
/// use aml_grants::{
///     IntentEntry, ReceiptJournal, ReceiptStore, RecordedOutcome, Settlement, SettlesCalls, StoreError,
///     StoredRecord, UnresolvedIntent,
/// };
///
/// /// Everything in one mutex: one lock is this store's transaction.
/// #[derive(Debug, Default)]
/// struct Locked(Mutex<(Vec<UnresolvedIntent>, Vec<StoredRecord>)>);
///
/// #[async_trait]
/// impl ReceiptJournal for Locked {
///     async fn intent(&self, _: &IntentEntry) -> Result<i64, StoreError> { Ok(0) }
///     async fn outcome(&self, _: i64, _: RecordedOutcome, _: Option<&str>) -> Result<(), StoreError> { Ok(()) }
///     async fn unresolved(&self) -> Result<Vec<UnresolvedIntent>, StoreError> { Ok(self.0.lock().unwrap().0.clone()) }
///     async fn reconcile(&self, _: i64, _: &str) -> Result<bool, StoreError> { Ok(false) }
/// }
///
/// #[async_trait]
/// impl ReceiptStore for Locked {
///     async fn append_records(&self, records: &[String]) -> Result<(), StoreError> {
///         let batch = records.iter().map(|r| Settlement { record: Some(r.clone()), outcome: None }).collect();
///         self.settle(batch).await
///     }
///     async fn records_since(&self, _: i64) -> Result<Vec<StoredRecord>, StoreError> { Ok(self.0.lock().unwrap().1.clone()) }
/// }
///
/// #[async_trait]
/// impl SettlesCalls for Locked {
///     async fn settle(&self, settled: Vec<Settlement>) -> Result<(), StoreError> {
///         let mut state = self.0.lock().unwrap();
///         for s in settled {
///             if let Some(outcome) = s.outcome {
///                 state.0.retain(|u| aml_grants::IntentRef::Id(u.id) != outcome.intent);
///             }
///             if let Some(record) = s.record {
///                 let id = state.1.len() as i64 + 1;
///                 state.1.push(StoredRecord { id, recorded_at_ms: 0, record });
///             }
///         }
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait SettlesCalls: ReceiptJournal + ReceiptStore {
    /// Stores each settlement, its record and outcome in one transaction, in order. A store
    /// that commits in groups may return once they are queued; [`ReceiptJournal::flush`]
    /// waits until they are durable.
    async fn settle(&self, settled: Vec<Settlement>) -> Result<(), StoreError>;
}

/// The writes of `settled`, in order, for one message to a writer (so one transaction).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn settled_writes(settled: Vec<Settlement>) -> Vec<Later> {
    let mut writes = Vec::with_capacity(settled.len() * 2);
    for s in settled {
        writes.extend(s.outcome.map(Later::Outcome));
        writes.extend(s.record.map(Later::Record));
    }
    writes
}

/// Outcomes of journaled dispatches waiting for their call's receipt record. The forward
/// leaves each here when the tool returns; the sink takes it with the call record of the
/// same proposal that ended the same way (`host_dispatch_returned`: dispatched;
/// `host_dispatch_error`: unknown; `host_dispatch_not_entered`: not entered).
#[derive(Debug, Clone, Default)]
pub struct CallOutcomes(Arc<Mutex<Held>>);

/// Outcomes by the proposal and the way the dispatch ended, oldest first.
type Held = HashMap<(Sha256Digest, RecordedOutcome), VecDeque<Waiting>>;

#[derive(Debug)]
struct Waiting {
    outcome: IntentOutcome,
    since: Instant,
}

impl CallOutcomes {
    /// Keeps `outcome` of a dispatch of `digest` for its record.
    pub(crate) fn hold(&self, digest: Sha256Digest, outcome: IntentOutcome) {
        let held = Waiting {
            since: Instant::now(),
            outcome,
        };
        self.lock()
            .entry((digest, held.outcome.outcome))
            .or_default()
            .push_back(held);
    }

    /// The outcome `record` settles, if it is the record of a held dispatch.
    pub(crate) fn take_for(&self, record: &Record) -> Option<IntentOutcome> {
        let receipt = record.as_call()?.receipt.as_ref()?;
        let outcome = match receipt.reason() {
            ReceiptReason::HostDispatchReturned => RecordedOutcome::Dispatched,
            ReceiptReason::HostDispatchError => RecordedOutcome::Unknown,
            ReceiptReason::HostDispatchNotEntered => RecordedOutcome::NotEntered,
            _ => return None,
        };
        let key = (receipt.proposal_sha256()?, outcome);
        let mut held = self.lock();
        let queue = held.get_mut(&key)?;
        let taken = queue.pop_front().map(|h| h.outcome);
        if queue.is_empty() {
            held.remove(&key);
        }
        taken
    }

    /// Takes the outcomes held for at least `age` (all of them for zero): their record is
    /// not coming, and they are stored alone.
    pub(crate) fn take_older_than(&self, age: Duration) -> Vec<IntentOutcome> {
        let mut taken = Vec::new();
        self.lock().retain(|_, queue| {
            while queue.front().is_some_and(|h| h.since.elapsed() >= age) {
                taken.extend(queue.pop_front().map(|h| h.outcome));
            }
            !queue.is_empty()
        });
        taken
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aml_core::{CallClock, CallRecord, Receipt};

    fn record(digest: Sha256Digest, reason: &str) -> Record {
        let status = match reason {
            "host_dispatch_returned" => "dispatched",
            "host_dispatch_error" => "unknown",
            _ => "blocked",
        };
        let receipt: Receipt = serde_json::from_value(serde_json::json!({
            "protocol": "aml-action-dispatch/1", "proposal_sha256": digest.to_string(),
            "policy_decision": "allow", "execution_status": status, "reason": reason}))
        .unwrap();
        let mut call = CallRecord::new("test", "send_notice", &CallClock::start());
        call.receipt = Some(receipt);
        Record::Call(call)
    }

    fn outcome(id: i64, outcome: RecordedOutcome) -> IntentOutcome {
        IntentOutcome {
            intent: crate::IntentRef::Id(id),
            outcome,
            detail: None,
        }
    }

    #[test]
    fn a_record_takes_the_oldest_outcome_of_its_proposal_that_ended_its_way() {
        let (a, b) = (Sha256Digest::of(b"a"), Sha256Digest::of(b"b"));
        let held = CallOutcomes::default();
        held.hold(a, outcome(1, RecordedOutcome::Dispatched));
        held.hold(a, outcome(2, RecordedOutcome::Unknown));
        held.hold(a, outcome(3, RecordedOutcome::Dispatched));
        // A blocked call of the same proposal never ran the tool: it takes nothing.
        assert_eq!(held.take_for(&record(a, "approval_reused_or_expired")), None);
        assert_eq!(held.take_for(&record(b, "host_dispatch_returned")), None);
        assert_eq!(
            held.take_for(&record(a, "host_dispatch_error")),
            Some(outcome(2, RecordedOutcome::Unknown))
        );
        assert_eq!(
            held.take_for(&record(a, "host_dispatch_returned")),
            Some(outcome(1, RecordedOutcome::Dispatched))
        );
        assert_eq!(
            held.take_older_than(Duration::ZERO),
            [outcome(3, RecordedOutcome::Dispatched)]
        );
        assert_eq!(held.take_for(&record(a, "host_dispatch_returned")), None);
    }

    #[test]
    fn only_outcomes_held_long_enough_are_given_up_on() {
        let held = CallOutcomes::default();
        held.hold(Sha256Digest::of(b"a"), outcome(1, RecordedOutcome::Dispatched));
        assert!(held.take_older_than(Duration::from_secs(3600)).is_empty());
        assert_eq!(held.take_older_than(Duration::ZERO).len(), 1);
    }
}

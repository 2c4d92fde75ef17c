//! Receipt records kept in the state database beside the grants and the journal, so one file
//! (or one PostgreSQL database) holds everything the boundary did.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aml_core::{async_trait, ReceiptSink, Record};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::grant::StoreError;
use crate::journal::IntentOutcome;
use crate::settle::{CallOutcomes, Settlement, SettlesCalls};

/// One stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// Its id in the store, increasing in the order records were appended.
    pub id: i64,
    /// When it was stored (ms since the epoch; the database server's clock for PostgreSQL).
    pub recorded_at_ms: i64,
    /// The record as JSON text (`aml-call-record/1` or an approval record).
    pub record: String,
}

/// Where receipt records are kept.
///
/// ```
/// use std::sync::Mutex;
/// use aml_core::async_trait;
/// use aml_grants::{ReceiptStore, StoreError, StoredRecord};
///
/// /// Records in memory, for a test.
/// #[derive(Debug, Default)]
/// struct Kept(Mutex<Vec<StoredRecord>>);
///
/// #[async_trait]
/// impl ReceiptStore for Kept {
///     async fn append_records(&self, records: &[String]) -> Result<(), StoreError> {
///         let mut kept = self.0.lock().unwrap();
///         for record in records {
///             let id = kept.len() as i64 + 1;
///             kept.push(StoredRecord { id, recorded_at_ms: 0, record: record.clone() });
///         }
///         Ok(())
///     }
///     async fn records_since(&self, since_ms: i64) -> Result<Vec<StoredRecord>, StoreError> {
///         Ok(self.0.lock().unwrap().iter().filter(|r| r.recorded_at_ms >= since_ms).cloned().collect())
///     }
/// }
/// ```
#[async_trait]
pub trait ReceiptStore: Send + Sync + core::fmt::Debug {
    /// Appends records (JSON text each), in order, in one transaction. A store that commits
    /// in groups may return once they are queued; [`flush_records`](Self::flush_records)
    /// waits until they are durable.
    async fn append_records(&self, records: &[String]) -> Result<(), StoreError>;
    /// The records stored at or after `since_ms` (ms since the epoch), oldest first.
    async fn records_since(&self, since_ms: i64) -> Result<Vec<StoredRecord>, StoreError>;
    /// Waits until every record appended before the call is durable; fails when some could
    /// not be stored. By default there is nothing to wait for.
    async fn flush_records(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// How long a held outcome waits for its call's record before it is stored alone.
const HOLD: Duration = Duration::from_secs(2);

/// A [`ReceiptSink`] that stores records in a [`ReceiptStore`] from a task of the current
/// tokio runtime, so recording never waits for the database. Records are appended in
/// batches, in order; a batch the store refuses is logged (`aml.receipts`, error) and counted
/// in [`failures`](Self::failures).
///
/// Built with [`settling`](Self::settling), it also stores each journaled call's outcome
/// (left in [`outcomes`](Self::outcomes) by the forward) with the call's record, in one
/// transaction; an outcome whose record does not come within 2 s is stored alone.
#[derive(Debug, Clone)]
pub struct StoredReceipts {
    queue: mpsc::UnboundedSender<Message>,
    failures: Arc<AtomicU64>,
    outcomes: Option<CallOutcomes>,
}

enum Message {
    Record(String, Option<IntentOutcome>),
    Flush(oneshot::Sender<()>),
}

/// Where the task writes.
enum Target {
    Records(Arc<dyn ReceiptStore>),
    Settles(Arc<dyn SettlesCalls>, CallOutcomes),
}

impl StoredReceipts {
    /// Starts the task that appends to `store`; it ends when every clone of the sink is gone.
    pub fn spawn(store: Arc<dyn ReceiptStore>) -> (Self, JoinHandle<()>) {
        Self::start(Target::Records(store), None)
    }

    /// Like [`spawn`](Self::spawn), storing each record of a journaled dispatch with its
    /// intent's outcome, taken from [`outcomes`](Self::outcomes).
    pub fn settling(store: Arc<dyn SettlesCalls>) -> (Self, JoinHandle<()>) {
        let outcomes = CallOutcomes::default();
        Self::start(Target::Settles(store, outcomes.clone()), Some(outcomes))
    }

    fn start(target: Target, outcomes: Option<CallOutcomes>) -> (Self, JoinHandle<()>) {
        let (queue, messages) = mpsc::unbounded_channel::<Message>();
        let failures = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(write(target, messages, Arc::clone(&failures)));
        (
            StoredReceipts {
                queue,
                failures,
                outcomes,
            },
            task,
        )
    }

    /// Where the journaled forward leaves outcomes for this sink (see
    /// [`JournaledGrants::settled_by`](crate::JournaledGrants::settled_by)); `None` unless
    /// built with [`settling`](Self::settling).
    pub fn outcomes(&self) -> Option<CallOutcomes> {
        self.outcomes.clone()
    }

    /// Waits until every record recorded before this call — and every outcome held — is
    /// durable in the store (or counted lost).
    pub async fn flush(&self) {
        let (done, stored) = oneshot::channel();
        if self.queue.send(Message::Flush(done)).is_ok() {
            let _ = stored.await;
        }
    }

    /// How many records could not be stored.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

/// The task: gathers what is queued, writes it in one call, answers flushes once it is
/// durable; with held outcomes, looks every [`HOLD`] for those whose record never came.
async fn write(target: Target, mut messages: mpsc::UnboundedReceiver<Message>, lost: Arc<AtomicU64>) {
    let mut batch = Vec::new();
    let mut flushes = Vec::new();
    loop {
        // Held outcomes are looked at every HOLD, whether or not records arrive.
        let first = if matches!(target, Target::Settles(..)) {
            match tokio::time::timeout(HOLD, messages.recv()).await {
                Ok(None) => break,
                Ok(Some(message)) => Some(message),
                Err(_) => None,
            }
        } else {
            match messages.recv().await {
                Some(message) => Some(message),
                None => break,
            }
        };
        let mut next = first;
        while let Some(message) = next {
            match message {
                Message::Record(record, outcome) => batch.push(Settlement {
                    record: Some(record),
                    outcome,
                }),
                Message::Flush(done) => flushes.push(done),
            }
            next = messages.try_recv().ok();
        }
        let flushing = !flushes.is_empty();
        if let Target::Settles(_, held) = &target {
            let age = if flushing { Duration::ZERO } else { HOLD };
            batch.extend(held.take_older_than(age).into_iter().map(|outcome| Settlement {
                record: None,
                outcome: Some(outcome),
            }));
        }
        let count = batch.iter().filter(|s| s.record.is_some()).count() as u64;
        if !batch.is_empty() {
            let written = match &target {
                Target::Records(store) => {
                    let records: Vec<String> = batch.drain(..).filter_map(|s| s.record).collect();
                    store.append_records(&records).await
                }
                Target::Settles(store, _) => store.settle(std::mem::take(&mut batch)).await,
            };
            batch.clear();
            if let Err(e) = written {
                lost.fetch_add(count, Ordering::Relaxed);
                tracing::error!(target: "aml.receipts", error = %e, lost = count,
                                "receipt records could not be stored");
            }
        }
        if flushing {
            let durable = match &target {
                Target::Records(store) => store.flush_records().await,
                Target::Settles(store, _) => store.flush().await,
            };
            if let Err(e) = durable {
                let count = match e {
                    StoreError::Lost { count, .. } => count,
                    _ => 1,
                };
                lost.fetch_add(count, Ordering::Relaxed);
                tracing::error!(target: "aml.receipts", error = %e, "receipt records could not be stored");
            }
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
        }
    }
    // Every sink is gone: outcomes still held will have no record; they are stored alone.
    if let Target::Settles(store, held) = &target {
        let orphans: Vec<Settlement> = held
            .take_older_than(Duration::ZERO)
            .into_iter()
            .map(|outcome| Settlement {
                record: None,
                outcome: Some(outcome),
            })
            .collect();
        if !orphans.is_empty() && store.settle(orphans).await.is_err() {
            lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl ReceiptSink for StoredReceipts {
    fn record(&self, record: &Record) {
        // Taken now, in the order records arrive: the record follows its call's outcome.
        let outcome = self.outcomes.as_ref().and_then(|held| held.take_for(record));
        // Written straight from the record (as the JSON-lines log writes it), without the
        // tree of values `to_value` would build first.
        let text = match serde_json::to_string(record) {
            Ok(text) => text,
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(target: "aml.receipts", error = %e, "a record could not be serialized");
                return;
            }
        };
        if self.queue.send(Message::Record(text, outcome)).is_err() {
            self.failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(target: "aml.receipts", "a receipt record arrived after the store closed");
        }
    }
}

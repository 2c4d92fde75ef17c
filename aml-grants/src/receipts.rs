//! Receipt records kept in the state database beside the grants and the journal, so one file
//! (or one PostgreSQL database) holds everything the boundary did.

use std::sync::Arc;

use aml_core::{async_trait, ReceiptSink, Record};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::grant::StoreError;

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
    /// Appends records (JSON text each), in order, in one transaction.
    async fn append_records(&self, records: &[String]) -> Result<(), StoreError>;
    /// The records stored at or after `since_ms` (ms since the epoch), oldest first.
    async fn records_since(&self, since_ms: i64) -> Result<Vec<StoredRecord>, StoreError>;
}

/// A [`ReceiptSink`] that stores records in a [`ReceiptStore`] from a task of the current
/// tokio runtime, so recording never waits for the database. Records are appended in
/// batches, in order; a batch the store refuses is logged (`aml.receipts`, error) and counted
/// in [`failures`](Self::failures).
#[derive(Debug, Clone)]
pub struct StoredReceipts {
    queue: mpsc::UnboundedSender<Message>,
    failures: Arc<AtomicU64>,
}

enum Message {
    Record(String),
    Flush(oneshot::Sender<()>),
}

impl StoredReceipts {
    /// Starts the task that appends to `store`; it ends when every clone of the sink is gone.
    pub fn spawn(store: Arc<dyn ReceiptStore>) -> (Self, JoinHandle<()>) {
        let (queue, mut messages) = mpsc::unbounded_channel::<Message>();
        let failures = Arc::new(AtomicU64::new(0));
        let lost = Arc::clone(&failures);
        let task = tokio::spawn(async move {
            let mut batch = Vec::new();
            let mut flushes = Vec::new();
            while let Some(first) = messages.recv().await {
                let mut next = Some(first);
                while let Some(message) = next {
                    match message {
                        Message::Record(record) => batch.push(record),
                        Message::Flush(done) => flushes.push(done),
                    }
                    next = messages.try_recv().ok();
                }
                if !batch.is_empty() {
                    if let Err(e) = store.append_records(&batch).await {
                        lost.fetch_add(batch.len() as u64, Ordering::Relaxed);
                        tracing::error!(target: "aml.receipts", error = %e, lost = batch.len(),
                                        "receipt records could not be stored");
                    }
                    batch.clear();
                }
                for done in flushes.drain(..) {
                    let _ = done.send(());
                }
            }
        });
        (StoredReceipts { queue, failures }, task)
    }

    /// Waits until every record recorded before this call is stored (or counted lost).
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

impl ReceiptSink for StoredReceipts {
    fn record(&self, record: &Record) {
        if self
            .queue
            .send(Message::Record(record.to_value().to_string()))
            .is_err()
        {
            self.failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(target: "aml.receipts", "a receipt record arrived after the store closed");
        }
    }
}

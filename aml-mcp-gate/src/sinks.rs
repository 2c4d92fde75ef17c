//! Where the gate's records go: the state's receipts table and, when asked for, a JSON-lines
//! log.

use std::sync::Arc;
use std::time::Duration;

use aml_core::{JsonLinesSink, ReceiptSink, Record};
use aml_grants::StoredReceipts;

/// Every record to each of the gate's sinks.
#[derive(Debug, Clone)]
pub(crate) struct Receipts {
    log: Option<Arc<JsonLinesSink>>,
    stored: Option<StoredReceipts>,
}

impl Receipts {
    pub(crate) fn new(log: Option<Arc<JsonLinesSink>>, stored: Option<StoredReceipts>) -> Self {
        Receipts { log, stored }
    }

    /// Waits (bounded) until everything recorded so far is written; whether it all was.
    pub(crate) async fn flush(&self, limit: Duration) -> bool {
        let mut complete = true;
        if let Some(stored) = &self.stored {
            complete &= tokio::time::timeout(limit, stored.flush()).await.is_ok() && stored.failures() == 0;
        }
        if let Some(log) = &self.log {
            complete &= log.flush(limit) && log.failures() == 0;
        }
        complete
    }

    /// Waits (bounded) until every record so far is in the state; whether it was in time
    /// (`true` without a database state).
    pub(crate) async fn flush_state_within(&self, limit: Duration) -> bool {
        match &self.stored {
            Some(stored) => tokio::time::timeout(limit, stored.flush()).await.is_ok(),
            None => true,
        }
    }

    /// Writes that failed so far, in the state and the log together.
    pub(crate) fn failures(&self) -> u64 {
        self.stored.as_ref().map_or(0, StoredReceipts::failures)
            + self.log.as_ref().map_or(0, |log| log.failures())
    }
}

impl ReceiptSink for Receipts {
    fn record(&self, record: &Record) {
        if let Some(log) = &self.log {
            log.record(record);
        }
        if let Some(stored) = &self.stored {
            stored.record(record);
        }
    }

    fn record_owned(&self, record: Record) {
        if let Some(stored) = &self.stored {
            stored.record(&record);
        }
        if let Some(log) = &self.log {
            log.record_owned(record);
        }
    }
}

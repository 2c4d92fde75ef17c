//! Records written after the answer: a [`ReceiptSink`] that hands each record to a task of
//! the relay's runtime, which passes it on to the host's sink once the answers that were
//! ready have gone out. Serializing a record and waking a writer thread then happen off the
//! path of the call.

use std::sync::Arc;

use aml_core::{ReceiptSink, Record};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long the first record of a batch waits for others.
const BATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// A sink that defers each record to a task; see the module docs. Dropping every handle to
/// it ends the task once it has passed on every record.
#[derive(Debug, Clone)]
pub struct DeferredSink {
    queue: mpsc::UnboundedSender<Record>,
    inner: Arc<dyn ReceiptSink>,
}

impl DeferredSink {
    /// Starts the task (on the current runtime) that passes records on to `inner`. Await the
    /// handle, after the last `DeferredSink` is dropped, before flushing `inner`.
    pub fn spawn(inner: Arc<dyn ReceiptSink>) -> (Self, JoinHandle<()>) {
        let (queue, mut records) = mpsc::unbounded_channel::<Record>();
        let task_inner = Arc::clone(&inner);
        let task = tokio::spawn(async move {
            while let Some(first) = records.recv().await {
                // Let the answer that came with this record go out, and gather the records of
                // the next calls: the host's sink (a writer thread) is woken once per batch.
                tokio::time::sleep(BATCH_WAIT).await;
                task_inner.record_owned(first);
                while let Ok(next) = records.try_recv() {
                    task_inner.record_owned(next);
                }
            }
        });
        (DeferredSink { queue, inner }, task)
    }
}

impl ReceiptSink for DeferredSink {
    fn record(&self, record: &Record) {
        self.record_owned(record.clone());
    }

    fn record_owned(&self, record: Record) {
        if let Err(unsent) = self.queue.send(record) {
            // The task has ended (the runtime is shutting down): record now.
            self.inner.record_owned(unsent.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aml_core::{ApprovalRecord, MemorySink, Sha256Digest};

    #[tokio::test]
    async fn every_record_reaches_the_inner_sink_in_order() {
        let memory = MemorySink::new();
        let (sink, task) = DeferredSink::spawn(Arc::new(memory.clone()));
        for n in 0..50u8 {
            let record = ApprovalRecord::new(Sha256Digest::of(&[n]), true, None, serde_json::json!(n));
            sink.record(&Record::Approval(record));
        }
        drop(sink);
        task.await.unwrap();
        let records = memory.records();
        assert_eq!(records.len(), 50);
        assert!(matches!(&records[49], Record::Approval(a) if a.statement == serde_json::json!(49)));
    }
}

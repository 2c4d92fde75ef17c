//! A receipt sink that appends one JSON line per record to a file (or stderr) from its own
//! writer thread, so recording never blocks the caller's runtime.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::record::{ReceiptSink, Record};

enum Message {
    /// Serialized on the writer thread, off the caller's.
    Record(Box<Record>),
    Flush(SyncSender<()>),
}

/// Appends each record as one JSON line, written by a background thread.
///
/// [`record`](ReceiptSink::record) only serializes and queues; the thread writes whatever has
/// queued in one write and flushes, and while records keep coming it polls every
/// millisecond instead of parking, so a busy caller never pays for waking it. Dropping the sink writes everything queued before it
/// returns. A failed write is counted ([`failures`](Self::failures)) and reported through
/// `tracing`, never ignored silently.
///
/// ```
/// use aml_core::{JsonLinesSink, ReceiptSink};
/// let path = std::env::temp_dir().join(format!("aml-doc-sink-{}.jsonl", std::process::id()));
/// let sink = JsonLinesSink::append(&path).unwrap();
/// assert!(sink.flush(std::time::Duration::from_secs(5)));
/// assert_eq!(sink.failures(), 0);
/// # std::fs::remove_file(&path).ok();
/// ```
#[derive(Debug)]
pub struct JsonLinesSink {
    queue: Sender<Message>,
    writer: Mutex<Option<JoinHandle<()>>>,
    failures: Arc<AtomicU64>,
}

impl JsonLinesSink {
    /// Appends to `path`, creating it if needed.
    pub fn append(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Self::from_writer(Box::new(file))
    }

    /// Writes to this process's stderr.
    pub fn stderr() -> std::io::Result<Self> {
        Self::from_writer(Box::new(std::io::stderr()))
    }

    /// Writes to `out`.
    pub fn from_writer(out: Box<dyn Write + Send>) -> std::io::Result<Self> {
        let (queue, lines) = mpsc::channel();
        let failures = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&failures);
        let writer = std::thread::Builder::new()
            .name("aml-receipts".into())
            .spawn(move || write_lines(out, lines, &counter))?;
        Ok(JsonLinesSink {
            queue,
            writer: Mutex::new(Some(writer)),
            failures,
        })
    }

    /// Waits (blocking the calling thread, at most `timeout`) until every record queued so
    /// far is written and flushed. Returns whether that happened in time.
    pub fn flush(&self, timeout: Duration) -> bool {
        let (done, wait) = mpsc::sync_channel(1);
        self.queue.send(Message::Flush(done)).is_ok() && wait.recv_timeout(timeout).is_ok()
    }

    /// How many records could not be written.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

impl ReceiptSink for JsonLinesSink {
    fn record(&self, record: &Record) {
        self.record_owned(record.clone());
    }

    fn record_owned(&self, record: Record) {
        if self.queue.send(Message::Record(Box::new(record))).is_err() {
            self.failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(target: "aml.receipts", "the receipt writer has stopped; a record was not written");
        }
    }
}

impl Drop for JsonLinesSink {
    fn drop(&mut self) {
        // Closing the queue ends the writer once it has written everything queued.
        let (closed, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.queue, closed));
        let writer = self
            .writer
            .get_mut()
            .map(Option::take)
            .unwrap_or_else(|p| p.into_inner().take());
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
}

/// How long the writer waits for more records after writing some, before it parks again.
/// While records keep coming it never parks, so a caller's send never has to wake it.
const LINGER: Duration = Duration::from_millis(1);

fn write_lines(mut out: Box<dyn Write + Send>, queue: Receiver<Message>, failures: &AtomicU64) {
    let mut batch = Batch::default();
    // Park until a record arrives; then keep draining every LINGER while records keep coming.
    while let Ok(first) = queue.recv() {
        batch.take(first);
        loop {
            let open = batch.drain(&queue);
            batch.write(&mut out, failures);
            if !open {
                return;
            }
            std::thread::sleep(LINGER);
            if !batch.drain(&queue) {
                batch.write(&mut out, failures);
                return;
            }
            if batch.is_empty() {
                break;
            }
        }
    }
}

/// Records (and flush requests) taken from the queue, not yet written.
#[derive(Default)]
struct Batch {
    text: Vec<u8>,
    lines: u64,
    /// Records that could not be serialized, counted as failures at the next write.
    unwritable: u64,
    waiting: Vec<SyncSender<()>>,
}

impl Batch {
    fn take(&mut self, message: Message) {
        match message {
            Message::Record(record) => {
                let start = self.text.len();
                match serde_json::to_writer(&mut self.text, &*record) {
                    Ok(()) => {
                        self.text.push(b'\n');
                        self.lines += 1;
                    }
                    Err(e) => {
                        // A partial line is taken back.
                        self.text.truncate(start);
                        self.unwritable += 1;
                        tracing::error!(target: "aml.receipts", error = %e, "a record could not be serialized");
                    }
                }
            }
            Message::Flush(done) => self.waiting.push(done),
        }
    }

    /// Takes everything queued now; `false` once the sink is gone.
    fn drain(&mut self, queue: &Receiver<Message>) -> bool {
        loop {
            match queue.try_recv() {
                Ok(message) => self.take(message),
                Err(mpsc::TryRecvError::Empty) => return true,
                Err(mpsc::TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.lines == 0 && self.unwritable == 0 && self.waiting.is_empty()
    }

    /// One write for every line taken, then the flush requests are answered.
    fn write(&mut self, out: &mut Box<dyn Write + Send>, failures: &AtomicU64) {
        failures.fetch_add(std::mem::take(&mut self.unwritable), Ordering::Relaxed);
        if self.lines > 0 {
            if let Err(e) = out.write_all(&self.text).and_then(|()| out.flush()) {
                failures.fetch_add(self.lines, Ordering::Relaxed);
                tracing::error!(target: "aml.receipts", error = %e, lost = self.lines,
                                "receipt records could not be written");
            }
            self.text.clear();
            self.lines = 0;
        }
        for done in self.waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ApprovalRecord, Record};
    use crate::Sha256Digest;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct Broken;

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn approval(n: u8) -> Record {
        Record::Approval(ApprovalRecord::new(
            Sha256Digest::of(&[n]),
            true,
            Some(format!("grant-{n}")),
            serde_json::json!({"n": n}),
        ))
    }

    #[test]
    fn every_record_is_one_line_and_none_is_lost_on_drop() {
        let out = Shared::default();
        let sink = JsonLinesSink::from_writer(Box::new(out.clone())).unwrap();
        for n in 0..200 {
            sink.record(&approval(n as u8));
        }
        drop(sink);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 200);
        assert_eq!(lines[7]["grant_id"], "grant-7");
        assert_eq!(lines[7]["record"], "aml-approval-record/1");
    }

    #[test]
    fn flush_waits_for_queued_records() {
        let out = Shared::default();
        let sink = JsonLinesSink::from_writer(Box::new(out.clone())).unwrap();
        sink.record(&approval(1));
        assert!(sink.flush(Duration::from_secs(10)));
        assert_eq!(String::from_utf8_lossy(&out.0.lock().unwrap()).lines().count(), 1);
    }

    #[test]
    fn failed_writes_are_counted() {
        let sink = JsonLinesSink::from_writer(Box::new(Broken)).unwrap();
        sink.record(&approval(1));
        sink.record(&approval(2));
        assert!(sink.flush(Duration::from_secs(10)));
        assert_eq!(sink.failures(), 2);
    }
}

//! One receipt stream for every adapter: each call that reaches a front door
//! ([`crate::GuardedTool`], [`crate::ToolGate`]) ends in exactly one [`CallRecord`], and
//! approval channels add [`ApprovalRecord`]s, all handed to the host's [`ReceiptSink`].
//!
//! Records never hold a tool's output: only its SHA-256 and size ([`ResultSummary`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use sha2::Digest as _;

use crate::{Plan, Receipt, Refusal, Sha256Digest};

/// The record protocol string of a [`CallRecord`].
pub const CALL_RECORD_PROTOCOL: &str = "aml-call-record/1";
/// The record protocol string of an [`ApprovalRecord`].
pub const APPROVAL_RECORD_PROTOCOL: &str = "aml-approval-record/1";

/// The digest and size of a tool's result, recorded instead of the result itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ResultSummary {
    /// SHA-256 of the result bytes.
    pub sha256: Sha256Digest,
    /// Their length.
    pub bytes: u64,
}

impl ResultSummary {
    /// The summary of `bytes`.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        ResultSummary {
            sha256: Sha256Digest::of(bytes),
            bytes: bytes.len() as u64,
        }
    }

    /// The summary of a JSON result, as compact JSON text (keys sorted, as serde_json's
    /// map writes them). Hashed as it is written: the text is never held in memory.
    pub fn of_json(value: &Value) -> Self {
        let mut hasher = HashingWriter::default();
        // Writing to an infallible writer cannot fail.
        let _ = write_sorted(value, &mut hasher);
        ResultSummary {
            sha256: Sha256Digest::from_bytes(hasher.hasher.finalize().into()),
            bytes: hasher.bytes,
        }
    }
}

/// Compact JSON with every object's keys in byte order, whatever order the map keeps: a
/// dependency may turn on serde_json's `preserve_order` (cedar-policy does), which makes
/// `serde_json::Map` keep insertion order for every crate in the build.
fn write_sorted(value: &Value, out: &mut impl std::io::Write) -> std::io::Result<()> {
    match value {
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_sorted(item, out)?;
            }
            out.write_all(b"]")
        }
        Value::Object(members) => {
            out.write_all(b"{")?;
            // Already in order (a BTreeMap-backed map, or keys inserted in order): no copy.
            if members.keys().is_sorted() {
                write_members(members.iter(), out)?;
            } else {
                let mut entries: Vec<(&String, &Value)> = members.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                write_members(entries.into_iter(), out)?;
            }
            out.write_all(b"}")
        }
        scalar => serde_json::to_writer(out, scalar).map_err(std::io::Error::from),
    }
}

fn write_members<'a>(
    members: impl Iterator<Item = (&'a String, &'a Value)>,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    for (i, (key, member)) in members.enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *out, key)?;
        out.write_all(b":")?;
        write_sorted(member, out)?;
    }
    Ok(())
}

/// Feeds written bytes to SHA-256 and counts them.
#[derive(Default)]
struct HashingWriter {
    hasher: sha2::Sha256,
    bytes: u64,
}

impl std::io::Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        sha2::Digest::update(&mut self.hasher, buf);
        self.bytes += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How one call through a front door ended: the same shape from every adapter.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct CallRecord {
    /// Always [`CALL_RECORD_PROTOCOL`].
    pub record: &'static str,
    /// The adapter that carried the call (`core`, `mcp`, `grpc`, `a2ui`, …).
    pub adapter: String,
    /// The tool name the caller asked for.
    pub tool: String,
    /// When the call arrived, in milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// How long it took until this record, in microseconds.
    pub elapsed_us: u64,
    /// A refusal before any plan (unknown tool, arguments outside the host schema, …).
    pub refusal: Option<Refusal>,
    /// The plan, when one was made.
    pub plan: Option<Plan>,
    /// The receipt, when one was made.
    pub receipt: Option<Receipt>,
    /// A host error (failing resource mapper): no plan, no receipt.
    pub host_error: Option<String>,
    /// Diagnostics: the hook, tool or transport error behind a block or an `unknown`.
    pub detail: Option<String>,
    /// The tool's result, as a digest and a size (never the result itself).
    pub result: Option<ResultSummary>,
    /// The ids of the Cedar policies that determined the plan (absent for exact rules).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
    /// In shadow mode, what the policy decided for a call it let through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_block: Option<crate::plan::WouldBlock>,
    /// Who called, when it was not the host's own agent (`local`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The server that serves the tool, when its registration names one
    /// ([`ToolRegistration::with_server`](crate::ToolRegistration::with_server)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The caller's usage of the tool that the plan was decided on, for a policy that reads
    /// `context.usage`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::Usage>,
}

impl CallRecord {
    /// A record of a call to `tool` through `adapter` that started at `clock`; every
    /// outcome field empty.
    pub fn new(adapter: impl Into<String>, tool: impl Into<String>, clock: &CallClock) -> Self {
        CallRecord {
            record: CALL_RECORD_PROTOCOL,
            adapter: adapter.into(),
            tool: tool.into(),
            started_at_ms: clock.started_at_ms,
            elapsed_us: clock.elapsed_us(),
            refusal: None,
            plan: None,
            receipt: None,
            host_error: None,
            detail: None,
            result: None,
            policies: Vec::new(),
            would_block: None,
            caller: None,
            server: None,
            usage: None,
        }
    }

    /// The record as JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A signed approval decision, recorded before it counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ApprovalRecord {
    /// Always [`APPROVAL_RECORD_PROTOCOL`].
    pub record: &'static str,
    /// The proposal the decision is bound to.
    pub proposal_sha256: Sha256Digest,
    /// Whether it approves.
    pub approved: bool,
    /// The one-use grant it names, if any.
    pub grant_id: Option<String>,
    /// The whole statement (for a signed decision: its wire form with the signature).
    pub statement: Value,
}

impl ApprovalRecord {
    /// A record of a decision on `proposal_sha256`.
    pub fn new(
        proposal_sha256: Sha256Digest,
        approved: bool,
        grant_id: Option<String>,
        statement: Value,
    ) -> Self {
        ApprovalRecord {
            record: APPROVAL_RECORD_PROTOCOL,
            proposal_sha256,
            approved,
            grant_id,
            statement,
        }
    }
}

/// One entry of the receipt stream.
// A record is built once per call and moved straight into a sink: boxing its larger variant
// would cost every call an allocation for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum Record {
    /// How a call ended.
    Call(CallRecord),
    /// An approval decision.
    Approval(ApprovalRecord),
}

impl Record {
    /// The record as JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The call record, if this is one.
    pub fn as_call(&self) -> Option<&CallRecord> {
        match self {
            Record::Call(call) => Some(call),
            Record::Approval(_) => None,
        }
    }
}

/// Where a host's records go. Called on the caller's task: it must not block (hand the
/// record to a queue, as [`crate::JsonLinesSink`] does) and must not panic.
///
/// ```
/// use aml_core::{Record, ReceiptSink};
///
/// /// Counts records in a metric.
/// #[derive(Debug, Default)]
/// struct Counted(std::sync::atomic::AtomicU64);
///
/// impl ReceiptSink for Counted {
///     fn record(&self, _record: &Record) {
///         self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///     }
/// }
/// ```
pub trait ReceiptSink: Send + Sync + core::fmt::Debug {
    /// Takes one record.
    fn record(&self, record: &Record);

    /// Takes one record its caller no longer needs (the front doors hand theirs over this
    /// way): a sink that keeps records can then skip the copy [`record`](Self::record)
    /// would need. By default, [`record`](Self::record).
    fn record_owned(&self, record: Record) {
        self.record(&record);
    }

    /// Whether this sink keeps records at all; a front door skips the work of building one
    /// (hashing the tool's result) for a sink that does not.
    fn wants_records(&self) -> bool {
        true
    }
}

/// A sink that drops every record (the default of a front door without a sink).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSink;

impl ReceiptSink for NoSink {
    fn record(&self, _record: &Record) {}

    fn wants_records(&self) -> bool {
        false
    }
}

/// A [`ReceiptSink`] from a closure.
///
/// ```
/// let sink = aml_core::sink_fn(|record| eprintln!("{}", record.to_value()));
/// ```
pub fn sink_fn<F: Fn(&Record) + Send + Sync>(f: F) -> SinkFn<F> {
    SinkFn(f)
}

/// See [`sink_fn`].
pub struct SinkFn<F>(F);

impl<F> core::fmt::Debug for SinkFn<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SinkFn")
    }
}

impl<F: Fn(&Record) + Send + Sync> ReceiptSink for SinkFn<F> {
    fn record(&self, record: &Record) {
        (self.0)(record)
    }
}

/// Keeps every record in memory: for tests and for hosts that poll.
#[derive(Debug, Clone, Default)]
pub struct MemorySink(Arc<Mutex<Vec<Record>>>);

impl MemorySink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every record so far, in order.
    pub fn records(&self) -> Vec<Record> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every call record so far, in order.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.records()
            .iter()
            .filter_map(Record::as_call)
            .cloned()
            .collect()
    }
}

impl ReceiptSink for MemorySink {
    fn record(&self, record: &Record) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record.clone());
    }
}

/// When a call started: the wall-clock time for the record and a monotonic start for its
/// duration.
#[derive(Debug, Clone, Copy)]
pub struct CallClock {
    started_at_ms: u64,
    started: Instant,
}

impl CallClock {
    /// Starts now.
    pub fn start() -> Self {
        let started_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64)
            .unwrap_or(0);
        CallClock {
            started_at_ms,
            started: Instant::now(),
        }
    }

    /// Microseconds since the start.
    pub fn elapsed_us(&self) -> u64 {
        let elapsed: Duration = self.started.elapsed();
        elapsed.as_micros().min(u128::from(u64::MAX)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With serde_json's `preserve_order` on (cedar-policy turns it on in this build), a map
    /// keeps insertion order; the summary still hashes the keys sorted.
    #[test]
    fn a_result_is_hashed_with_its_keys_sorted_whatever_order_the_map_keeps() {
        let mut inner = serde_json::Map::new();
        inner.insert("z".into(), Value::from(1));
        inner.insert("a".into(), Value::from(vec![1.5, 2.0]));
        let mut outer = serde_json::Map::new();
        outer.insert("structuredContent".into(), Value::Object(inner));
        outer.insert("content".into(), Value::Array(vec![]));
        let sorted = r#"{"content":[],"structuredContent":{"a":[1.5,2.0],"z":1}}"#;
        assert_eq!(
            ResultSummary::of_json(&Value::Object(outer)),
            ResultSummary::of_bytes(sorted.as_bytes())
        );
    }
}

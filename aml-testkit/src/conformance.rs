//! The cross-adapter conformance report: the same hostile calls through every adapter's wire,
//! and the same status, reason, record and tool-entry count from each (ADR 019).
//!
//! A custom adapter implements [`ConformanceHarness`] (serve the given gate on its wire,
//! carry one [`Probe`] over it) and runs [`conformance_with`]; `aml-testkit rehearse` shows
//! every built-in adapter's column.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aml_core::{
    approval_fn, async_trait, sink_fn, tool_fn, ActionBoundary, ArgumentSnapshot, CallRecord, Effect,
    ExecutionStatus, MemorySink, Policy, ReceiptSink, ToolCatalog, ToolError, ToolExecutor, ToolGate,
    ToolRegistration,
};
use serde_json::json;
use tokio::sync::Notify;

use crate::compare::CaseVerdict;
use crate::harness::HarnessError;

/// How long a probe's caller waits before its deadline passes.
pub const PROBE_DEADLINE: Duration = Duration::from_millis(300);
/// The longest any probe may take to answer and be recorded.
const SETTLE: Duration = Duration::from_secs(20);

/// When the caller of a probe leaves without waiting for its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// Once the host has been asked for approval.
    DuringApproval,
    /// Once the tool has been entered.
    DuringTool,
}

/// One hostile call.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The report row.
    pub id: &'static str,
    /// The tool named.
    pub tool: &'static str,
    /// The agent's argument text, sent as is.
    pub arguments: String,
    /// The caller's deadline ([`PROBE_DEADLINE`]), when the probe has one.
    pub deadline: Option<Duration>,
    /// When the caller leaves, if it does.
    pub leave: Option<Leave>,
    /// Whether a wire whose client library holds arguments as a parsed JSON object (rmcp)
    /// cannot carry this text at all: duplicate keys, a number beyond a double, an array.
    pub unparsed_only: bool,
    expected: Expected,
}

/// What every adapter must show for a probe: the answer (`None` when the caller left), the
/// one record, and how often a tool was entered.
#[derive(Debug, Clone, Copy)]
struct Expected {
    answer: Option<(&'static str, &'static str)>,
    record: (&'static str, &'static str),
    entries: usize,
}

/// What a harness saw come back over its wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// The answer's status (`refused`, `host_error`, `blocked`, `dispatched`, `unknown`) and
    /// exact reason, as the wire carried them.
    Answer {
        /// The status word.
        status: String,
        /// The reason string.
        reason: String,
    },
    /// The caller left as the probe asked; no answer was read.
    Left,
    /// The wire's client cannot carry the text at all; nothing was sent.
    WireRefused(String),
}

/// The host every probe runs against: its gate (the adapter renames it), the records, and
/// signals for a harness whose caller leaves mid-call.
#[derive(Debug)]
pub struct ConformanceHost {
    gate: ToolGate,
    sink: MemorySink,
    entries: Arc<AtomicUsize>,
    approval_asked: Arc<Notify>,
    tool_entered: Arc<Notify>,
    release: Arc<Notify>,
    recorded: Arc<Notify>,
}

impl ConformanceHost {
    /// A fresh host: `fetch_record` (allowed), `delete_record` (approval from a person who
    /// never answers), `slow_report` (waits until released), `crash` (panics),
    /// `notify_offline` (its executor says it reached nothing: `ToolError::not_entered`) and
    /// `purge_all` (registered, but no rule can allow it: never listed).
    pub fn new() -> Self {
        let entries = Arc::new(AtomicUsize::new(0));
        let (tool_entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let approval_asked = Arc::new(Notify::new());
        let counted = |executor: Arc<dyn ToolExecutor>| {
            let entries = Arc::clone(&entries);
            Arc::new(tool_fn(move |call| {
                entries.fetch_add(1, Ordering::SeqCst);
                let executor = Arc::clone(&executor);
                async move { executor.execute(call).await }
            })) as Arc<dyn ToolExecutor>
        };
        let fetch: Arc<dyn ToolExecutor> = Arc::new(tool_fn(|call| async move {
            Ok(json!({"id": call.arguments()["id"]}))
        }));
        let slow: Arc<dyn ToolExecutor> = Arc::new(tool_fn({
            let (entered, release) = (Arc::clone(&tool_entered), Arc::clone(&release));
            move |_| {
                let (entered, release) = (Arc::clone(&entered), Arc::clone(&release));
                async move {
                    entered.notify_one();
                    release.notified().await;
                    Ok(json!({"report": "done"}))
                }
            }
        }));
        // `resume_unwind` panics without the panic hook: no backtrace on the report's stderr.
        let crash: Arc<dyn ToolExecutor> = Arc::new(tool_fn(|_| async {
            std::panic::resume_unwind(Box::new("the tool crashed"))
        }));
        let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]});
        let tool = |name: &str, effect, executor: Option<Arc<dyn ToolExecutor>>| {
            let fixed = |_: &ArgumentSnapshot| Ok("records".to_owned());
            let registration = ToolRegistration::new(name, effect, "Work on records", fixed, schema.clone())
                .expect("a valid registration");
            match executor {
                Some(executor) => registration.with_executor(counted(executor)),
                None => registration,
            }
        };
        let catalog = [
            tool("fetch_record", Effect::Read, Some(fetch)),
            tool(
                "delete_record",
                Effect::Delete,
                Some(Arc::new(tool_fn(|_| async { Ok(json!({})) }))),
            ),
            tool("slow_report", Effect::Write, Some(slow)),
            tool("crash", Effect::Write, Some(crash)),
            // Its executor stands for a forward that could not connect: the tool behind it
            // is never reached, so no entry is counted.
            tool("notify_offline", Effect::Send, None).with_executor(Arc::new(tool_fn(|_| async {
                let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
                Err(ToolError::not_entered("the service is not reachable", refused))
            }))),
            tool("purge_all", Effect::Delete, None),
        ]
        .into_iter()
        .try_fold(ToolCatalog::new(), ToolCatalog::with)
        .expect("distinct names");
        let rule = |tool: &str, effect: &str, approval: bool| json!({"tool": tool, "effect": effect, "resource": "records", "requires_approval": approval});
        let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
            rule("fetch_record", "read", false), rule("delete_record", "delete", true),
            rule("slow_report", "write", false), rule("crash", "write", false),
            rule("notify_offline", "send", false)]}));
        let asked = Arc::clone(&approval_asked);
        let (sink, recorded) = (MemorySink::new(), Arc::new(Notify::new()));
        let (memory, signal) = (sink.clone(), Arc::clone(&recorded));
        let boundary = ActionBoundary::builder(Arc::new(policy))
            .approval(approval_fn(move |_| {
                asked.notify_one();
                std::future::pending()
            }))
            .sink(sink_fn(move |record| {
                memory.record(record);
                signal.notify_one();
            }))
            .build();
        ConformanceHost {
            gate: ToolGate::new(catalog, boundary),
            sink,
            entries,
            approval_asked,
            tool_entered,
            release,
            recorded,
        }
    }

    /// The host's gate, for the adapter to serve.
    pub fn gate(&self) -> ToolGate {
        self.gate.clone()
    }

    /// Completes when the caller of `probe` should leave (never, if it should not).
    pub async fn leave_signal(&self, probe: &Probe) {
        match probe.leave {
            Some(Leave::DuringApproval) => self.approval_asked.notified().await,
            Some(Leave::DuringTool) => self.tool_entered.notified().await,
            None => std::future::pending().await,
        }
    }

    fn records(&self) -> Vec<CallRecord> {
        self.sink.calls()
    }
}

impl Default for ConformanceHost {
    fn default() -> Self {
        Self::new()
    }
}

/// Carries the conformance probes over one adapter's wire.
///
/// ```
/// use aml_core::{async_trait, CallRequest};
/// use aml_testkit::conformance::{ConformanceHarness, ConformanceHost, Observed, Probe};
/// use aml_testkit::HarnessError;
///
/// /// The core itself, as a "wire".
/// #[derive(Debug)]
/// struct InProcess;
///
/// #[async_trait]
/// impl ConformanceHarness for InProcess {
///     fn adapter(&self) -> &str { "in-process" }
///     async fn probe(&self, host: &ConformanceHost, probe: &Probe) -> Result<Observed, HarnessError> {
///         let gate = host.gate().with_runtime(aml_core::TokioRuntime);
///         let mut request = CallRequest::bytes(probe.tool, probe.arguments.as_bytes());
///         if let Some(deadline) = probe.deadline {
///             request = request.deadline(std::time::Instant::now() + deadline);
///         }
///         tokio::select! {
///             outcome = gate.call(request) => Ok(Observed::Answer {
///                 status: outcome.status().to_owned(), reason: outcome.reason().to_owned() }),
///             () = host.leave_signal(probe) => Ok(Observed::Left),
///         }
///     }
///     async fn list(&self, host: &ConformanceHost) -> Result<Option<Vec<String>>, HarnessError> {
///         Ok(Some(host.gate().listing().iter().map(|t| t.name().to_owned()).collect()))
///     }
/// }
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # let report = rt.block_on(aml_testkit::conformance::conformance_with(&InProcess));
/// # assert!(report.iter().all(|(_, v)| v.passed()), "{report:?}");
/// ```
#[async_trait]
pub trait ConformanceHarness: Send + Sync + core::fmt::Debug {
    /// The adapter's column name.
    fn adapter(&self) -> &str;

    /// Serves `host.gate()` on the adapter's wire and carries `probe` over it: its tool and
    /// argument text, its deadline if it has one, and a caller that leaves when
    /// [`ConformanceHost::leave_signal`] completes (dropping the call, closing the stream).
    async fn probe(&self, host: &ConformanceHost, probe: &Probe) -> Result<Observed, HarnessError>;

    /// The tool names the adapter's wire lists for `host`; `None` for a wire that lists no
    /// tools.
    async fn list(&self, host: &ConformanceHost) -> Result<Option<Vec<String>>, HarnessError>;
}

/// Every probe, in report order.
pub fn probes() -> Vec<Probe> {
    let probe = |id, tool, arguments: &str, answer, record, entries| Probe {
        id,
        tool,
        arguments: arguments.to_owned(),
        deadline: None,
        leave: None,
        unparsed_only: false,
        expected: Expected {
            answer,
            record,
            entries,
        },
    };
    let same = |status, reason| (Some((status, reason)), (status, reason));
    let with = |mut p: Probe, f: &dyn Fn(&mut Probe)| {
        f(&mut p);
        p
    };
    let oversize = format!(r#"{{"id": 1, "pad": "{}"}}"#, "x".repeat(100 * 1024));
    let refused = |reason| same("refused", reason);
    let (a, r) = refused("inexact_number");
    let mut all = vec![probe(
        "big_integer",
        "fetch_record",
        r#"{"id": 9007199254740993}"#,
        a,
        r,
        0,
    )];
    let (a, r) = same("blocked", "AML_CANONICAL_JSON_NON_FINITE_NUMBER");
    all.push(with(
        probe("number_1e400", "fetch_record", r#"{"id": 1e400}"#, a, r, 0),
        &|p| p.unparsed_only = true,
    ));
    let (a, r) = same("blocked", "AML_JSON_DUPLICATE_KEY");
    all.push(with(
        probe("duplicate_keys", "fetch_record", r#"{"id": 1, "id": 2}"#, a, r, 0),
        &|p| p.unparsed_only = true,
    ));
    let (a, r) = refused("invalid_arguments");
    all.push(with(
        probe("not_an_object", "fetch_record", "[1]", a, r, 0),
        &|p| p.unparsed_only = true,
    ));
    let (a, r) = same("blocked", "proposal_too_large");
    all.push(probe("oversize_arguments", "fetch_record", &oversize, a, r, 0));
    let (a, r) = refused("invalid_or_unregistered_call");
    all.push(probe("unknown_tool", "purge_everything", r#"{"id": 1}"#, a, r, 0));
    let (a, r) = refused("invalid_arguments");
    all.push(probe(
        "schema_mismatch",
        "fetch_record",
        r#"{"id": "seven"}"#,
        a,
        r,
        0,
    ));
    let blocked_approval = ("blocked", "approval_error");
    all.push(with(
        probe(
            "gone_during_approval",
            "delete_record",
            r#"{"id": 7}"#,
            None,
            blocked_approval,
            0,
        ),
        &|p| p.leave = Some(Leave::DuringApproval),
    ));
    let (a, r) = same("blocked", "approval_error");
    all.push(with(
        probe(
            "deadline_during_approval",
            "delete_record",
            r#"{"id": 7}"#,
            a,
            r,
            0,
        ),
        &|p| p.deadline = Some(PROBE_DEADLINE),
    ));
    let running = Some(("unknown", "dispatch_in_progress"));
    let finished = ("dispatched", "host_dispatch_returned");
    all.push(with(
        probe(
            "deadline_during_tool",
            "slow_report",
            r#"{"id": 7}"#,
            running,
            finished,
            1,
        ),
        &|p| p.deadline = Some(PROBE_DEADLINE),
    ));
    let (a, r) = same("unknown", "host_dispatch_error");
    all.push(probe("tool_panics", "crash", r#"{"id": 7}"#, a, r, 1));
    let (a, r) = same("blocked", "host_dispatch_not_entered");
    all.push(probe(
        "tool_not_reached",
        "notify_offline",
        r#"{"id": 7}"#,
        a,
        r,
        0,
    ));
    all.push(with(
        probe(
            "tool_hangs_caller_gone",
            "slow_report",
            r#"{"id": 7}"#,
            None,
            finished,
            1,
        ),
        &|p| p.leave = Some(Leave::DuringTool),
    ));
    all
}

/// The names every adapter must list for a [`ConformanceHost`].
pub const LISTED: [&str; 5] = [
    "crash",
    "delete_record",
    "fetch_record",
    "notify_offline",
    "slow_report",
];

/// Runs every probe and the listing through `harness`, each against a fresh host: the
/// verdict per row (`conformance/<probe>`, and `conformance/listing` unless the wire lists
/// no tools).
pub async fn conformance_with(harness: &dyn ConformanceHarness) -> Vec<(String, CaseVerdict)> {
    let mut rows = Vec::new();
    for probe in probes() {
        let verdict = match tokio::time::timeout(SETTLE, run_probe(harness, &probe)).await {
            Ok(verdict) => verdict,
            Err(_) => CaseVerdict::Fail(vec![format!("no answer and record within {SETTLE:?}")]),
        };
        rows.push((probe.id.to_owned(), verdict));
    }
    let host = ConformanceHost::new();
    let listing = match harness.list(&host).await {
        Ok(None) => return rows,
        Ok(Some(names)) if names == LISTED => CaseVerdict::Pass,
        Ok(Some(names)) => CaseVerdict::Fail(vec![format!("listed {names:?}, expected {LISTED:?}")]),
        Err(e) => CaseVerdict::Fail(vec![e.to_string()]),
    };
    rows.push(("listing".to_owned(), listing));
    rows
}

async fn run_probe(harness: &dyn ConformanceHarness, probe: &Probe) -> CaseVerdict {
    let host = ConformanceHost::new();
    let observed = match harness.probe(&host, probe).await {
        Ok(observed) => observed,
        Err(e) => return CaseVerdict::Fail(vec![e.to_string()]),
    };
    if let Observed::WireRefused(why) = &observed {
        return match (probe.unparsed_only, host.records().is_empty()) {
            (true, true) => CaseVerdict::PassWireRefused,
            _ => CaseVerdict::Fail(vec![format!("the wire refused the probe: {why}")]),
        };
    }
    // A tool still running (or whose caller left) finishes once released; then its record.
    host.release.notify_one();
    while host.records().is_empty() {
        host.recorded.notified().await;
    }
    let mut differences = Vec::new();
    let expected_answer = probe.expected.answer.map(|(s, r)| Observed::Answer {
        status: s.to_owned(),
        reason: r.to_owned(),
    });
    let expected_answer = expected_answer.unwrap_or(Observed::Left);
    if observed != expected_answer {
        differences.push(format!("answer: expected {expected_answer:?}, got {observed:?}"));
    }
    let records = host.records();
    let got: Vec<_> = records.iter().map(record_status).collect();
    let (status, reason) = probe.expected.record;
    if got != [(status.to_owned(), reason.to_owned())] {
        differences.push(format!("records: expected [({status}, {reason})], got {got:?}"));
    }
    let entries = host.entries.load(Ordering::SeqCst);
    if entries != probe.expected.entries {
        differences.push(format!(
            "tool entries: expected {}, got {entries}",
            probe.expected.entries
        ));
    }
    if differences.is_empty() {
        CaseVerdict::Pass
    } else {
        CaseVerdict::Fail(differences)
    }
}

/// A record's status and reason, in the words of [`aml_core::CallOutcome`].
fn record_status(record: &CallRecord) -> (String, String) {
    let (status, reason) = match (&record.receipt, record.refusal, &record.host_error) {
        (Some(receipt), _, _) => (
            match receipt.execution_status() {
                ExecutionStatus::Dispatched => "dispatched",
                ExecutionStatus::Unknown => "unknown",
                _ => "blocked",
            },
            receipt.reason().as_str(),
        ),
        (None, Some(refusal), _) => ("refused", refusal.as_str()),
        (None, None, Some(_)) => ("host_error", "host_error"),
        (None, None, None) => ("none", "none"),
    };
    (status.to_owned(), reason.to_owned())
}

//! Timing decorators around what the gate already holds: the receipt sink (one record per
//! call), the forward to the server (with the state's intent write inside it), the one-use
//! grant store and the approval hook. Nothing in the relay or the stores changes.

use std::cell::Cell;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aml_core::{
    async_trait, Approval, ApprovalError, ApprovalHook, ApprovalRequest, ClaimError, ClaimStatus, GrantRef,
    GrantStore, ReceiptSink, Record, Sha256Digest, ToolCall, ToolError, ToolExecutor,
};
use aml_mcp::relay::ForwardWrapper;
use serde_json::Value;

use super::metrics::{Metrics, OpLabel, OutcomeLabel};
use super::Telemetry;

/// Forward times not yet matched with their call's record, by proposal digest; bounded
/// (a record that never comes must not hold memory forever). A list searched from its end:
/// it holds about one entry per call in flight, and a record follows its forward at once.
#[derive(Debug, Default)]
pub(crate) struct Unmatched(Mutex<Vec<(Sha256Digest, u64)>>);

const MAX_UNMATCHED: usize = 4096;

impl Unmatched {
    fn put(&self, digest: Sha256Digest, upstream_us: u64) {
        let mut times = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if times.len() >= MAX_UNMATCHED {
            times.clear();
        }
        times.push((digest, upstream_us));
    }

    fn take(&self, digest: &Sha256Digest) -> Option<u64> {
        let mut times = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let at = times.iter().rposition(|(d, _)| d == digest)?;
        Some(times.swap_remove(at).1)
    }
}

/// The gate's sink with every call record counted first.
#[derive(Debug)]
pub(crate) struct Observed {
    pub(crate) inner: Arc<dyn ReceiptSink>,
    pub(crate) telemetry: Arc<Telemetry>,
}

impl Observed {
    fn observe(&self, record: &Record) {
        if let Some(call) = record.as_call() {
            let digest = call.receipt.as_ref().and_then(|r| r.proposal_sha256());
            let upstream = digest.and_then(|d| self.telemetry.unmatched.take(&d));
            self.telemetry.metrics.observe_call(call, upstream);
        }
    }
}

impl ReceiptSink for Observed {
    fn record(&self, record: &Record) {
        self.observe(record);
        self.inner.record(record);
    }

    fn record_owned(&self, record: Record) {
        self.observe(&record);
        self.inner.record_owned(record);
    }
}

tokio::task_local! {
    /// The time the innermost forward took, for the outer one to subtract.
    static UPSTREAM_US: Cell<Option<u64>>;
}

/// Wraps each forward twice: inside the state's journaling (if any), to time the server;
/// outside it, to time the intent's commit (the difference).
#[derive(Debug)]
pub(crate) struct TimedForward {
    pub(crate) journal: Option<Arc<dyn ForwardWrapper>>,
    pub(crate) telemetry: Arc<Telemetry>,
}

impl ForwardWrapper for TimedForward {
    fn wrap(&self, forward: Arc<dyn ToolExecutor>) -> Arc<dyn ToolExecutor> {
        let server = Arc::new(ServerTimed(forward)) as Arc<dyn ToolExecutor>;
        let journaled = self.journal.is_some();
        let inner = match &self.journal {
            Some(journal) => journal.wrap(server),
            None => server,
        };
        Arc::new(Timed {
            inner,
            journaled,
            telemetry: Arc::clone(&self.telemetry),
        })
    }
}

#[derive(Debug)]
struct ServerTimed(Arc<dyn ToolExecutor>);

#[async_trait]
impl ToolExecutor for ServerTimed {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
        let started = Instant::now();
        let result = self.0.execute(call).await;
        let us = started.elapsed().as_micros() as u64;
        let _ = UPSTREAM_US.try_with(|cell| cell.set(Some(us)));
        result
    }
}

#[derive(Debug)]
struct Timed {
    inner: Arc<dyn ToolExecutor>,
    journaled: bool,
    telemetry: Arc<Telemetry>,
}

#[async_trait]
impl ToolExecutor for Timed {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
        let digest = call.proposal().digest();
        let started = Instant::now();
        let (result, upstream) = UPSTREAM_US
            .scope(Cell::new(None), async {
                let result = self.inner.execute(call).await;
                (result, UPSTREAM_US.with(Cell::get))
            })
            .await;
        let total = started.elapsed().as_micros() as u64;
        if self.journaled {
            // The intent's write (none when the claim wrote it: then this is ~0).
            let commit = total - upstream.unwrap_or(total).min(total);
            self.telemetry
                .metrics
                .state_commit_seconds
                .get_or_create(&OpLabel { op: "intent" })
                .observe(commit as f64 / 1e6);
        }
        if let Some(us) = upstream {
            self.telemetry.unmatched.put(digest, us);
        }
        result
    }
}

/// The one-use grant store, its claims timed (for an approved call, the claim's transaction
/// also writes the intent).
#[derive(Debug)]
pub(crate) struct TimedGrants {
    pub(crate) inner: Arc<dyn GrantStore>,
    pub(crate) metrics: Arc<Metrics>,
}

impl TimedGrants {
    fn observe(&self, started: Instant) {
        self.metrics
            .state_commit_seconds
            .get_or_create(&OpLabel { op: "claim" })
            .observe(started.elapsed().as_secs_f64());
    }
}

#[async_trait]
impl GrantStore for TimedGrants {
    async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        let started = Instant::now();
        let claimed = self.inner.claim(grant).await;
        self.observe(started);
        claimed
    }

    async fn claim_call_id(&self, id: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        let started = Instant::now();
        let claimed = self.inner.claim_call_id(id).await;
        self.observe(started);
        claimed
    }
}

/// The approval hook, with calls pending and the time to each decision.
#[derive(Debug)]
pub(crate) struct TimedApproval {
    pub(crate) inner: Arc<dyn ApprovalHook>,
    pub(crate) metrics: Arc<Metrics>,
}

/// Takes one call off the pending gauge when dropped (the caller may leave mid-wait).
struct Pending<'a>(&'a Metrics);

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.approvals_pending.dec();
    }
}

#[async_trait]
impl ApprovalHook for TimedApproval {
    async fn request_approval(&self, request: ApprovalRequest) -> Result<Approval, ApprovalError> {
        self.metrics.approvals_pending.inc();
        let _pending = Pending(&self.metrics);
        let started = Instant::now();
        let decided = self.inner.request_approval(request).await;
        let outcome = match decided {
            Ok(_) => "answered",
            Err(_) => "error",
        };
        self.metrics
            .approval_seconds
            .get_or_create(&OutcomeLabel { outcome })
            .observe(started.elapsed().as_secs_f64());
        decided
    }
}

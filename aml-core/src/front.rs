//! What every front door ([`crate::GuardedTool`], [`crate::ToolGate`]) does around a call:
//! one `aml.dispatch` span, one closing event, and exactly one [`CallRecord`] — also for a
//! call whose caller went away before it ended.

use std::sync::Arc;

use tracing::field::Empty;

use crate::dispatch::{DispatchOutcome, Progress, Stage};
use crate::plan::Plan;
use crate::receipt::Receipt;
use crate::record::{CallClock, CallRecord, ReceiptSink, Record};
use crate::{Effect, ReceiptReason};

/// Tracks one call from arrival to its record. Dropped unfinished, it records the call as
/// abandoned at the stage it reached.
pub(crate) struct CallTracker {
    adapter: Arc<str>,
    tool: String,
    clock: CallClock,
    sink: Arc<dyn ReceiptSink>,
    pub(crate) span: tracing::Span,
    pub(crate) progress: Progress,
    plan: Option<Plan>,
    policies: Vec<String>,
    /// The caller, when it is not `local`.
    caller: Option<String>,
    /// The tool's server, when its registration names one.
    server: Option<std::sync::Arc<str>>,
    done: bool,
}

impl core::fmt::Debug for CallTracker {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CallTracker")
            .field("adapter", &self.adapter)
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

impl CallTracker {
    pub(crate) fn start(adapter: &Arc<str>, tool: &str, sink: &Arc<dyn ReceiptSink>) -> Self {
        let span = tracing::info_span!(
            target: "aml.dispatch",
            "aml.dispatch",
            adapter = &**adapter,
            tool,
            effect = Empty,
            digest = Empty,
            decision = Empty,
            reason = Empty,
        );
        CallTracker {
            adapter: Arc::clone(adapter),
            tool: tool.to_owned(),
            clock: CallClock::start(),
            sink: Arc::clone(sink),
            span,
            progress: Progress::default(),
            plan: None,
            policies: Vec::new(),
            caller: None,
            server: None,
            done: false,
        }
    }

    /// Notes the plan (and the declared effect) once planning is done, with the Cedar
    /// policies that determined it.
    pub(crate) fn planned(&mut self, plan: &Plan, effect: Effect, policies: &[String]) {
        self.policies = policies.to_vec();
        self.span.record("effect", effect.as_str());
        if let Some(digest) = plan.proposal_sha256() {
            self.span.record("digest", tracing::field::display(digest));
        }
        self.span.record("decision", plan.decision().as_str());
        self.plan = Some(plan.clone());
    }

    /// Names the caller in the record (nothing for `local`).
    pub(crate) fn called_by(&mut self, caller: &crate::Caller) {
        self.caller = (!caller.is_local()).then(|| caller.id().to_owned());
    }

    /// Names the tool's server in the record, when its registration names one.
    pub(crate) fn served_by(&mut self, registration: &crate::ToolRegistration) {
        self.server = registration.server().map(Arc::from);
    }

    /// Records how the call ended: the closing event and the one record.
    pub(crate) fn finish(mut self, fill: impl FnOnce(&mut CallRecord)) {
        self.done = true;
        if !self.sink.wants_records() && !tracing::enabled!(target: "aml.dispatch", tracing::Level::INFO) {
            // Nobody keeps or shows the record: do not build it.
            return;
        }
        let mut record = CallRecord::new(&*self.adapter, self.tool.as_str(), &self.clock);
        record.policies = std::mem::take(&mut self.policies);
        record.caller = self.caller.take();
        record.server = self.server.as_deref().map(str::to_owned);
        fill(&mut record);
        self.emit(record);
    }

    /// Records a boundary outcome.
    pub(crate) fn finish_outcome(self, outcome: &DispatchOutcome) {
        // Hashing the result is the one costly part of a record: only for a sink that keeps it.
        let summarize = self.sink.wants_records();
        self.finish(|r| {
            r.plan = Some(outcome.plan().clone());
            r.receipt = Some(outcome.receipt().clone());
            r.detail = outcome.detail().map(str::to_owned);
            r.result = outcome.output_summary().filter(|_| summarize);
            r.would_block = outcome.would_block().copied();
            if let Some(policies) = outcome.replanned_policies() {
                r.policies = policies.to_vec();
            }
            r.usage = outcome.facts().usage;
        });
    }

    fn emit(&self, record: CallRecord) {
        let reason = match (&record.receipt, record.refusal, &record.host_error) {
            (Some(receipt), _, _) => receipt.reason().as_str(),
            (None, Some(refusal), _) => refusal.as_str(),
            (None, None, Some(_)) => "host_error",
            (None, None, None) => "none",
        };
        let digest = record
            .receipt
            .as_ref()
            .and_then(Receipt::proposal_sha256)
            .or_else(|| record.plan.as_ref().and_then(Plan::proposal_sha256));
        self.span.record("reason", reason);
        let status = record
            .receipt
            .as_ref()
            .map_or("not_planned", |r| r.execution_status().as_str());
        if tracing::enabled!(target: "aml.dispatch", tracing::Level::INFO) {
            let digest = digest.map(|d| d.to_string());
            tracing::info!(
                target: "aml.dispatch",
                parent: &self.span,
                adapter = &*self.adapter,
                tool = self.tool.as_str(),
                server = self.server.as_deref(),
                digest = digest.as_deref().unwrap_or("null"),
                reason,
                status,
                elapsed_us = record.elapsed_us,
                "call ended"
            );
        }
        if self.sink.wants_records() {
            self.sink.record_owned(Record::Call(record));
        }
    }
}

impl Drop for CallTracker {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // The caller went away (its future was dropped) before the call ended.
        let stage = self.progress.stage();
        let (reason, during) = match stage {
            Stage::Planned | Stage::Approval => (ReceiptReason::ApprovalError, "before the tool was entered"),
            Stage::Claim | Stage::Claimed => (
                ReceiptReason::ApprovalConsumeError,
                "after the one-use claim started, before the tool was entered",
            ),
            Stage::Tool => (ReceiptReason::HostDispatchError, "while the tool was running"),
        };
        let mut record = CallRecord::new(&*self.adapter, self.tool.as_str(), &self.clock);
        record.detail = Some(format!("the caller went away {during}"));
        record.policies = std::mem::take(&mut self.policies);
        record.caller = self.caller.take();
        record.server = self.server.as_deref().map(str::to_owned);
        if let Some(plan) = &self.plan {
            record.receipt = Some(Receipt::new(plan.proposal_sha256(), plan.decision(), reason));
            record.plan = Some(plan.clone());
        }
        self.emit(record);
    }
}

//! The gate's Prometheus metrics (`prometheus-client`), every label from a bounded set: the
//! one server, tool names from the host's tools file (any other name is `(other)`), and the
//! protocol's fixed decisions, statuses and reasons. No digest, id or argument is a label.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use aml_core::{CallRecord, ExecutionStatus};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The label of a tool the host's tools file does not register (or of a server request).
pub(crate) const OTHER_TOOL: &str = "(other)";

/// A label value shared without copying (the server's name, a registered tool's name).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Name(pub(crate) Arc<str>);

impl EncodeLabelValue for Name {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, &self.0)
    }
}

/// The labels of `aml_gate_calls_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct CallLabels {
    pub(crate) server: Name,
    pub(crate) tool: Name,
    /// `allow`, `requires_approval`, `deny`, or `none` (refused before a plan).
    pub(crate) decision: &'static str,
    /// `blocked`, `dispatched` or `unknown`.
    pub(crate) status: &'static str,
    /// The receipt's reason, the refusal's, or `host_error`.
    pub(crate) reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct StatusLabel {
    pub(crate) status: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct OpLabel {
    /// `intent` (written before a call is forwarded) or `claim` (a one-use claim).
    pub(crate) op: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct OutcomeLabel {
    /// `answered` (a decision came) or `error` (none came: timeout, the caller left).
    pub(crate) outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct ServerLabel {
    pub(crate) server: Name,
}

/// Every metric of the gate, and the registry that encodes them.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    server: Name,
    tools: RwLock<HashSet<Arc<str>>>,
    other: Name,
    pub(crate) calls: Family<CallLabels, Counter>,
    pub(crate) call_seconds: Family<StatusLabel, Histogram>,
    pub(crate) gate_added_seconds: Histogram,
    pub(crate) upstream_seconds: Histogram,
    pub(crate) state_commit_seconds: Family<OpLabel, Histogram>,
    pub(crate) approvals_pending: Gauge,
    pub(crate) approval_seconds: Family<OutcomeLabel, Histogram>,
    pub(crate) sessions: Gauge,
    pub(crate) upstream_up: Family<ServerLabel, Gauge>,
    pub(crate) policy_valid: Gauge,
}

fn fast() -> Histogram {
    // 10 µs to about 0.3 s.
    Histogram::new(exponential_buckets(0.000_01, 2.0, 16))
}

impl Metrics {
    /// The metrics of a gate in front of `server` (its name as a label).
    pub(crate) fn new(server: &str) -> Metrics {
        let mut registry = Registry::with_prefix("aml_gate");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register("calls", "Gated tools/call requests by outcome", calls.clone());
        let call_seconds = Family::<StatusLabel, Histogram>::new_with_constructor(|| {
            // 100 µs to about 15 min.
            Histogram::new(exponential_buckets(0.000_1, 2.5, 18))
        });
        registry.register(
            "call_duration_seconds",
            "Time from a call's arrival to its record, by status",
            call_seconds.clone(),
        );
        let gate_added_seconds = fast();
        registry.register(
            "gate_added_seconds",
            "Time a call spent in the gate, not waiting for the server",
            gate_added_seconds.clone(),
        );
        let upstream_seconds = Histogram::new(exponential_buckets(0.000_1, 2.5, 18));
        registry.register(
            "upstream_call_duration_seconds",
            "Time from forwarding a call to the server's answer",
            upstream_seconds.clone(),
        );
        let state_commit_seconds = Family::<OpLabel, Histogram>::new_with_constructor(fast);
        registry.register(
            "state_commit_seconds",
            "Time a call waited for the state's commit (intent before forwarding, one-use claim)",
            state_commit_seconds.clone(),
        );
        let approvals_pending = Gauge::default();
        registry.register(
            "approvals_pending",
            "Calls waiting for a person's decision",
            approvals_pending.clone(),
        );
        let approval_seconds = Family::<OutcomeLabel, Histogram>::new_with_constructor(|| {
            // 0.1 s to about 1.5 h.
            Histogram::new(exponential_buckets(0.1, 2.0, 16))
        });
        registry.register(
            "approval_decision_seconds",
            "Time from asking for approval to the decision",
            approval_seconds.clone(),
        );
        let sessions = Gauge::default();
        registry.register("sessions", "Open MCP sessions", sessions.clone());
        let upstream_up = Family::<ServerLabel, Gauge>::default();
        registry.register(
            "upstream_up",
            "Whether the MCP server is reachable (1) or not (0)",
            upstream_up.clone(),
        );
        let policy_valid = Gauge::default();
        registry.register(
            "policy_valid",
            "Whether the policy in force loaded (1) or every call is blocked with invalid_policy (0)",
            policy_valid.clone(),
        );
        let metrics = Metrics {
            registry,
            server: Name(server.into()),
            tools: RwLock::default(),
            other: Name(OTHER_TOOL.into()),
            calls,
            call_seconds,
            gate_added_seconds,
            upstream_seconds,
            state_commit_seconds,
            approvals_pending,
            approval_seconds,
            sessions,
            upstream_up,
            policy_valid,
        };
        metrics.set_upstream_up(true);
        metrics.policy_valid.set(1);
        metrics
    }

    /// The tool names a label may take: those of the host's tools file (at start and after
    /// each reload).
    pub(crate) fn set_tools(&self, names: impl IntoIterator<Item = String>) {
        let names = names.into_iter().map(Arc::from).collect();
        *self.tools.write().unwrap_or_else(|p| p.into_inner()) = names;
    }

    pub(crate) fn set_upstream_up(&self, up: bool) {
        let labels = ServerLabel {
            server: self.server.clone(),
        };
        self.upstream_up.get_or_create(&labels).set(i64::from(up));
    }

    fn tool(&self, name: &str) -> Name {
        let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
        match tools.get(name) {
            Some(name) => Name(Arc::clone(name)),
            None => self.other.clone(),
        }
    }

    /// Counts one call record; `upstream_us` is the time it spent with the server, if it
    /// was forwarded.
    pub(crate) fn observe_call(&self, record: &CallRecord, upstream_us: Option<u64>) {
        let (decision, status, reason) = outcome(record);
        let labels = CallLabels {
            server: self.server.clone(),
            tool: self.tool(&record.tool),
            decision,
            status,
            reason,
        };
        self.calls.get_or_create(&labels).inc();
        let total = record.elapsed_us as f64 / 1e6;
        self.call_seconds
            .get_or_create(&StatusLabel { status })
            .observe(total);
        let upstream = upstream_us.unwrap_or(0).min(record.elapsed_us);
        self.gate_added_seconds
            .observe((record.elapsed_us - upstream) as f64 / 1e6);
        if let Some(us) = upstream_us {
            self.upstream_seconds.observe(us as f64 / 1e6);
        }
    }

    /// The metrics in the OpenMetrics text format.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// A record's decision, status and reason, from fixed sets.
pub(crate) fn outcome(record: &CallRecord) -> (&'static str, &'static str, &'static str) {
    let decision = record
        .plan
        .as_ref()
        .map_or("none", |plan| plan.decision().as_str());
    match (&record.receipt, record.refusal) {
        (Some(receipt), _) => (
            decision,
            receipt.execution_status().as_str(),
            receipt.reason().as_str(),
        ),
        (None, Some(refusal)) => (decision, ExecutionStatus::Blocked.as_str(), refusal.as_str()),
        (None, None) => (decision, ExecutionStatus::Blocked.as_str(), "host_error"),
    }
}

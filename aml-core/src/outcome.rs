//! How one call ended ([`CallOutcome`]): exhaustive, one variant per thing an adapter must
//! say, each carrying only what it has (ADR 019).

use serde_json::Value;

use crate::dispatch::DispatchOutcome;
use crate::plan::Plan;
use crate::receipt::Receipt;
use crate::{ReceiptReason, Refusal, ResultSummary};

/// The reason an adapter reports for a call still running at its deadline.
pub const DISPATCH_IN_PROGRESS: &str = "dispatch_in_progress";

/// How one call ended. A `match` on it needs no catch-all: there is no other way.
///
/// Only [`Dispatched`](CallOutcome::Dispatched) and [`Unknown`](CallOutcome::Unknown) mean
/// the tool was entered; the other three say, with certainty, that it was not.
#[derive(Debug, Clone)]
pub enum CallOutcome {
    /// Refused before any plan (unknown tool, arguments outside the schema, an inexact
    /// number, a reused call id, a request the adapter could not read).
    Refused(Refused),
    /// The host failed while preparing the call (a failing resource mapper): no plan.
    HostError(HostError),
    /// Planned and blocked: by policy, approval, the grant, the arguments, the deadline or
    /// the caller leaving before the claim.
    Blocked(Blocked),
    /// The tool returned.
    Dispatched(Dispatched),
    /// The tool was entered and failed, or was still running at the deadline: a side
    /// effect may have happened; never retry automatically.
    Unknown(Unknown),
}

/// See [`CallOutcome::Refused`].
#[derive(Debug, Clone)]
pub struct Refused {
    pub(crate) refusal: Refusal,
    pub(crate) detail: String,
}

impl Refused {
    /// Why.
    pub fn refusal(&self) -> Refusal {
        self.refusal
    }
    /// For the host's log: what was wrong (names argument paths, never argument values).
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

/// See [`CallOutcome::HostError`].
#[derive(Debug, Clone)]
pub struct HostError {
    pub(crate) message: String,
}

impl HostError {
    /// The host's error text.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// See [`CallOutcome::Blocked`].
#[derive(Debug, Clone)]
pub struct Blocked(pub(crate) DispatchOutcome);

impl Blocked {
    /// The plan.
    pub fn plan(&self) -> &Plan {
        self.0.plan()
    }
    /// The `blocked` receipt.
    pub fn receipt(&self) -> &Receipt {
        self.0.receipt()
    }
    /// The receipt's reason.
    pub fn reason(&self) -> ReceiptReason {
        self.0.receipt().reason()
    }
    /// For the host's log: the hook error behind the block, if any.
    pub fn detail(&self) -> Option<&str> {
        self.0.detail()
    }
    /// Whether the caller's deadline passed before the claim.
    pub fn deadline_passed(&self) -> bool {
        self.0.deadline_passed()
    }
    /// Whether the caller went away before the claim.
    pub fn caller_gone(&self) -> bool {
        self.0.caller_gone()
    }
}

/// See [`CallOutcome::Dispatched`].
#[derive(Debug, Clone)]
pub struct Dispatched(pub(crate) DispatchOutcome);

impl Dispatched {
    /// The plan.
    pub fn plan(&self) -> &Plan {
        self.0.plan()
    }
    /// The `dispatched` receipt.
    pub fn receipt(&self) -> &Receipt {
        self.0.receipt()
    }
    /// The tool's output.
    pub fn output(&self) -> &Value {
        // A dispatched outcome always holds the output it was built with.
        static NULL: Value = Value::Null;
        self.0.output().unwrap_or(&NULL)
    }
    /// Takes the tool's output.
    pub fn into_output(self) -> Value {
        self.0.into_output().unwrap_or_default()
    }
    /// The output's digest and size, as the call record holds them (computed once).
    pub fn output_summary(&self) -> ResultSummary {
        self.0
            .output_summary()
            .unwrap_or_else(|| ResultSummary::of_json(&Value::Null))
    }
}

/// See [`CallOutcome::Unknown`].
#[derive(Debug, Clone)]
pub struct Unknown {
    pub(crate) plan: Plan,
    /// The `host_dispatch_error` outcome; `None` while the tool is still running.
    pub(crate) ended: Option<DispatchOutcome>,
}

impl Unknown {
    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    /// The `unknown` receipt; `None` when the tool was still running at the deadline (its
    /// receipt goes to the host's record when it ends).
    pub fn receipt(&self) -> Option<&Receipt> {
        self.ended.as_ref().map(DispatchOutcome::receipt)
    }
    /// Whether the tool was still running at the deadline.
    pub fn still_running(&self) -> bool {
        self.ended.is_none()
    }
    /// For the host's log: the tool's error, if it ended.
    pub fn detail(&self) -> Option<&str> {
        self.ended.as_ref().and_then(DispatchOutcome::detail)
    }
}

impl CallOutcome {
    /// From a boundary outcome, by its receipt.
    #[cfg(feature = "catalog")]
    pub(crate) fn of_dispatch(outcome: DispatchOutcome) -> Self {
        match outcome.receipt().execution_status() {
            crate::ExecutionStatus::Dispatched => CallOutcome::Dispatched(Dispatched(outcome)),
            crate::ExecutionStatus::Unknown => CallOutcome::Unknown(Unknown {
                plan: outcome.plan().clone(),
                ended: Some(outcome),
            }),
            crate::ExecutionStatus::Blocked => CallOutcome::Blocked(Blocked(outcome)),
        }
    }

    #[cfg(feature = "catalog")]
    pub(crate) fn refused(refusal: Refusal, detail: String) -> Self {
        CallOutcome::Refused(Refused { refusal, detail })
    }

    /// The status word every shipped wire uses: `refused`, `host_error`, `blocked`,
    /// `dispatched` or `unknown`.
    pub fn status(&self) -> &'static str {
        match self {
            CallOutcome::Refused(_) => "refused",
            CallOutcome::HostError(_) => "host_error",
            CallOutcome::Blocked(_) => "blocked",
            CallOutcome::Dispatched(_) => "dispatched",
            CallOutcome::Unknown(_) => "unknown",
        }
    }

    /// The exact reason string: the refusal, the receipt's reason, `host_error`, or
    /// [`DISPATCH_IN_PROGRESS`] for a tool still running at the deadline.
    pub fn reason(&self) -> &'static str {
        match self {
            CallOutcome::Refused(r) => r.refusal.as_str(),
            CallOutcome::HostError(_) => "host_error",
            CallOutcome::Blocked(b) => b.reason().as_str(),
            CallOutcome::Dispatched(d) => d.receipt().reason().as_str(),
            CallOutcome::Unknown(u) => u.receipt().map_or(DISPATCH_IN_PROGRESS, |r| r.reason().as_str()),
        }
    }

    /// Whether the tool was certainly not entered.
    pub fn not_run(&self) -> bool {
        matches!(
            self,
            CallOutcome::Refused(_) | CallOutcome::HostError(_) | CallOutcome::Blocked(_)
        )
    }

    /// The plan, when one was made.
    pub fn plan(&self) -> Option<&Plan> {
        match self {
            CallOutcome::Refused(_) | CallOutcome::HostError(_) => None,
            CallOutcome::Blocked(b) => Some(b.plan()),
            CallOutcome::Dispatched(d) => Some(d.plan()),
            CallOutcome::Unknown(u) => Some(u.plan()),
        }
    }

    /// The receipt, when one was made.
    pub fn receipt(&self) -> Option<&Receipt> {
        match self {
            CallOutcome::Refused(_) | CallOutcome::HostError(_) => None,
            CallOutcome::Blocked(b) => Some(b.receipt()),
            CallOutcome::Dispatched(d) => Some(d.receipt()),
            CallOutcome::Unknown(u) => u.receipt(),
        }
    }

    /// The tool's output, when it returned.
    pub fn output(&self) -> Option<&Value> {
        match self {
            CallOutcome::Dispatched(d) => Some(d.output()),
            _ => None,
        }
    }

    /// For the host's log: the refusal's detail, the host error, or the hook or tool error.
    pub fn detail(&self) -> Option<&str> {
        match self {
            CallOutcome::Refused(r) => Some(r.detail()),
            CallOutcome::HostError(h) => Some(h.message()),
            CallOutcome::Blocked(b) => b.detail(),
            CallOutcome::Dispatched(_) => None,
            CallOutcome::Unknown(u) => u.detail(),
        }
    }

    /// The refusal, when the call was refused before any plan.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            CallOutcome::Refused(r) => Some(r.refusal),
            _ => None,
        }
    }

    /// The host error, when the host failed while preparing the call.
    pub fn host_error(&self) -> Option<&str> {
        match self {
            CallOutcome::HostError(h) => Some(h.message()),
            _ => None,
        }
    }
}

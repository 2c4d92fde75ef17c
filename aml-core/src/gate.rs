//! The front door every adapter uses: the host's [`ToolCatalog`] in front of one
//! [`ActionBoundary`]. An adapter turns its wire request into a tool name and arguments, asks
//! the gate, and maps the [`GateOutcome`] back to its wire; it holds no policy of its own.

use std::sync::{Arc, RwLock};

use serde_json::Value;
use tracing::Instrument;

use crate::catalog::{ToolCatalog, ToolRegistration};
use crate::dispatch::{ActionBoundary, DispatchOutcome};
use crate::front::CallTracker;
use crate::guarded::{capture_refused, prepare_call, GuardedToolError, Prepared, ToolIdentity};
use crate::hooks::ToolExecutor;
use crate::outcome::{CallOutcome, HostError};
use crate::plan::Plan;
use crate::policy::Policy;
use crate::receipt::Receipt;
use crate::runtime::CallRuntime;
use crate::{CallFacts, ExecutionStatus, ReceiptReason, Refusal, ResultSummary};

/// A catalog the host can replace while calls run (a reload): each call uses the catalog
/// that was current when it arrived.
#[derive(Debug, Clone, Default)]
pub struct LiveCatalog(Arc<RwLock<Arc<ToolCatalog>>>);

impl LiveCatalog {
    /// Serves `catalog`.
    pub fn new(catalog: ToolCatalog) -> Self {
        LiveCatalog(Arc::new(RwLock::new(Arc::new(catalog))))
    }

    /// The catalog now.
    pub fn current(&self) -> Arc<ToolCatalog> {
        Arc::clone(&self.0.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replaces the catalog for calls that arrive from now on.
    pub fn replace(&self, catalog: ToolCatalog) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(catalog);
    }
}

impl From<ToolCatalog> for LiveCatalog {
    fn from(catalog: ToolCatalog) -> Self {
        LiveCatalog::new(catalog)
    }
}

/// How a call of the relay's ended. To be retired when the relay moves to the call contract
/// (ADR 019): adapters match [`CallOutcome`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    /// Refused before any plan; the tool was not entered.
    Refused(Refusal),
    /// The host failed while preparing the call (a failing resource mapper): no plan, no
    /// receipt, the tool was not entered.
    HostError,
    /// Planned and blocked; the tool was not entered.
    Blocked(ReceiptReason),
    /// The tool returned.
    Dispatched,
    /// The tool was entered and failed: a side effect may have happened; do not retry.
    Unknown,
}

/// What the gate did with one call of the relay's. To be retired when the relay moves to the
/// call contract (ADR 019): adapters get a [`CallOutcome`].
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct GateOutcome {
    tool: String,
    refusal: Option<Refusal>,
    host_error: Option<String>,
    outcome: Option<DispatchOutcome>,
    detail: Option<String>,
}

impl GateOutcome {
    /// How the call ended.
    pub fn status(&self) -> CallStatus {
        if let Some(refusal) = self.refusal {
            return CallStatus::Refused(refusal);
        }
        let Some(outcome) = &self.outcome else {
            return CallStatus::HostError;
        };
        let receipt = outcome.receipt();
        match receipt.execution_status() {
            ExecutionStatus::Dispatched => CallStatus::Dispatched,
            ExecutionStatus::Unknown => CallStatus::Unknown,
            _ => CallStatus::Blocked(receipt.reason()),
        }
    }
    /// The tool the caller asked for.
    pub fn tool(&self) -> &str {
        &self.tool
    }
    /// The refusal before planning, if any.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refusal
    }
    /// The host error, if the host failed while preparing the call.
    pub fn host_error(&self) -> Option<&str> {
        self.host_error.as_deref()
    }
    /// The plan, when one was made.
    pub fn plan(&self) -> Option<&Plan> {
        self.outcome.as_ref().map(DispatchOutcome::plan)
    }
    /// The receipt, when one was made.
    pub fn receipt(&self) -> Option<&Receipt> {
        self.outcome.as_ref().map(DispatchOutcome::receipt)
    }
    /// The boundary's outcome, when the call was planned.
    pub fn dispatch(&self) -> Option<&DispatchOutcome> {
        self.outcome.as_ref()
    }
    /// The tool's output, when it returned.
    pub fn output(&self) -> Option<&Value> {
        self.outcome.as_ref().and_then(DispatchOutcome::output)
    }
    /// Takes the tool's output.
    pub fn into_output(self) -> Option<Value> {
        self.outcome.and_then(DispatchOutcome::into_output)
    }
    /// The output's digest and size ([`DispatchOutcome::output_summary`]: computed once).
    pub fn output_summary(&self) -> Option<ResultSummary> {
        self.outcome.as_ref().and_then(DispatchOutcome::output_summary)
    }
    /// For the host's log: why the call was refused, blocked or uncertain (schema violation,
    /// hook or tool error). May name argument paths, never argument values.
    pub fn detail(&self) -> Option<&str> {
        self.detail
            .as_deref()
            .or_else(|| self.outcome.as_ref().and_then(DispatchOutcome::detail))
    }
    /// Whether the call was blocked because the caller's [`Deadline`] passed.
    pub fn deadline_passed(&self) -> bool {
        self.outcome
            .as_ref()
            .is_some_and(DispatchOutcome::deadline_passed)
    }
}

pub(crate) enum Stage {
    /// Refused, blocked or failed while preparing: already recorded.
    Ended(GateOutcome),
    Planned {
        tracker: CallTracker,
        planned: crate::Planned,
        executor: Option<Arc<dyn ToolExecutor>>,
    },
}

/// A call of the relay's, looked up, checked and planned. To be retired when the relay moves
/// to the call contract (ADR 019). A call that ended while it was prepared is recorded at
/// once; a planned one that is dropped is recorded as abandoned.
#[doc(hidden)]
pub struct PreparedCall {
    pub(crate) tool: String,
    pub(crate) stage: Stage,
}

impl core::fmt::Debug for PreparedCall {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PreparedCall")
            .field("tool", &self.tool)
            .field("planned", &matches!(self.stage, Stage::Planned { .. }))
            .finish_non_exhaustive()
    }
}

impl PreparedCall {
    /// The plan, if the call got that far. The relay's; to be retired with it (ADR 019).
    #[doc(hidden)]
    pub fn plan(&self) -> Option<&Plan> {
        match &self.stage {
            Stage::Planned { planned, .. } => Some(planned.plan()),
            Stage::Ended(outcome) => outcome.plan(),
        }
    }
}

/// The host's catalog in front of its boundary: the one way to run a call
/// ([`ToolGate::call`], ADR 019), and the one listing of what an agent may call
/// ([`ToolGate::listing`]).
#[derive(Debug, Clone)]
pub struct ToolGate {
    catalog: LiveCatalog,
    boundary: ActionBoundary,
    adapter: Arc<str>,
    runtime: Option<Arc<dyn CallRuntime>>,
}

impl ToolGate {
    /// A gate over `catalog` and `boundary` (its policy, hooks, default executor and sink),
    /// recording calls as adapter `core`, with no runtime (requests with a deadline are
    /// refused as a host error until [`with_runtime`](Self::with_runtime)).
    pub fn new(catalog: impl Into<LiveCatalog>, boundary: ActionBoundary) -> Self {
        ToolGate {
            catalog: catalog.into(),
            boundary,
            adapter: Arc::from("core"),
            runtime: None,
        }
    }

    /// Names the adapter in every record and span (`mcp`, `grpc`, `a2ui`, …).
    pub fn for_adapter(mut self, adapter: &str) -> Self {
        self.adapter = Arc::from(adapter);
        self
    }

    /// The runtime that keeps deadlines and finishes calls whose caller left after the claim
    /// (`TokioRuntime` with the `tokio` feature).
    pub fn with_runtime(mut self, runtime: impl CallRuntime + 'static) -> Self {
        self.runtime = Some(Arc::new(runtime));
        self
    }

    /// The runtime, if one was given.
    pub fn runtime(&self) -> Option<&Arc<dyn CallRuntime>> {
        self.runtime.as_ref()
    }

    /// The adapter name.
    pub fn adapter(&self) -> &str {
        &self.adapter
    }

    pub(crate) fn adapter_arc(&self) -> &Arc<str> {
        &self.adapter
    }

    /// The catalog now.
    pub fn catalog(&self) -> Arc<ToolCatalog> {
        self.catalog.current()
    }

    /// The replaceable catalog.
    pub fn live_catalog(&self) -> &LiveCatalog {
        &self.catalog
    }

    /// The boundary.
    pub fn boundary(&self) -> &ActionBoundary {
        &self.boundary
    }

    /// What an agent may be offered, in catalog order: each registered tool that the current
    /// policy may allow ([`Policy::may_allow`](crate::Policy::may_allow): an exact rule names
    /// it with its effect, or a Cedar permit's action scope admits it); whether a call is
    /// allowed is still decided per call. Every adapter that lists tools answers with this.
    pub fn listing(&self) -> Vec<ToolRegistration> {
        let catalog = self.catalog.current();
        let policy = self.boundary.policy().current();
        // Shadow mode lets every call through: every tool is offered.
        let shadow = self.boundary.is_shadow();
        catalog
            .tools()
            .filter(|tool| shadow || policy.may_allow(tool.name(), tool.effect()))
            .cloned()
            .collect()
    }

    /// Looks up `tool`, checks `arguments` against its input schema, captures, maps,
    /// freezes and plans them — all now. The relay's; to be retired when it moves to
    /// [`call`](Self::call) (ADR 019).
    #[doc(hidden)]
    pub fn prepare_value(&self, tool: &str, arguments: Value) -> PreparedCall {
        self.prepare_value_for(tool, &CallFacts::default(), arguments)
    }

    /// [`prepare_value`](Self::prepare_value) for a call with `facts` (its caller and
    /// client). The relay's; to be retired with it (ADR 019).
    #[doc(hidden)]
    pub fn prepare_value_for(&self, tool: &str, facts: &CallFacts, arguments: Value) -> PreparedCall {
        self.prepare_with(tool, facts, |registration, policy, tracker| {
            check_and_prepare(registration, arguments, policy, facts, tracker)
        })
    }

    /// [`prepare_value`](Self::prepare_value) after refusing every integer beyond ±2^53.
    pub(crate) fn prepare_exact_value(
        &self,
        tool: &str,
        facts: &CallFacts,
        arguments: Value,
    ) -> PreparedCall {
        self.prepare_with(tool, facts, |registration, policy, tracker| {
            if has_integer_beyond_2_53(&arguments) {
                return Err(Refused::Refusal(
                    Refusal::InexactNumber,
                    INEXACT_DETAIL.to_owned(),
                ));
            }
            check_and_prepare(registration, arguments, policy, facts, tracker)
        })
    }

    /// The agent's JSON text, parsed strictly ([`crate::strict`]): text the parser refuses
    /// skips the schema and is blocked with its `AML_JSON_*` code; a number no double keeps
    /// exactly is refused (`inexact_number`), from the bytes, before anything rounds it.
    pub(crate) fn prepare_bytes(&self, tool: &str, facts: &CallFacts, arguments: &[u8]) -> PreparedCall {
        self.prepare_with(tool, facts, |registration, policy, tracker| {
            let value = match crate::strict::parse_slice(arguments) {
                Ok(value) => value,
                Err(e) => return Ok(capture_refused(e.code(), e.to_string())),
            };
            if let Some(inexact) = crate::strict::first_inexact_number(arguments) {
                let detail = format!("{INEXACT_DETAIL} (the number at byte {})", inexact.offset());
                return Err(Refused::Refusal(Refusal::InexactNumber, detail));
            }
            check_and_prepare(registration, value, policy, facts, tracker)
        })
    }

    fn prepare_with(
        &self,
        tool: &str,
        facts: &CallFacts,
        prepare: impl FnOnce(&ToolRegistration, &Policy, &mut CallTracker) -> Result<Prepared, Refused>,
    ) -> PreparedCall {
        let mut tracker = CallTracker::start(&self.adapter, tool, self.boundary.sink());
        tracker.called_by(&facts.caller);
        let catalog = self.catalog.current();
        let ended = |tracker, outcome| PreparedCall {
            tool: tool.to_owned(),
            stage: Stage::Ended(finish_ended(tracker, outcome)),
        };
        let Some(registration) = catalog.get(tool) else {
            let refused = refused_outcome(
                tool,
                Refusal::InvalidOrUnregisteredCall,
                "no tool by that name".into(),
            );
            return ended(tracker, refused);
        };
        tracker.served_by(registration);
        let policy = self.boundary.policy().current();
        let outcome = |outcome, host_error| GateOutcome {
            tool: tool.to_owned(),
            refusal: None,
            host_error,
            outcome,
            detail: None,
        };
        match prepare(registration, &policy, &mut tracker) {
            Err(Refused::Refusal(refusal, detail)) => ended(tracker, refused_outcome(tool, refusal, detail)),
            Err(Refused::Host(error)) => ended(tracker, outcome(None, Some(error.to_string()))),
            Ok(Prepared::Ended(dispatched)) => ended(tracker, outcome(Some(dispatched), None)),
            Ok(Prepared::Planned(planned)) => PreparedCall {
                tool: tool.to_owned(),
                stage: Stage::Planned {
                    tracker,
                    planned,
                    executor: registration.executor().cloned(),
                },
            },
        }
    }

    /// Refuses a prepared call of the relay's; to be retired with it (ADR 019).
    #[doc(hidden)]
    pub fn refuse(&self, call: PreparedCall, refusal: Refusal, detail: String) -> GateOutcome {
        match call.stage {
            Stage::Planned { tracker, .. } => {
                finish_ended(tracker, refused_outcome(&call.tool, refusal, detail))
            }
            // Already recorded as it ended.
            Stage::Ended(outcome) => outcome,
        }
    }

    /// Records a refusal of the relay's; to be retired with it (ADR 019): adapters use
    /// [`refuse_request`](Self::refuse_request).
    #[doc(hidden)]
    pub fn refused(&self, tool: &str, refusal: Refusal, detail: String) -> GateOutcome {
        self.refused_by(tool, &crate::Caller::local(), refusal, detail)
    }

    /// [`refused`](Self::refused) for a request of `caller`, whom the record names. The
    /// relay's; to be retired with it (ADR 019).
    #[doc(hidden)]
    pub fn refused_by(
        &self,
        tool: &str,
        caller: &crate::Caller,
        refusal: Refusal,
        detail: String,
    ) -> GateOutcome {
        let mut tracker = CallTracker::start(&self.adapter, tool, self.boundary.sink());
        tracker.called_by(caller);
        if let Some(registration) = self.catalog.current().get(tool) {
            tracker.served_by(registration);
        }
        finish_ended(tracker, refused_outcome(tool, refusal, detail))
    }

    /// [`prepare_value`](Self::prepare_value) and [`run`](Self::run), for the relay's tests;
    /// to be retired with it (ADR 019).
    #[doc(hidden)]
    pub async fn call_value(
        &self,
        tool: &str,
        arguments: Value,
        executor: Option<&dyn ToolExecutor>,
        deadline: Option<crate::Deadline>,
    ) -> GateOutcome {
        let call = self.prepare_value(tool, arguments);
        self.run(call, executor, deadline, None).await
    }

    /// Runs a prepared call of the relay's to its end; until the one-use claim, `deadline`
    /// and `gone` stop it (blocked, nothing claimed). To be retired with the relay (ADR 019).
    #[doc(hidden)]
    pub async fn run(
        &self,
        call: PreparedCall,
        executor: Option<&dyn ToolExecutor>,
        deadline: Option<crate::Deadline>,
        gone: Option<crate::CallerGone>,
    ) -> GateOutcome {
        let PreparedCall { tool, stage } = call;
        let (tracker, planned, registered) = match stage {
            Stage::Ended(outcome) => return outcome,
            Stage::Planned {
                tracker,
                planned,
                executor,
            } => (tracker, planned, executor),
        };
        let boundary_executor = self.boundary.executor().cloned();
        let chosen: Option<&dyn ToolExecutor> = registered
            .as_deref()
            .or(executor)
            .or(boundary_executor.as_deref());
        let span = tracker.span.clone();
        let outcome = self
            .boundary
            .dispatch_to(
                planned,
                chosen,
                crate::deadline::Watch::new(deadline, gone),
                &tracker.progress,
            )
            .instrument(span)
            .await;
        tracker.finish_outcome(&outcome);
        GateOutcome {
            tool,
            refusal: None,
            host_error: None,
            outcome: Some(outcome),
            detail: None,
        }
    }
}

/// What a refusal for an inexact number records: never the number itself.
const INEXACT_DETAIL: &str = "a number in the call is not kept exactly by the canonical form (an integer \
                              beyond ±2^53, or more digits than a double keeps); send it as a string";

/// Whether `value` holds an integer of magnitude beyond 2^53 (9007199254740992).
fn has_integer_beyond_2_53(value: &Value) -> bool {
    const LIMIT: u64 = 1 << 53;
    match value {
        Value::Number(n) => {
            n.as_u64().is_some_and(|u| u > LIMIT) || n.as_i64().is_some_and(|i| i.unsigned_abs() > LIMIT)
        }
        Value::Array(items) => items.iter().any(has_integer_beyond_2_53),
        Value::Object(members) => members.values().any(has_integer_beyond_2_53),
        _ => false,
    }
}

/// The schema check, the object check and the plan, for arguments the gate has read.
fn check_and_prepare(
    registration: &ToolRegistration,
    arguments: Value,
    policy: &Policy,
    facts: &CallFacts,
    tracker: &mut CallTracker,
) -> Result<Prepared, Refused> {
    registration
        .check(&arguments)
        .map_err(|e| Refused::Refusal(Refusal::InvalidArguments, e.to_string()))?;
    let Value::Object(arguments) = arguments else {
        return Err(Refused::Refusal(
            Refusal::InvalidArguments,
            "the arguments must be a JSON object".to_owned(),
        ));
    };
    let identity = ToolIdentity {
        tool: registration.name(),
        effect: registration.effect(),
        purpose: registration.purpose(),
        mapper: registration.mapper().as_ref(),
    };
    prepare_call(&identity, arguments, policy, facts.clone(), tracker).map_err(|e| match e {
        // A typed resource the arguments break is the caller's to fix, not a host error.
        GuardedToolError::Mapper(mapper) => match mapper.refusal() {
            Some(refusal) => Refused::Refusal(refusal, mapper.to_string()),
            None => Refused::Host(GuardedToolError::Mapper(mapper)),
        },
        host => Refused::Host(host),
    })
}

impl From<GateOutcome> for CallOutcome {
    fn from(outcome: GateOutcome) -> Self {
        let GateOutcome {
            refusal,
            host_error,
            outcome,
            detail,
            ..
        } = outcome;
        match (refusal, host_error, outcome) {
            (Some(refusal), _, _) => CallOutcome::refused(refusal, detail.unwrap_or_default()),
            (None, _, Some(dispatched)) => CallOutcome::of_dispatch(dispatched),
            (None, message, None) => CallOutcome::HostError(HostError {
                message: message.unwrap_or_default(),
            }),
        }
    }
}

fn refused_outcome(tool: &str, refusal: Refusal, detail: String) -> GateOutcome {
    GateOutcome {
        tool: tool.to_owned(),
        refusal: Some(refusal),
        host_error: None,
        outcome: None,
        detail: Some(detail),
    }
}

/// Records a call that ended before the tool, and hands its outcome back.
fn finish_ended(tracker: CallTracker, outcome: GateOutcome) -> GateOutcome {
    match &outcome.outcome {
        Some(dispatched) => tracker.finish_outcome(dispatched),
        None => tracker.finish(|r| {
            r.refusal = outcome.refusal;
            r.host_error = outcome.host_error.clone();
            r.detail = outcome.detail.clone();
        }),
    }
    outcome
}

/// Why a call ended while it was being prepared.
enum Refused {
    Refusal(Refusal, String),
    Host(GuardedToolError),
}

#[cfg(test)]
#[path = "shadow_tests.rs"]
mod shadow_tests;

#[cfg(all(test, feature = "cedar", feature = "tokio", feature = "testing"))]
#[path = "budget_tests.rs"]
mod budget_tests;

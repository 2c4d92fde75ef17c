//! The front door every adapter uses: the host's [`ToolCatalog`] in front of one
//! [`ActionBoundary`]. An adapter turns its wire request into a tool name and arguments, asks
//! the gate, and maps the [`GateOutcome`] back to its wire; it holds no policy of its own.

use std::sync::{Arc, RwLock};

use serde_json::Value;
use tracing::Instrument;

use crate::catalog::{ToolCatalog, ToolRegistration};
use crate::dispatch::{ActionBoundary, Authorization, DispatchOutcome};
use crate::front::CallTracker;
use crate::guarded::{capture_refused, prepare_call, GuardedToolError, Prepared, ToolIdentity};
use crate::hooks::ToolExecutor;
use crate::plan::Plan;
use crate::policy::Policy;
use crate::receipt::Receipt;
use crate::{Deadline, ExecutionStatus, ReceiptReason, Refusal, ResultSummary};

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

/// How a gated call ended, for an adapter to map to its wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

/// What the gate did with one call. Never holds anything but the tool's own output, which the
/// adapter answers with; the record that went to the sink holds only its digest and size.
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

enum Stage {
    /// Refused, blocked or failed while preparing: already recorded.
    Ended(GateOutcome),
    Planned {
        tracker: CallTracker,
        planned: crate::Planned,
        executor: Option<Arc<dyn ToolExecutor>>,
    },
}

/// A call the gate has looked up, checked and planned, synchronously; nothing the caller
/// does with its arguments afterwards reaches the tool. Run it with [`ToolGate::run`] (or
/// [`ToolGate::authorize`] then [`AuthorizedCall::execute`]). A call that ended while it was
/// prepared (refused, blocked by its arguments, a host error) is recorded at once; a planned
/// one that is dropped is recorded as abandoned.
pub struct PreparedCall {
    tool: String,
    stage: Stage,
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
    /// The refusal, if the call was refused before planning (unknown tool, arguments
    /// outside the schema).
    pub fn refusal(&self) -> Option<Refusal> {
        match &self.stage {
            Stage::Ended(outcome) => outcome.refusal(),
            Stage::Planned { .. } => None,
        }
    }

    /// The plan, if the call got that far.
    pub fn plan(&self) -> Option<&Plan> {
        match &self.stage {
            Stage::Planned { planned, .. } => Some(planned.plan()),
            Stage::Ended(outcome) => outcome.plan(),
        }
    }
}

/// A call that passed every check and spent its one-use grant: run it once with
/// [`execute`](Self::execute). Dropping it records the call as blocked after the claim.
pub struct AuthorizedCall {
    tracker: CallTracker,
    authorized: crate::Authorized,
    executor: Option<Arc<dyn ToolExecutor>>,
    tool: String,
}

impl core::fmt::Debug for AuthorizedCall {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AuthorizedCall")
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

impl AuthorizedCall {
    /// The plan.
    pub fn plan(&self) -> &Plan {
        self.authorized.plan()
    }

    /// Enters the tool once: the registration's own executor, else `executor`.
    pub async fn execute(self, executor: Option<&dyn ToolExecutor>) -> GateOutcome {
        let AuthorizedCall {
            tracker,
            authorized,
            executor: registered,
            tool,
        } = self;
        let chosen: Option<&dyn ToolExecutor> = registered.as_deref().or(executor);
        let span = tracker.span.clone();
        let outcome = match chosen {
            Some(executor) => {
                authorized
                    .execute_tracked(executor, &tracker.progress)
                    .instrument(span)
                    .await
            }
            None => DispatchOutcome::ended(
                authorized.plan().clone(),
                ReceiptReason::MissingHostDispatch,
                None,
            ),
        };
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

/// What [`ToolGate::authorize`] ended with.
#[derive(Debug)]
#[non_exhaustive]
pub enum GateAuthorization {
    /// Ready to run once.
    Authorized(AuthorizedCall),
    /// Refused or blocked before the tool.
    Ended(GateOutcome),
}

/// The host's catalog in front of its boundary.
///
/// ```
/// use aml_core::{tool_fn, ActionBoundary, CallStatus, Effect, MemorySink, Policy, ResourceRule,
///                ToolCatalog, ToolGate, ToolRegistration};
/// use serde_json::json;
///
/// let catalog = ToolCatalog::new().with(ToolRegistration::new(
///     "fetch_record", Effect::Read, "Inspect a record", ResourceRule::Fixed("records".into()),
///     json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}),
/// ).unwrap()).unwrap();
/// let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
///     {"tool": "fetch_record", "effect": "read", "resource": "records", "requires_approval": false}]}));
/// let sink = MemorySink::new();
/// let boundary = ActionBoundary::builder(std::sync::Arc::new(policy))
///     .executor(tool_fn(|call| async move { Ok(json!({"id": call.arguments()["id"]})) }))
///     .sink(sink.clone())
///     .build();
/// let gate = ToolGate::new(catalog, boundary).for_adapter("docs");
///
/// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let done = rt.block_on(gate.call_value("fetch_record", json!({"id": 42}), None, None));
/// assert_eq!(done.status(), CallStatus::Dispatched);
/// assert_eq!(done.output(), Some(&json!({"id": 42})));
/// let refused = rt.block_on(gate.call_value("fetch_record", json!({"id": "x"}), None, None));
/// assert!(matches!(refused.status(), CallStatus::Refused(_)));
/// assert_eq!(sink.calls().len(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct ToolGate {
    catalog: LiveCatalog,
    boundary: ActionBoundary,
    adapter: Arc<str>,
}

impl ToolGate {
    /// A gate over `catalog` and `boundary` (its policy, hooks, default executor and sink),
    /// recording calls as adapter `core`.
    pub fn new(catalog: impl Into<LiveCatalog>, boundary: ActionBoundary) -> Self {
        ToolGate {
            catalog: catalog.into(),
            boundary,
            adapter: Arc::from("core"),
        }
    }

    /// Names the adapter in every record and span (`mcp`, `grpc`, `a2ui`, …).
    pub fn for_adapter(mut self, adapter: &str) -> Self {
        self.adapter = Arc::from(adapter);
        self
    }

    /// The adapter name.
    pub fn adapter(&self) -> &str {
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

    /// Looks up `tool`, checks `arguments` against its input schema, captures, maps,
    /// freezes and plans them — all now.
    pub fn prepare_value(&self, tool: &str, arguments: Value) -> PreparedCall {
        self.prepare_with(tool, |registration, policy, tracker| {
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
            prepare_call(&identity, arguments, policy, tracker).map_err(Refused::Host)
        })
    }

    /// Like [`prepare_value`](Self::prepare_value) for JSON text from an agent, parsed
    /// strictly ([`crate::strict`]). Text the parser refuses skips the schema and is blocked
    /// by the boundary with its `AML_JSON_*` code.
    pub fn prepare_json(&self, tool: &str, arguments: &[u8]) -> PreparedCall {
        match crate::strict::parse_slice(arguments) {
            Ok(value) => self.prepare_value(tool, value),
            Err(e) => self.prepare_with(tool, |_, _, _| Ok(capture_refused(e.code(), e.to_string()))),
        }
    }

    fn prepare_with(
        &self,
        tool: &str,
        prepare: impl FnOnce(&ToolRegistration, &Policy, &mut CallTracker) -> Result<Prepared, Refused>,
    ) -> PreparedCall {
        let mut tracker = CallTracker::start(&self.adapter, tool, self.boundary.sink());
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

    /// Refuses a prepared call for a reason the adapter found (e.g. a reused call id): it
    /// ends unplanned-for, recorded with `refusal` and `detail`; the tool is not entered.
    pub fn refuse(&self, call: PreparedCall, refusal: Refusal, detail: String) -> GateOutcome {
        match call.stage {
            Stage::Planned { tracker, .. } => {
                finish_ended(tracker, refused_outcome(&call.tool, refusal, detail))
            }
            // Already recorded as it ended.
            Stage::Ended(outcome) => outcome,
        }
    }

    /// Records a call the adapter refused before it could prepare it (a malformed request,
    /// an unknown function of its own wire, …), so that every refusal reaches the sink.
    /// `tool` is what the request named, if anything.
    pub fn refused(&self, tool: &str, refusal: Refusal, detail: String) -> GateOutcome {
        let tracker = CallTracker::start(&self.adapter, tool, self.boundary.sink());
        finish_ended(tracker, refused_outcome(tool, refusal, detail))
    }

    /// Approval, the one-use claim and both policy re-checks. Until the claim, dropping
    /// this future (a caller that gave up) claims nothing and records the call as blocked.
    pub async fn authorize(&self, call: PreparedCall, deadline: Option<Deadline>) -> GateAuthorization {
        let PreparedCall { tool, stage } = call;
        let (tracker, planned, executor) = match stage {
            Stage::Ended(outcome) => return GateAuthorization::Ended(outcome),
            Stage::Planned {
                tracker,
                planned,
                executor,
            } => (tracker, planned, executor),
        };
        let span = tracker.span.clone();
        let authorization = self
            .boundary
            .authorize_tracked(planned, deadline, &tracker.progress)
            .instrument(span)
            .await;
        match authorization {
            Authorization::Authorized(authorized) => GateAuthorization::Authorized(AuthorizedCall {
                tracker,
                authorized,
                executor: executor.or_else(|| self.boundary.executor().cloned()),
                tool,
            }),
            Authorization::Ended(outcome) => {
                tracker.finish_outcome(&outcome);
                GateAuthorization::Ended(GateOutcome {
                    tool,
                    refusal: None,
                    host_error: None,
                    outcome: Some(outcome),
                    detail: None,
                })
            }
        }
    }

    /// Runs a prepared call to its end. The executor is the registration's own, else
    /// `executor` (one chosen for this call, e.g. a forward to an upstream server), else the
    /// boundary's; with none, the call is blocked with `missing_host_dispatch`.
    pub async fn run(
        &self,
        call: PreparedCall,
        executor: Option<&dyn ToolExecutor>,
        deadline: Option<Deadline>,
    ) -> GateOutcome {
        let no_executor = executor.is_none()
            && self.boundary.executor().is_none()
            && matches!(&call.stage, Stage::Planned { executor: None, .. });
        if no_executor {
            return self.run_without_executor(call).await;
        }
        match self.authorize(call, deadline).await {
            GateAuthorization::Authorized(authorized) => authorized.execute(executor).await,
            GateAuthorization::Ended(outcome) => outcome,
        }
    }

    /// A call with no executor anywhere still goes through the plan's own checks, then
    /// blocks with `missing_host_dispatch` (before approval, as the protocol orders it).
    async fn run_without_executor(&self, call: PreparedCall) -> GateOutcome {
        let PreparedCall { tool, stage } = call;
        let (tracker, outcome) = match stage {
            Stage::Planned { tracker, planned, .. } => {
                let outcome = self
                    .boundary
                    .dispatch_to(planned, None, None, &tracker.progress)
                    .await;
                (tracker, outcome)
            }
            Stage::Ended(ended) => return ended,
        };
        let outcome = GateOutcome {
            tool,
            refusal: None,
            host_error: None,
            outcome: Some(outcome),
            detail: None,
        };
        finish_ended(tracker, outcome)
    }

    /// [`prepare_value`](Self::prepare_value) and [`run`](Self::run).
    pub async fn call_value(
        &self,
        tool: &str,
        arguments: Value,
        executor: Option<&dyn ToolExecutor>,
        deadline: Option<Deadline>,
    ) -> GateOutcome {
        let call = self.prepare_value(tool, arguments);
        self.run(call, executor, deadline).await
    }

    /// [`prepare_json`](Self::prepare_json) and [`run`](Self::run).
    pub async fn call_json(
        &self,
        tool: &str,
        arguments: &[u8],
        executor: Option<&dyn ToolExecutor>,
        deadline: Option<Deadline>,
    ) -> GateOutcome {
        let call = self.prepare_json(tool, arguments);
        self.run(call, executor, deadline).await
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
#[path = "gate_tests.rs"]
mod tests;

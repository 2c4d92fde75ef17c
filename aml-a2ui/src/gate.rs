//! The gate: one `callRendererFunction` in, one A2UI response out, in the order of the
//! protocol (size limits, envelope, catalog and function, arguments, bindings, argument
//! schema, call-id claim, boundary).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use aml_core::{DispatchOutcome, ExecutionStatus, GuardedToolError, Plan, Receipt};
use serde_json::{json, Map, Value};

use crate::binding::{find_unresolved, BindingRequest, BindingResolver};
use crate::catalog::{FunctionRegistry, HostFunction};
use crate::reason::GateReason;
use crate::wire::{
    decode_with, respond, Answer, CallRendererFunction, DecodeError, GateLimits, RendererMessage, WireForm,
};

/// Whether the call reached the boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Invocation {
    /// `"not_reached"`: refused before the call id was claimed.
    NotReached,
    /// `"claimed"`: the call id was claimed and the boundary ran.
    Claimed,
    /// `"replayed"`: the call id was already claimed; nothing ran.
    Replayed,
}

impl Invocation {
    /// The report string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Invocation::NotReached => "not_reached",
            Invocation::Claimed => "claimed",
            Invocation::Replayed => "replayed",
        }
    }
}

/// Why the gate refused a call before the boundary, for the host's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The code.
    pub reason: GateReason,
    /// What exactly was wrong (a parser message, a schema violation, a JSON pointer).
    pub detail: String,
}

/// What the gate did with one message.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GateOutcome {
    /// The message to send back to the agent, in the call's own form.
    pub response: RendererMessage,
    /// The form the call used.
    pub form: WireForm,
    /// Whether the boundary ran.
    pub invocation: Invocation,
    /// The gate's refusal, when it refused before the boundary.
    pub refusal: Option<Refusal>,
    /// The plan, when the boundary ran.
    pub plan: Option<Plan>,
    /// The receipt, when the boundary ran.
    pub receipt: Option<Receipt>,
    /// A host error (failing resource mapper) behind a host-error response.
    pub host_error: Option<String>,
}

impl GateOutcome {
    fn refused(form: WireForm, function_call_id: String, reason: GateReason, detail: String) -> Self {
        GateOutcome {
            response: respond(form, function_call_id, Answer::Refused(reason)),
            form,
            invocation: if reason == GateReason::Replayed {
                Invocation::Replayed
            } else {
                Invocation::NotReached
            },
            refusal: Some(Refusal { reason, detail }),
            plan: None,
            receipt: None,
            host_error: None,
        }
    }

    /// The most specific code: the gate's refusal reason, else the receipt reason, else
    /// `"host_error"`.
    pub fn code(&self) -> &'static str {
        match (&self.refusal, &self.receipt) {
            (Some(r), _) => r.reason.as_str(),
            (None, Some(receipt)) => receipt.reason().as_str(),
            (None, None) => "host_error",
        }
    }

    /// One JSON record for the host's log: call id, form, invocation, code, detail, the
    /// wire code sent, plan and receipt.
    pub fn record(&self) -> Value {
        let detail = match (&self.refusal, &self.host_error) {
            (Some(r), _) => Some(r.detail.as_str()),
            (None, Some(e)) => Some(e.as_str()),
            (None, None) => None,
        };
        json!({
            "function_call_id": self.response.function_call_id(),
            "form": self.form.as_str(),
            "invocation": self.invocation.as_str(),
            "code": self.code(),
            "detail": detail,
            "response_code": self.response.error_code(),
            "plan": self.plan.as_ref().map(Plan::to_value),
            "receipt": self.receipt.as_ref().map(Receipt::to_value),
        })
    }
}

/// Gates agent `callRendererFunction` requests for one renderer session.
///
/// Each `functionCallId` is taken up at most once per gate: create one gate per session
/// (or surface) and share the [`FunctionRegistry`] between them.
#[derive(Debug)]
pub struct FunctionGate {
    registry: Arc<FunctionRegistry>,
    limits: GateLimits,
    resolver: Option<Arc<dyn BindingResolver>>,
    claimed_ids: Mutex<HashSet<String>>,
}

impl FunctionGate {
    /// A gate over `registry`, with the default [`GateLimits`] and no binding resolver
    /// (arguments holding bindings are refused).
    pub fn new(registry: Arc<FunctionRegistry>) -> Self {
        FunctionGate {
            registry,
            limits: GateLimits::default(),
            resolver: None,
            claimed_ids: Mutex::default(),
        }
    }

    /// Sets the size limits.
    pub fn with_limits(mut self, limits: GateLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Resolves data bindings and nested calls in `args` before the proposal is frozen.
    pub fn with_binding_resolver(mut self, resolver: Arc<dyn BindingResolver>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Handles one agent-to-renderer message.
    ///
    /// `Err` only for a message that cannot be answered in A2UI because it names no usable
    /// `functionCallId` (over a size limit, malformed JSON, another message type): log it
    /// and answer with [`DecodeError::response`] or drop it.
    pub async fn handle(&self, message: &[u8]) -> Result<GateOutcome, DecodeError> {
        let call = match decode_with(message, self.limits) {
            Ok(call) => call,
            Err(e) => match e.function_call_id {
                Some(id) => return Ok(GateOutcome::refused(e.form, id, e.reason, e.detail)),
                None => return Err(e),
            },
        };
        let (form, id) = (call.form, call.function_call_id.clone());
        let refuse = |id, reason, detail| Ok(GateOutcome::refused(form, id, reason, detail));
        let function = match self.registry.find(&call.catalog_id, &call.call) {
            Ok(function) => function,
            Err(reason) => {
                let detail = format!("{} in {}", clip(&call.call, 64), clip(&call.catalog_id, 128));
                return refuse(id, reason, detail);
            }
        };
        let Some(tool) = function
            .tool()
            .filter(|_| function.allowed_callers().agent_may_call())
        else {
            let detail = format!("allowedCallers is {}", function.allowed_callers().as_str());
            return refuse(id, GateReason::NotAgentCallable, detail);
        };
        let args_text = match call.args_json {
            Some(text) => text,
            None if function.requires_args() => {
                return refuse(id, GateReason::ArgsMissing, "the catalog requires args".into())
            }
            None => "{}",
        };
        let args = match self.arguments(&call, function, args_text).await {
            Ok(args) => args,
            Err(Refusal { reason, detail }) => return refuse(id, reason, detail),
        };
        let fresh = self
            .claimed_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone());
        if !fresh {
            return refuse(id, GateReason::Replayed, "functionCallId already taken up".into());
        }
        let result = match &args {
            Some(args) => tool.call(args).await,
            None => tool.call_json(args_text.as_bytes()).await,
        };
        Ok(match result {
            Ok(outcome) => answered(form, id, outcome),
            Err(host_error) => host_failed(form, id, host_error),
        })
    }
}

impl FunctionGate {
    /// The arguments to run with: checked (and resolved) literal arguments, or `None` for
    /// text the strict parser refuses, which skips the checks so that the boundary blocks
    /// it with its canonical code and leaves a receipt.
    async fn arguments(
        &self,
        call: &CallRendererFunction<'_>,
        function: &HostFunction,
        text: &str,
    ) -> Result<Option<Value>, Refusal> {
        let refusal = |reason, detail| Err(Refusal { reason, detail });
        if !text.starts_with('{') {
            return refusal(GateReason::ArgsNotObject, format!("args is {}", clip(text, 16)));
        }
        let map = match aml_core::strict::parse_str(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return refusal(GateReason::ArgsNotObject, "args is not an object".into()),
            Err(_) => return Ok(None),
        };
        let args = Value::Object(match find_unresolved(call.form, &map) {
            None => map,
            Some((reason, at)) => self.resolve(call, &map, reason, &at).await?,
        });
        match function.check(&args) {
            Ok(()) => Ok(Some(args)),
            Err(detail) => refusal(GateReason::ArgsSchemaMismatch, detail),
        }
    }

    /// Bindings and nested calls: refused (`reason` at `at`) without a resolver, else
    /// whatever literals the host's resolver returns.
    async fn resolve(
        &self,
        call: &CallRendererFunction<'_>,
        args: &Map<String, Value>,
        reason: GateReason,
        at: &str,
    ) -> Result<Map<String, Value>, Refusal> {
        let unresolved = |detail| Refusal {
            reason: GateReason::BindingsUnresolved,
            detail,
        };
        let Some(resolver) = &self.resolver else {
            return Err(Refusal {
                reason,
                detail: format!("{reason} at {at}"),
            });
        };
        let request = BindingRequest {
            form: call.form,
            surface_id: call.surface_id.as_deref(),
            catalog_id: &call.catalog_id,
            function: &call.call,
            args,
        };
        let resolved = resolver
            .resolve(&request)
            .await
            .map_err(|e| unresolved(e.to_string()))?;
        match find_unresolved(call.form, &resolved) {
            None => Ok(resolved),
            Some((left, at)) => Err(unresolved(format!("the resolver left {left} at {at}"))),
        }
    }
}

/// At most `max` characters of agent text, for a log line that must not echo it whole.
fn clip(text: &str, max: usize) -> String {
    let end = text.char_indices().nth(max).map_or(text.len(), |(i, _)| i);
    let ellipsis = if end < text.len() { "…" } else { "" };
    format!("{}{ellipsis}", &text[..end])
}

fn answered(form: WireForm, function_call_id: String, outcome: DispatchOutcome) -> GateOutcome {
    let answer = match outcome.receipt().execution_status() {
        ExecutionStatus::Dispatched => Answer::Value(outcome.output().cloned().unwrap_or_default()),
        ExecutionStatus::Unknown => Answer::Uncertain,
        _ => Answer::Blocked(outcome.receipt().reason()),
    };
    GateOutcome {
        response: respond(form, function_call_id, answer),
        form,
        invocation: Invocation::Claimed,
        refusal: None,
        plan: Some(outcome.plan().clone()),
        receipt: Some(outcome.receipt().clone()),
        host_error: None,
    }
}

fn host_failed(form: WireForm, function_call_id: String, error: GuardedToolError) -> GateOutcome {
    let detail = match &error {
        GuardedToolError::Mapper(e) => e.to_string(),
        other => other.to_string(),
    };
    GateOutcome {
        response: respond(form, function_call_id, Answer::HostError),
        form,
        invocation: Invocation::Claimed,
        refusal: None,
        plan: None,
        receipt: None,
        host_error: Some(detail),
    }
}

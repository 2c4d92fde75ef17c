//! The gate: one `callRendererFunction` in, one A2UI response out, in the order of the
//! protocol (size limits, envelope, catalog and function, arguments, bindings, argument
//! schema, call-id claim, boundary).

use std::sync::Arc;
use std::time::{Duration, Instant};

use aml_core::{ActionBoundary, CallOutcome, CallRequest, Plan, Receipt, Refusal, TokioRuntime, ToolGate};
use serde_json::{Map, Value};

use crate::binding::{find_unresolved, BindingRequest, BindingResolver};
use crate::catalog::{FunctionCatalogError, FunctionRegistry};
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
pub struct MessageRefusal {
    /// The code.
    pub reason: GateReason,
    /// What exactly was wrong (a parser message, a schema violation, a JSON pointer).
    pub detail: String,
}

/// What the gate did with one message.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MessageOutcome {
    /// The message to send back to the agent, in the call's own form.
    pub response: RendererMessage,
    /// The form the call used.
    pub form: WireForm,
    /// Whether the boundary ran.
    pub invocation: Invocation,
    /// The gate's refusal, when it refused before the boundary.
    pub refusal: Option<MessageRefusal>,
    /// The plan, when the boundary ran.
    pub plan: Option<Plan>,
    /// The receipt, when the boundary ran.
    pub receipt: Option<Receipt>,
    /// A host error (failing resource mapper) behind a host-error response.
    pub host_error: Option<String>,
}

impl MessageOutcome {
    fn refused(form: WireForm, function_call_id: String, reason: GateReason, detail: String) -> Self {
        MessageOutcome {
            response: respond(form, function_call_id, Answer::Refused(reason)),
            form,
            invocation: if reason == GateReason::Replayed {
                Invocation::Replayed
            } else {
                Invocation::NotReached
            },
            refusal: Some(MessageRefusal { reason, detail }),
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
}

/// Gates agent `callRendererFunction` requests for one renderer session.
///
/// Each `functionCallId` is taken up at most once per gate: the core claims it, scoped to
/// this gate, in the boundary's one-use grant store before the call runs (ADR 019). Create
/// one gate per session (or surface) and share the [`FunctionRegistry`] between them. Every
/// message ends in one record in the boundary's receipt sink (adapter `a2ui`), refusals
/// included.
#[derive(Debug)]
pub struct FunctionGate {
    registry: Arc<FunctionRegistry>,
    gate: ToolGate,
    limits: GateLimits,
    resolver: Option<Arc<dyn BindingResolver>>,
    call_timeout: Option<Duration>,
    /// Scopes this gate's call ids in a grant store other sessions share.
    session: String,
}

impl FunctionGate {
    /// A gate over `registry`, with the host's `boundary` (policy, hooks, receipt sink) behind
    /// its agent-callable functions, the default [`GateLimits`] and no binding resolver
    /// (arguments holding bindings are refused).
    pub fn new(
        registry: Arc<FunctionRegistry>,
        boundary: ActionBoundary,
    ) -> Result<Self, FunctionCatalogError> {
        let gate = ToolGate::new(registry.tool_catalog()?, boundary)
            .for_adapter("a2ui")
            .with_runtime(TokioRuntime);
        Ok(FunctionGate {
            registry,
            gate,
            limits: GateLimits::default(),
            resolver: None,
            call_timeout: None,
            session: new_session(),
        })
    }

    /// Sets the size limits.
    pub fn with_limits(mut self, limits: GateLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Answers each call within `timeout` (A2UI carries no deadline of its own): approval
    /// stops waiting then (blocked), and a tool still running is answered as uncertain and
    /// finishes on its own.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// Resolves data bindings and nested calls in `args` before the proposal is frozen.
    pub fn with_binding_resolver(mut self, resolver: Arc<dyn BindingResolver>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// The host's tool gate behind the functions.
    pub fn tool_gate(&self) -> &ToolGate {
        &self.gate
    }

    /// Handles one agent-to-renderer message.
    ///
    /// `Err` only for a message that cannot be answered in A2UI because it names no usable
    /// `functionCallId` (over a size limit, malformed JSON, another message type): log it
    /// and answer with [`DecodeError::response`] or drop it. It is recorded all the same.
    pub async fn handle(&self, message: &[u8]) -> Result<MessageOutcome, DecodeError> {
        let call = match decode_with(message, self.limits) {
            Ok(call) => call,
            Err(e) => {
                self.record(&e.reason, "", &e.detail);
                return match e.function_call_id.clone() {
                    Some(id) => Ok(MessageOutcome::refused(e.form, id, e.reason, e.detail)),
                    None => Err(e),
                };
            }
        };
        let (form, id) = (call.form, call.function_call_id.clone());
        let refuse = |id, reason, detail: String| {
            self.record(&reason, &call.call, &detail);
            Ok(MessageOutcome::refused(form, id, reason, detail))
        };
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
        // The agent's own bytes go to the gate, unless a resolver replaced bindings.
        let request = match self.arguments(&call, args_text).await {
            Ok(None) => CallRequest::bytes(tool.name(), args_text.as_bytes()),
            Ok(Some(resolved)) => CallRequest::value(tool.name(), resolved),
            Err(MessageRefusal { reason, detail }) => return refuse(id, reason, detail),
        };
        let scoped = format!("{}/{id}", self.session);
        let mut request = request.call_id(&scoped);
        if let Some(timeout) = self.call_timeout {
            request = request.deadline(Instant::now() + timeout);
        }
        let outcome = self.gate.call(request).await;
        Ok(answered(form, id, outcome))
    }

    /// Records a refusal the gate made before the tool gate could prepare the call.
    fn record(&self, reason: &GateReason, function: &str, detail: &str) {
        self.gate
            .refuse_request(function, reason.refusal(), format!("{reason}: {detail}"));
    }
}

impl FunctionGate {
    /// The arguments to run with: `None` for the agent's text as sent (bindings-free, or
    /// refused by the strict parser, which the gate then blocks with its code), or the
    /// literal arguments the host's resolver returned.
    async fn arguments(
        &self,
        call: &CallRendererFunction<'_>,
        text: &str,
    ) -> Result<Option<Value>, MessageRefusal> {
        let refusal = |reason, detail| Err(MessageRefusal { reason, detail });
        if !text.starts_with('{') {
            return refusal(GateReason::ArgsNotObject, format!("args is {}", clip(text, 16)));
        }
        let map = match aml_core::strict::parse_str(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return refusal(GateReason::ArgsNotObject, "args is not an object".into()),
            Err(_) => return Ok(None),
        };
        match find_unresolved(call.form, &map) {
            None => Ok(None),
            Some((reason, at)) => Ok(Some(Value::Object(self.resolve(call, &map, reason, &at).await?))),
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
    ) -> Result<Map<String, Value>, MessageRefusal> {
        let unresolved = |detail| MessageRefusal {
            reason: GateReason::BindingsUnresolved,
            detail,
        };
        let Some(resolver) = &self.resolver else {
            return Err(MessageRefusal {
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

/// A scope no other gate of any process shares: the process, its clock at start, a counter.
fn new_session() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{started}-{n}", std::process::id())
}

/// At most `max` characters of agent text, for a log line that must not echo it whole.
fn clip(text: &str, max: usize) -> String {
    let end = text.char_indices().nth(max).map_or(text.len(), |(i, _)| i);
    let ellipsis = if end < text.len() { "…" } else { "" };
    format!("{}{ellipsis}", &text[..end])
}

fn answered(form: WireForm, function_call_id: String, outcome: CallOutcome) -> MessageOutcome {
    let answer = match &outcome {
        CallOutcome::Refused(refused) => {
            let reason = match refused.refusal() {
                Refusal::DuplicateCall => GateReason::Replayed,
                Refusal::InexactNumber => GateReason::ArgsInexactNumber,
                Refusal::InvalidResource => GateReason::InvalidResource,
                Refusal::ResourceOutsideRoot => GateReason::ResourceOutsideRoot,
                // Outside the function's schema, or not an object.
                _ => GateReason::ArgsSchemaMismatch,
            };
            let detail = refused.detail().to_owned();
            return MessageOutcome::refused(form, function_call_id, reason, detail);
        }
        CallOutcome::Dispatched(done) => Answer::Value(done.output().clone()),
        CallOutcome::Unknown(_) => Answer::Uncertain,
        CallOutcome::Blocked(blocked) => Answer::Blocked(blocked.reason()),
        CallOutcome::HostError(_) => Answer::HostError,
    };
    let invocation = match &outcome {
        CallOutcome::HostError(_) => Invocation::NotReached,
        _ => Invocation::Claimed,
    };
    MessageOutcome {
        response: respond(form, function_call_id, answer),
        form,
        invocation,
        refusal: None,
        plan: outcome.plan().cloned(),
        receipt: outcome.receipt().cloned(),
        host_error: outcome.host_error().map(str::to_owned),
    }
}

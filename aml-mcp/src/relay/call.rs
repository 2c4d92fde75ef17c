//! `tools/call` through the gate: the call's parts are checked (nothing reaches the server
//! that is not in the digest), planned and authorized by the host's gate, then forwarded as
//! a request rebuilt from the frozen bytes; the answer is the server's with the verdict.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use aml_core::strict::first_inexact_number;
use aml_core::{
    async_trait, CallerGone, GateOutcome, PreparedCall, Refusal, ToolCall, ToolError, ToolExecutor,
};
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::answer::{error_result, lenient_status, read_result, relay_reply, unsplicable};
use super::endpoint::{flight_key, EndpointId};
use super::jsonrpc::{self, json_string, Envelope, Members};
use super::machine::{CallEvent, Flight, Relay, Reply, ServerId, Step, FIRST_SERVER};
use super::pins::{self, PinCheck};
use super::session::Session;
use super::{ForwardedCall, ObservedCall, OutboundTraces, ServerRequestPolicy, TransportTrace};
use crate::{ForwardError, McpVerdict, ResultStatus};

/// The members of `tools/call` params the relay forwards. Anything else would reach the
/// server without being in the digest, so it is refused.
const FORWARDED: [&str; 5] = ["name", "arguments", "_meta", "inputResponses", "requestState"];

/// One checked call, ready for the gate.
struct CallRequest {
    /// Where the answer goes.
    endpoint: EndpointId,
    /// The server whose tool it is, and its own name for it when that is not `name` (the
    /// exposed name, ADR 033).
    server: ServerId,
    own_name: Option<String>,
    client_id: Bytes,
    flight: String,
    name: String,
    arguments: Map<String, Value>,
    input_responses: Option<Value>,
    request_state: Option<Value>,
    meta: Option<String>,
    /// The transport's trace headers, for the host's observer.
    trace: Option<TransportTrace>,
}

impl CallRequest {
    /// The server's own name for the tool.
    fn own_name(&self) -> &str {
        self.own_name.as_deref().unwrap_or(&self.name)
    }
}

/// The server a `tools/call` goes to: its tool's (the first server's, for a tool no server
/// has: the gate refuses it before anything is sent).
pub(crate) fn server_of(relay: &Relay, env: &Envelope<'_>) -> ServerId {
    let routes = relay.tools.routes();
    if !routes.listed() {
        return FIRST_SERVER;
    }
    routes
        .resolve(&tool_named(env))
        .map_or(FIRST_SERVER, |(server, _)| server)
}

/// A checked call for its future: planned when its tool's pin could be checked, else after
/// the future has fetched the server's tool list.
pub(crate) struct CallStart {
    request: CallRequest,
    plan: Option<(bool, PreparedCall)>,
}

impl CallStart {
    /// The client's request id, as a flight key.
    pub(crate) fn flight(&self) -> &str {
        &self.request.flight
    }

    /// The server the call goes to, and the name it is sent under (the server's own).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn target(&self) -> (ServerId, &str) {
        (self.request.server, self.request.own_name())
    }
}

/// Checks a `tools/call` request and hands it to the engine to run; answers at once what
/// it refuses.
pub(crate) fn start_call(
    step: &mut Step<'_>,
    client_id: Bytes,
    env: &Envelope<'_>,
    params: Option<Value>,
    trace: Option<TransportTrace>,
) {
    let ids = step.state.id_space(step.endpoint);
    let mut request = match check(step.endpoint, ids, client_id.clone(), env, params) {
        Ok(request) => CallRequest { trace, ..request },
        Err(Checked::BadParams(why)) => {
            let message = format!("invalid params: {why}");
            tracing::warn!(target: "aml_mcp::relay", "tools/call refused: {why}");
            let refusal = Refusal::MalformedRequest;
            record_unread_call(step.relay, &tool_named(env), trace.as_ref(), refusal, &message);
            return step.answer_error(Some(&client_id), jsonrpc::INVALID_PARAMS, &message);
        }
        Err(Checked::Refused(refusal, detail)) => {
            return refuse_call(step, &client_id, env, trace.as_ref(), refusal, &detail);
        }
    };
    if let Some((server, own)) = step.relay.tools.routes().resolve(&request.name) {
        request.server = server;
        request.own_name = (own != request.name).then(|| own.to_owned());
    }
    step.state.token_goes_to(request.server);
    let seen = &step.state.seen[request.server];
    let plan = match pins::check(&step.relay.tools, seen, &request.name, request.own_name()) {
        PinCheck::Changed(detail) => {
            let (trace, refusal) = (request.trace.as_ref(), Refusal::ToolDefinitionChanged);
            return refuse_call(step, &client_id, env, trace, refusal, &detail);
        }
        // Planned now, so that a call dropped before its future runs is still recorded.
        PinCheck::Pass => Some(prepare(step.relay, &mut request)),
        PinCheck::Unknown => None,
    };
    step.state.flights.insert(
        request.flight.clone(),
        Flight::Call {
            upstream: None,
            stop: None,
        },
    );
    step.start_call(CallStart { request, plan });
}

/// Runs a call the session core checked, to its answer and record.
pub(crate) async fn run(session: Arc<Session>, start: CallStart) {
    match start.plan {
        Some((retry, prepared)) => run_call(session, start.request, retry, prepared).await,
        None => fetch_then_run(session, start.request).await,
    }
}

/// A call to a pinned tool whose definition this session has not seen since it last
/// changed: the relay fetches the server's `tools/list` first, then checks the pin.
async fn fetch_then_run(session: Arc<Session>, mut request: CallRequest) {
    let checked = match pins::fetch(&session, request.server).await {
        Ok(seen) => {
            let checked = pins::check(&session.relay.tools, &seen, &request.name, request.own_name());
            session.tell(CallEvent::Listed(request.server, seen));
            checked
        }
        Err(why) => PinCheck::Changed(format!(
            "tool {:?} is pinned and the gate could not read the server's definition of it: {why}",
            request.name
        )),
    };
    let detail = match checked {
        PinCheck::Pass => {
            let (retry, prepared) = prepare(&session.relay, &mut request);
            return run_call(session, request, retry, prepared).await;
        }
        PinCheck::Changed(detail) => detail,
        PinCheck::Unknown => format!(
            "tool {:?} is pinned and the server's tools/list does not settle its definition (it changed again meanwhile)",
            request.name
        ),
    };
    let called = (request.meta.as_deref(), request.trace.as_ref());
    let refusal = Refusal::ToolDefinitionChanged;
    let answer = refusal_answer(
        &session.relay,
        &request.client_id,
        &request.name,
        called,
        refusal,
        &detail,
    );
    session.answer(request.endpoint, answer).await
}

enum Checked {
    BadParams(String),
    Refused(Refusal, String),
}

/// `params` is the strictly parsed params object; `env` gives its raw text. `ids` is the
/// id space the request's id is in ([`super::machine::State::id_space`]).
fn check(
    endpoint: EndpointId,
    ids: EndpointId,
    client_id: Bytes,
    env: &Envelope<'_>,
    params: Option<Value>,
) -> Result<CallRequest, Checked> {
    let bad = |why: &str| Checked::BadParams(why.to_owned());
    let Some(Value::Object(mut params)) = params else {
        return Err(bad("tools/call needs params {\"name\": …, \"arguments\": {…}}"));
    };
    if let Some(unknown) = params.keys().find(|k| !FORWARDED.contains(&k.as_str())) {
        return Err(Checked::BadParams(format!(
            "the gate does not forward the tools/call member {unknown:?}: it would reach the server without being in the approved digest"
        )));
    }
    let name = match params.remove("name") {
        Some(Value::String(name)) => name,
        _ => return Err(bad("tools/call needs a string \"name\"")),
    };
    let arguments = match params.remove("arguments") {
        None => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(bad("tools/call \"arguments\" must be a JSON object")),
    };
    let input_responses = match params.remove("inputResponses") {
        None => None,
        Some(v @ Value::Object(_)) => Some(v),
        Some(_) => return Err(bad("tools/call \"inputResponses\" must be a JSON object")),
    };
    let request_state = match params.remove("requestState") {
        None => None,
        Some(v @ Value::String(_)) => Some(v),
        Some(_) => return Err(bad("tools/call \"requestState\" must be a string")),
    };
    // The raw text: numbers as written, and the client's `_meta` to pass on as it is.
    let raw = env
        .params
        .and_then(|p| Members::parse(p).ok())
        .ok_or_else(|| bad("tools/call params must be a JSON object"))?;
    for member in ["arguments", "inputResponses"] {
        if let Some(inexact) = raw
            .get(member)
            .and_then(|raw| first_inexact_number(raw.get().as_bytes()))
        {
            return Err(Checked::Refused(
                Refusal::InexactNumber,
                format!("{member}: {inexact}; send it as a string"),
            ));
        }
    }
    Ok(CallRequest {
        flight: flight_key(ids, &client_id),
        endpoint,
        server: FIRST_SERVER,
        own_name: None,
        client_id,
        name,
        arguments,
        input_responses,
        request_state,
        meta: raw.get("_meta").map(|m| m.get().to_owned()),
        trace: None,
    })
}

/// Answers a call the relay refuses before the gate (nothing is sent), and records it.
pub(crate) fn refuse_call(
    step: &mut Step<'_>,
    client_id: &[u8],
    env: &Envelope<'_>,
    trace: Option<&TransportTrace>,
    refusal: Refusal,
    detail: &str,
) {
    let meta = env
        .params
        .and_then(|p| Members::parse(p).ok())
        .and_then(|m| m.get("_meta").map(|m| m.get().to_owned()));
    let called = (meta.as_deref(), trace);
    let answer = refusal_answer(step.relay, client_id, &tool_named(env), called, refusal, detail);
    step.answer(answer);
}

/// What the client sent beside the call, for the observer: its `_meta` (raw text) and its
/// transport's trace headers.
type Called<'a> = (Option<&'a str>, Option<&'a TransportTrace>);

/// Tells the host's observer, if any, of a call that ended.
fn observe(
    relay: &Relay,
    tool: &str,
    (meta, trace): Called<'_>,
    forwarded: Option<&TransportTrace>,
    outcome: &GateOutcome,
    started: (SystemTime, Instant),
) {
    if let Some(observer) = relay.tools.call_observer() {
        observer.call_ended(&ObservedCall {
            tool,
            meta,
            trace,
            forwarded,
            outcome,
            started: started.0,
            elapsed: started.1.elapsed(),
        });
    }
}

/// The tool a `tools/call` names (`params.name`), or `""` when it names none.
pub(crate) fn tool_named(env: &Envelope<'_>) -> String {
    env.params
        .and_then(|p| Members::parse(p).ok())
        .and_then(|m| m.get("name"))
        .and_then(|n| serde_json::from_str::<String>(n.get()).ok())
        .unwrap_or_default()
}

/// Records a refused call to `tool` (nothing is sent) and returns its answer.
fn refusal_answer(
    relay: &Relay,
    client_id: &[u8],
    tool: &str,
    called: Called<'_>,
    refusal: Refusal,
    detail: &str,
) -> Bytes {
    let outcome = record_refused(relay, tool, called, refusal, detail);
    let verdict = McpVerdict::from_outcome(outcome);
    let text = format!("{}: {detail}", verdict.explanation());
    error_result(client_id, &text, &verdict.to_json())
}

/// Records a refused call to `tool` (nothing is sent), and tells the host's observer.
fn record_refused(
    relay: &Relay,
    tool: &str,
    called: Called<'_>,
    refusal: Refusal,
    detail: &str,
) -> GateOutcome {
    let started = (SystemTime::now(), Instant::now());
    // The record names the reason, never argument values.
    let recorded = match refusal {
        Refusal::InexactNumber => "a number in the call is not kept exactly by the canonical form".to_owned(),
        _ => detail.to_owned(),
    };
    let outcome = relay.record_refusal(tool, refusal, recorded);
    observe(relay, tool, called, None, &outcome, started);
    outcome
}

/// Records a `tools/call` that is answered with a JSON-RPC error instead of a verdict (it
/// could not be read as a call, or its id is taken): every refused call leaves a record.
pub(crate) fn record_unread_call(
    relay: &Relay,
    tool: &str,
    trace: Option<&TransportTrace>,
    refusal: Refusal,
    detail: &str,
) {
    record_refused(relay, tool, (None, trace), refusal, detail);
}

/// The gate's plan for the call; a retry's proposal is the envelope (ADR 013).
fn prepare(relay: &Relay, request: &mut CallRequest) -> (bool, PreparedCall) {
    let arguments = std::mem::take(&mut request.arguments);
    let retry = request.input_responses.is_some() || request.request_state.is_some();
    let (gate, arguments) = if retry {
        let mut envelope = Map::new();
        envelope.insert("arguments".into(), Value::Object(arguments));
        if let Some(responses) = request.input_responses.take() {
            envelope.insert("inputResponses".into(), responses);
        }
        if let Some(state) = request.request_state.take() {
            envelope.insert("requestState".into(), state);
        }
        (relay.tools.retry_gate(), Value::Object(envelope))
    } else {
        (relay.tools.gate(), Value::Object(arguments))
    };
    let mut facts = aml_core::CallFacts::of(relay.config.caller.clone());
    facts.client = relay.client.get().cloned();
    (
        retry,
        gate.gate().prepare_value_for(&request.name, &facts, arguments),
    )
}

async fn run_call(session: Arc<Session>, request: CallRequest, retry: bool, prepared: PreparedCall) {
    let started = (SystemTime::now(), Instant::now());
    let relay = &session.relay;
    let gate = if retry {
        relay.tools.retry_gate()
    } else {
        relay.tools.gate()
    };
    let outbound = relay.tools.outbound_traces().map(|_| OutboundCall {
        tool: request.name.clone(),
        trace: request.trace.clone(),
        sent: Mutex::new(None),
    });
    let forward = Arc::new(Forward {
        session: Arc::clone(&session),
        server: request.server,
        flight: request.flight.clone(),
        name: json_string(request.own_name()),
        meta: request.meta,
        retry,
        reply: Mutex::new(None),
        cancelled: AtomicBool::new(false),
        outbound,
    });
    let wrapped = relay
        .tools
        .forward_wrapper()
        .map(|w| w.wrap(Arc::clone(&forward) as Arc<dyn ToolExecutor>));
    let executor: &dyn ToolExecutor = match &wrapped {
        Some(wrapped) => wrapped.as_ref(),
        None => forward.as_ref(),
    };
    // Until the one-use claim the call stops if the client leaves (its approval is
    // withdrawn: the page no longer offers it); from the claim on it runs to the end.
    let left = {
        let session = Arc::clone(&session);
        CallerGone::new(async move { session.client_left().await })
    };
    let outcome = gate.gate().run(prepared, Some(executor), None, Some(left)).await;
    let called = (forward.meta.as_deref(), request.trace.as_ref());
    let sent = forward.outbound.as_ref().and_then(|o| lock(&o.sent).clone());
    observe(relay, &request.name, called, sent.as_ref(), &outcome, started);
    if outcome.dispatch().is_some_and(|d| d.caller_gone()) {
        // Recorded as blocked (the caller went away before the claim); nobody is left to
        // answer.
        tracing::info!(target: "aml_mcp::relay", tool = %request.name,
                       "the client left before the call was authorized; it was withdrawn and never sent");
        return;
    }
    if forward.cancelled.load(Ordering::Relaxed) {
        // The client cancelled it: MCP wants no answer.
        return;
    }
    let mut verdict = McpVerdict::from_outcome(outcome);
    let answered = lock(&forward.reply).take();
    if let Some(answered) = answered
        .as_ref()
        .filter(|a| a.not_strict.is_some() || a.withheld.is_some())
    {
        // The gate's output may be the result's text: the status is read from the answer.
        let status = lenient_status(&answered.reply);
        verdict = verdict.with_answer_notes(status, answered.not_strict.clone(), answered.withheld.clone());
    }
    if let Some(why) = answered.as_ref().and_then(|a| a.withheld.as_deref()) {
        let text = format!(
            "The server answered this call (it was made: do not send it again without checking), but its answer cannot carry the gate's verdict safely, so it is not relayed: {why}."
        );
        let answer = error_result(&request.client_id, &text, &verdict.to_json());
        return session.answer(request.endpoint, answer).await;
    }
    let answer = match (verdict.status(), answered.map(|a| a.reply)) {
        (ResultStatus::InputRequired, Some(reply)) => match refused_input(relay, &reply) {
            Some(method) => {
                let text = format!(
                    "The server asked for {method} to finish this call; this host does not relay it. {}",
                    "The call was made; its outcome is the server's interim result."
                );
                error_result(&request.client_id, &text, &verdict.to_json())
            }
            None => relayed(&request.client_id, &reply, &verdict),
        },
        (ResultStatus::Returned | ResultStatus::ToolError | ResultStatus::Unknown, Some(reply)) => {
            relayed(&request.client_id, &reply, &verdict)
        }
        _ => {
            let mut text = verdict.explanation();
            if let Some(detail) = verdict.outcome().detail() {
                text = format!("{text} ({detail})");
            }
            error_result(&request.client_id, &text, &verdict.to_json())
        }
    };
    session.answer(request.endpoint, answer).await;
}

fn relayed(client_id: &[u8], reply: &Reply, verdict: &McpVerdict) -> Bytes {
    Bytes::from(relay_reply(reply, client_id, Some(&verdict.to_json())))
}

/// The kind of input an `input_required` result asks for that the host does not relay.
fn refused_input(relay: &Relay, reply: &Reply) -> Option<String> {
    let result = reply.body.as_ref().ok()?;
    let result: &serde_json::value::RawValue = serde_json::from_slice(&reply.message[result.clone()]).ok()?;
    let requests = Members::parse(result).ok()?.get("inputRequests")?;
    let requests = Members::parse(requests).ok()?;
    for (key, request) in &requests.0 {
        let method: String = Members::parse(request)
            .ok()
            .and_then(|m| m.get("method"))
            .and_then(|m| serde_json::from_str(m.get()).ok())
            .unwrap_or_default();
        let policy = match method.as_str() {
            "sampling/createMessage" => relay.config.sampling,
            "elicitation/create" => relay.config.elicitation,
            _ => continue,
        };
        if policy == ServerRequestPolicy::Refuse {
            let detail = format!("input request {key:?} of an input_required result asks for {method}");
            relay.record_refusal(&method, Refusal::ServerRequestRefused, detail);
            return Some(method);
        }
    }
    None
}

/// Forwards the frozen call once and waits for the server's answer.
struct Forward {
    session: Arc<Session>,
    server: ServerId,
    flight: String,
    /// The tool name as JSON text.
    name: String,
    /// The client's `_meta`, as it sent it (protocol metadata: progress token, version).
    meta: Option<String>,
    retry: bool,
    reply: Mutex<Option<Answered>>,
    cancelled: AtomicBool,
    /// With [`OutboundTraces`]: what the observer is asked for the forward's trace context.
    outbound: Option<OutboundCall>,
}

/// A forwarded call's part in [`OutboundTraces`].
struct OutboundCall {
    /// The tool's name, as the client sent it.
    tool: String,
    /// The client's transport trace headers.
    trace: Option<TransportTrace>,
    /// The trace context last sent with it.
    sent: Mutex<Option<TransportTrace>>,
}

/// Takes a request's trace context out of the table once the request has ended.
struct Forget<'a>(&'a OutboundTraces, u64);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.forget(self.1);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The server's answer to the forwarded call, and what the gate could not do with it.
struct Answered {
    reply: Reply,
    /// Why its result is not strict JSON (its digest is then of its text).
    not_strict: Option<String>,
    /// Why the verdict cannot be added to it safely (it is then not relayed).
    withheld: Option<String>,
}

impl core::fmt::Debug for Forward {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Forward")
            .field("tool", &self.name)
            .finish_non_exhaustive()
    }
}

impl Forward {
    /// Asks the observer for the trace context to send with request `id`, and puts it in the
    /// table the server's transport takes it from; the guard forgets it when the request
    /// ends.
    fn put_trace(&self, id: u64) -> Option<Forget<'_>> {
        let outbound = self.outbound.as_ref()?;
        let table = self.session.relay.tools.outbound_traces()?;
        let observer = self.session.relay.tools.call_observer()?;
        let trace = observer.forward_trace(&ForwardedCall {
            tool: &outbound.tool,
            meta: self.meta.as_deref(),
            trace: outbound.trace.as_ref(),
        })?;
        *lock(&outbound.sent) = Some(trace.clone());
        table.put(id, trace);
        Some(Forget(table, id))
    }

    /// The request params, from the frozen canonical bytes only.
    fn params(&self, frozen: &str) -> Result<String, ForwardError> {
        let mut params = format!("{{\"name\":{}", self.name);
        if self.retry {
            let raw: &serde_json::value::RawValue =
                serde_json::from_str(frozen).map_err(|e| ForwardError::Unreadable(e.to_string()))?;
            let envelope = Members::parse(raw).map_err(|e| ForwardError::Unreadable(e.to_string()))?;
            for (key, value) in &envelope.0 {
                params.push_str(&format!(",{}:{}", json_string(key), value.get()));
            }
        } else {
            params.push_str(",\"arguments\":");
            params.push_str(frozen);
        }
        if let Some(meta) = &self.meta {
            params.push_str(",\"_meta\":");
            params.push_str(meta);
        }
        params.push('}');
        Ok(params)
    }

    async fn send(&self, frozen: &str) -> Result<Value, ForwardError> {
        let params = self.params(frozen)?;
        let request = |id: u64| {
            let request =
                format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{params}}}");
            (request, self.put_trace(id))
        };
        let reply = match self.session.ask(self.server, Some(&self.flight), request).await {
            Ok(reply) => reply,
            Err(ForwardError::Cancelled) => {
                self.cancelled.store(true, Ordering::Relaxed);
                return Err(ForwardError::Cancelled);
            }
            Err(e) => return Err(e),
        };
        let withheld = unsplicable(&reply);
        let outcome = match &reply.body {
            // The server answered: the call was made, whatever its answer's JSON looks like.
            Ok(result) => {
                let (value, not_strict) = read_result(
                    &reply.message[result.clone()],
                    self.session.relay.config.max_message_bytes,
                );
                let answered = Answered {
                    reply,
                    not_strict,
                    withheld,
                };
                *lock(&self.reply) = Some(answered);
                return Ok(value);
            }
            Err(error) => {
                let text = &reply.message[error.clone()];
                // An error object read one way only, whose `data` alone cannot take the
                // verdict (JSON-RPC lets `data` be any value), is the server's answer all the
                // same; anything else in it that two readers could read apart is not.
                let readable =
                    serde_json::from_slice::<&RawValue>(text).is_ok_and(|raw| Members::parse(raw).is_ok());
                if let (Some(why), false) = (&withheld, readable) {
                    return Err(ForwardError::Unreadable(why.clone()));
                }
                let error: Value = serde_json::from_slice(text).unwrap_or_default();
                Err(ForwardError::Server {
                    code: error["code"].as_i64().unwrap_or_default() as i32,
                    message: error["message"].as_str().unwrap_or_default().to_owned(),
                })
            }
        };
        let withheld = match (&outcome, withheld) {
            (Err(ForwardError::Server { code, message }), Some(why)) => {
                Some(format!("{why}; the server's error was {code}: {message:?}"))
            }
            (_, withheld) => withheld,
        };
        let answered = Answered {
            reply,
            not_strict: None,
            withheld,
        };
        *lock(&self.reply) = Some(answered);
        outcome
    }
}

#[async_trait]
impl ToolExecutor for Forward {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
        let frozen = call.proposal().arguments_json();
        self.send(frozen).await.map_err(crate::gate::forward_failed)
    }
}

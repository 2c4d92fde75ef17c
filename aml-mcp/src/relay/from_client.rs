//! Messages from the client: each one checked (a JSON-RPC answer for anything malformed),
//! requests relayed with the relay's own id and a time limit, `tools/call` to the gate,
//! cancellations passed on.

use std::time::Duration;

use aml_core::strict::{self, Limits};
use aml_core::Refusal;
use bytes::Bytes;
use serde_json::Value;

use super::call::{record_unread_call, refuse_call, server_of, start_call, tool_named};
use super::endpoint::{EndpointEvent, STANDING};
use super::frame::{Inbound, TransportTrace};
use super::jsonrpc::{self, error_response, range_in, scan_id, scan_method, splice, Envelope, Kind, Members};
use super::kinds::{drop_client_request_without_id, is_notification_method, takes_client_answer};
use super::machine::{Flight, Pending, Relay, ServerId, State, Step, FIRST_SERVER};
use super::{gather, pages, prompts, resources};
use crate::ForwardError;

fn strict_limits(relay: &Relay) -> Limits {
    Limits {
        max_bytes: relay.config.max_message_bytes,
        ..Limits::default()
    }
}

/// What the client side delivered: a message from one of its endpoints, or an endpoint
/// opening or closing.
pub(super) fn on_client_event(step: &mut Step<'_>, event: EndpointEvent) {
    match event {
        EndpointEvent::Message { endpoint, inbound } => {
            step.endpoint = endpoint;
            on_client(step, inbound);
        }
        EndpointEvent::Open { endpoint, to, stream } => step.endpoint_opened(endpoint, to, stream),
        EndpointEvent::Close { endpoint } => step.endpoint_closed(endpoint),
    }
}

fn on_client(step: &mut Step<'_>, inbound: Inbound) {
    let relay = step.relay;
    step.state.noted_token = None;
    let (bytes, trace) = match inbound {
        Inbound::Message(bytes) => (with_relay_token(step, bytes), None),
        Inbound::Traced { message, trace } => (with_relay_token(step, message), Some(trace)),
        Inbound::Oversized { prefix, len } => {
            let message = format!(
                "invalid request: the message is {len} bytes, over {}'s limit of {} bytes",
                relay.config.product, relay.config.max_message_bytes
            );
            let id = scan_id(&prefix);
            record_if_call(
                step,
                Read::Text(&prefix),
                None,
                Refusal::RequestTooLarge,
                &message,
            );
            return step.answer_error(id.as_deref(), jsonrpc::INVALID_REQUEST, &message);
        }
    };
    let env = Envelope::parse(&bytes);
    let readable_id = |env: &serde_json::Result<Envelope<'_>>| match env {
        Ok(env) => env
            .valid_id()
            .map(|id| Bytes::copy_from_slice(id.get().as_bytes())),
        Err(_) => scan_id(&bytes),
    };
    let value = match strict::parse_slice_with(&bytes, strict_limits(relay)) {
        Ok(value) => value,
        Err(e) => {
            let id = readable_id(&env);
            let message = format!("parse error: {e}");
            let read = env.as_ref().map_or(Read::Text(&bytes), Read::Envelope);
            record_if_call(step, read, trace.as_ref(), Refusal::MalformedRequest, &message);
            return step.answer_error(id.as_deref(), jsonrpc::PARSE_ERROR, &message);
        }
    };
    let (mut message, env) = match (value, env) {
        (Value::Array(items), _) => return answer_batch(step, &items, trace.as_ref()),
        (Value::Object(message), Ok(env)) => (message, env),
        (Value::Object(_), Err(e)) => {
            let id = scan_id(&bytes);
            let message = format!("invalid request: not a JSON-RPC message ({e})");
            let refusal = Refusal::MalformedRequest;
            record_if_call(step, Read::Text(&bytes), trace.as_ref(), refusal, &message);
            return step.answer_error(id.as_deref(), jsonrpc::INVALID_REQUEST, &message);
        }
        (_, env) => {
            let id = readable_id(&env);
            let message = "invalid request: a message must be a JSON object";
            return step.answer_error(id.as_deref(), jsonrpc::INVALID_REQUEST, message);
        }
    };
    let kind = match env.kind() {
        Ok(kind) => kind,
        Err(why) => {
            let id = env.valid_id().map(|id| id.get().as_bytes());
            let message = format!("invalid request: {why}");
            let refusal = Refusal::MalformedRequest;
            record_if_call(step, Read::Envelope(&env), trace.as_ref(), refusal, &message);
            return step.answer_error(id, jsonrpc::INVALID_REQUEST, &message);
        }
    };
    let method = env.method.as_deref().unwrap_or_default();
    match kind {
        Kind::Request => {
            let Some(id) = env.id else { return };
            let client_id = Bytes::copy_from_slice(id.get().as_bytes());
            // A call goes to its tool's server; every other request to the first server
            // until the rest are routed (ADR 033).
            let (server, own_name) = match method {
                "tools/call" => (server_of(relay, &env), None),
                "prompts/get" if step.state.servers > 1 => prompts::target(step.state, &env),
                _ if step.state.servers > 1 && prompts::is_prompt_completion(&env) => {
                    prompts::target(step.state, &env)
                }
                _ if step.state.servers > 1 && resources::names_a_resource(method) => {
                    let uri = resources::uri_of(method, &env);
                    match uri.map(|uri| resources::target(step.state, &uri)) {
                        Some(Ok(server)) => (server, None),
                        None => (step.state.default_server_for(method), None),
                        Some(Err(why)) => {
                            let message = format!("{}: {why}", relay.config.product);
                            return step.answer_error(Some(&client_id), RESOURCE_NOT_FOUND, &message);
                        }
                    }
                }
                _ => (step.state.default_server_for(method), None),
            };
            let gathered = step.state.servers > 1 && gather::is_gathered(method);
            let gone = match gathered {
                true => step.state.all_gone().map(|_| step.state.gone_why()),
                false => step.state.gone(server).cloned(),
            };
            let taken = step
                .state
                .flights
                .contains_key(&step.state.flight_key(step.endpoint, &client_id));
            if taken {
                // Two requests under one id could not be told apart (their answers, a
                // cancellation), and the in-flight limit counts ids.
                let message = "invalid request: a request with this id is still in flight; use a new id";
                let refusal = Refusal::DuplicateCall;
                record_if_call(step, Read::Envelope(&env), trace.as_ref(), refusal, message);
                return step.answer_error(Some(&client_id), jsonrpc::INVALID_REQUEST, message);
            }
            if let Some(why) = odd_progress_token(&message) {
                if method == "tools/call" {
                    refuse_call(
                        step,
                        &client_id,
                        &env,
                        trace.as_ref(),
                        Refusal::MalformedRequest,
                        why,
                    );
                } else {
                    step.answer_error(
                        Some(&client_id),
                        jsonrpc::INVALID_PARAMS,
                        &format!("invalid params: {why}"),
                    );
                }
                return;
            }
            note_token(step, &message);
            if method == "tools/call" {
                match gone {
                    Some(reason) => {
                        let trace = trace.as_ref();
                        refuse_call(step, &client_id, &env, trace, Refusal::UpstreamGone, &reason)
                    }
                    None => {
                        let params = message.remove("params");
                        start_call(step, client_id, &env, params, trace)
                    }
                }
                return;
            }
            if let Some(reason) = gone {
                let message = format!(
                    "{}: the upstream server is gone ({reason}); nothing was sent",
                    relay.config.product
                );
                return step.answer_error(Some(&client_id), jsonrpc::UPSTREAM_GONE, &message);
            }
            if method == "initialize" {
                if let Some(client) = client_info(&message) {
                    let _ = relay.client.set(client);
                }
            }
            let limit = match method {
                "initialize" | "server/discover" => Some(relay.config.handshake_timeout),
                // The server answers it when the subscription ends, not before (2026-07-28).
                SUBSCRIPTIONS_LISTEN => None,
                _ => Some(relay.config.upstream_timeout),
            };
            let id_range = range_in(&bytes, id);
            match limit {
                // Every server must hear the handshake (ADR 033).
                Some(limit) if gathered => gather::start(step, client_id, &bytes, id_range, method, limit),
                // With several servers a list walks them in turn, under the gate's cursor.
                _ if step.state.servers > 1 && pages::is_paged(method) => {
                    match pages::route(step.state, &bytes, &env) {
                        Ok(Some((server, paged))) => {
                            let id_range = rewritten_id(&paged).unwrap_or(id_range);
                            forward(step, server, client_id, &paged, id_range, method, limit)
                        }
                        Ok(None) => {
                            let result = pages::empty_result(method);
                            step.answer(jsonrpc::result_response(&client_id, result.as_bytes()))
                        }
                        Err(why) => {
                            let message = format!("invalid params: {why}");
                            step.answer_error(Some(&client_id), jsonrpc::INVALID_PARAMS, &message)
                        }
                    }
                }
                _ => match own_name.and_then(|own| prompts::with_own_name(&bytes, &own)) {
                    Some(renamed) => {
                        let id_range = rewritten_id(&renamed).unwrap_or(id_range);
                        forward(step, server, client_id, &renamed, id_range, method, limit)
                    }
                    None => forward(step, server, client_id, &bytes, id_range, method, limit),
                },
            }
        }
        Kind::Notification if method == "notifications/cancelled" => cancel(step, &bytes, &env),
        // A request without an id would pass as a notification, where nothing gates it.
        Kind::Notification if !is_notification_method(method) => {
            drop_client_request_without_id(relay, method, &env)
        }
        Kind::Response => {
            let Some(id) = env.id else { return };
            let Some(asked) = takes_client_answer(step.state, id.get().as_bytes()) else {
                return;
            };
            let answer = if asked.server_id[..] == *id.get().as_bytes() {
                bytes.clone()
            } else {
                Bytes::from(splice(
                    &bytes,
                    &mut [(range_in(&bytes, id), &asked.server_id[..])],
                ))
            };
            step.upstream(asked.server, answer);
        }
        // Tied to no request of the client's: every server hears it (one server: as today).
        Kind::Notification => step.every_upstream(bytes.clone()),
    }
}

/// Why a request's progress token (`params._meta.progressToken`) is refused, when it is not
/// a string or an integer (MCP) that every JSON reader keeps exactly (a JavaScript safe
/// integer, within ±(2^53 − 1)): servers drop such a request without an answer (seen with
/// rmcp and the TypeScript SDK), which would hold it until the relay's time limit.
fn odd_progress_token(message: &serde_json::Map<String, Value>) -> Option<&'static str> {
    let token = message.get("params")?.get("_meta")?.get("progressToken")?;
    match token {
        Value::String(_) => None,
        Value::Number(n) if is_safe_integer(n) => None,
        _ => Some(
            "params._meta.progressToken must be a string or an integer within ±(2^53 - 1) (MCP); nothing was sent",
        ),
    }
}

/// Whether `n` is an integer (however written: `1e3` and `1.0` are) that a double keeps.
fn is_safe_integer(n: &serde_json::Number) -> bool {
    const MAX: u64 = (1 << 53) - 1;
    match (n.as_i64(), n.as_u64()) {
        (Some(i), _) => i.unsigned_abs() <= MAX,
        (None, Some(u)) => u <= MAX,
        (None, None) => n
            .as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.abs() <= MAX as f64),
    }
}

/// What the relay could read of a message it refuses with a JSON-RPC error.
enum Read<'a> {
    /// Only its text (cut off, or not JSON-RPC): its method is scanned for.
    Text(&'a [u8]),
    Envelope(&'a Envelope<'a>),
}

/// Records the refused message when it is a `tools/call` (its tool named when readable).
fn record_if_call(
    step: &Step<'_>,
    read: Read<'_>,
    trace: Option<&TransportTrace>,
    refusal: Refusal,
    detail: &str,
) {
    let tool = match read {
        Read::Envelope(env) if env.method.as_deref() == Some("tools/call") => tool_named(env),
        Read::Text(text) if scan_method(text).as_deref() == Some("tools/call") => String::new(),
        _ => return,
    };
    record_unread_call(step.relay, &tool, trace, refusal, detail);
}

/// Longest client name or version kept for the approver's eyes.
const MAX_CLIENT_TEXT: usize = 256;

/// `params.clientInfo` of an `initialize`, as the client named itself (cut to
/// [`MAX_CLIENT_TEXT`] characters each: it is only shown, never decided on).
fn client_info(message: &serde_json::Map<String, Value>) -> Option<std::sync::Arc<aml_core::ClientInfo>> {
    let info = message.get("params")?.get("clientInfo")?;
    let text = |key: &str| {
        info.get(key)
            .and_then(Value::as_str)
            .map(|s| s.chars().take(MAX_CLIENT_TEXT).collect::<String>())
    };
    Some(std::sync::Arc::new(aml_core::ClientInfo {
        name: text("name")?,
        version: text("version").unwrap_or_default(),
    }))
}

/// MCP has no batches: each request in one gets its own `-32600` (a `tools/call`, a record).
fn answer_batch(step: &mut Step<'_>, items: &[Value], trace: Option<&TransportTrace>) {
    let message = format!(
        "invalid request: {} does not take JSON-RPC batches (MCP removed them); send each message alone",
        step.relay.config.product
    );
    for item in items.iter().filter(|item| item["method"] == "tools/call") {
        let tool = item.pointer("/params/name").and_then(Value::as_str);
        let refusal = Refusal::MalformedRequest;
        record_unread_call(step.relay, tool.unwrap_or_default(), trace, refusal, &message);
    }
    let ids: Vec<Bytes> = items
        .iter()
        .filter_map(|item| item.get("id"))
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
        .map(|id| Bytes::from(id.to_string()))
        .collect();
    if ids.is_empty() {
        return step.answer_error(None, jsonrpc::INVALID_REQUEST, &message);
    }
    let answers: Vec<String> = ids
        .iter()
        .map(|id| {
            String::from_utf8_lossy(&error_response(
                Some(id),
                jsonrpc::INVALID_REQUEST,
                &message,
                None,
            ))
            .into_owned()
        })
        .collect();
    step.answer(Bytes::from(format!("[{}]", answers.join(","))));
}

/// The prefix of the progress tokens the relay gives endpoints' requests.
const TOKEN_PREFIX: &str = "aml-progress-";

/// Whether the message being handled comes from an open endpoint other than the standing
/// connection: only such a request's progress token is mapped (its close forgets the
/// mapping; what answers an endpoint never opened goes nowhere, so a mapping for one would
/// only be kept forever).
fn from_open_endpoint(step: &Step<'_>) -> bool {
    step.endpoint != STANDING && step.state.endpoints.contains_key(&step.endpoint)
}

/// Notes one client's request's progress token (`params._meta.progressToken`), read from
/// its strict parse, so that each `notifications/progress` for it goes to its endpoint. A
/// token whose text the parse would not keep (an integer past 64 bits) is not noted: its
/// progress goes where what belongs to no request goes.
fn note_token(step: &mut Step<'_>, message: &serde_json::Map<String, Value>) {
    if !step.state.one_client || !from_open_endpoint(step) {
        return;
    }
    let meta = message.get("params").and_then(|p| p.get("_meta"));
    let token = match meta.and_then(|m| m.get("progressToken")) {
        Some(token @ Value::String(_)) => token,
        Some(token @ Value::Number(n)) if n.is_i64() || n.is_u64() => token,
        _ => return,
    };
    // Its progress goes on as the server writes it: nothing to put back.
    // The server is the first until the request is routed (`State::token_goes_to`).
    let kept = (step.endpoint, FIRST_SERVER, Bytes::new());
    let key = token.to_string();
    step.state.tokens.insert(key.clone(), kept);
    step.state.noted_token = Some(key);
}

/// A caller's request, with its progress token (`params._meta.progressToken`, a string or a
/// number) replaced by one of the relay's, mapped back on each `notifications/progress` to
/// the caller's endpoint with the caller's token: callers share one server, so their
/// tokens could collide.
fn with_relay_token(step: &mut Step<'_>, bytes: Bytes) -> Bytes {
    if step.state.one_client || !from_open_endpoint(step) {
        return bytes;
    }
    let token = Envelope::parse(&bytes).ok().and_then(|env| {
        let meta = Members::parse(env.params?).ok()?.get("_meta")?;
        let token = Members::parse(meta).ok()?.get("progressToken")?;
        // MCP's tokens are strings and numbers; anything else goes up as it is, unmapped.
        let kind = token.get().as_bytes()[0];
        (kind == b'"' || kind == b'-' || kind.is_ascii_digit()).then_some(())?;
        Some((
            range_in(&bytes, token),
            Bytes::copy_from_slice(token.get().as_bytes()),
        ))
    });
    let Some((range, client_token)) = token else {
        return bytes;
    };
    let ours = format!("\"{TOKEN_PREFIX}{}\"", step.relay.next_id());
    let rewritten = splice(&bytes, &mut [(range, ours.as_bytes())]);
    step.state
        .tokens
        .insert(ours.clone(), (step.endpoint, FIRST_SERVER, client_token));
    step.state.noted_token = Some(ours);
    Bytes::from(rewritten)
}

/// Where a rewritten request's id is.
fn rewritten_id(message: &[u8]) -> Option<std::ops::Range<usize>> {
    Some(range_in(message, Envelope::parse(message).ok()?.id?))
}

/// MCP's error code for a resource that cannot be found.
const RESOURCE_NOT_FOUND: i64 = -32002;

/// The 2026-07-28 request that opens a stream of notifications; they carry its id.
pub(crate) const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";

/// Relays a client request with the relay's own id, answering it with a timeout (when it has
/// a time limit).
fn forward(
    step: &mut Step<'_>,
    server: ServerId,
    client_id: Bytes,
    message: &[u8],
    id_range: std::ops::Range<usize>,
    method: &str,
    limit: Option<Duration>,
) {
    let key = step.state.flight_key(step.endpoint, &client_id);
    let state = &mut *step.state;
    let upstream_id = step.relay.next_id();
    let deadline = limit.map(|limit| (step.now + limit, limit));
    if let Some((at, _)) = deadline {
        state.deadlines.insert((at, server, upstream_id));
    }
    state.pending.insert(
        (server, upstream_id),
        Pending::Relayed {
            endpoint: step.endpoint,
            client_id,
            flight: key.clone(),
            tools_list: method == "tools/list",
            handshake: matches!(method, "initialize" | "server/discover"),
            subscription: method == SUBSCRIPTIONS_LISTEN,
            deadline,
            method: method.into(),
            gather: None,
            paged: state.servers > 1 && pages::is_paged(method),
        },
    );
    state.flights.insert(key, Flight::Relayed(server, upstream_id));
    state.token_goes_to(server);
    let relayed = splice(message, &mut [(id_range, upstream_id.to_string().as_bytes())]);
    step.upstream(server, Bytes::from(relayed));
}

/// A relayed request's time limit ran out (the session's timer took it off).
pub(crate) fn expire(step: &mut Step<'_>, server: ServerId, upstream_id: u64) {
    let state = &mut *step.state;
    let key = (server, upstream_id);
    let (endpoint, client_id, method, limit, gathered) = match state.pending.remove(&key) {
        Some(Pending::Relayed {
            endpoint,
            client_id,
            flight,
            method,
            deadline: Some((_, limit)),
            gather,
            ..
        }) => {
            if gather.is_none() {
                state.flights.remove(&flight);
            }
            state.pending.insert(key, Pending::Cancelled);
            (endpoint, client_id, method, limit, gather)
        }
        Some(other) => {
            state.pending.insert(key, other);
            return;
        }
        None => return,
    };
    let relay = step.relay;
    let product = &relay.config.product;
    step.cancel_upstream(server, upstream_id, &relay.no_answer_in_time());
    if let Some(gather) = gathered {
        return gather::said(step, gather, server, Err(format!("no answer within {limit:?}")));
    }
    let message = format!("{product}: the upstream server did not answer {method} within {limit:?}");
    step.answer_error_at(endpoint, &client_id, jsonrpc::UPSTREAM_TIMEOUT, &message);
    if matches!(&*method, "initialize" | "server/discover") {
        step.fail(format!(
            "the server did not answer the client's {method} within {limit:?}"
        ));
    }
}

/// The client cancels one of its requests: passed on with the id the server knows; a call
/// still waiting for approval is dropped (and recorded as such), not sent.
fn cancel(step: &mut Step<'_>, message: &[u8], env: &Envelope<'_>) {
    let Some(params) = env.params else { return };
    let Some(request_id) = Members::parse(params).ok().and_then(|m| m.get("requestId")) else {
        return;
    };
    let key = step.state.flight_key(step.endpoint, request_id.get().as_bytes());
    if !step.state.flights.contains_key(&key) {
        tracing::debug!(target: "aml_mcp::relay", "a cancellation for no request in flight was dropped");
        return;
    }
    for (server, upstream_id) in cancel_flight(step.state, &key) {
        let relayed = splice(
            message,
            &mut [(range_in(message, request_id), upstream_id.to_string().as_bytes())],
        );
        step.upstream(server, Bytes::from(relayed));
    }
}

/// Ends the flight `key` as cancelled by its client: a late answer is dropped, a call waiting
/// for its answer ends `unknown`, a call not sent yet is dropped (its future records it).
/// Returns each server the request went to and the id it knows the request by, when it was
/// sent (the server is to be told).
pub(crate) fn cancel_flight(state: &mut State, key: &str) -> Vec<(ServerId, u64)> {
    let Some(flight) = state.flights.remove(key) else {
        return Vec::new();
    };
    match flight {
        Flight::Relayed(server, id) => {
            state.take_pending(server, id);
            state.pending.insert((server, id), Pending::Cancelled);
            vec![(server, id)]
        }
        Flight::Gathered(gather) => gather::cancel(state, gather),
        Flight::Call {
            upstream: Some(sent), ..
        } => {
            if let Some(Pending::Call { reply }) = state.pending.insert(sent, Pending::Cancelled) {
                let _ = reply.send(Err(ForwardError::Cancelled));
            }
            vec![sent]
        }
        Flight::Call { upstream: None, stop } => {
            if let Some(stop) = stop {
                stop.abort();
            }
            Vec::new()
        }
    }
}

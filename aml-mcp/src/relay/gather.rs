//! A client request that every server must hear when the gate fronts several (ADR 033,
//! step 3): `initialize` (and `server/discover`) goes to each server still there, and the
//! client gets one answer once each has answered or failed, merged: the union of the
//! capabilities, the protocol version every server accepted, each server's instructions
//! under its name. A server that fails the handshake is gone for the session; the others
//! serve on. Each server's part is an ordinary relayed request (its own id, time limit and
//! cancellation); only its answer comes here instead of to the client.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::endpoint::EndpointId;
use super::jsonrpc::{self, error_response, splice, Envelope, Members};
use super::machine::{Flight, Pending, ServerId, State, Step};

/// One gathered request: where its answer goes, and what each server said so far.
pub(crate) struct Gather {
    endpoint: EndpointId,
    client_id: Bytes,
    flight: String,
    method: Box<str>,
    /// The protocol version the client asked for, if it named one.
    asked_version: Option<String>,
    /// The relay's request to each server, by server.
    parts: Vec<(ServerId, u64)>,
    /// Each server's result, or why it has none.
    said: Vec<(ServerId, Result<Value, String>)>,
}

/// Whether `method` is gathered from every server when the gate fronts several.
pub(crate) fn is_gathered(method: &str) -> bool {
    matches!(method, "initialize" | "server/discover")
}

/// Sends the client's request (`message`, its id at `id_range`) to every server still there,
/// each under an id of the relay's, with the time limit `limit`.
pub(crate) fn start(
    step: &mut Step<'_>,
    client_id: Bytes,
    message: &[u8],
    id_range: std::ops::Range<usize>,
    method: &str,
    limit: Duration,
) {
    let key = step.state.flight_key(step.endpoint, &client_id);
    let gather = step.relay.next_id();
    let at = step.now + limit;
    let mut parts = Vec::new();
    let there: Vec<ServerId> = (0..step.state.servers)
        .filter(|s| step.state.gone(*s).is_none())
        .collect();
    for server in there {
        let upstream_id = step.relay.next_id();
        step.state.deadlines.insert((at, server, upstream_id));
        step.state.pending.insert(
            (server, upstream_id),
            Pending::Relayed {
                endpoint: step.endpoint,
                client_id: client_id.clone(),
                flight: key.clone(),
                tools_list: false,
                handshake: true,
                subscription: false,
                deadline: Some((at, limit)),
                method: method.into(),
                gather: Some(gather),
                paged: false,
            },
        );
        let relayed = splice(
            message,
            &mut [(id_range.clone(), upstream_id.to_string().as_bytes())],
        );
        step.upstream(server, Bytes::from(relayed));
        parts.push((server, upstream_id));
    }
    step.state.flights.insert(key.clone(), Flight::Gathered(gather));
    step.state.gathers.insert(
        gather,
        Gather {
            endpoint: step.endpoint,
            client_id,
            flight: key,
            method: method.into(),
            parts,
            said: Vec::new(),
            asked_version: asked_version(message),
        },
    );
    finish_if_complete(step, gather);
}

/// `server` answered its part of `gather` (its result, or why it has none).
pub(crate) fn said(step: &mut Step<'_>, gather: u64, server: ServerId, said: Result<Value, String>) {
    let Some(waiting) = step.state.gathers.get_mut(&gather) else {
        return;
    };
    if waiting.said.iter().any(|(s, _)| *s == server) {
        return;
    }
    waiting.said.push((server, said));
    finish_if_complete(step, gather);
}

/// The result of a server's answer to its part: the `result`, or its `error` as text.
pub(crate) fn read_answer(
    message: &[u8],
    body: &Result<std::ops::Range<usize>, std::ops::Range<usize>>,
) -> Result<Value, String> {
    match body {
        Ok(result) => serde_json::from_slice(&message[result.clone()])
            .map_err(|e| format!("its answer cannot be read ({e})")),
        Err(error) => Err(format!(
            "it answered with an error: {}",
            String::from_utf8_lossy(&message[error.clone()])
        )),
    }
}

/// Answers the client once every server has answered or failed; a server that failed is
/// gone for the session.
fn finish_if_complete(step: &mut Step<'_>, gather: u64) {
    let complete = step
        .state
        .gathers
        .get(&gather)
        .is_some_and(|g| g.said.len() >= g.parts.len());
    if !complete {
        return;
    }
    let Some(done) = step.state.gathers.remove(&gather) else {
        return;
    };
    step.state.flights.remove(&done.flight);
    let product = step.relay.config.product.clone();
    let mut answered = Vec::new();
    let mut failed = Vec::new();
    for (server, said) in done.said {
        match said.and_then(|result| acceptable(result, done.asked_version.as_deref())) {
            Ok(result) => {
                step.state.offered[server] = Some(capabilities(&result));
                answered.push((server, result))
            }
            Err(why) => failed.push((server, why)),
        }
    }
    answered.sort_by_key(|(server, _)| *server);
    for (server, why) in &failed {
        let name = step.state.server_name(*server);
        let reason = format!("the server did not complete {}: {why}", done.method);
        tracing::warn!(target: "aml_mcp::relay", server = %name, "{reason}");
        step.upstream_gone(*server, reason);
    }
    if answered.is_empty() {
        // Each server's failure, the ones gone before this handshake too.
        let message = format!(
            "{product}: no server completed {} ({})",
            done.method,
            step.state.gone_why()
        );
        let answer = error_response(Some(&done.client_id), jsonrpc::UPSTREAM_GONE, &message, None);
        step.answer_at(done.endpoint, answer);
        return step.fail(message);
    }
    let named: Vec<(String, Value)> = answered
        .into_iter()
        .map(|(server, result)| (step.state.server_name(server), result))
        .collect();
    let result = merge(&product, named).to_string();
    // The client's id, as it wrote it.
    let mut answer = b"{\"jsonrpc\":\"2.0\",\"id\":".to_vec();
    answer.extend_from_slice(&done.client_id);
    answer.extend_from_slice(b",\"result\":");
    answer.extend_from_slice(result.as_bytes());
    answer.push(b'}');
    step.answer_at(done.endpoint, Bytes::from(answer));
}

/// The MCP versions a server may answer with besides the client's own (older ones).
const KNOWN_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// `params.protocolVersion` of the client's handshake.
fn asked_version(message: &[u8]) -> Option<String> {
    let params = Members::parse(Envelope::parse(message).ok()?.params?).ok()?;
    serde_json::from_str(params.get("protocolVersion")?.get()).ok()
}

/// A server's handshake result, unless it answered a protocol version the client cannot
/// speak: one that is neither the client's nor a known MCP version older than it. (The
/// merged answer gives the client the oldest version answered, so one bogus version would
/// cost it every server.)
fn acceptable(result: Value, asked: Option<&str>) -> Result<Value, String> {
    let Some(version) = result.get("protocolVersion").and_then(Value::as_str) else {
        return Ok(result);
    };
    let known = KNOWN_VERSIONS.contains(&version) && asked.is_none_or(|asked| version <= asked);
    if Some(version) == asked || known {
        return Ok(result);
    }
    Err(format!(
        "it answered protocol version {version:?}, which the client did not ask for and MCP does not know"
    ))
}

/// The capabilities a handshake result names.
fn capabilities(result: &Value) -> Vec<String> {
    result
        .get("capabilities")
        .and_then(Value::as_object)
        .map(|c| c.keys().cloned().collect())
        .unwrap_or_default()
}

/// One result from every server's: the first server's members, with the union of the
/// capabilities (a `listChanged` true if any server's is, and always for tools: a server
/// that goes takes its tools), the protocol version every server answered (the client's,
/// when each accepted it; else the oldest one answered), the gate as the server, and each
/// server's instructions under its name.
fn merge(product: &str, answered: Vec<(String, Value)>) -> Value {
    let mut merged = Map::new();
    let mut capabilities = Value::Object(Map::new());
    let mut versions = Vec::new();
    let mut instructions = Vec::new();
    for (name, result) in answered {
        let Value::Object(mut result) = result else {
            continue;
        };
        if let Some(found) = result.remove("capabilities") {
            union(&mut capabilities, found);
        }
        if let Some(Value::String(version)) = result.remove("protocolVersion") {
            versions.push(version);
        }
        if let Some(Value::String(text)) = result.remove("instructions") {
            instructions.push(format!("[{name}] {text}"));
        }
        result.remove("serverInfo");
        for (key, value) in result {
            merged.entry(key).or_insert(value);
        }
    }
    without_task_calls(&mut capabilities);
    if let Some(tools) = capabilities.get_mut("tools").and_then(Value::as_object_mut) {
        tools.insert("listChanged".into(), Value::Bool(true));
    }
    merged.insert("capabilities".into(), capabilities);
    // Versions are dates: the oldest sorts first, and is the one every server answered when
    // they agree.
    if let Some(version) = versions.iter().min().cloned() {
        merged.insert("protocolVersion".into(), Value::String(version));
    }
    merged.insert(
        "serverInfo".into(),
        serde_json::json!({"name": product, "version": env!("CARGO_PKG_VERSION")}),
    );
    if !instructions.is_empty() {
        merged.insert("instructions".into(), Value::String(instructions.join("\n\n")));
    }
    Value::Object(merged)
}

/// `into` with `from`'s members added: objects merged member by member, `true` over `false`,
/// else the first value kept.
fn union(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                match into.get_mut(&key) {
                    Some(kept) => union(kept, value),
                    None => {
                        into.insert(key, value);
                    }
                }
            }
        }
        (Value::Bool(kept), Value::Bool(other)) => *kept |= other,
        _ => {}
    }
}

/// Task-augmented tool calls are not relayed (ADR 013): the merged capabilities do not
/// offer them, as the single-server handshake does not.
fn without_task_calls(capabilities: &mut Value) {
    if let Some(tools) = capabilities
        .pointer_mut("/tasks/requests/tools")
        .and_then(Value::as_object_mut)
    {
        tools.remove("call");
    }
}

/// The client cancelled (or its endpoint closed) `gather`: no answer is owed; returns each
/// server's part still open, to tell it.
pub(crate) fn cancel(state: &mut State, gather: u64) -> Vec<(ServerId, u64)> {
    let Some(done) = state.gathers.remove(&gather) else {
        return Vec::new();
    };
    let mut open = Vec::new();
    for (server, id) in done.parts {
        if state.take_pending(server, id).is_some() {
            state.pending.insert((server, id), Pending::Cancelled);
            open.push((server, id));
        }
    }
    open
}

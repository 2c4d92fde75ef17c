//! One 2026-07-28 POST: the checks the transport specification asks of a server that reads
//! the body (one message; the `_meta` envelope; `MCP-Protocol-Version`, `Mcp-Method` and
//! `Mcp-Name` equal to what the body says), then the request goes to the caller's stateless
//! relay on an endpoint of its own, and its answer comes back on this POST.

use std::net::SocketAddr;
use std::sync::Arc;

use aml_mcp::relay::{
    jsonrpc, ToEndpoint, TransportTrace, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, UPSTREAM_GONE,
};
use bytes::Bytes;
use hyper::header::HeaderMap;
use hyper::{Response, StatusCode};
use serde_json::value::RawValue;

use super::handler::{json_reply, refuse, refuse_code, sse_reply, Reply, UNSUPPORTED_PROTOCOL_VERSION};
use super::stateless::{Asked, Refused, Stateless};
use super::Shared;
use crate::body::Body;
use crate::envelope::{decode_header_value, ClientMessage, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
use crate::{message, param_headers, sse};

/// JSON-RPC code for headers that disagree with the body (2026-07-28).
pub(crate) const HEADER_MISMATCH: i64 = -32020;
const METHOD_NOT_FOUND: i64 = -32601;
/// 2026-07-28's code for a request that needs a client capability it did not declare.
const MISSING_CLIENT_CAPABILITY: i64 = -32021;

/// What the stateless path needs from the request's headers (read before the body).
#[derive(Debug)]
pub(super) struct Routing {
    version: String,
    session: bool,
    method: Option<String>,
    name: Option<String>,
    /// A routing header sent more than once (readers could take different copies).
    duplicated: Option<&'static str>,
    /// The `Mcp-Param-*` headers sent.
    params: HeaderMap,
}

impl Routing {
    /// The routing headers of a request whose `MCP-Protocol-Version` is `version`.
    pub(super) fn of(headers: &HeaderMap, version: &str) -> Routing {
        let one = |name: &'static str| {
            let mut values = headers.get_all(name).iter();
            let first = values
                .next()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            (first, values.next().is_some())
        };
        // `MCP-Protocol-Version` named twice is refused before (the `McpPath` layer).
        let (method, method_twice) = one("mcp-method");
        let (name, name_twice) = one("mcp-name");
        let duplicated = [("Mcp-Method", method_twice), ("Mcp-Name", name_twice)]
            .into_iter()
            .find(|(_, twice)| *twice)
            .map(|(n, _)| n);
        let mut params = HeaderMap::new();
        for (key, value) in headers {
            if key.as_str().starts_with("mcp-param-") {
                params.append(key.clone(), value.clone());
            }
        }
        Routing {
            version: version.to_owned(),
            session: headers.contains_key("mcp-session-id"),
            method,
            name,
            duplicated,
            params,
        }
    }
}

fn bad(id: Option<&str>, code: i64, why: &str) -> Reply {
    refuse_code(StatusCode::BAD_REQUEST, id, code, why)
}

/// How many 2026-07-28 relays may be open: the session limit, less the sessions open.
fn links_allowed(shared: &Shared) -> usize {
    let sessions = shared.sessions.lock().unwrap_or_else(|e| e.into_inner()).len();
    shared.config.max_sessions.saturating_sub(sessions)
}

/// Serves one stateless POST whose body has been read (and fits the size limit).
pub(super) async fn post(
    shared: &Shared,
    peer: SocketAddr,
    caller: Option<String>,
    routing: Routing,
    body: Bytes,
    (wants_sse, wants_json): (bool, bool),
    trace: Option<TransportTrace>,
) -> Reply {
    if routing.session {
        return bad(
            None,
            INVALID_REQUEST,
            "Mcp-Session-Id is not part of protocol 2026-07-28: sessions belong to the initialize handshake; send 2026-07-28 requests without one",
        );
    }
    if let Some(header) = routing.duplicated {
        return bad(
            None,
            HEADER_MISMATCH,
            &format!("the {header} header appears more than once"),
        );
    }
    let Ok(text) = std::str::from_utf8(&body) else {
        return bad(None, PARSE_ERROR, "the body is not UTF-8");
    };
    if text.trim_start().starts_with('[') {
        return bad(
            None,
            INVALID_REQUEST,
            "a 2026-07-28 POST carries one JSON-RPC request or notification, not a batch",
        );
    }
    if serde_json::from_str::<&RawValue>(text).is_err() {
        return bad(None, PARSE_ERROR, "the body is not JSON");
    }
    let read = match ClientMessage::read(text) {
        Ok(read) => read,
        Err(why) => return bad(None, INVALID_REQUEST, &format!("not a JSON-RPC message: {why}")),
    };
    let Some(method) = read.method.clone() else {
        return bad(
            None,
            INVALID_REQUEST,
            "a 2026-07-28 client sends requests and notifications only, never responses",
        );
    };
    let Some(id_range) = read.id.clone() else {
        // 2026-07-28 defines no client notifications over HTTP (closing the stream cancels):
        // acknowledged, as the specification allows, and not passed on. A request sent
        // without an id goes to the relay, which drops it too but logs and records it.
        if !aml_mcp::relay::is_notification_method(&method) {
            // With every caller's relay busy, it is dropped here instead: nothing to answer.
            if let Ok((link, announce)) = shared.stateless.link(peer, &caller, links_allowed(shared)) {
                let announced = match announce {
                    Some(new) => shared.new_sessions.send(new).await.is_ok(),
                    None => true,
                };
                if announced {
                    link.tell(super::trace::inbound(message::one_line(&body), trace.as_ref()))
                        .await;
                }
            }
        }
        tracing::debug!(target: "aml_mcp_http", %peer, %method, "a stateless notification; acknowledged and dropped");
        let mut reply = Response::new(Body::empty());
        *reply.status_mut() = StatusCode::ACCEPTED;
        return reply;
    };
    let id = &text[id_range.clone()];
    let id_is_valid = serde_json::from_str::<&RawValue>(id).is_ok_and(|id| jsonrpc::id_key(id).is_some());
    if !id_is_valid {
        // MCP ids are strings or integers (of any size, as the relay keys them on every
        // transport); null is no id.
        return bad(
            None,
            INVALID_REQUEST,
            "a request id must be a string or an integer",
        );
    }
    if let Err(reply) = check_envelope(&routing, &read, &method, id) {
        return *reply;
    }
    if let Err(why) = check_param_headers(shared, &routing, &read, &method, &body) {
        return bad(Some(id), HEADER_MISMATCH, &why);
    }
    if method == "initialize" {
        // The handshake would fix the shared server's era for every stateless client.
        return bad(
            Some(id),
            INVALID_REQUEST,
            "initialize belongs to the handshake era: send it without the 2026-07-28 MCP-Protocol-Version header to open a session",
        );
    }
    if method == "subscriptions/listen" && !wants_sse {
        // Its notifications come on the request's stream: a JSON body has none.
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            Some(id),
            "subscriptions/listen answers with a stream: Accept must list text/event-stream",
        );
    }
    if !wants_sse && !wants_json {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            Some(id),
            "Accept must list application/json or text/event-stream",
        );
    }
    let Ok((link, announce)) = shared.stateless.link(peer, &caller, links_allowed(shared)) else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            Some(id),
            "every caller's 2026-07-28 relay is busy (the gate's session limit): try again later",
        );
    };
    if let Some(new) = announce {
        if shared.new_sessions.send(new).await.is_err() {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                Some(id),
                "the gate is shutting down",
            );
        }
    }
    let request = super::trace::inbound(message::one_line(&body), trace.as_ref());
    let asked = match link
        .ask(request, wants_sse, shared.config.max_stateless_calls)
        .await
    {
        Ok(asked) => asked,
        Err(Refused::Full) => {
            return refuse(
                StatusCode::TOO_MANY_REQUESTS,
                Some(id),
                &format!(
                    "{} stateless requests are already waiting for an answer (the limit): try again later",
                    shared.config.max_stateless_calls
                ),
            )
        }
        Err(Refused::Closed) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                Some(id),
                "the gate's connection to the server has ended: try again",
            )
        }
    };
    // A tool listing teaches the front what each tool declares as `Mcp-Param-*` headers.
    let learns = (method == "tools/list").then(|| shared.stateless.clone());
    let Asked { mut rx, guard } = asked;
    if wants_sse {
        // Nothing is sent before the first message: an answer that comes first goes as
        // JSON, with the status its error code asks for (as for a JSON-only client), in one
        // write; the stream starts with a notification, or when a keep-alive would be due.
        let keep_alive = shared.config.sse_keep_alive;
        let first = match keep_alive {
            Some(wait) => tokio::time::timeout(wait, rx.recv()).await.ok(),
            None => Some(rx.recv().await),
        };
        let first = match first {
            Some(Some(ToEndpoint::Answer(answer))) => {
                if let Some(stateless) = &learns {
                    stateless.param_headers.learn(&answer);
                }
                return json_reply(status_of(&answer), answer);
            }
            Some(None) => return json_reply(StatusCode::OK, upstream_ended(id)),
            Some(Some(ToEndpoint::Notification(note))) => Some(note),
            None => None,
        };
        let (chunks, body) = tokio::sync::mpsc::channel(1);
        tokio::spawn(stream_answer(first, rx, chunks, id.to_owned(), learns));
        let guard = Box::new(guard);
        return sse_reply(Body::watched_sse(body, keep_alive, guard));
    }
    // The guard lives as long as this future: hyper drops it if the client goes away.
    let _guard = guard;
    let answer = answer_of(rx, None, id, learns.as_deref()).await;
    json_reply(status_of(&answer), answer)
}

/// The answer on an endpoint (each notification before it passed to `stream`, if any), or
/// an error answer when the relay ended without one.
async fn answer_of(
    mut rx: tokio::sync::mpsc::Receiver<ToEndpoint>,
    stream: Option<&tokio::sync::mpsc::Sender<Bytes>>,
    id: &str,
    learns: Option<&Stateless>,
) -> Bytes {
    while let Some(next) = rx.recv().await {
        match next {
            ToEndpoint::Answer(answer) => {
                if let Some(stateless) = learns {
                    stateless.param_headers.learn(&answer);
                }
                return answer;
            }
            ToEndpoint::Notification(note) => {
                // A client too slow to read its progress loses some, never its answer.
                if let Some(stream) = stream {
                    let _ = stream.try_send(sse::message_event(&note));
                }
            }
        }
    }
    upstream_ended(id)
}

/// The error answer for a request whose relay ended before the server answered it.
fn upstream_ended(id: &str) -> Bytes {
    let why = "the gate's connection to the server ended before the server answered";
    message::error(Some(id), UPSTREAM_GONE, why)
}

/// Carries an endpoint's notifications (`first` already read) and then its answer as SSE
/// events.
async fn stream_answer(
    first: Option<Bytes>,
    rx: tokio::sync::mpsc::Receiver<ToEndpoint>,
    chunks: tokio::sync::mpsc::Sender<Bytes>,
    id: String,
    learns: Option<Arc<Stateless>>,
) {
    if let Some(note) = first {
        let _ = chunks.send(sse::message_event(&note)).await;
    }
    let answer = answer_of(rx, Some(&chunks), &id, learns.as_deref()).await;
    // A client that stopped reading has dropped its stream, and this fails at once.
    let _ = chunks.send(sse::message_event(&answer)).await;
}

/// The HTTP status of a JSON answer, by its JSON-RPC error code as 2026-07-28 asks (`404`
/// for an unknown method, `400` for a request the server found malformed); `200` otherwise.
fn status_of(answer: &[u8]) -> StatusCode {
    #[derive(serde::Deserialize)]
    struct Answer {
        error: Option<Error>,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        code: i64,
    }
    let code = serde_json::from_slice::<Answer>(answer)
        .ok()
        .and_then(|a| a.error)
        .map(|e| e.code);
    match code {
        Some(METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(PARSE_ERROR | INVALID_REQUEST | INVALID_PARAMS | HEADER_MISMATCH) => StatusCode::BAD_REQUEST,
        Some(MISSING_CLIENT_CAPABILITY | UNSUPPORTED_PROTOCOL_VERSION) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// A `tools/call`'s `Mcp-Param-*` headers against its arguments, for a tool whose listing
/// (carried by this front) declares some; `Err` says how they disagree. A tool no listing has
/// named is not checked: the front cannot know what it declares.
fn check_param_headers(
    shared: &Shared,
    routing: &Routing,
    read: &ClientMessage,
    method: &str,
    body: &[u8],
) -> Result<(), String> {
    if method != "tools/call" {
        return Ok(());
    }
    let Some(declared) = read
        .name
        .as_deref()
        .and_then(|tool| shared.stateless.param_headers.of(tool))
    else {
        return Ok(());
    };
    param_headers::check(&declared, &param_headers::arguments_of(body), &routing.params)
}

/// The per-request envelope and the headers that must repeat it; `Err` is the `400`.
fn check_envelope(routing: &Routing, read: &ClientMessage, method: &str, id: &str) -> Result<(), Box<Reply>> {
    let fail = |code, why: String| Err(Box::new(bad(Some(id), code, &why)));
    match &read.meta_version {
        None => {
            return fail(
                INVALID_PARAMS,
                format!("params._meta must carry {META_PROTOCOL_VERSION:?} and the client's capabilities"),
            )
        }
        Some(None) => return fail(INVALID_PARAMS, format!("{META_PROTOCOL_VERSION:?} must be a string")),
        Some(Some(v)) if *v != routing.version => {
            return fail(
                HEADER_MISMATCH,
                format!(
                    "the MCP-Protocol-Version header {:?} does not match the request's {META_PROTOCOL_VERSION:?} {v:?}",
                    routing.version
                ),
            )
        }
        Some(Some(_)) => {}
    }
    if !read.has_capabilities {
        return fail(
            INVALID_PARAMS,
            format!("params._meta must carry the client's capabilities as an object ({META_CLIENT_CAPABILITIES:?})"),
        );
    }
    if routing.method.as_deref() != Some(method) {
        return fail(
            HEADER_MISMATCH,
            format!("the Mcp-Method header must be present and equal the request's method {method:?}"),
        );
    }
    if let Some(name) = &read.name {
        let sent = routing.name.as_deref().map(decode_header_value);
        if sent != Some(Some(name.clone())) {
            return fail(
                HEADER_MISMATCH,
                format!("the Mcp-Name header must be present and equal the request's name {name:?}"),
            );
        }
    }
    Ok(())
}

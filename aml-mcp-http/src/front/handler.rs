//! The front's handlers, behind the checks of `layers.rs`: POST, GET and DELETE per the
//! Streamable HTTP transport.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use aml_mcp::relay::{TransportTrace, INVALID_REQUEST, PARSE_ERROR, STANDING};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::mpsc;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

use super::connections::Slot;
use super::layers::{
    Answer, Asked, Authenticate, Authenticated, CheckLayer, Era, McpPath, PublicPaths, ReadBody, SameOrigin,
};
use super::session::{handshake_failed, PostStream, Refused, Session};
use super::stateless_post::{self, Routing};
use super::{SessionInfo, Shared};
use crate::auth::Client;
use crate::body::Body;
use crate::message::{self, Peek};
use crate::PROTOCOL_VERSIONS;

const SESSION_HEADER: &str = "mcp-session-id";
pub(super) const VERSION_HEADER: &str = "mcp-protocol-version";
/// JSON-RPC code for requests the transport refuses (limits, sessions, authentication).
const TRANSPORT_ERROR: i64 = -32000;
/// JSON-RPC code for a protocol revision the front does not speak (2026-07-28's
/// `UnsupportedProtocolVersionError`, which names the ones it does).
pub(super) const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

pub(super) type Reply = Response<Body>;

/// The front's service for one connection: the checks of `layers.rs`, outermost first, then
/// a handler per method.
pub(super) fn service(
    shared: Arc<Shared>,
    peer: SocketAddr,
    connection: Arc<Slot>,
) -> impl Service<Asked, Response = Reply, Error = Infallible, Future = Answer> + Clone {
    let handlers = {
        let shared = shared.clone();
        tower::service_fn(move |request| by_method(shared.clone(), peer, request))
    };
    ServiceBuilder::new()
        .layer(CheckLayer(SameOrigin {
            shared: shared.clone(),
            peer,
        }))
        .layer(CheckLayer(PublicPaths {
            shared: shared.clone(),
        }))
        .layer(CheckLayer(Authenticate {
            shared: shared.clone(),
            peer,
            connection,
        }))
        .layer(CheckLayer(McpPath { shared }))
        .service(handlers)
}

async fn by_method(shared: Arc<Shared>, peer: SocketAddr, request: Asked) -> Result<Reply, Infallible> {
    let (who, era) = match passed(&request) {
        Ok(passed) => passed,
        Err(reply) => return Ok(*reply),
    };
    Ok(match *request.method() {
        Method::POST => {
            let check = ReadBody {
                shared: shared.clone(),
                peer,
            };
            let post =
                tower::service_fn(move |request| post(shared.clone(), peer, (who.clone(), era), request));
            return CheckLayer(check).layer(post).oneshot(request).await;
        }
        Method::GET => get(&shared, &who.client, &request),
        Method::DELETE => delete(&shared, &who.client, &request),
        _ => {
            let mut reply = refuse(StatusCode::METHOD_NOT_ALLOWED, None, "use POST, GET or DELETE");
            reply
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
            reply
        }
    })
}

/// What the checks learned of a request that passed them.
fn passed(request: &Asked) -> Result<(Authenticated, Era), Box<Reply>> {
    let who = request.extensions().get::<Authenticated>().cloned();
    let era = request.extensions().get::<Era>().copied();
    who.zip(era).ok_or_else(|| {
        // Only a request that passed the checks reaches a handler; fail closed if not.
        tracing::error!(target: "aml_mcp_http", "a request reached a handler without its checks");
        let why = "the request was not checked";
        Box::new(refuse(StatusCode::INTERNAL_SERVER_ERROR, None, why))
    })
}

/// An HTTP error with a JSON-RPC error body.
pub(super) fn refuse(status: StatusCode, id: Option<&str>, why: &str) -> Reply {
    let code = match status {
        StatusCode::BAD_REQUEST => INVALID_REQUEST,
        _ => TRANSPORT_ERROR,
    };
    refuse_code(status, id, code, why)
}

/// An HTTP error with a JSON-RPC error body of the given code.
pub(super) fn refuse_code(status: StatusCode, id: Option<&str>, code: i64, why: &str) -> Reply {
    json_reply(status, message::error(id, code, why))
}

/// `400` for a protocol revision the front does not speak, naming those it does (a
/// 2026-07-28 client that supports an older one falls back to it).
pub(super) fn unsupported_version(version: &HeaderValue) -> Reply {
    let requested = String::from_utf8_lossy(version.as_bytes());
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": UNSUPPORTED_PROTOCOL_VERSION,
            "message": format!("unsupported MCP-Protocol-Version {requested:?}; this front speaks {}", PROTOCOL_VERSIONS.join(", ")),
            "data": {"supported": PROTOCOL_VERSIONS, "requested": requested},
        }
    });
    json_reply(StatusCode::BAD_REQUEST, Bytes::from(body.to_string()))
}

pub(super) fn json_reply(status: StatusCode, body: Bytes) -> Reply {
    let mut reply = Response::new(Body::from(body));
    *reply.status_mut() = status;
    reply
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    reply
}

fn accepts(headers: &HeaderMap, kind: &str) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| {
            let v = v.split(';').next().unwrap_or("").trim();
            v.eq_ignore_ascii_case(kind) || v == "*/*"
        })
}

/// The session a request names: `Err` is the status and reason to refuse with (`400` without
/// the header or with two, `404` for a session that does not exist, has ended, or was opened
/// with another token: a token's holder learns nothing about other tokens' sessions, not even
/// that one exists).
fn session_of(shared: &Shared, client: &Client, headers: &HeaderMap) -> Result<Arc<Session>, NoSession> {
    let mut named = headers.get_all(SESSION_HEADER).iter();
    let (Some(id), None) = (named.next(), named.next()) else {
        let why = match headers.contains_key(SESSION_HEADER) {
            true => "Mcp-Session-Id appears more than once: name one session",
            false => "no Mcp-Session-Id: send initialize first",
        };
        return Err((StatusCode::BAD_REQUEST, why));
    };
    let found = id
        .to_str()
        .ok()
        .and_then(|id| {
            shared
                .sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(id)
                .cloned()
        })
        .filter(|s| !s.is_closed())
        .filter(|s| match &s.client {
            // Without tokens, addresses do not own sessions: one client may reach a
            // loopback front over 127.0.0.1 and ::1 alike.
            Client::Address(_) => true,
            owner if owner != client => {
                tracing::warn!(target: "aml_mcp_http", %client, "refused: {} belongs to {} (answered 404)", s.name, s.client);
                false
            }
            _ => true,
        });
    found.ok_or((
        StatusCode::NOT_FOUND,
        "no such session (it ended or timed out): initialize a new one",
    ))
}

/// Why a request names no session it may use: the status and the reason.
type NoSession = (StatusCode, &'static str);

/// A POST whose body has been read: a 2026-07-28 request, or messages for a session
/// (opened here by an `initialize`).
async fn post(
    shared: Arc<Shared>,
    peer: SocketAddr,
    (who, era): (Authenticated, Era),
    request: Request<Bytes>,
) -> Result<Reply, Infallible> {
    let (head, body) = request.into_parts();
    let headers = &head.headers;
    let asked = (
        accepts(headers, "text/event-stream"),
        accepts(headers, "application/json") || !headers.contains_key(header::ACCEPT),
    );
    let trace = super::trace::of(headers);
    let shared = &shared;
    if let Some(refused) = super::authorize::tool_scopes_refusal(shared, peer, who.granted.as_deref(), &body)
    {
        return Ok(refused);
    }
    if era.stateless {
        let version = headers.get(VERSION_HEADER).map(HeaderValue::as_bytes);
        let routing = Routing::of(headers, &String::from_utf8_lossy(version.unwrap_or_default()));
        let caller = caller_of(shared, &who.client);
        return Ok(stateless_post::post(shared, peer, caller, routing, body, asked, trace).await);
    }
    if body.trim_ascii_start().first() == Some(&b'[') && !takes_batches(headers.get(VERSION_HEADER)) {
        let messages = message::split(&body).unwrap_or_default();
        let why = "JSON-RPC batches were removed in MCP 2025-06-18: send each message in its own POST";
        return Ok(refuse_all(shared, &who.client, &messages, why));
    }
    let named = session_of(shared, &who.client, headers);
    Ok(post_in_session(shared, peer, &who.client, named, asked, body, trace).await)
}

/// `400` for a whole POST of `messages`, each `tools/call` among them reported to the host's
/// record ([`crate::RefusedCalls`]): nothing of it is sent.
fn refuse_all(shared: &Shared, client: &Client, messages: &[Bytes], why: &str) -> Reply {
    refuse_all_with(shared, client, messages, StatusCode::BAD_REQUEST, why)
}

/// [`refuse_all`] with another status (`404` for a session that is gone).
fn refuse_all_with(
    shared: &Shared,
    client: &Client,
    messages: &[Bytes],
    status: StatusCode,
    why: &str,
) -> Reply {
    if let Some(refused) = &shared.config.refused_calls {
        let caller = caller_of(shared, client);
        for tool in messages.iter().filter_map(|m| Peek::of(m)?.tool) {
            refused.report(caller.as_deref(), &tool, why);
        }
    }
    refuse(status, None, why)
}

/// Reports each `tools/call` among `messages` that cannot be read (a POST refused as not
/// JSON-RPC) to the host's record, under the tool it names if that can be read.
fn report_unreadable_calls(shared: &Shared, client: &Client, messages: &[Bytes], why: &str) {
    if let Some(refused) = &shared.config.refused_calls {
        let caller = caller_of(shared, client);
        for tool in messages.iter().filter_map(|m| Peek::unreadable_call(m)) {
            refused.report(caller.as_deref(), &tool, why);
        }
    }
}

/// Whether the revision a session-era request names still has JSON-RPC batches: 2025-03-26
/// and older (a request without the header is taken as 2025-03-26, as the spec says).
fn takes_batches(version: Option<&HeaderValue>) -> bool {
    // The revisions are ISO dates, so they order as text.
    version.is_none_or(|v| v.as_bytes() < b"2025-06-18".as_slice())
}

/// A POST of the session-era protocol: one message or a batch.
async fn post_in_session(
    shared: &Shared,
    peer: SocketAddr,
    client: &Client,
    named: Result<Arc<Session>, NoSession>,
    (wants_sse, wants_json): (bool, bool),
    body: Bytes,
    trace: Option<TransportTrace>,
) -> Reply {
    let messages = match message::split(&body) {
        Ok(messages) => messages,
        Err(why) => return json_reply(StatusCode::BAD_REQUEST, message::error(None, PARSE_ERROR, why)),
    };
    let batch = body.trim_ascii_start().first() == Some(&b'[');
    let mut peeks = Vec::with_capacity(messages.len());
    for m in &messages {
        match Peek::of(m) {
            // Answered here: the relay's answer to it could name no request of this POST.
            Some(p) if p.bad_id && p.method.is_some() => {
                return refuse_all(
                    shared,
                    client,
                    &messages,
                    "a request id must be a string or an integer",
                )
            }
            Some(p) if p.method.is_some() || p.id.is_some() => peeks.push(p),
            _ => {
                let why = "not a JSON-RPC request, notification or response";
                report_unreadable_calls(shared, client, &messages, why);
                return refuse(StatusCode::BAD_REQUEST, None, why);
            }
        }
    }
    if let Some(id) = repeated_request_id(&peeks) {
        // Both answers would carry the id: the client could not tell them apart.
        let why = format!("the batch has two requests with the id {id}: ids in a batch must differ");
        return refuse_all(shared, client, &messages, &why);
    }
    let initialize = peeks
        .iter()
        .any(|p| p.is_request() && p.method.as_deref() == Some("initialize"));
    let session = if initialize {
        if batch {
            return refuse_all(
                shared,
                client,
                &messages,
                "initialize must be sent alone, not in a batch",
            );
        }
        match open_session(shared, peer, client, peeks[0].id.as_deref()).await {
            Ok(session) => session,
            Err(reply) => return *reply,
        }
    } else {
        match named {
            Ok(session) => session,
            Err((status, why)) => return refuse_all_with(shared, client, &messages, status, why),
        }
    };
    let asks: Vec<bool> = peeks.iter().map(Peek::is_request).collect();
    // Requests the client cancels: no answer comes for them (MCP), so no POST waits for one.
    let cancels: Vec<String> = peeks
        .iter()
        .zip(&messages)
        .filter(|(p, _)| p.method.as_deref() == Some("notifications/cancelled"))
        .filter_map(|(_, m)| Peek::cancelled_request(m))
        .collect();
    let requests: Vec<Peek> = peeks.into_iter().filter(Peek::is_request).collect();
    if requests.is_empty() {
        let messages = messages.into_iter().map(|m| (STANDING, m)).collect();
        if !session.send(None, messages, trace.as_ref()).await {
            return refuse(StatusCode::NOT_FOUND, None, "the session has ended");
        }
        cancels.iter().for_each(|id| session.cancelled(id));
        return accepted();
    }
    let first = requests[0].id.clone();
    if !wants_sse && !wants_json {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            first.as_deref(),
            "Accept must list application/json or text/event-stream",
        );
    }
    // An initialize is answered as JSON whenever the client takes it: the answer is then in
    // hand before the headers, and a refused one names no session (ADR 015).
    let as_json = !wants_sse || (initialize && wants_json);
    let PostStream {
        endpoint,
        rx,
        from_relay,
        open,
    } = match session.open_post(&requests, as_json, shared.config.max_calls_per_session) {
        Ok(stream) => stream,
        Err(Refused::Closed) => {
            return refuse(StatusCode::NOT_FOUND, first.as_deref(), "the session has ended")
        }
        Err(Refused::TooManyCalls) => {
            return refuse(
                StatusCode::TOO_MANY_REQUESTS,
                first.as_deref(),
                &format!(
                    "this session already has {} requests waiting for an answer (the limit)",
                    shared.config.max_calls_per_session
                ),
            )
        }
    };
    let init = first.clone().filter(|_| initialize);
    tokio::spawn(Arc::clone(&session).pump(endpoint, from_relay, init));
    // Its requests come from its endpoint, the rest from the standing one: whatever the
    // relay answers them with (an error, for a malformed one) is not one of its answers.
    let from = |asks: bool| if asks { endpoint } else { STANDING };
    let messages = asks.into_iter().map(from).zip(messages).collect();
    if !session.send(Some(open), messages, trace.as_ref()).await {
        return refuse(StatusCode::NOT_FOUND, first.as_deref(), "the session has ended");
    }
    cancels.iter().for_each(|id| session.cancelled(id));
    if as_json {
        let answer = collect(rx, batch).await;
        if answer.is_empty() {
            // Every request of it was cancelled: nothing to answer.
            return accepted();
        }
        let refused =
            initialize && first.as_deref().and_then(|init| handshake_failed(&answer, init)) == Some(true);
        let mut reply = json_reply(StatusCode::OK, answer);
        if initialize && !refused {
            if let Ok(value) = HeaderValue::from_str(&session.id) {
                reply.headers_mut().insert(SESSION_HEADER, value);
            }
        }
        return reply;
    }
    let mut reply = sse_reply(Body::sse(rx, shared.config.sse_keep_alive));
    // An initialize whose client takes only SSE: the header goes before the answer is known.
    if initialize {
        if let Ok(value) = HeaderValue::from_str(&session.id) {
            reply.headers_mut().insert(SESSION_HEADER, value);
        }
    }
    reply
}

/// `202` without a body: nothing to answer.
fn accepted() -> Reply {
    let mut reply = Response::new(Body::empty());
    *reply.status_mut() = StatusCode::ACCEPTED;
    reply
}

/// The id of a request that another request of the same POST also has.
fn repeated_request_id(peeks: &[Peek]) -> Option<&str> {
    let mut seen = std::collections::HashSet::new();
    peeks
        .iter()
        .filter(|p| p.is_request())
        .filter_map(|p| p.id.as_deref())
        .find(|id| !seen.insert(*id))
}

/// The answers of a POST as one JSON body (an array for a batch); empty if there are none
/// (the client cancelled every request of it).
async fn collect(mut rx: mpsc::Receiver<Bytes>, batch: bool) -> Bytes {
    let mut answers = Vec::new();
    while let Some(answer) = rx.recv().await {
        answers.push(answer);
    }
    if answers.is_empty() {
        return Bytes::new();
    }
    if !batch && answers.len() == 1 {
        return answers.pop().unwrap_or_default();
    }
    let mut body = Vec::from(&b"["[..]);
    for (i, a) in answers.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(a);
    }
    body.push(b']');
    body.into()
}

/// The caller a client is: its static token's name, its JWT's subject, or none on a front
/// without tokens.
fn caller_of(shared: &Shared, client: &Client) -> Option<String> {
    match (client, &shared.config.tokens) {
        (Client::Token(id), Some(tokens)) => Some(tokens.name(*id).to_owned()),
        (Client::Subject(subject), _) => Some(subject.to_string()),
        _ => None,
    }
}

/// Starts a session for an `initialize`: `Err` is the reply when the front is full.
async fn open_session(
    shared: &Shared,
    peer: SocketAddr,
    client: &Client,
    id: Option<&str>,
) -> Result<Arc<Session>, Box<Reply>> {
    let mut token = [0u8; 16];
    if getrandom::fill(&mut token).is_err() {
        return Err(Box::new(refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            id,
            "no randomness for a session id",
        )));
    }
    let session_id: String = token.iter().map(|b| format!("{b:02x}")).collect();
    let (to_relay, events) = mpsc::channel(1024);
    let number = shared.opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let name = format!("session {number}");
    let (session, standing) = Session::new(
        session_id.clone(),
        name.clone(),
        client.clone(),
        to_relay,
        shared.config.replay_events,
    );
    let session = Arc::new(session);
    {
        let mut map = shared.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let quota = shared.config.max_sessions_per_client;
        let own = map.values().filter(|s| &s.client == client).count();
        if own >= quota {
            tracing::warn!(target: "aml_mcp_http", %peer, %client, "refused: {own} sessions open for this client (its quota)");
            return Err(Box::new(refuse(
                StatusCode::TOO_MANY_REQUESTS,
                id,
                &format!("this client ({client}) has {own} sessions open, its quota: end one (DELETE) or let one idle out"),
            )));
        }
        // 2026-07-28 relays have a server each too: they count toward the same limit.
        let open = map.len() + shared.stateless.open();
        if open >= shared.config.max_sessions {
            tracing::warn!(target: "aml_mcp_http", %peer, "refused: {open} sessions and 2026-07-28 relays open (the limit)");
            return Err(Box::new(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                &format!("{open} sessions are open, the limit: try again later"),
            )));
        }
        map.insert(session_id.clone(), session.clone());
    }
    let (ended, sessions) = (session.clone(), shared.sessions.clone());
    tokio::spawn(async move {
        // The standing stream's messages until the relay ends; then the session goes.
        Arc::clone(&ended).pump(STANDING, standing, None).await;
        let mut map = sessions.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&ended.id);
    });
    let info = SessionInfo {
        id: session_id,
        name,
        peer,
        stateless: false,
        caller: caller_of(shared, client),
    };
    let relay_client = aml_mcp::relay::Client::Session(events);
    if shared.new_sessions.send((relay_client, info)).await.is_err() {
        return Err(Box::new(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            "the gate is shutting down",
        )));
    }
    tracing::info!(target: "aml_mcp_http", %peer, %client, "{} opened", session.name);
    tracing::debug!(target: "aml_mcp_http", "{} is {}", session.name, session.id);
    Ok(session)
}

fn get(shared: &Shared, client: &Client, request: &Request<Incoming>) -> Reply {
    let session = match session_of(shared, client, request.headers()) {
        Ok(session) => session,
        Err((status, why)) => return refuse(status, None, why),
    };
    if !accepts(request.headers(), "text/event-stream") {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            None,
            "a GET stream needs Accept: text/event-stream",
        );
    }
    let last = request
        .headers()
        .get(header::HeaderName::from_static("last-event-id"))
        .and_then(|v| v.to_str().ok());
    let Some(rx) = session.open_get(last) else {
        return refuse(
            StatusCode::NOT_FOUND,
            None,
            "no stream to resume after that event id",
        );
    };
    sse_reply(Body::sse(rx, shared.config.sse_keep_alive))
}

/// A `200` whose body is an SSE stream, not to be cached or held back by a proxy.
pub(super) fn sse_reply(body: Body) -> Reply {
    let mut reply = Response::new(body);
    let headers = reply.headers_mut();
    let stream = HeaderValue::from_static("text/event-stream");
    headers.insert(header::CONTENT_TYPE, stream);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    reply
}

fn delete(shared: &Shared, client: &Client, request: &Request<Incoming>) -> Reply {
    let session = match session_of(shared, client, request.headers()) {
        Ok(session) => session,
        Err((status, why)) => return refuse(status, None, why),
    };
    shared
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&session.id);
    session.end(
        TRANSPORT_ERROR,
        "the client ended the session (DELETE) before the server answered; a call already sent may still run, and is recorded",
    );
    tracing::info!(target: "aml_mcp_http", "{} ended by the client", session.name);
    let mut reply = Response::new(Body::empty());
    *reply.status_mut() = StatusCode::NO_CONTENT;
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peeks(messages: &[&str]) -> Vec<Peek> {
        messages.iter().map(|m| Peek::of(m.as_bytes()).unwrap()).collect()
    }

    #[test]
    fn a_batch_repeating_a_request_id_is_found_and_ids_of_other_kinds_are_not() {
        let twice = peeks(&[
            r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":"7","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
        ]);
        assert_eq!(repeated_request_id(&twice), Some("7"));
        // `7` and `"7"` differ, and an answer to the server may share a request's id.
        let apart = peeks(&[
            r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":"7","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
        ]);
        assert_eq!(repeated_request_id(&apart), None);
    }
}

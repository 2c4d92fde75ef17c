//! The relay engine: one client session in front of one upstream connection. Routes each
//! message, maps request ids, keeps the time limits, and notices an upstream that is gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use aml_core::strict::{self, Limits};
use aml_core::{GateOutcome, Refusal};
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use super::answer::{filter_tools_list, relay_reply};
use super::call::{refuse_call, start_call};
use super::frame::Inbound;
use super::jsonrpc::{self, error_response, range_in, scan_id, splice, Envelope, Kind, Members};
use super::{Connection, RelayConfig, RelayTools, ServerRequestPolicy, Upstream};
use crate::ForwardError;

const PROBE_ID: &str = "\"aml-mcp-gate:probe\"";

/// How a relay session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelayEnd {
    /// The client went away (end of its input); calls in flight were drained.
    ClientClosed,
    /// The upstream server exited or closed its output.
    UpstreamGone(String),
    /// The upstream server did not complete the MCP handshake: it sent the client's
    /// `initialize` (or `server/discover`) back, or did not answer it in time.
    Handshake(String),
}

/// Why the upstream failed the startup check.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// It exited (or closed its output) before answering.
    #[error("the server exited before it answered the gate's ping ({0})")]
    Exited(String),
    /// It sent the gate's own request back.
    #[error("the server sent the gate's ping back instead of answering it: it does not speak MCP (JSON-RPC) on stdio")]
    Echo,
    /// No answer in time.
    #[error("the server did not answer the gate's ping within {0:?}: is it an MCP server on stdio?")]
    Timeout(Duration),
}

/// Checks that the upstream answers a JSON-RPC `ping` (which MCP allows before
/// `initialize`) within `limit`. Returns what else it sent meanwhile, to relay later.
///
/// Not for sessions a client drives from the start: a server may fix its protocol era
/// (handshake or 2026-07-28) on the first request it sees, so the probe would choose for the
/// client. [`run`] checks the handshake on the client's own first request instead; the probe
/// is for a gate started by hand, with no client yet.
pub async fn probe(upstream: &mut Upstream, limit: Duration) -> Result<Vec<Inbound>, ProbeError> {
    let ping = Bytes::from(format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{PROBE_ID},\"method\":\"ping\"}}"
    ));
    if upstream.connection.outgoing.send(ping).await.is_err() {
        return Err(ProbeError::Exited("its input is closed".into()));
    }
    let mut other = Vec::new();
    let deadline = Instant::now() + limit;
    loop {
        let next = tokio::select! {
            next = upstream.connection.incoming.recv() => next,
            status = &mut upstream.exited => return Err(ProbeError::Exited(status.unwrap_or_default())),
            _ = tokio::time::sleep_until(deadline) => return Err(ProbeError::Timeout(limit)),
        };
        let Some(inbound) = next else {
            return Err(ProbeError::Exited("it closed its output".into()));
        };
        if let Inbound::Message(bytes) = &inbound {
            if let Ok(env) = Envelope::parse(bytes) {
                if env.id.map(|id| id.get()) == Some(PROBE_ID) {
                    match env.kind() {
                        Ok(Kind::Response) => return Ok(other),
                        _ => return Err(ProbeError::Echo),
                    }
                }
            }
        }
        other.push(inbound);
    }
}

/// What waits for an answer from the upstream, by the id the relay gave the request.
pub(crate) enum Pending {
    /// A client request relayed as is.
    Relayed {
        client_id: Bytes,
        flight: String,
        tools_list: bool,
        timer: AbortHandle,
    },
    /// A gated `tools/call`: its task takes the answer.
    Call {
        reply: oneshot::Sender<Result<Reply, ForwardError>>,
    },
    /// Cancelled or timed out: a late answer is dropped.
    Cancelled,
}

/// The server's answer to a forwarded call, with where its members are.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) message: Bytes,
    pub(crate) id: std::ops::Range<usize>,
    /// The result's range, else the error's.
    pub(crate) body: Result<std::ops::Range<usize>, std::ops::Range<usize>>,
}

/// A client request in flight, by its id (as normalized JSON text).
pub(crate) enum Flight {
    Relayed(u64),
    Call {
        upstream: Option<u64>,
        task: Option<AbortHandle>,
    },
}

#[derive(Default)]
pub(crate) struct State {
    next_id: u64,
    pub(crate) pending: HashMap<u64, Pending>,
    pub(crate) flights: HashMap<String, Flight>,
    pub(crate) gone: Option<String>,
}

impl State {
    pub(crate) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

/// What every task of one session shares.
pub(crate) struct Relay {
    /// Set when the session cannot go on (the upstream failed the handshake).
    fatal: Mutex<Option<String>>,
    fatal_signal: tokio::sync::Notify,
    pub(crate) tools: RelayTools,
    pub(crate) config: RelayConfig,
    pub(crate) to_client: mpsc::Sender<Bytes>,
    pub(crate) to_upstream: mpsc::Sender<Bytes>,
    state: Mutex<State>,
}

impl Relay {
    /// Ends the session: the upstream cannot serve it.
    pub(crate) fn fail(&self, why: String) {
        tracing::debug!(target: "aml_mcp::relay", "{why}");
        self.fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(why);
        self.fatal_signal.notify_one();
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) async fn answer(&self, message: Bytes) {
        // A client that stopped reading has gone; its end is seen on its input.
        let _ = self.to_client.send(message).await;
    }

    pub(crate) async fn answer_error(&self, id: Option<&[u8]>, code: i64, message: &str) {
        self.answer(error_response(id, code, message, None)).await;
    }

    /// Tells the server a request of ours is cancelled.
    pub(crate) async fn cancel_upstream(&self, upstream_id: u64, reason: &str) {
        let note = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{upstream_id},\"reason\":{}}}}}",
            jsonrpc::json_string(reason)
        );
        let _ = self.to_upstream.send(Bytes::from(note)).await;
    }

    /// One record (through the gate, like every call) for a request the relay refused
    /// itself; nothing was sent.
    pub(crate) fn record_refusal(&self, tool: &str, refusal: Refusal, detail: String) -> GateOutcome {
        self.tools.gate().gate().refused(tool, refusal, detail)
    }
}

/// Runs one client session against `upstream` until the client goes away (calls in flight
/// then get up to [`RelayConfig::drain_timeout`] to finish) or the upstream is gone (the
/// client's requests are then refused for [`RelayConfig::gone_grace`]). `early` is what the
/// upstream sent before the session (see [`probe`]).
pub async fn run(
    tools: RelayTools,
    config: RelayConfig,
    client: Connection,
    upstream: Upstream,
    early: Vec<Inbound>,
) -> RelayEnd {
    let Connection {
        incoming: mut from_client,
        outgoing: to_client,
    } = client;
    let Upstream {
        connection:
            Connection {
                incoming: mut from_upstream,
                outgoing: to_upstream,
            },
        mut exited,
    } = upstream;
    let relay = Arc::new(Relay {
        fatal: Mutex::new(None),
        fatal_signal: tokio::sync::Notify::new(),
        tools,
        config,
        to_client,
        to_upstream,
        state: Mutex::new(State::default()),
    });
    for inbound in early {
        on_upstream(&relay, inbound).await;
    }
    let mut calls = JoinSet::new();
    let mut upstream_open = true;
    let mut exit_pending = true;
    let mut gone_at: Option<Instant> = None;
    let grace = relay.config.gone_grace;
    loop {
        tokio::select! {
            status = &mut exited, if exit_pending => {
                exit_pending = false;
                gone_at.get_or_insert_with(Instant::now);
                upstream_gone(&relay, format!("it exited ({})", status.unwrap_or_else(|_| "status unknown".into()))).await;
            }
            next = from_upstream.recv(), if upstream_open => match next {
                Some(inbound) => on_upstream(&relay, inbound).await,
                None => {
                    upstream_open = false;
                    gone_at.get_or_insert_with(Instant::now);
                    upstream_gone(&relay, "it closed its output".into()).await;
                }
            },
            next = from_client.recv() => match next {
                Some(inbound) => on_client(&relay, inbound, &mut calls).await,
                None => break,
            },
            Some(_) = calls.join_next(), if !calls.is_empty() => {}
            _ = sleep_until(gone_at.map(|at| at + grace)), if gone_at.is_some() => break,
            _ = relay.fatal_signal.notified() => {
                let why = relay.fatal.lock().unwrap_or_else(|p| p.into_inner()).clone();
                return RelayEnd::Handshake(why.unwrap_or_default());
            }
        }
    }
    // Calls in flight may still get their answers (and receipts), within a bound.
    let deadline = Instant::now() + relay.config.drain_timeout;
    while !calls.is_empty() {
        tokio::select! {
            next = from_upstream.recv(), if upstream_open => match next {
                Some(inbound) => on_upstream(&relay, inbound).await,
                None => {
                    upstream_open = false;
                    upstream_gone(&relay, "it closed its output".into()).await;
                }
            },
            status = &mut exited, if exit_pending => {
                exit_pending = false;
                upstream_gone(&relay, format!("it exited ({})", status.unwrap_or_default())).await;
            }
            _ = calls.join_next() => {}
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(target: "aml_mcp::relay", calls = calls.len(),
                               "calls still running when the client left are recorded as abandoned");
                calls.abort_all();
                while calls.join_next().await.is_some() {}
            }
        }
    }
    let left: Vec<(u64, Pending)> = relay.state().pending.drain().collect();
    for (id, waiting) in left {
        if let Pending::Relayed { timer, .. } = waiting {
            timer.abort();
        }
        relay.cancel_upstream(id, "the client went away").await;
    }
    let gone = relay.state().gone.clone();
    match gone {
        Some(reason) => RelayEnd::UpstreamGone(reason),
        None => RelayEnd::ClientClosed,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The upstream is gone: every request waiting on it fails now, later ones are refused.
async fn upstream_gone(relay: &Relay, reason: String) {
    let pending: Vec<Pending> = {
        let mut state = relay.state();
        if state.gone.is_some() {
            return;
        }
        tracing::error!(target: "aml_mcp::relay", "the upstream server is gone: {reason}");
        state.gone = Some(reason.clone());
        state.flights.retain(|_, f| matches!(f, Flight::Call { .. }));
        state.pending.drain().map(|(_, p)| p).collect()
    };
    for waiting in pending {
        match waiting {
            Pending::Relayed { client_id, timer, .. } => {
                timer.abort();
                let message = format!("aml-mcp-gate: the upstream server is gone ({reason})");
                relay
                    .answer_error(Some(&client_id), jsonrpc::UPSTREAM_GONE, &message)
                    .await;
            }
            Pending::Call { reply } => {
                let _ = reply.send(Err(ForwardError::UpstreamGone(reason.clone())));
            }
            Pending::Cancelled => {}
        }
    }
}

fn strict_limits(relay: &Relay) -> Limits {
    Limits {
        max_bytes: relay.config.max_message_bytes,
        ..Limits::default()
    }
}

async fn on_client(relay: &Arc<Relay>, inbound: Inbound, calls: &mut JoinSet<()>) {
    let bytes = match inbound {
        Inbound::Message(bytes) => bytes,
        Inbound::Oversized { prefix, len } => {
            let message = format!(
                "invalid request: the message is {len} bytes, over aml-mcp-gate's limit of {} bytes",
                relay.config.max_message_bytes
            );
            let id = scan_id(&prefix);
            return relay
                .answer_error(id.as_deref(), jsonrpc::INVALID_REQUEST, &message)
                .await;
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
            return relay
                .answer_error(id.as_deref(), jsonrpc::PARSE_ERROR, &format!("parse error: {e}"))
                .await;
        }
    };
    let (mut message, env) = match (value, env) {
        (Value::Array(items), _) => return answer_batch(relay, &items).await,
        (Value::Object(message), Ok(env)) => (message, env),
        (_, env) => {
            let id = readable_id(&env);
            let message = "invalid request: a message must be a JSON object";
            return relay
                .answer_error(id.as_deref(), jsonrpc::INVALID_REQUEST, message)
                .await;
        }
    };
    let kind = match env.kind() {
        Ok(kind) => kind,
        Err(why) => {
            let id = env.valid_id().map(|id| id.get().as_bytes());
            return relay
                .answer_error(id, jsonrpc::INVALID_REQUEST, &format!("invalid request: {why}"))
                .await;
        }
    };
    let method = env.method.as_deref().unwrap_or_default();
    match kind {
        Kind::Request => {
            let Some(id) = env.id else { return };
            let client_id = Bytes::copy_from_slice(id.get().as_bytes());
            let gone = relay.state().gone.clone();
            if method == "tools/call" {
                match gone {
                    Some(reason) => {
                        refuse_call(relay, &client_id, &env, Refusal::UpstreamGone, &reason).await
                    }
                    None => start_call(relay, client_id, &env, message.remove("params"), calls).await,
                }
                return;
            }
            if let Some(reason) = gone {
                let message =
                    format!("aml-mcp-gate: the upstream server is gone ({reason}); nothing was sent");
                return relay
                    .answer_error(Some(&client_id), jsonrpc::UPSTREAM_GONE, &message)
                    .await;
            }
            let limit = match method {
                "initialize" | "server/discover" => relay.config.handshake_timeout,
                _ => relay.config.upstream_timeout,
            };
            let id_range = range_in(&bytes, id);
            forward(relay, client_id, &bytes, id_range, method, limit).await;
        }
        Kind::Notification if method == "notifications/cancelled" => cancel(relay, &bytes, &env).await,
        Kind::Notification | Kind::Response => {
            let _ = relay.to_upstream.send(bytes.clone()).await;
        }
    }
}

/// MCP has no batches: each request in one gets its own `-32600`.
async fn answer_batch(relay: &Relay, items: &[Value]) {
    let message = "invalid request: aml-mcp-gate does not take JSON-RPC batches (MCP removed them); send each message alone";
    let ids: Vec<Bytes> = items
        .iter()
        .filter_map(|item| item.get("id"))
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
        .map(|id| Bytes::from(id.to_string()))
        .collect();
    if ids.is_empty() {
        return relay.answer_error(None, jsonrpc::INVALID_REQUEST, message).await;
    }
    let answers: Vec<String> = ids
        .iter()
        .map(|id| {
            String::from_utf8_lossy(&error_response(Some(id), jsonrpc::INVALID_REQUEST, message, None))
                .into_owned()
        })
        .collect();
    relay
        .answer(Bytes::from(format!("[{}]", answers.join(","))))
        .await;
}

/// The client id as a lookup key (so `"a"` and `"\u0061"` are one id).
pub(crate) fn flight_key(raw: &[u8]) -> String {
    serde_json::from_slice::<Value>(raw)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned())
}

/// Relays a client request with the relay's own id, answering it with a timeout.
async fn forward(
    relay: &Arc<Relay>,
    client_id: Bytes,
    message: &[u8],
    id_range: std::ops::Range<usize>,
    method: &str,
    limit: Duration,
) {
    let key = flight_key(&client_id);
    let upstream_id = {
        let mut state = relay.state();
        let id = state.next_id();
        let timer = tokio::spawn(expire(Arc::clone(relay), id, method.to_owned(), limit)).abort_handle();
        state.pending.insert(
            id,
            Pending::Relayed {
                client_id,
                flight: key.clone(),
                tools_list: method == "tools/list",
                timer,
            },
        );
        state.flights.insert(key, Flight::Relayed(id));
        id
    };
    let relayed = splice(message, &mut [(id_range, upstream_id.to_string().as_bytes())]);
    let _ = relay.to_upstream.send(Bytes::from(relayed)).await;
}

/// A relayed request's time limit ran out.
async fn expire(relay: Arc<Relay>, upstream_id: u64, method: String, limit: Duration) {
    tokio::time::sleep(limit).await;
    let client_id = {
        let mut state = relay.state();
        match state.pending.remove(&upstream_id) {
            Some(Pending::Relayed {
                client_id, flight, ..
            }) => {
                state.flights.remove(&flight);
                state.pending.insert(upstream_id, Pending::Cancelled);
                client_id
            }
            Some(other) => {
                state.pending.insert(upstream_id, other);
                return;
            }
            None => return,
        }
    };
    let message = format!("aml-mcp-gate: the upstream server did not answer {method} within {limit:?}");
    relay
        .answer_error(Some(&client_id), jsonrpc::UPSTREAM_TIMEOUT, &message)
        .await;
    relay
        .cancel_upstream(upstream_id, "aml-mcp-gate: no answer in time")
        .await;
    if matches!(method.as_str(), "initialize" | "server/discover") {
        relay.fail(format!(
            "the server did not answer the client's {method} within {limit:?}"
        ));
    }
}

/// The client cancels one of its requests: passed on with the id the server knows; a call
/// still waiting for approval is dropped (and recorded as such), not sent.
async fn cancel(relay: &Relay, message: &[u8], env: &Envelope<'_>) {
    let Some(params) = env.params else { return };
    let Some(request_id) = Members::parse(params).ok().and_then(|m| m.get("requestId")) else {
        return;
    };
    let key = flight_key(request_id.get().as_bytes());
    let upstream_id = {
        let mut state = relay.state();
        match state.flights.remove(&key) {
            Some(Flight::Relayed(id)) => {
                if let Some(Pending::Relayed { timer, .. }) = state.pending.insert(id, Pending::Cancelled) {
                    timer.abort();
                }
                id
            }
            Some(Flight::Call {
                upstream: Some(id), ..
            }) => {
                if let Some(Pending::Call { reply }) = state.pending.insert(id, Pending::Cancelled) {
                    let _ = reply.send(Err(ForwardError::Cancelled));
                }
                id
            }
            Some(Flight::Call { upstream: None, task }) => {
                // Not sent yet: the call's task is dropped, which records it.
                if let Some(task) = task {
                    task.abort();
                }
                return;
            }
            None => {
                tracing::debug!(target: "aml_mcp::relay", "a cancellation for no request in flight was dropped");
                return;
            }
        }
    };
    let relayed = splice(
        message,
        &mut [(range_in(message, request_id), upstream_id.to_string().as_bytes())],
    );
    let _ = relay.to_upstream.send(Bytes::from(relayed)).await;
}

async fn on_upstream(relay: &Relay, inbound: Inbound) {
    let bytes = match inbound {
        Inbound::Message(bytes) => bytes,
        Inbound::Oversized { prefix, len } => {
            let why = format!(
                "a message of {len} bytes, over the limit of {} bytes",
                relay.config.max_message_bytes
            );
            return unreadable(relay, scan_id(&prefix), why).await;
        }
    };
    let env = match Envelope::parse(&bytes) {
        Ok(env) => env,
        Err(e) => return unreadable(relay, scan_id(&bytes), format!("not JSON-RPC ({e})")).await,
    };
    match env.kind() {
        Ok(Kind::Response) => {
            let body = match (env.result, env.error) {
                (Some(result), _) => Ok(range_in(&bytes, result)),
                (None, Some(error)) => Err(range_in(&bytes, error)),
                _ => return,
            };
            if let Some(id) = env.id {
                let answer = Reply {
                    id: range_in(&bytes, id),
                    body,
                    message: bytes.clone(),
                };
                reply(relay, id.get(), answer).await;
            }
        }
        Ok(Kind::Request) => {
            let method = env.method.as_deref().unwrap_or_default();
            if matches!(method, "initialize" | "server/discover") {
                // Only clients send these: the "server" sends our requests back.
                return echoed(relay, method).await;
            }
            let policy = match method {
                "sampling/createMessage" => relay.config.sampling,
                "elicitation/create" => relay.config.elicitation,
                _ => ServerRequestPolicy::Relay,
            };
            match (policy, env.id) {
                (ServerRequestPolicy::Refuse, Some(id)) => {
                    refuse_server_request(relay, id.get(), method).await
                }
                _ => relay.answer(bytes.clone()).await,
            }
        }
        Ok(Kind::Notification) => relay.answer(bytes.clone()).await,
        Err(why) => {
            let id = env.id.map(|id| Bytes::copy_from_slice(id.get().as_bytes()));
            unreadable(relay, id, format!("not a valid JSON-RPC message ({why})")).await
        }
    }
}

/// The upstream repeats what it is sent: it is not an MCP server. Whoever waits is told.
async fn echoed(relay: &Relay, method: &str) {
    let why = format!(
        "the server sent the client's {method} back instead of answering it: it does not speak MCP (JSON-RPC) on stdio"
    );
    let pending: Vec<Pending> = relay.state().pending.drain().map(|(_, p)| p).collect();
    for waiting in pending {
        if let Pending::Relayed { client_id, timer, .. } = waiting {
            timer.abort();
            let message = format!("aml-mcp-gate: {why}");
            relay
                .answer_error(Some(&client_id), jsonrpc::UPSTREAM_GONE, &message)
                .await;
        }
    }
    relay.fail(why);
}

/// Routes the server's answer to what waits for it.
async fn reply(relay: &Relay, id: &str, answer: Reply) {
    let Ok(upstream_id) = id.parse::<u64>() else {
        tracing::warn!(target: "aml_mcp::relay", id, "the server answered an id the gate never sent; dropped");
        return;
    };
    let waiting = {
        let mut state = relay.state();
        let waiting = state.pending.remove(&upstream_id);
        if let Some(Pending::Relayed { flight, .. }) = &waiting {
            state.flights.remove(flight);
        }
        waiting
    };
    match waiting {
        Some(Pending::Relayed {
            client_id,
            tools_list,
            timer,
            ..
        }) => {
            timer.abort();
            let answer = if tools_list {
                filter_tools_list(&answer.message, &client_id, &relay.tools)
            } else {
                Some(relay_reply(&answer, &client_id, None))
            };
            match answer {
                Some(answer) => relay.answer(Bytes::from(answer)).await,
                None => {
                    let text = "aml-mcp-gate: the server's answer could not be read";
                    relay.answer_error(Some(&client_id), -32603, text).await
                }
            }
        }
        Some(Pending::Call { reply }) => {
            let _ = reply.send(Ok(answer));
        }
        Some(Pending::Cancelled) => {
            tracing::info!(target: "aml_mcp::relay", upstream_id,
                           "the server answered a request after it was cancelled; the answer was dropped");
        }
        None => {
            tracing::warn!(target: "aml_mcp::relay", upstream_id, "the server answered no pending request; dropped");
        }
    }
}

/// A message from the server that cannot be read: if its id names a request in flight,
/// that request fails now; otherwise it is dropped (the request's time limit still holds).
async fn unreadable(relay: &Relay, id: Option<Bytes>, why: String) {
    let upstream_id = id.and_then(|id| std::str::from_utf8(&id).ok()?.parse::<u64>().ok());
    let waiting = upstream_id.and_then(|id| {
        let mut state = relay.state();
        let waiting = state.pending.remove(&id)?;
        if let Pending::Relayed { flight, .. } = &waiting {
            state.flights.remove(flight);
        }
        state.pending.insert(id, Pending::Cancelled);
        Some(waiting)
    });
    match waiting {
        Some(Pending::Relayed { client_id, timer, .. }) => {
            timer.abort();
            let message = format!("aml-mcp-gate: the server's answer could not be read: {why}");
            relay.answer_error(Some(&client_id), -32603, &message).await;
        }
        Some(Pending::Call { reply }) => {
            let _ = reply.send(Err(ForwardError::Unreadable(why)));
        }
        _ => tracing::warn!(target: "aml_mcp::relay", "dropped a message from the server: {why}"),
    }
}

/// A server request the host does not relay: answered with an error, recorded.
async fn refuse_server_request(relay: &Relay, id: &str, method: &str) {
    let setting = if method == "sampling/createMessage" {
        "--sampling"
    } else {
        "--elicitation"
    };
    let message = format!(
        "aml-mcp-gate: the host does not relay {method} from this server to the client ({setting} relay allows it)"
    );
    relay.record_refusal(method, Refusal::ServerRequestRefused, message.clone());
    let answer = error_response(Some(id.as_bytes()), jsonrpc::REFUSED_BY_HOST, &message, None);
    let _ = relay.to_upstream.send(answer).await;
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;

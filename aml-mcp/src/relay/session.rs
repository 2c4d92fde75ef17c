//! The relay engine: one client session in front of one upstream connection. Routes each
//! message, maps request ids, keeps the time limits, and notices an upstream that is gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use aml_core::{GateOutcome, Refusal};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use super::frame::Inbound;
use super::from_client::on_client;
use super::from_upstream::on_upstream;
use super::jsonrpc::{self, error_response, Envelope, Kind};
use super::{Connection, RelayConfig, RelayTools, Upstream};
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
        if let Inbound::Message(bytes) | Inbound::Traced { message: bytes, .. } = &inbound {
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
        /// `initialize` or `server/discover`: the server's capabilities.
        handshake: bool,
        /// A 2026-07-28 `subscriptions/listen`: its notifications name it.
        subscription: bool,
        /// When it is answered with an error if the server has not answered it (none for a
        /// request that stays open by design, a 2026-07-28 `subscriptions/listen`), and the
        /// limit that gives, in [`State::deadlines`].
        deadline: Option<(Instant, Duration)>,
        method: Box<str>,
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
    /// The server's tool definitions as this session has seen them (pins).
    pub(crate) seen: super::pins::Seen,
    /// The ids (as lookup keys) of the server's requests relayed to the client and not yet
    /// answered: only answers to these are relayed back.
    pub(crate) asked: std::collections::HashSet<String>,
    /// Tool names of the `tools/list` pages seen since the last complete list, and the
    /// registered tools last found missing from one (see `advertised`).
    pub(crate) listing: std::collections::BTreeSet<String>,
    pub(crate) missing_warned: std::collections::BTreeSet<String>,
    /// The time limits of relayed requests, soonest first, by upstream id: the session's
    /// one timer waits for the first (no task per request).
    pub(crate) deadlines: std::collections::BTreeSet<(Instant, u64)>,
}

impl State {
    pub(crate) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Takes what waits for `upstream_id`'s answer, with its time limit.
    pub(crate) fn take_pending(&mut self, upstream_id: u64) -> Option<Pending> {
        let waiting = self.pending.remove(&upstream_id)?;
        if let Pending::Relayed {
            deadline: Some((at, _)),
            ..
        } = &waiting
        {
            self.deadlines.remove(&(*at, upstream_id));
        }
        Some(waiting)
    }

    /// Takes everything that waits for an answer, and every time limit.
    pub(crate) fn take_all_pending(&mut self) -> Vec<(u64, Pending)> {
        self.deadlines.clear();
        self.pending.drain().collect()
    }

    /// The soonest time limit of a relayed request: the session's one timer waits for it.
    fn soonest(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// The upstream ids whose time limit has passed by `now`, taken off the timer.
    fn due(&mut self, now: Instant) -> Vec<u64> {
        let mut due = Vec::new();
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            due.push(id);
        }
        due
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
    /// The client software as its first `initialize` named itself (shown to the approver):
    /// read on every call without the state's lock.
    pub(crate) client: std::sync::OnceLock<std::sync::Arc<aml_core::ClientInfo>>,
    state: Mutex<State>,
    /// Set once the client has gone (end of its input, or its output closed): calls not yet
    /// authorized are withdrawn (see [`Relay::client_left`]).
    left: tokio::sync::watch::Sender<bool>,
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

    /// Completes once the client has gone. A call still waiting for approval (or for the
    /// server's tool list, to check a pin) then stops: nobody can be answered, and an
    /// approver must not be able to approve it into running after its client left. A call
    /// past its one-use claim goes on to the end, as with gRPC (ADR 006).
    pub(crate) async fn client_left(&self) {
        let mut left = self.left.subscribe();
        // The sender lives as long as `self`, so this ends only when the flag is set.
        let _ = left.wait_for(|gone| *gone).await;
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
        let caller = &self.config.caller;
        self.tools.gate().gate().refused_by(tool, caller, refusal, detail)
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
        client: std::sync::OnceLock::new(),
        tools,
        config,
        to_client,
        to_upstream,
        state: Mutex::new(State::default()),
        left: tokio::sync::watch::Sender::new(false),
    });
    for inbound in early {
        on_upstream(&relay, inbound).await;
    }
    let mut calls = JoinSet::new();
    let mut upstream_open = true;
    let mut exit_pending = true;
    let mut gone_at: Option<Instant> = None;
    let mut handshake: Option<String> = None;
    let grace = relay.config.gone_grace;
    // Made once: a waiter made and dropped on every turn of the loop costs two locks.
    let fatal = relay.fatal_signal.notified();
    tokio::pin!(fatal);
    loop {
        let (full, soonest) = {
            let state = relay.state();
            (state.flights.len() >= relay.config.max_in_flight, state.soonest())
        };
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
            next = from_client.recv(), if !full => match next {
                // Its answers cannot be written (it closed its end): it has gone, and what
                // it sent after that is not taken up to run unanswered.
                Some(_) if relay.to_client.is_closed() => {
                    relay.left.send_replace(true);
                    break;
                }
                Some(inbound) => on_client(&relay, inbound, &mut calls).await,
                None => {
                    relay.left.send_replace(true);
                    break;
                }
            },
            Some(_) = calls.join_next(), if !calls.is_empty() => {}
            () = sleep_until(soonest), if soonest.is_some() => expire_due(&relay).await,
            _ = sleep_until(gone_at.map(|at| at + grace)), if gone_at.is_some() => break,
            _ = &mut fatal => {
                // Calls in flight still answer their clients and leave their receipts.
                let why = relay.fatal.lock().unwrap_or_else(|p| p.into_inner()).clone();
                handshake = Some(why.unwrap_or_default());
                break;
            }
        }
    }
    // Requests already read still get their answers (and calls their receipts), within a
    // bound: a client that writes its requests and closes its input at once (`printf … |`)
    // is answered like any other.
    let deadline = Instant::now() + relay.config.drain_timeout;
    while !calls.is_empty() || awaits_answers(&relay) {
        let soonest = relay.state().soonest();
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
            Some(_) = calls.join_next(), if !calls.is_empty() => {}
            () = sleep_until(soonest), if soonest.is_some() => expire_due(&relay).await,
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(target: "aml_mcp::relay", calls = calls.len(),
                               "calls still running when the client left are recorded as abandoned");
                calls.abort_all();
                while calls.join_next().await.is_some() {}
                answer_unanswered(&relay).await;
                break;
            }
        }
    }
    if let Some(why) = handshake {
        return RelayEnd::Handshake(why);
    }
    let left = relay.state().take_all_pending();
    for (id, waiting) in left {
        if let Pending::Cancelled = waiting {
            // The server was told when it was cancelled (or timed out).
            continue;
        }
        relay.cancel_upstream(id, "the client went away").await;
    }
    let gone = relay.state().gone.clone();
    match gone {
        Some(reason) => RelayEnd::UpstreamGone(reason),
        None => RelayEnd::ClientClosed,
    }
}

/// Whether a request relayed to the server still waits for its answer and the client can
/// still be written to (a subscription, which ends only when the client ends it, does not
/// count).
fn awaits_answers(relay: &Relay) -> bool {
    !relay.to_client.is_closed()
        && relay.state().pending.values().any(|p| {
            matches!(
                p,
                Pending::Relayed {
                    subscription: false,
                    ..
                }
            )
        })
}

/// The drain limit passed after the client left: each relayed request still waiting is
/// answered with an error now (the server is told it is cancelled as the session ends).
async fn answer_unanswered(relay: &Relay) {
    let waiting: Vec<Bytes> = relay
        .state()
        .pending
        .values()
        .filter_map(|p| match p {
            Pending::Relayed {
                client_id,
                subscription: false,
                ..
            } => Some(client_id.clone()),
            _ => None,
        })
        .collect();
    let limit = relay.config.drain_timeout;
    let message = format!(
        "{}: the server did not answer within {limit:?} of the client closing its input; the gate is stopping",
        relay.config.product
    );
    for client_id in waiting {
        relay
            .answer_error(Some(&client_id), jsonrpc::UPSTREAM_TIMEOUT, &message)
            .await;
    }
}

/// Answers every relayed request whose time limit has passed.
async fn expire_due(relay: &Relay) {
    let due = relay.state().due(Instant::now());
    for upstream_id in due {
        super::from_client::expire(relay, upstream_id).await;
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
        state.take_all_pending().into_iter().map(|(_, p)| p).collect()
    };
    for waiting in pending {
        match waiting {
            Pending::Relayed { client_id, .. } => {
                let message = format!("{}: the upstream server is gone ({reason})", relay.config.product);
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

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "kinds_tests.rs"]
mod kinds_tests;

#[cfg(test)]
#[path = "outbound_tests.rs"]
mod outbound_tests;

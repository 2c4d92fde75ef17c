//! The relay engine: one client session in front of one upstream connection. It reads both
//! connections and the session's timer, runs each event through the session core
//! ([`super::machine`]) and sends what that returns. Gated calls are futures of its own,
//! polled beside the connections: no task, no hand-off between tasks per call.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{AbortHandle, Abortable, BoxFuture, FutureExt};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::frame::Inbound;
use super::from_client::on_client;
use super::from_upstream::on_upstream;
use super::jsonrpc::{Envelope, Kind};
use super::machine::{Flight, Out, Pending, Relay, Reply, State, Step};
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

/// One session as the engine runs it: its settings and state, the two connections' sending
/// ends, and whether the client has gone. Its calls' futures share it.
pub(crate) struct Session {
    pub(crate) relay: Relay,
    state: Mutex<State>,
    pub(crate) to_client: mpsc::Sender<Bytes>,
    pub(crate) to_upstream: mpsc::Sender<Bytes>,
    /// Set once the client has gone (end of its input, or its output closed): calls not yet
    /// authorized are withdrawn (see [`Session::client_left`]).
    left: tokio::sync::watch::Sender<bool>,
}

impl Session {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) async fn answer(&self, message: Bytes) {
        // A client that stopped reading has gone; its end is seen on its input.
        let _ = self.to_client.send(message).await;
    }

    /// Tells the server a request of ours is cancelled.
    pub(crate) async fn cancel_upstream(&self, upstream_id: u64, reason: &str) {
        let _ = self
            .to_upstream
            .send(Relay::cancel_note(upstream_id, reason))
            .await;
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

    /// Sends a request of the relay's own (a gated call, its own `tools/list`), made by
    /// `request` from the id it gets, and waits for the server's answer within the upstream
    /// limit; past it the server is told the request is cancelled. A call's flight learns the
    /// id, so that the client's cancellation reaches the server. `request` may also return a
    /// guard, kept until the answer.
    pub(crate) async fn ask<G>(
        &self,
        flight: Option<&str>,
        request: impl FnOnce(u64) -> (String, G),
    ) -> Result<Reply, ForwardError> {
        let (tx, rx) = oneshot::channel();
        let upstream_id = {
            let mut state = self.state();
            if let Some(reason) = &state.gone {
                return Err(ForwardError::UpstreamGone(format!(
                    "{reason}; the request was not sent"
                )));
            }
            let id = state.next_id();
            state.pending.insert(id, Pending::Call { reply: tx });
            if let Some(Flight::Call { upstream, .. }) = flight.and_then(|f| state.flights.get_mut(f)) {
                *upstream = Some(id);
            }
            id
        };
        let (request, _guard) = request(upstream_id);
        if self.to_upstream.send(Bytes::from(request)).await.is_err() {
            return Err(ForwardError::UpstreamGone("its input is closed".into()));
        }
        let limit = self.relay.config.upstream_timeout;
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(ForwardError::UpstreamGone("the relay stopped".into())),
            Err(_) => {
                self.state().pending.insert(upstream_id, Pending::Cancelled);
                let reason = format!("{}: no answer in time", self.relay.config.product);
                self.cancel_upstream(upstream_id, &reason).await;
                Err(ForwardError::Timeout(limit))
            }
        }
    }

    /// Runs one transition under the state's lock; what it sends is left in `out`. Returns
    /// why the session cannot go on, once that is known.
    fn step(&self, out: &mut Vec<Out>, transition: impl FnOnce(&mut Step<'_>)) -> Option<String> {
        let now = Instant::now().into_std();
        let mut state = self.state();
        transition(&mut Step::new(&self.relay, &mut state, now, out));
        state.fatal.clone()
    }

    /// Sends what transitions returned, in order, and starts the calls they checked.
    async fn send(self: &Arc<Self>, out: &mut Vec<Out>, calls: &mut Calls) {
        for next in out.drain(..) {
            match next {
                Out::Client(message) => self.answer(message).await,
                Out::Upstream(message) => {
                    let _ = self.to_upstream.send(message).await;
                }
                Out::Call(start) => {
                    let flight = start.flight().to_owned();
                    let (abort, registration) = AbortHandle::new_pair();
                    // A panic in a call ends that call, as a task's would, not the session.
                    let call = std::panic::AssertUnwindSafe(super::call::run(Arc::clone(self), *start))
                        .catch_unwind()
                        .map(|ended| {
                            if ended.is_err() {
                                tracing::error!(target: "aml_mcp::relay", "a call panicked; it was dropped");
                            }
                        });
                    calls.push(Abortable::new(call.boxed(), registration));
                    self.state().set_stop(&flight, abort);
                }
            }
        }
    }
}

/// The session's calls in flight: each stops when its handle (in its flight) aborts it, and
/// a call dropped before it ends is recorded as such by the gate.
type Calls = FuturesUnordered<Abortable<BoxFuture<'static, ()>>>;

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
    let session = Arc::new(Session {
        relay: Relay::new(tools, config),
        to_client,
        to_upstream,
        state: Mutex::new(State::default()),
        left: tokio::sync::watch::Sender::new(false),
    });
    let mut out = Vec::new();
    let mut calls = Calls::new();
    let mut handshake: Option<String> = None;
    for inbound in early {
        handshake = session.step(&mut out, |step| on_upstream(step, inbound));
    }
    session.send(&mut out, &mut calls).await;
    let mut upstream_open = true;
    let mut exit_pending = true;
    let mut gone_at: Option<Instant> = None;
    let grace = session.relay.config.gone_grace;
    while handshake.is_none() {
        let (full, soonest) = {
            let state = session.state();
            (state.full(&session.relay.config), state.soonest())
        };
        handshake = tokio::select! {
            status = &mut exited, if exit_pending => {
                exit_pending = false;
                gone_at.get_or_insert_with(Instant::now);
                let why = format!("it exited ({})", status.unwrap_or_else(|_| "status unknown".into()));
                session.step(&mut out, |step| step.upstream_gone(why))
            }
            next = from_upstream.recv(), if upstream_open => match next {
                Some(inbound) => session.step(&mut out, |step| on_upstream(step, inbound)),
                None => {
                    upstream_open = false;
                    gone_at.get_or_insert_with(Instant::now);
                    session.step(&mut out, |step| step.upstream_gone("it closed its output".into()))
                }
            },
            next = from_client.recv(), if !full => match next {
                // Its answers cannot be written (it closed its end): it has gone, and what
                // it sent after that is not taken up to run unanswered.
                Some(_) if session.to_client.is_closed() => {
                    session.left.send_replace(true);
                    break;
                }
                Some(inbound) => session.step(&mut out, |step| on_client(step, inbound)),
                None => {
                    session.left.send_replace(true);
                    break;
                }
            },
            Some(_) = calls.next(), if !calls.is_empty() => None,
            () = sleep_until(soonest), if soonest.is_some() => session.step(&mut out, |step| step.expire_due()),
            _ = sleep_until(gone_at.map(|at| (at + grace).into_std())), if gone_at.is_some() => break,
        };
        // Calls in flight still answer their clients and leave their receipts.
        session.send(&mut out, &mut calls).await;
    }
    // Requests already read still get their answers (and calls their receipts), within a
    // bound: a client that writes its requests and closes its input at once (`printf … |`)
    // is answered like any other.
    let deadline = Instant::now() + session.relay.config.drain_timeout;
    while !calls.is_empty() || (!session.to_client.is_closed() && session.state().awaits_answers()) {
        let soonest = session.state().soonest();
        tokio::select! {
            next = from_upstream.recv(), if upstream_open => match next {
                Some(inbound) => session.step(&mut out, |step| on_upstream(step, inbound)),
                None => {
                    upstream_open = false;
                    session.step(&mut out, |step| step.upstream_gone("it closed its output".into()))
                }
            },
            status = &mut exited, if exit_pending => {
                exit_pending = false;
                let why = format!("it exited ({})", status.unwrap_or_default());
                session.step(&mut out, |step| step.upstream_gone(why))
            }
            Some(_) = calls.next(), if !calls.is_empty() => None,
            () = sleep_until(soonest), if soonest.is_some() => session.step(&mut out, |step| step.expire_due()),
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(target: "aml_mcp::relay", calls = calls.len(),
                               "calls still running when the client left are recorded as abandoned");
                calls.clear();
                session.step(&mut out, |step| step.answer_unanswered());
                session.send(&mut out, &mut calls).await;
                break;
            }
        };
        session.send(&mut out, &mut calls).await;
    }
    if let Some(why) = handshake {
        return RelayEnd::Handshake(why);
    }
    session.step(&mut out, |step| step.end());
    session.send(&mut out, &mut calls).await;
    let gone = session.state().gone.clone();
    match gone {
        Some(reason) => RelayEnd::UpstreamGone(reason),
        None => RelayEnd::ClientClosed,
    }
}

async fn sleep_until(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(Instant::from_std(at)).await,
        None => std::future::pending().await,
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

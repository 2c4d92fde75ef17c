//! The session's state and its transitions, without I/O: a message from either side, the
//! passing of time or the upstream's end goes in with the session's [`State`], and what to
//! send where comes out, in order ([`Out`]). The engine ([`super::session`]) reads the
//! connections, runs a transition on the state it owns and sends what it returns; nothing
//! here awaits, so every transition can be driven (and tested) without a runtime. A call's
//! future holds no state: what it needs of the session it asks for ([`CallEvent`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use aml_core::{ClientInfo, GateOutcome, Refusal};
use bytes::Bytes;
use futures_util::future::AbortHandle;
use tokio::sync::oneshot;

use super::call::CallStart;
use super::endpoint::{flight_prefix, EndpointId, ToEndpoint, STANDING};
use super::jsonrpc::{self, error_response, json_string};
use super::{RelayConfig, RelayTools};
use crate::ForwardError;

/// Why the server is told the relay's requests still open at the end are cancelled.
const CLIENT_WENT_AWAY: &str = "the client went away";
/// Why the server is told an endpoint's requests are cancelled when it closes unanswered.
const ENDPOINT_CLOSED: &str = "the client closed its response stream";

/// What waits for an answer from the upstream, by the id the relay gave the request.
pub(crate) enum Pending {
    /// A client request relayed as is.
    Relayed {
        /// Where the answer goes, with the client's id put back.
        endpoint: EndpointId,
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
    /// A gated `tools/call` (or the relay's own `tools/list`): its future takes the answer.
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
        stop: Option<AbortHandle>,
    },
}

/// Everything one session keeps between messages: one owner, changed only by transitions.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) pending: HashMap<u64, Pending>,
    pub(crate) flights: HashMap<String, Flight>,
    pub(crate) gone: Option<String>,
    /// Set when the session cannot go on (the upstream failed the handshake).
    pub(crate) fatal: Option<String>,
    /// The server's tool definitions as this session has seen them (pins).
    pub(crate) seen: super::pins::Seen,
    /// The ids (as lookup keys) of the server's requests relayed to the client and not yet
    /// answered: only answers to these are relayed back.
    pub(crate) asked: HashSet<String>,
    /// Tool names of the `tools/list` pages seen since the last complete list, and the
    /// registered tools last found missing from one (see `advertised`).
    pub(crate) listing: BTreeSet<String>,
    pub(crate) missing_warned: BTreeSet<String>,
    /// The time limits of relayed requests, soonest first, by upstream id: the session's
    /// one timer waits for the first (no task per request).
    pub(crate) deadlines: BTreeSet<(Instant, u64)>,
    /// Whether every endpoint belongs to one client (a standing connection, a Streamable
    /// HTTP session): they share its request ids and its progress tokens, and what is tied
    /// to no request goes to its newest stream, else its standing one. Else the endpoints
    /// are callers' (2026-07-28), with no standing connection.
    pub(crate) one_client: bool,
    /// The endpoints open besides the standing connection (few, by a front's numbers: in
    /// order, so the newest is the last).
    pub(crate) endpoints: BTreeMap<EndpointId, Endpoint>,
    /// The progress tokens of endpoints' requests (as key text): the relay's own for a
    /// caller's request, with the endpoint and the token the caller chose (raw text); one
    /// client's own, with its endpoint.
    pub(crate) tokens: HashMap<String, (EndpointId, Bytes)>,
}

/// An open endpoint.
pub(crate) struct Endpoint {
    pub(crate) to: tokio::sync::mpsc::Sender<ToEndpoint>,
    /// Whether it takes notifications besides its answer.
    pub(crate) stream: bool,
    /// Whether a notification for it was dropped (the operator is told once per endpoint).
    pub(crate) dropped: std::sync::atomic::AtomicBool,
}

impl State {
    /// The endpoint whose id space `endpoint`'s request ids are in: the standing
    /// connection's for one client's endpoints, its own for a caller's.
    pub(crate) fn id_space(&self, endpoint: EndpointId) -> EndpointId {
        if self.one_client {
            STANDING
        } else {
            endpoint
        }
    }

    /// Where a request of `endpoint` with id `id` is kept while in flight (in its id space).
    pub(crate) fn flight_key(&self, endpoint: EndpointId, id: &[u8]) -> String {
        super::endpoint::flight_key(self.id_space(endpoint), id)
    }

    /// Whether `endpoint` is open and takes notifications.
    fn streams(&self, endpoint: EndpointId) -> bool {
        self.endpoints.get(&endpoint).is_some_and(|e| e.stream)
    }

    /// Where one client's message tied to no request goes: its newest open stream other
    /// than the standing one (a Streamable HTTP POST's, as the client still reads it), else
    /// the standing connection.
    fn loose_target(&self) -> EndpointId {
        let mut newest_first = self.endpoints.iter().rev();
        let streaming = newest_first.find(|(id, e)| **id != STANDING && e.stream);
        streaming.map_or(STANDING, |(id, _)| *id)
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
    pub(crate) fn soonest(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Whether the client has as many requests in flight as the relay takes: nothing more is
    /// read from it until one ends.
    pub(crate) fn full(&self, config: &RelayConfig) -> bool {
        self.flights.len() >= config.max_in_flight
    }

    /// Whether a request relayed to the server still waits for its answer (a subscription,
    /// which ends only when the client ends it, does not count).
    pub(crate) fn awaits_answers(&self) -> bool {
        self.pending.values().any(|p| {
            matches!(
                p,
                Pending::Relayed {
                    subscription: false,
                    ..
                }
            )
        })
    }

    /// Gives a call's handle to its flight, so that a cancellation can stop it.
    pub(crate) fn set_stop(&mut self, flight: &str, handle: AbortHandle) {
        if let Some(Flight::Call { stop, .. }) = self.flights.get_mut(flight) {
            *stop = Some(handle);
        }
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

/// What the engine does for a session, in the order a transition returns it.
pub(crate) enum Out {
    /// An answer for a client endpoint: never dropped while the endpoint is open.
    Client(EndpointId, Bytes),
    /// A notification (or a server's request) for a client endpoint: dropped when an
    /// endpoint other than the standing connection cannot take it.
    Notify(EndpointId, Bytes),
    /// A message for the server.
    Upstream(Bytes),
    /// A checked `tools/call` for the gate: the engine runs it as a future of its own.
    Call(Box<CallStart>),
}

/// What a call's future asks of the session core: it holds none of the session's state.
pub(crate) enum CallEvent {
    /// Send a request of the relay's own, made with `id` (from [`Relay::next_id`]), and give
    /// the server's answer to `reply`. A call's flight learns the id, so that the client's
    /// cancellation reaches the server.
    Ask {
        id: u64,
        flight: Option<String>,
        request: Bytes,
        reply: oneshot::Sender<Result<Reply, ForwardError>>,
    },
    /// Request `id` got no answer in time: the server is told it is cancelled.
    TimedOut(u64),
    /// The relay's own complete `tools/list` (to check a pin) replaces what was seen.
    Listed(super::pins::Seen),
    /// A call's answer for an endpoint other than the standing connection.
    Answer(EndpointId, Bytes),
}

/// What a session shares with its calls, fixed for its life (besides the client's name,
/// set once, and the request ids, taken in turn).
pub(crate) struct Relay {
    pub(crate) tools: RelayTools,
    pub(crate) config: RelayConfig,
    /// The client software as its first `initialize` named itself (shown to the approver).
    pub(crate) client: OnceLock<Arc<ClientInfo>>,
    /// The last id the relay gave a request of its own or relayed.
    last_id: AtomicU64,
}

impl Relay {
    pub(crate) fn new(tools: RelayTools, config: RelayConfig) -> Relay {
        Relay {
            tools,
            config,
            client: OnceLock::new(),
            last_id: AtomicU64::new(0),
        }
    }

    /// Why the server is told a request of ours is cancelled when its time limit passed.
    pub(crate) fn no_answer_in_time(&self) -> String {
        format!("{}: no answer in time", self.config.product)
    }

    /// A new id for a request to the server; never one given before in this session.
    pub(crate) fn next_id(&self) -> u64 {
        self.last_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// One record (through the gate, like every call) for a request the relay refused
    /// itself; nothing was sent.
    pub(crate) fn record_refusal(&self, tool: &str, refusal: Refusal, detail: String) -> GateOutcome {
        let caller = &self.config.caller;
        self.tools.gate().gate().refused_by(tool, caller, refusal, detail)
    }

    /// The `notifications/cancelled` that tells the server a request of ours is cancelled.
    pub(crate) fn cancel_note(upstream_id: u64, reason: &str) -> Bytes {
        Bytes::from(format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{upstream_id},\"reason\":{}}}}}",
            json_string(reason)
        ))
    }
}

/// One transition: the session's settings, its state, the time it runs at, and where what
/// it sends goes.
pub(crate) struct Step<'a> {
    pub(crate) relay: &'a Relay,
    pub(crate) state: &'a mut State,
    pub(crate) now: Instant,
    /// The endpoint whose message is handled: what answers it goes there.
    pub(crate) endpoint: EndpointId,
    out: &'a mut Vec<Out>,
}

impl<'a> Step<'a> {
    pub(crate) fn new(relay: &'a Relay, state: &'a mut State, now: Instant, out: &'a mut Vec<Out>) -> Self {
        Step {
            relay,
            state,
            now,
            endpoint: STANDING,
            out,
        }
    }

    /// Answers the message being handled, on its endpoint.
    pub(crate) fn answer(&mut self, message: Bytes) {
        self.answer_at(self.endpoint, message);
    }

    pub(crate) fn answer_error(&mut self, id: Option<&[u8]>, code: i64, message: &str) {
        self.answer(error_response(id, code, message, None));
    }

    /// Answers a request of `endpoint` (nothing, if that endpoint is not open: nobody waits).
    pub(crate) fn answer_at(&mut self, endpoint: EndpointId, message: Bytes) {
        if endpoint != STANDING && !self.state.endpoints.contains_key(&endpoint) {
            tracing::debug!(target: "aml_mcp::relay", endpoint, "an answer for an endpoint that is not open; dropped");
            return;
        }
        self.out.push(Out::Client(endpoint, message));
    }

    pub(crate) fn answer_error_at(&mut self, endpoint: EndpointId, id: &[u8], code: i64, message: &str) {
        self.answer_at(endpoint, error_response(Some(id), code, message, None));
    }

    /// A notification (or a server's request) for `endpoint` (the standing connection's,
    /// for one tied to no request).
    pub(crate) fn notify(&mut self, endpoint: EndpointId, message: Bytes) {
        let state = &*self.state;
        let endpoint = match endpoint {
            // One client reads what is tied to no request on its newest stream.
            STANDING if state.one_client => state.loose_target(),
            STANDING => STANDING,
            // A JSON answer has no room for notifications, and another request's stream is
            // not the place for them; a closed endpoint has none at all.
            _ if !state.streams(endpoint) => {
                tracing::debug!(target: "aml_mcp::relay", endpoint, "a notification for a request that takes none (answered as JSON, or gone); dropped");
                return;
            }
            _ => endpoint,
        };
        self.out.push(Out::Notify(endpoint, message));
    }

    pub(crate) fn upstream(&mut self, message: Bytes) {
        self.out.push(Out::Upstream(message));
    }

    pub(crate) fn start_call(&mut self, call: CallStart) {
        self.out.push(Out::Call(Box::new(call)));
    }

    /// Tells the server a request of ours is cancelled.
    pub(crate) fn cancel_upstream(&mut self, upstream_id: u64, reason: &str) {
        self.upstream(Relay::cancel_note(upstream_id, reason));
    }

    /// Ends the session: the upstream cannot serve it.
    pub(crate) fn fail(&mut self, why: String) {
        tracing::debug!(target: "aml_mcp::relay", "{why}");
        self.state.fatal.get_or_insert(why);
    }

    /// Answers every relayed request whose time limit has passed by [`Step::now`].
    pub(crate) fn expire_due(&mut self) {
        for upstream_id in self.state.due(self.now) {
            super::from_client::expire(self, upstream_id);
        }
    }

    /// The upstream is gone: every request waiting on it fails now, later ones are refused.
    pub(crate) fn upstream_gone(&mut self, reason: String) {
        if self.state.gone.is_some() {
            return;
        }
        tracing::error!(target: "aml_mcp::relay", "the upstream server is gone: {reason}");
        self.state.gone = Some(reason.clone());
        self.state.flights.retain(|_, f| matches!(f, Flight::Call { .. }));
        let message = format!(
            "{}: the upstream server is gone ({reason})",
            self.relay.config.product
        );
        for (_, waiting) in self.state.take_all_pending() {
            match waiting {
                Pending::Relayed {
                    endpoint, client_id, ..
                } => self.answer_error_at(endpoint, &client_id, jsonrpc::UPSTREAM_GONE, &message),
                Pending::Call { reply } => {
                    let _ = reply.send(Err(ForwardError::UpstreamGone(reason.clone())));
                }
                Pending::Cancelled => {}
            }
        }
    }

    /// The drain limit passed after the client left: each relayed request still waiting is
    /// answered with an error now, and the server is told it is cancelled.
    pub(crate) fn answer_unanswered(&mut self) {
        let limit = self.relay.config.drain_timeout;
        let message = format!(
            "{}: the server did not answer within {limit:?} of the client closing its input; the gate is stopping",
            self.relay.config.product
        );
        let waiting: Vec<u64> = self
            .state
            .pending
            .iter()
            .filter(|(_, p)| {
                matches!(
                    p,
                    Pending::Relayed {
                        subscription: false,
                        ..
                    }
                )
            })
            .map(|(id, _)| *id)
            .collect();
        for upstream_id in waiting {
            let Some(Pending::Relayed {
                endpoint,
                client_id,
                flight,
                ..
            }) = self.state.take_pending(upstream_id)
            else {
                continue;
            };
            self.state.flights.remove(&flight);
            self.state.pending.insert(upstream_id, Pending::Cancelled);
            self.answer_error_at(endpoint, &client_id, jsonrpc::UPSTREAM_TIMEOUT, &message);
            self.cancel_upstream(upstream_id, CLIENT_WENT_AWAY);
        }
    }

    /// What a call's future asks (see [`CallEvent`]).
    pub(crate) fn on_call_event(&mut self, event: CallEvent) {
        match event {
            CallEvent::Ask {
                id,
                flight,
                request,
                reply,
            } => {
                if reply.is_closed() {
                    // Its call was dropped (a cancellation, the drain limit) before the
                    // request could be sent: it never is.
                    return;
                }
                if let Some(reason) = &self.state.gone {
                    let _ = reply.send(Err(ForwardError::NotSent(reason.clone())));
                    return;
                }
                self.state.pending.insert(id, Pending::Call { reply });
                if let Some(Flight::Call { upstream, .. }) =
                    flight.and_then(|f| self.state.flights.get_mut(&f))
                {
                    *upstream = Some(id);
                }
                self.upstream(request);
            }
            CallEvent::TimedOut(id) => {
                // An answer that came meanwhile has ended the request: nothing to cancel.
                if let Some(waiting @ Pending::Call { .. }) = self.state.pending.get_mut(&id) {
                    *waiting = Pending::Cancelled;
                    let reason = self.relay.no_answer_in_time();
                    self.cancel_upstream(id, &reason);
                }
            }
            CallEvent::Listed(seen) => {
                let names: Vec<String> = seen.names().cloned().collect();
                self.state.seen = seen;
                // The relay's own complete list replaces any the client was walking.
                self.state.listing.clear();
                super::advertised::page(self.relay, self.state, names, true);
            }
            CallEvent::Answer(endpoint, message) => self.answer_at(endpoint, message),
        }
    }

    /// A front opened an endpoint.
    pub(crate) fn endpoint_opened(
        &mut self,
        endpoint: EndpointId,
        to: tokio::sync::mpsc::Sender<ToEndpoint>,
        stream: bool,
    ) {
        let dropped = Default::default();
        self.state
            .endpoints
            .insert(endpoint, Endpoint { to, stream, dropped });
    }

    /// An endpoint closed: its progress tokens are forgotten, and a caller's requests still
    /// in flight are cancelled as if its client had cancelled them (one client's stay: a
    /// Streamable HTTP session's client may resume the stream, or ask on another).
    pub(crate) fn endpoint_closed(&mut self, endpoint: EndpointId) {
        self.state.endpoints.remove(&endpoint);
        self.state.tokens.retain(|_, (of, _)| *of != endpoint);
        if self.state.one_client {
            return;
        }
        let prefix = flight_prefix(endpoint);
        let open: Vec<String> = self
            .state
            .flights
            .keys()
            .filter(|key| key.starts_with(&prefix))
            .cloned()
            .collect();
        for key in open {
            if let Some(upstream_id) = super::from_client::cancel_flight(self.state, &key) {
                tracing::debug!(target: "aml_mcp::relay", endpoint, "an endpoint closed before its answer; its request is cancelled");
                self.cancel_upstream(upstream_id, ENDPOINT_CLOSED);
            }
        }
    }

    /// A call's future has ended (answered, refused, withdrawn or panicked): its id is free.
    pub(crate) fn call_ended(&mut self, flight: &str) {
        self.state.flights.remove(flight);
    }

    /// The session ends: the server is told every request of ours still open is cancelled
    /// (those cancelled or timed out were told then).
    pub(crate) fn end(&mut self) {
        for (id, waiting) in self.state.take_all_pending() {
            if !matches!(waiting, Pending::Cancelled) {
                self.cancel_upstream(id, CLIENT_WENT_AWAY);
            }
        }
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;

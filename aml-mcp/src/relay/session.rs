//! The relay engine: one client session in front of one upstream connection. It reads both
//! connections and the session's timer, runs each event through the session core
//! ([`super::machine`]) and sends what that returns. Gated calls are futures of its own,
//! polled beside the connections: no task, no hand-off between tasks per call. The engine
//! owns the session's state; a call's future reaches it only through [`CallEvent`]s, which
//! the engine takes before anything else, so no lock is shared.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{AbortHandle, Abortable, Aborted, BoxFuture, FutureExt};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::endpoint::{Client, EndpointEvent, EndpointId, ToEndpoint, STANDING};
use super::frame::Inbound;
use super::from_client::on_client_event;
use super::from_upstream::on_upstream;
use super::jsonrpc::{Envelope, Kind};
use super::machine::{CallEvent, Out, Relay, Reply, ServerId, State, Step, FIRST_SERVER};
use super::upstreams::{UpstreamEvent, Upstreams};
use super::{Connection, RelayConfig, RelayTools, Upstream};
use crate::ForwardError;

const PROBE_ID: &str = "\"aml-mcp-gate:probe\"";

/// Why a server whose output ended is gone: it closed it, or (a stdio child) a write to
/// its input failed and the relay stopped reading it.
const CLOSED: &str = "the server closed its output or stopped reading its input";

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
    #[error("the server went away before it answered the gate's ping ({0})")]
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
            return Err(ProbeError::Exited(CLOSED.into()));
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

/// What a session's calls share with the engine: its settings, the two connections'
/// sending ends, the way to the engine's state, and whether the client has gone.
pub(crate) struct Session {
    pub(crate) relay: Relay,
    events: mpsc::UnboundedSender<CallEvent>,
    /// The standing connection to the client, if the session has one (else its answers go
    /// to endpoints, through the engine).
    pub(crate) to_client: Option<mpsc::Sender<Bytes>>,
    /// Each server's sending end, by server.
    pub(crate) to_upstream: Vec<mpsc::Sender<Bytes>>,
    /// Set once the client has gone (end of its input, or its output closed): calls not yet
    /// authorized are withdrawn (see [`Session::client_left`]).
    left: tokio::sync::watch::Sender<bool>,
}

impl Session {
    /// Asks the engine to change the session's state for a call.
    pub(crate) fn tell(&self, event: CallEvent) {
        // The engine outlives its calls' futures: it drops them before it ends.
        let _ = self.events.send(event);
    }

    /// Sends a call's answer to its endpoint.
    pub(crate) async fn answer(&self, endpoint: EndpointId, message: Bytes) {
        match (&self.to_client, endpoint) {
            // A client that stopped reading has gone; its end is seen on its input.
            (Some(to_client), STANDING) => drop(to_client.send(message).await),
            _ => self.tell(CallEvent::Answer(endpoint, message)),
        }
    }

    /// Whether the standing connection's client closed its end (its answers cannot be
    /// written).
    fn client_closed(&self) -> bool {
        self.to_client.as_ref().is_some_and(|c| c.is_closed())
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

    /// Sends `server` a request of the relay's own (a gated call, its own `tools/list`), made
    /// by `request` from the id it gets, and waits for the server's answer within the
    /// upstream limit; past it the server is told the request is cancelled. A call's flight
    /// learns the id, so that the client's cancellation reaches the server. `request` may
    /// also return a guard, kept until the answer.
    pub(crate) async fn ask<G>(
        &self,
        server: ServerId,
        flight: Option<&str>,
        request: impl FnOnce(u64) -> (String, G),
    ) -> Result<Reply, ForwardError> {
        let (reply, answer) = oneshot::channel();
        let id = self.relay.next_id();
        let (request, _guard) = request(id);
        self.tell(CallEvent::Ask {
            server,
            id,
            flight: flight.map(str::to_owned),
            request: Bytes::from(request),
            reply,
        });
        let limit = self.relay.config.upstream_timeout;
        match tokio::time::timeout(limit, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(ForwardError::UpstreamGone("the relay stopped".into())),
            Err(_) => {
                self.tell(CallEvent::TimedOut(server, id));
                Err(ForwardError::Timeout(limit))
            }
        }
    }
}

/// The session's calls in flight: each ends with its flight's key, and stops when its
/// handle (in its flight) aborts it; a call dropped before it ends is recorded as such by
/// the gate.
type Calls = FuturesUnordered<Abortable<BoxFuture<'static, String>>>;

/// The engine's own part of a session: the state it alone changes, what transitions return,
/// the calls it polls and what they ask of it.
struct Engine {
    session: Arc<Session>,
    state: State,
    out: Vec<Out>,
    calls: Calls,
    events: mpsc::UnboundedReceiver<CallEvent>,
}

impl Engine {
    /// Runs one transition; what it sends is left in `out`. Returns why the session cannot
    /// go on, once that is known.
    fn step(&mut self, transition: impl FnOnce(&mut Step<'_>)) -> Option<String> {
        let now = Instant::now().into_std();
        transition(&mut Step::new(
            &self.session.relay,
            &mut self.state,
            now,
            &mut self.out,
        ));
        self.state.fatal.clone()
    }

    /// Something happened at a server.
    fn on_upstream_event(&mut self, event: UpstreamEvent) -> Option<String> {
        match event {
            UpstreamEvent::Message(server, inbound) => self.step(|step| on_upstream(step, server, inbound)),
            UpstreamEvent::Closed(server) => self.step(|step| step.upstream_gone(server, CLOSED.into())),
            UpstreamEvent::Exited(server, status) => {
                self.step(|step| step.upstream_gone(server, format!("it exited ({status})")))
            }
        }
    }

    /// Takes what calls asked while they were polled, before anything else can happen.
    fn take_events(&mut self) -> Option<String> {
        let mut fatal = None;
        while let Ok(event) = self.events.try_recv() {
            fatal = self.step(|step| step.on_call_event(event));
        }
        fatal
    }

    /// A call's future ended (or was stopped): its flight ends.
    fn call_ended(&mut self, ended: Result<String, Aborted>) -> Option<String> {
        match ended {
            Ok(flight) => self.step(|step| step.call_ended(&flight)),
            Err(Aborted) => None,
        }
    }

    /// Whether anyone can still hear the session's answers: its standing connection is
    /// open, or an endpoint is.
    fn heard(&self) -> bool {
        match &self.session.to_client {
            Some(to_client) => !to_client.is_closed(),
            None => !self.state.endpoints.is_empty(),
        }
    }

    /// Sends what transitions returned, in order, and starts the calls they checked.
    async fn send(&mut self) {
        let session = &self.session;
        for next in self.out.drain(..) {
            match next {
                Out::Client(endpoint, message) => {
                    deliver(session, &self.state, endpoint, ToEndpoint::Answer(message)).await
                }
                Out::Notify(endpoint, message) => {
                    deliver(session, &self.state, endpoint, ToEndpoint::Notification(message)).await
                }
                Out::Upstream(server, message) => match session.to_upstream.get(server) {
                    Some(to_upstream) => drop(to_upstream.send(message).await),
                    // The state names only the servers the engine was given.
                    None => {
                        tracing::error!(target: "aml_mcp::relay", server, "a message for no server; dropped")
                    }
                },
                Out::Call(start) => {
                    let flight = start.flight().to_owned();
                    let (abort, registration) = AbortHandle::new_pair();
                    let ended = flight.clone();
                    // A panic in a call ends that call, as a task's would, not the session.
                    let call = std::panic::AssertUnwindSafe(super::call::run(Arc::clone(session), *start))
                        .catch_unwind()
                        .map(move |result| {
                            if result.is_err() {
                                tracing::error!(target: "aml_mcp::relay", "a call panicked; it was dropped");
                            }
                            ended
                        });
                    self.calls.push(Abortable::new(call.boxed(), registration));
                    self.state.set_stop(&flight, abort);
                }
            }
        }
    }
}

/// Sends one message to a client endpoint. The standing connection is waited on (a client
/// that stops reading holds the session, as a pipe would); another endpoint is not: its
/// answer waits for room on a task of its own, and a notification it has no room for is
/// dropped (the transition sent it only to an endpoint that takes notifications).
async fn deliver(session: &Session, state: &State, endpoint: EndpointId, message: ToEndpoint) {
    if let (STANDING, Some(to_client)) = (endpoint, &session.to_client) {
        let (ToEndpoint::Answer(bytes) | ToEndpoint::Notification(bytes)) = message;
        return drop(to_client.send(bytes).await);
    }
    let Some(open) = state.endpoints.get(&endpoint) else {
        tracing::debug!(target: "aml_mcp::relay", endpoint, "a message for an endpoint that is not open; dropped (no stream carries it)");
        return;
    };
    match message {
        ToEndpoint::Answer(_) => match open.to.try_send(message) {
            Err(mpsc::error::TrySendError::Full(answer)) => {
                let to = open.to.clone();
                // Behind queued notifications; a client that stopped reading closes its end.
                tokio::spawn(async move { tokio::time::timeout(ANSWER_WAIT, to.send(answer)).await });
            }
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
        },
        ToEndpoint::Notification(_) => {
            if open.to.try_send(message).is_err() {
                if open.dropped.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::debug!(target: "aml_mcp::relay", endpoint, "a notification was dropped");
                } else {
                    tracing::warn!(target: "aml_mcp::relay", endpoint,
                                   "a client endpoint is not reading its stream: its notifications (progress, for one) are dropped until it does; its answer is not");
                }
            }
        }
    }
}

/// How long an endpoint's answer waits for room behind its notifications.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// The client side's input: a standing connection's messages, or a front's endpoint events.
enum ClientInput {
    Standing(mpsc::Receiver<Inbound>),
    Endpoints(mpsc::Receiver<EndpointEvent>),
}

impl ClientInput {
    async fn recv(&mut self) -> Option<EndpointEvent> {
        match self {
            ClientInput::Standing(incoming) => incoming.recv().await.map(|inbound| EndpointEvent::Message {
                endpoint: STANDING,
                inbound,
            }),
            ClientInput::Endpoints(events) => events.recv().await,
        }
    }

    /// The next event if one is ready.
    fn try_recv(&mut self) -> Option<EndpointEvent> {
        match self {
            ClientInput::Standing(incoming) => {
                incoming.try_recv().ok().map(|inbound| EndpointEvent::Message {
                    endpoint: STANDING,
                    inbound,
                })
            }
            ClientInput::Endpoints(events) => events.try_recv().ok(),
        }
    }
}

/// Client events taken in one turn of the engine when they are ready together (an
/// endpoint's opening and its message).
const CLIENT_BURST: usize = 16;

/// Runs one client session against `upstream` until the client goes away (calls in flight
/// then get up to [`RelayConfig::drain_timeout`] to finish) or the upstream is gone (the
/// client's requests are then refused for [`RelayConfig::gone_grace`]). `early` is what the
/// upstream sent before the session (see [`probe`]). `client` is a standing [`Connection`]
/// or a front's endpoints ([`Client`], ADR 031).
pub async fn run(
    tools: RelayTools,
    config: RelayConfig,
    client: impl Into<Client>,
    upstream: Upstream,
    early: Vec<Inbound>,
) -> RelayEnd {
    run_engine(tools, config, client.into(), Vec::new(), vec![upstream], early).await
}

/// Runs one client session in front of several servers (ADR 033), each given with its
/// name, in the order the host listed them (the tools' servers, see
/// [`RelayTools::from_json_for_servers`]). As [`run`], except that a server that goes takes
/// only its own requests and tools (the client is told its tools changed); the session ends
/// as with one server once every server is gone.
pub async fn run_servers(
    tools: RelayTools,
    config: RelayConfig,
    client: impl Into<Client>,
    servers: Vec<(String, Upstream)>,
) -> RelayEnd {
    let (names, upstreams) = servers.into_iter().unzip();
    run_engine(tools, config, client.into(), names, upstreams, Vec::new()).await
}

async fn run_engine(
    tools: RelayTools,
    config: RelayConfig,
    client: Client,
    names: Vec<String>,
    upstreams: Vec<Upstream>,
    early: Vec<Inbound>,
) -> RelayEnd {
    let (mut from_client, to_client, one_client) = match client {
        Client::Connection(Connection { incoming, outgoing }) => {
            (ClientInput::Standing(incoming), Some(outgoing), true)
        }
        Client::Session(events) => (ClientInput::Endpoints(events), None, true),
        Client::Endpoints(events) => (ClientInput::Endpoints(events), None, false),
    };
    let (mut upstreams, to_upstream) = Upstreams::new(upstreams);
    let (events, events_rx) = mpsc::unbounded_channel();
    let session = Arc::new(Session {
        relay: Relay::new(tools, config),
        to_client,
        to_upstream,
        events,
        left: tokio::sync::watch::Sender::new(false),
    });
    let mut engine = Engine {
        session: Arc::clone(&session),
        state: State::new(names, one_client),
        out: Vec::new(),
        calls: Calls::new(),
        events: events_rx,
    };
    let mut handshake: Option<String> = None;
    for inbound in early {
        handshake = engine.step(|step| on_upstream(step, FIRST_SERVER, inbound));
    }
    engine.send().await;
    let mut gone_at: Option<Instant> = None;
    let grace = session.relay.config.gone_grace;
    while handshake.is_none() {
        handshake = engine.take_events();
        engine.send().await;
        if handshake.is_some() {
            break;
        }
        let full = engine.state.full(&session.relay.config);
        let soonest = engine.state.soonest();
        let calls_idle = engine.calls.is_empty();
        handshake = tokio::select! {
            event = upstreams.next(), if upstreams.active() => {
                let fatal = engine.on_upstream_event(event);
                // Callers share their relay for as long as it lives: it ends (and the next
                // request starts every server again) once any of its servers is gone. One
                // client's session goes on with the servers it has.
                let ends = match engine.state.one_client {
                    true => engine.state.all_gone().is_some(),
                    false => engine.state.any_gone(),
                };
                if ends {
                    gone_at.get_or_insert_with(Instant::now);
                }
                fatal
            }
            next = from_client.recv(), if !full => match next {
                // Its answers cannot be written (it closed its end): it has gone, and what
                // it sent after that is not taken up to run unanswered.
                Some(_) if session.client_closed() => {
                    session.left.send_replace(true);
                    break;
                }
                Some(event) => {
                    let mut fatal = engine.step(|step| on_client_event(step, event));
                    for _ in 1..CLIENT_BURST {
                        // Only past events that sent nothing (an opening, a notification
                        // dropped): what was sent, and a call started, go out first, as one
                        // event at a time would have it (a cancellation finds its call).
                        let room = !engine.state.full(&session.relay.config) && !session.client_closed();
                        if !room || fatal.is_some() || !engine.out.is_empty() {
                            break;
                        }
                        let Some(event) = from_client.try_recv() else { break };
                        fatal = engine.step(|step| on_client_event(step, event));
                    }
                    fatal
                }
                None => {
                    session.left.send_replace(true);
                    break;
                }
            },
            Some(ended) = engine.calls.next(), if !calls_idle => engine.call_ended(ended),
            Some(event) = engine.events.recv() => engine.step(|step| step.on_call_event(event)),
            () = sleep_until(soonest), if soonest.is_some() => engine.step(|step| step.expire_due()),
            _ = sleep_until(gone_at.map(|at| (at + grace).into_std())), if gone_at.is_some() => break,
        };
        // Calls in flight still answer their clients and leave their receipts.
        engine.send().await;
    }
    // Requests already read still get their answers (and calls their receipts), within a
    // bound: a client that writes its requests and closes its input at once (`printf … |`)
    // is answered like any other.
    let deadline = Instant::now() + session.relay.config.drain_timeout;
    loop {
        engine.take_events();
        engine.send().await;
        let waiting = engine.heard() && engine.state.awaits_answers();
        if engine.calls.is_empty() && !waiting {
            break;
        }
        let soonest = engine.state.soonest();
        let calls_idle = engine.calls.is_empty();
        tokio::select! {
            event = upstreams.next(), if upstreams.active() => engine.on_upstream_event(event),
            Some(ended) = engine.calls.next(), if !calls_idle => engine.call_ended(ended),
            Some(event) = engine.events.recv() => engine.step(|step| step.on_call_event(event)),
            () = sleep_until(soonest), if soonest.is_some() => engine.step(|step| step.expire_due()),
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(target: "aml_mcp::relay", calls = engine.calls.len(),
                               "calls still running when the client left are recorded as abandoned");
                engine.calls.clear();
                engine.step(|step| step.answer_unanswered());
                engine.send().await;
                break;
            }
        };
    }
    if let Some(why) = handshake {
        return RelayEnd::Handshake(why);
    }
    engine.step(|step| step.end());
    engine.send().await;
    match engine.state.all_gone() {
        Some(reason) => RelayEnd::UpstreamGone(reason.clone()),
        None if !engine.state.one_client && engine.state.any_gone() => {
            RelayEnd::UpstreamGone(engine.state.gone_why())
        }
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

#[cfg(test)]
#[path = "run_servers_tests.rs"]
mod run_servers_tests;

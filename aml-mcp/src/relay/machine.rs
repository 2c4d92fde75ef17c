//! The session's state and its transitions, without I/O: a message from either side, the
//! passing of time or the upstream's end goes in with the session's [`State`], and what to
//! send where comes out, in order ([`Out`]). The engine ([`super::session`]) reads the
//! connections, runs a transition on the state it owns and sends what it returns; nothing
//! here awaits, so every transition can be driven (and tested) without a runtime. A call's
//! future holds no state: what it needs of the session it asks for ([`CallEvent`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
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

/// A server behind the relay, by its place in the gate's list of servers: 0 for a gate with
/// one server (ADR 033). Each server has its own connection, and what the session keeps of a
/// request it sent names the server it went to, so that no server's answer (or absence) is
/// ever taken for another's.
pub type ServerId = usize;

/// The only server of a gate with one, and the one a client's request goes to until routing
/// by exposed name lands (ADR 033, step 4).
pub const FIRST_SERVER: ServerId = 0;

/// What waits for an answer from a server, by the server and the id the relay gave the
/// request (unique across the session's servers).
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
        /// One server's part of a request every server hears ([`super::gather`]): its
        /// answer goes to the gathering, not to the client.
        gather: Option<u64>,
        /// A list request of a gate with several servers: its answer's `nextCursor` becomes
        /// the gate's ([`super::pages`]).
        paged: bool,
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
    /// Relayed to a server, under the relay's id.
    Relayed(ServerId, u64),
    /// Relayed to every server, gathered under this number ([`super::gather`]).
    Gathered(u64),
    Call {
        /// The server and the relay's id, once the call's request was sent.
        upstream: Option<(ServerId, u64)>,
        stop: Option<AbortHandle>,
    },
}

/// A server's request relayed to the client, by the id the client saw it under (as a key):
/// where the client's answer goes, and the id the server gave it.
pub(crate) struct Asked {
    pub(crate) server: ServerId,
    pub(crate) server_id: Bytes,
}

/// Everything one session keeps between messages: one owner, changed only by transitions.
pub(crate) struct State {
    pub(crate) pending: HashMap<(ServerId, u64), Pending>,
    pub(crate) flights: HashMap<String, Flight>,
    /// How many servers the session fronts (at least one).
    pub(crate) servers: usize,
    /// Their names, as the operator gave them (shown to the client and in logs).
    names: Vec<String>,
    /// The requests every server hears, by their number, until each server has answered.
    pub(crate) gathers: HashMap<u64, super::gather::Gather>,
    /// Whether the client has been sent a tool list (so a change to it is news).
    pub(crate) tools_listed: bool,
    /// Per server, the capabilities its handshake answered with, once gathered
    /// ([`State::offers`]).
    pub(crate) offered: Vec<Option<Vec<String>>>,
    /// With several servers: each prompt the client was shown, by the name it was shown
    /// under, with its server and the server's own name for it ([`super::prompts`]).
    pub(crate) prompts: HashMap<String, (ServerId, String)>,
    /// With several servers: whose each listed resource URI and URI template is
    /// ([`super::resources`]).
    pub(crate) resources: HashMap<String, super::resources::Owner>,
    pub(crate) templates: HashMap<String, super::resources::Owner>,
    /// The servers that are gone, with why: their requests are refused, the others serve.
    pub(crate) gone: BTreeMap<ServerId, String>,
    /// Set when the session cannot go on (the upstream failed the handshake).
    pub(crate) fatal: Option<String>,
    /// Each server's tool definitions as this session has seen them (pins), by server.
    pub(crate) seen: Vec<super::pins::Seen>,
    /// The servers' requests relayed to the client and not yet answered, by the id the
    /// client saw (as a lookup key): only answers to these are relayed back, each to its
    /// server under its own id. With one server the client sees the server's own id; with
    /// several, one of the relay's (two servers may use one id).
    pub(crate) asked: HashMap<String, Asked>,
    /// Per server: its own tool names on the `tools/list` pages seen since its last
    /// complete list, and the registered tools last found missing from one (see
    /// `advertised`).
    pub(crate) listing: Vec<BTreeSet<String>>,
    pub(crate) missing_warned: Vec<BTreeSet<String>>,
    /// The time limits of relayed requests, soonest first, by server and upstream id: the
    /// session's one timer waits for the first (no task per request).
    pub(crate) deadlines: BTreeSet<(Instant, ServerId, u64)>,
    /// Whether every endpoint belongs to one client (a standing connection, a Streamable
    /// HTTP session): they share its request ids and its progress tokens, and what is tied
    /// to no request goes to its newest stream, else its standing one. Else the endpoints
    /// are callers' (2026-07-28), with no standing connection.
    pub(crate) one_client: bool,
    /// The endpoints open besides the standing connection (few, by a front's numbers: in
    /// order, so the newest is the last).
    pub(crate) endpoints: BTreeMap<EndpointId, Endpoint>,
    /// The progress tokens of endpoints' requests (as key text): the relay's own for a
    /// caller's request, with the endpoint, the server it went to and the token the caller
    /// chose (raw text); one client's own, with its endpoint and server.
    pub(crate) tokens: HashMap<String, (EndpointId, ServerId, Bytes)>,
    /// The token (key text) the client message being read noted, until that message is
    /// routed to its server ([`State::token_goes_to`]).
    pub(crate) noted_token: Option<String>,
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
    /// The state of a session that has seen nothing yet, in front of the servers `names`
    /// (one, unnamed, when empty), with one client's endpoints (`one_client`) or callers'.
    pub(crate) fn new(names: Vec<String>, one_client: bool) -> State {
        let servers = names.len().max(1);
        State {
            pending: HashMap::new(),
            flights: HashMap::new(),
            servers,
            names,
            gathers: HashMap::new(),
            tools_listed: false,
            offered: vec![None; servers],
            prompts: HashMap::new(),
            resources: HashMap::new(),
            templates: HashMap::new(),
            gone: BTreeMap::new(),
            fatal: None,
            seen: (0..servers).map(|_| Default::default()).collect(),
            asked: HashMap::new(),
            listing: vec![BTreeSet::new(); servers],
            missing_warned: vec![BTreeSet::new(); servers],
            deadlines: BTreeSet::new(),
            one_client,
            endpoints: BTreeMap::new(),
            tokens: HashMap::new(),
            noted_token: None,
        }
    }

    /// The request whose progress token was just noted goes to `server`: only that server's
    /// progress under the token reaches the request's endpoint.
    pub(crate) fn token_goes_to(&mut self, server: ServerId) {
        if let Some(key) = self.noted_token.take() {
            if let Some(entry) = self.tokens.get_mut(&key) {
                entry.1 = server;
            }
        }
    }

    /// `server`'s name: `upstream` for the one server of a gate given no list.
    pub(crate) fn server_name(&self, server: ServerId) -> String {
        match self.names.get(server) {
            Some(name) => name.clone(),
            None if self.names.is_empty() => "upstream".to_owned(),
            None => format!("server {server}"),
        }
    }

    /// The server a request that names none goes to: the first one still there (the first
    /// one, when every server is gone: the request is then refused as its).
    pub(crate) fn default_server(&self) -> ServerId {
        (0..self.servers)
            .find(|s| self.gone(*s).is_none())
            .unwrap_or(FIRST_SERVER)
    }

    /// The server a `method` request that names none goes to: the first one still there
    /// that offers its capability (`prompts/…`, `resources/…`), else [`Self::default_server`].
    pub(crate) fn default_server_for(&self, method: &str) -> ServerId {
        (0..self.servers)
            .find(|s| self.gone(*s).is_none() && self.offers(*s, method))
            .unwrap_or_else(|| self.default_server())
    }

    /// Whether `server` offers what `method` lists or gets (its handshake's capabilities:
    /// `tools`, `prompts` or `resources`); a server whose handshake the relay did not see
    /// (none yet, or one server) is taken to offer everything.
    pub(crate) fn offers(&self, server: ServerId, method: &str) -> bool {
        let Some(capability) = method.split('/').next() else {
            return true;
        };
        match self.offered.get(server) {
            Some(Some(offered)) if matches!(capability, "tools" | "prompts" | "resources") => {
                offered.iter().any(|c| c == capability)
            }
            _ => true,
        }
    }

    /// Why every server is gone, once each is (the first's reason).
    pub(crate) fn all_gone(&self) -> Option<&String> {
        (self.gone.len() >= self.servers)
            .then(|| self.gone.values().next())
            .flatten()
    }

    /// Why each server is gone, `name: reason` joined by `; ` (for one unnamed server, its
    /// reason alone).
    pub(crate) fn gone_why(&self) -> String {
        if self.names.is_empty() {
            return self.gone.values().next().cloned().unwrap_or_default();
        }
        let why: Vec<String> = self
            .gone
            .iter()
            .map(|(server, why)| format!("{}: {why}", self.server_name(*server)))
            .collect();
        why.join("; ")
    }

    /// Whether any server is gone.
    pub(crate) fn any_gone(&self) -> bool {
        !self.gone.is_empty()
    }

    /// Why `server` is gone, if it is.
    pub(crate) fn gone(&self, server: ServerId) -> Option<&String> {
        self.gone.get(&server)
    }

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

    /// Takes what waits for `server`'s answer to `upstream_id`, with its time limit.
    pub(crate) fn take_pending(&mut self, server: ServerId, upstream_id: u64) -> Option<Pending> {
        let waiting = self.pending.remove(&(server, upstream_id))?;
        if let Pending::Relayed {
            deadline: Some((at, _)),
            ..
        } = &waiting
        {
            self.deadlines.remove(&(*at, server, upstream_id));
        }
        Some(waiting)
    }

    /// Takes everything that waits for an answer from `server` (every server: `None`), with
    /// the time limits.
    pub(crate) fn take_all_pending(&mut self, server: Option<ServerId>) -> Vec<((ServerId, u64), Pending)> {
        let Some(server) = server else {
            self.deadlines.clear();
            return self.pending.drain().collect();
        };
        self.deadlines.retain(|(_, of, _)| *of != server);
        let keys: Vec<(ServerId, u64)> = self
            .pending
            .keys()
            .filter(|(of, _)| *of == server)
            .copied()
            .collect();
        keys.into_iter()
            .filter_map(|key| Some((key, self.pending.remove(&key)?)))
            .collect()
    }

    /// The soonest time limit of a relayed request: the session's one timer waits for it.
    pub(crate) fn soonest(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _, _)| *at)
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

    /// The requests (by server and upstream id) whose time limit has passed by `now`, taken
    /// off the timer.
    fn due(&mut self, now: Instant) -> Vec<(ServerId, u64)> {
        let mut due = Vec::new();
        while let Some(&(at, server, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            due.push((server, id));
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
    /// A message for a server.
    Upstream(ServerId, Bytes),
    /// A checked `tools/call` for the gate: the engine runs it as a future of its own.
    Call(Box<CallStart>),
}

/// What a call's future asks of the session core: it holds none of the session's state.
pub(crate) enum CallEvent {
    /// Send `server` a request of the relay's own, made with `id` (from [`Relay::next_id`]),
    /// and give the server's answer to `reply`. A call's flight learns the id, so that the
    /// client's cancellation reaches the server.
    Ask {
        server: ServerId,
        id: u64,
        flight: Option<String>,
        request: Bytes,
        reply: oneshot::Sender<Result<Reply, ForwardError>>,
    },
    /// Request `id` to `server` got no answer in time: the server is told it is cancelled.
    TimedOut(ServerId, u64),
    /// The relay's own complete `tools/list` of a server (to check a pin) replaces what was
    /// seen of it.
    Listed(ServerId, super::pins::Seen),
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

    /// The `notifications/cancelled` that tells a server a request of ours is cancelled.
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

    pub(crate) fn upstream(&mut self, server: ServerId, message: Bytes) {
        self.out.push(Out::Upstream(server, message));
    }

    /// A message for every server still there (a client's notification that names no
    /// request: `notifications/initialized`, a change of its roots).
    pub(crate) fn every_upstream(&mut self, message: Bytes) {
        for server in 0..self.state.servers {
            if self.state.gone(server).is_none() {
                self.upstream(server, message.clone());
            }
        }
    }

    pub(crate) fn start_call(&mut self, call: CallStart) {
        self.out.push(Out::Call(Box::new(call)));
    }

    /// Tells `server` a request of ours is cancelled.
    pub(crate) fn cancel_upstream(&mut self, server: ServerId, upstream_id: u64, reason: &str) {
        self.upstream(server, Relay::cancel_note(upstream_id, reason));
    }

    /// Ends the session: the upstream cannot serve it.
    pub(crate) fn fail(&mut self, why: String) {
        tracing::debug!(target: "aml_mcp::relay", "{why}");
        self.state.fatal.get_or_insert(why);
    }

    /// Answers every relayed request whose time limit has passed by [`Step::now`].
    pub(crate) fn expire_due(&mut self) {
        for (server, upstream_id) in self.state.due(self.now) {
            super::from_client::expire(self, server, upstream_id);
        }
    }

    /// `server` is gone: every request waiting on it fails now, later ones to it are
    /// refused; the other servers serve on.
    pub(crate) fn upstream_gone(&mut self, server: ServerId, reason: String) {
        if self.state.gone(server).is_some() {
            return;
        }
        let name = self.state.server_name(server);
        tracing::error!(target: "aml_mcp::relay", server = %name, "the upstream server is gone: {reason}");
        self.state.gone.insert(server, reason.clone());
        self.state
            .flights
            .retain(|_, f| !matches!(f, Flight::Relayed(of, _) if *of == server));
        // Its requests to the client can no longer be answered to it.
        self.state.asked.retain(|_, asked| asked.server != server);
        let message = format!(
            "{}: the upstream server is gone ({reason})",
            self.relay.config.product
        );
        for (_, waiting) in self.state.take_all_pending(Some(server)) {
            match waiting {
                Pending::Relayed {
                    gather: Some(gather), ..
                } => super::gather::said(self, gather, server, Err(format!("it is gone ({reason})"))),
                Pending::Relayed {
                    endpoint, client_id, ..
                } => self.answer_error_at(endpoint, &client_id, jsonrpc::UPSTREAM_GONE, &message),
                Pending::Call { reply } => {
                    let _ = reply.send(Err(ForwardError::UpstreamGone(reason.clone())));
                }
                Pending::Cancelled => {}
            }
        }
        if self.state.servers > 1 && self.state.tools_listed {
            // Its tools are gone from the list the client has (ADR 033).
            let changed = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}";
            self.notify(STANDING, Bytes::from_static(changed.as_bytes()));
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
        let waiting: Vec<(ServerId, u64)> = self
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
            .map(|(key, _)| *key)
            .collect();
        for (server, upstream_id) in waiting {
            let Some(Pending::Relayed {
                endpoint,
                client_id,
                flight,
                gather,
                ..
            }) = self.state.take_pending(server, upstream_id)
            else {
                continue;
            };
            self.state
                .pending
                .insert((server, upstream_id), Pending::Cancelled);
            self.cancel_upstream(server, upstream_id, CLIENT_WENT_AWAY);
            match gather {
                Some(gather) => super::gather::said(self, gather, server, Err(message.clone())),
                None => {
                    self.state.flights.remove(&flight);
                    self.answer_error_at(endpoint, &client_id, jsonrpc::UPSTREAM_TIMEOUT, &message);
                }
            }
        }
    }

    /// What a call's future asks (see [`CallEvent`]).
    pub(crate) fn on_call_event(&mut self, event: CallEvent) {
        match event {
            CallEvent::Ask {
                server,
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
                let gone = match self.state.gone(server) {
                    Some(reason) => Some(reason.clone()),
                    None if server >= self.state.servers => Some(format!("no server {server} here")),
                    None => None,
                };
                if let Some(reason) = gone {
                    let _ = reply.send(Err(ForwardError::NotSent(reason)));
                    return;
                }
                self.state.pending.insert((server, id), Pending::Call { reply });
                if let Some(Flight::Call { upstream, .. }) =
                    flight.and_then(|f| self.state.flights.get_mut(&f))
                {
                    *upstream = Some((server, id));
                }
                self.upstream(server, request);
            }
            CallEvent::TimedOut(server, id) => {
                // An answer that came meanwhile has ended the request: nothing to cancel.
                if let Some(waiting @ Pending::Call { .. }) = self.state.pending.get_mut(&(server, id)) {
                    *waiting = Pending::Cancelled;
                    let reason = self.relay.no_answer_in_time();
                    self.cancel_upstream(server, id, &reason);
                }
            }
            CallEvent::Listed(server, seen) => {
                let Some(kept) = self.state.seen.get_mut(server) else {
                    return;
                };
                let names: Vec<String> = seen.names().cloned().collect();
                *kept = seen;
                // The relay's own complete list replaces any the client was walking.
                if let Some(listing) = self.state.listing.get_mut(server) {
                    listing.clear();
                }
                super::advertised::page(self.relay, self.state, server, names, true);
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
        self.state.tokens.retain(|_, (of, _, _)| *of != endpoint);
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
            for (server, upstream_id) in super::from_client::cancel_flight(self.state, &key) {
                tracing::debug!(target: "aml_mcp::relay", endpoint, "an endpoint closed before its answer; its request is cancelled");
                self.cancel_upstream(server, upstream_id, ENDPOINT_CLOSED);
            }
        }
    }

    /// A call's future has ended (answered, refused, withdrawn or panicked): its id is free.
    pub(crate) fn call_ended(&mut self, flight: &str) {
        self.state.flights.remove(flight);
    }

    /// The session ends: each server is told every request of ours still open is cancelled
    /// (those cancelled or timed out were told then).
    pub(crate) fn end(&mut self) {
        for ((server, id), waiting) in self.state.take_all_pending(None) {
            if !matches!(waiting, Pending::Cancelled) {
                self.cancel_upstream(server, id, CLIENT_WENT_AWAY);
            }
        }
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;

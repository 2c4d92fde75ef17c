//! The session core driven by hand, for its unit tests and its fuzz target (feature
//! `fuzzing`): no runtime, no channels, and a clock only the caller moves. Not a stable API.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::endpoint::{EndpointEvent, EndpointId, ToEndpoint, STANDING};
use super::from_client::on_client_event;
use super::from_upstream::on_upstream;
use super::machine::{CallEvent, Out, Relay, Reply, ServerId, State, Step, FIRST_SERVER};
use super::{Inbound, RelayConfig, RelayTools};
use crate::ForwardError;

/// One session's core, and the clock its transitions run at.
pub struct Machine {
    relay: Relay,
    state: State,
    now: Instant,
    /// Where the answers to the calls' own requests go, by request id.
    answers: HashMap<u64, oneshot::Receiver<Result<Reply, ForwardError>>>,
    /// Each checked call's server and the tool name it is sent under, by flight.
    targets: HashMap<String, (ServerId, String)>,
}

/// What one transition returned, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// A message for the client's standing connection.
    Client(Bytes),
    /// A message for a client endpoint other than the standing connection.
    Endpoint(EndpointId, ToEndpoint),
    /// A message tied to no endpoint, in a session without a standing connection: dropped.
    Nowhere(Bytes),
    /// A message for a server (0: the first, or only, one).
    Upstream(ServerId, Bytes),
    /// A checked `tools/call` handed to a future of its own, by its client id's key.
    Call(String),
}

impl std::fmt::Debug for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machine")
            .field("in_flight", &self.in_flight())
            .field("fatal", &self.fatal())
            .finish_non_exhaustive()
    }
}

impl Machine {
    /// A session with a standing client connection (stdio, an HTTP session) in front of
    /// one server, that has seen nothing yet.
    pub fn new(tools: RelayTools, config: RelayConfig) -> Machine {
        Machine::with_servers(tools, config, &[])
    }

    /// As [`Machine::new`], in front of the servers named `servers` (one, unnamed, when
    /// empty; ADR 033).
    pub fn with_servers(tools: RelayTools, config: RelayConfig, servers: &[&str]) -> Machine {
        Machine {
            relay: Relay::new(tools, config),
            state: State::new(servers.iter().map(|s| (*s).to_owned()).collect(), true),
            now: Instant::now(),
            answers: HashMap::new(),
            targets: HashMap::new(),
        }
    }

    /// A session whose client side is callers' endpoints only (2026-07-28 stateless HTTP).
    pub fn of_endpoints(tools: RelayTools, config: RelayConfig) -> Machine {
        let mut machine = Machine::new(tools, config);
        machine.state.one_client = false;
        machine
    }

    /// A session whose client side is one client's endpoints (a Streamable HTTP session):
    /// [`Sent::Client`] is what goes to its standing stream.
    pub fn of_session(tools: RelayTools, config: RelayConfig) -> Machine {
        Machine::new(tools, config)
    }

    fn run(&mut self, transition: impl FnOnce(&mut Step<'_>)) -> Vec<Sent> {
        let mut out = Vec::new();
        transition(&mut Step::new(&self.relay, &mut self.state, self.now, &mut out));
        let standing = self.state.one_client;
        for next in &out {
            if let Out::Call(start) = next {
                let (server, name) = start.target();
                let target = (server, name.to_owned());
                self.targets.insert(start.flight().to_owned(), target);
            }
        }
        out.into_iter()
            .map(|next| match next {
                Out::Client(STANDING, b) | Out::Notify(STANDING, b) if standing => Sent::Client(b),
                Out::Client(STANDING, b) | Out::Notify(STANDING, b) => Sent::Nowhere(b),
                Out::Client(endpoint, b) => Sent::Endpoint(endpoint, ToEndpoint::Answer(b)),
                Out::Notify(endpoint, b) => Sent::Endpoint(endpoint, ToEndpoint::Notification(b)),
                Out::Upstream(server, b) => Sent::Upstream(server, b),
                Out::Call(start) => Sent::Call(start.flight().to_owned()),
            })
            .collect()
    }

    /// A message (or an oversized frame) from the client's standing connection.
    pub fn client(&mut self, inbound: Inbound) -> Vec<Sent> {
        self.endpoint(EndpointEvent::Message {
            endpoint: STANDING,
            inbound,
        })
    }

    /// An endpoint's event: opened (`Open`'s channel is not used: what goes to the
    /// endpoint is returned), a message, closed.
    pub fn endpoint(&mut self, event: EndpointEvent) -> Vec<Sent> {
        self.run(|step| on_client_event(step, event))
    }

    /// Opens `endpoint` (`stream`: it takes notifications).
    pub fn open(&mut self, endpoint: EndpointId, stream: bool) -> Vec<Sent> {
        let (to, _) = tokio::sync::mpsc::channel(1);
        self.endpoint(EndpointEvent::Open { endpoint, to, stream })
    }

    /// A message (or an oversized frame) from the first server.
    pub fn server(&mut self, inbound: Inbound) -> Vec<Sent> {
        self.server_at(FIRST_SERVER, inbound)
    }

    /// A message (or an oversized frame) from `server`.
    pub fn server_at(&mut self, server: ServerId, inbound: Inbound) -> Vec<Sent> {
        self.run(|step| on_upstream(step, server, inbound))
    }

    /// Moves the clock on by `elapsed` and lets the session's timer fire.
    pub fn after(&mut self, elapsed: Duration) -> Vec<Sent> {
        self.now += elapsed;
        self.run(|step| step.expire_due())
    }

    /// The first server has gone (it exited, or closed its output).
    pub fn upstream_gone(&mut self, reason: &str) -> Vec<Sent> {
        self.server_gone(FIRST_SERVER, reason)
    }

    /// `server` has gone.
    pub fn server_gone(&mut self, server: ServerId, reason: &str) -> Vec<Sent> {
        self.run(|step| step.upstream_gone(server, reason.to_owned()))
    }

    /// The client left and the drain limit passed: what still waits is answered.
    pub fn drained(&mut self) -> Vec<Sent> {
        self.run(|step| step.answer_unanswered())
    }

    /// The session ends: the server is told what is still open is cancelled.
    pub fn end(&mut self) -> Vec<Sent> {
        self.run(|step| step.end())
    }

    /// A call's future sends its request (`request`, made with the id returned) to the
    /// first server for the checked call of `flight`.
    pub fn call_sends(&mut self, flight: &str, request: impl FnOnce(u64) -> String) -> (u64, Vec<Sent>) {
        self.ask(FIRST_SERVER, flight, request, true)
    }

    /// As [`Machine::call_sends`], to `server`.
    pub fn call_sends_to(
        &mut self,
        server: ServerId,
        flight: &str,
        request: impl FnOnce(u64) -> String,
    ) -> (u64, Vec<Sent>) {
        self.ask(server, flight, request, true)
    }

    /// As [`Machine::call_sends`], for a call whose future was dropped (cancelled) after it
    /// asked and before the core took its request.
    pub fn dropped_call_sends(&mut self, flight: &str, request: impl FnOnce(u64) -> String) -> Vec<Sent> {
        self.ask(FIRST_SERVER, flight, request, false).1
    }

    fn ask(
        &mut self,
        server: ServerId,
        flight: &str,
        request: impl FnOnce(u64) -> String,
        waits: bool,
    ) -> (u64, Vec<Sent>) {
        let (reply, answer) = oneshot::channel();
        let id = self.relay.next_id();
        if waits {
            self.answers.insert(id, answer);
        } else {
            drop(answer);
        }
        let event = CallEvent::Ask {
            server,
            id,
            flight: Some(flight.to_owned()),
            request: Bytes::from(request(id)),
            reply,
        };
        (id, self.run(|step| step.on_call_event(event)))
    }

    /// What the call waiting on request `id` has been given: nothing yet (`None`), the
    /// server's answer (`Ok`), or an error (`Err`, as text).
    pub fn call_answer(&mut self, id: u64) -> Option<Result<(), String>> {
        let answer = self.answers.get_mut(&id)?.try_recv().ok()?;
        self.answers.remove(&id);
        Some(answer.map(drop).map_err(|e| e.to_string()))
    }

    /// A call's request `id` to the first server got no answer within its limit.
    pub fn call_timed_out(&mut self, id: u64) -> Vec<Sent> {
        self.call_timed_out_at(FIRST_SERVER, id)
    }

    /// A call's request `id` to `server` got no answer within its limit.
    pub fn call_timed_out_at(&mut self, server: ServerId, id: u64) -> Vec<Sent> {
        self.run(|step| step.on_call_event(CallEvent::TimedOut(server, id)))
    }

    /// The call of `flight` ended (answered, refused or withdrawn).
    pub fn call_ended(&mut self, flight: &str) -> Vec<Sent> {
        self.run(|step| step.call_ended(flight))
    }

    /// The server the checked call of `flight` goes to, and the tool name it is sent under.
    pub fn call_target(&self, flight: &str) -> Option<(ServerId, &str)> {
        let (server, name) = self.targets.get(flight)?;
        Some((*server, name))
    }

    /// The progress tokens the relay keeps for endpoints' requests.
    pub fn mapped_tokens(&self) -> usize {
        self.state.tokens.len()
    }

    /// The client's requests in flight (relayed or gated).
    pub fn in_flight(&self) -> usize {
        self.state.flights.len()
    }

    /// Whether the session's requests to the server all have their answers (or ended).
    pub fn idle_upstream(&self) -> bool {
        self.state.pending.is_empty() && self.state.deadlines.is_empty()
    }

    /// When the session's timer fires next.
    pub fn next_timer(&self) -> Option<Instant> {
        self.state.soonest()
    }

    /// The clock the transitions run at.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Why the session cannot go on, once it cannot.
    pub fn fatal(&self) -> Option<&str> {
        self.state.fatal.as_deref()
    }

    /// Whether the client has as many requests in flight as the relay takes.
    pub fn full(&self) -> bool {
        self.state.full(&self.relay.config)
    }

    /// Whether a relayed request (not a subscription) still waits for the server.
    pub fn awaits_answers(&self) -> bool {
        self.state.awaits_answers()
    }
}

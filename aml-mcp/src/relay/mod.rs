//! A faithful MCP relay with the gate where it must act.
//!
//! The relay works on JSON-RPC messages, not on typed MCP: every message in either direction
//! goes through as the same bytes unless the gate acts on it, so capabilities, `_meta` keys,
//! numbers, notifications and methods this crate has never heard of reach the other side as
//! they were sent. It acts on:
//!
//! - `tools/call`: the host's [`crate::McpGate`] (catalog, policy, approval, one-use grant);
//!   the forwarded request is rebuilt from the frozen, hashed bytes, and the answer is the
//!   server's result with the verdict added under `_meta["aml.action-boundary/verdict"]`;
//! - `tools/list`: only the tools the host registered (and its policy can allow), each with
//!   the input schema the host enforces;
//! - `sampling/createMessage` and `elicitation/create` from the server: refused (the default)
//!   or relayed, per host setting ([`ServerRequestPolicy`]);
//! - a request without an `"id"` in either direction: dropped and recorded, never relayed
//!   ([`is_notification_method`]); a client's answer reaches the server only for a request
//!   the server sent it;
//! - liveness: a time limit on every forwarded request, cancellation passed on, an upstream
//!   that exits or answers garbage, and a JSON-RPC answer to every malformed message.
//!
//! The engine ([`run`]) reads and writes framed messages over channels ([`Connection`]), so
//! transports are separate: [`stdio::stdio_connection`] for the client side and
//! [`stdio::spawn_child`] for a server started as a child process. Request ids are mapped per
//! client session, so several sessions can share an upstream connection.
//!
//! Design and limits: `docs/adr/007-mcp-harness-and-proxy-hop.md` and
//! `docs/adr/013-input-required-retry.md`.

mod advertised;
mod answer;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod by_hand;
mod call;
mod deferred;
mod endpoint;
pub mod frame;
mod from_client;
mod from_upstream;
mod gather;
pub mod jsonrpc;
mod kinds;
mod machine;
pub mod names;
mod pages;
mod pins;
mod prompts;
mod resources;
mod routes;
mod session;
pub mod stdio;
mod tools;
mod upstreams;
mod wrap;

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

pub use deferred::DeferredSink;
pub use endpoint::{Client, EndpointEvent, EndpointId, ToEndpoint, STANDING};
pub use frame::{Inbound, TransportTrace};
pub use jsonrpc::{
    INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, REFUSED_BY_HOST, UPSTREAM_GONE, UPSTREAM_TIMEOUT,
};
pub use kinds::is_notification_method;
pub use machine::{ServerId, FIRST_SERVER};
pub use session::{probe, run, run_servers, ProbeError, RelayEnd};
pub use tools::{catalog_warnings, RelayTools};
pub use wrap::{CallObserver, ForwardWrapper, ForwardedCall, ObservedCall, OutboundTraces};

/// What the relay does with one kind of request from the server to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ServerRequestPolicy {
    /// Answer the server with an error (`-32003`) and record the refusal; the client never
    /// sees the request.
    #[default]
    Refuse,
    /// Pass the request to the client and its answer back.
    Relay,
}

/// The relay's limits and settings.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelayConfig {
    /// How long a forwarded request may wait for the server's answer. A `tools/call` that
    /// runs out of time is `unknown`; the server is sent `notifications/cancelled`.
    pub upstream_timeout: Duration,
    /// How long the server may take to answer the gate's startup `ping` and the client's
    /// `initialize` (or `server/discover`).
    pub handshake_timeout: Duration,
    /// `sampling/createMessage` from the server (and sampling asked for in an
    /// `input_required` result).
    pub sampling: ServerRequestPolicy,
    /// `elicitation/create` from the server (and elicitation asked for in an
    /// `input_required` result).
    pub elicitation: ServerRequestPolicy,
    /// The longest message accepted from either side, in bytes.
    pub max_message_bytes: usize,
    /// After the client goes away, how long requests it sent may still take to be answered:
    /// calls in flight then are recorded as abandoned, other requests answered with an
    /// error. Calls not yet authorized (waiting for approval) are withdrawn at once instead.
    pub drain_timeout: Duration,
    /// After the server exits, how long the relay keeps answering (refusing) the client
    /// before it ends.
    pub gone_grace: Duration,
    /// The most requests of one client that may be in flight at once; at the limit the relay
    /// reads nothing more from that client until one is answered, so a client that sends
    /// faster than the server answers (or than it reads its answers) holds memory bounded.
    pub max_in_flight: usize,
    /// Who the client is (the Cedar principal, what budgets count per, named in records):
    /// [`Caller::local`](aml_core::Caller::local) on stdio, a bearer token's name over HTTP.
    pub caller: aml_core::Caller,
    /// The name the relay's own messages give it (`aml-mcp` unless the host names its
    /// product, as the `aml-mcp-gate` binary does), so an error says which program wrote it.
    pub product: std::borrow::Cow<'static, str>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            upstream_timeout: Duration::from_secs(120),
            handshake_timeout: Duration::from_secs(30),
            sampling: ServerRequestPolicy::Refuse,
            elicitation: ServerRequestPolicy::Refuse,
            max_message_bytes: 16 << 20,
            drain_timeout: Duration::from_secs(10),
            gone_grace: Duration::from_secs(3),
            max_in_flight: 1024,
            caller: aml_core::Caller::local(),
            product: std::borrow::Cow::Borrowed("aml-mcp"),
        }
    }
}

impl RelayConfig {
    /// Sets [`upstream_timeout`](Self::upstream_timeout).
    pub fn with_upstream_timeout(mut self, limit: Duration) -> Self {
        self.upstream_timeout = limit;
        self
    }
    /// Sets [`handshake_timeout`](Self::handshake_timeout).
    pub fn with_handshake_timeout(mut self, limit: Duration) -> Self {
        self.handshake_timeout = limit;
        self
    }
    /// Sets [`sampling`](Self::sampling).
    pub fn with_sampling(mut self, policy: ServerRequestPolicy) -> Self {
        self.sampling = policy;
        self
    }
    /// Sets [`elicitation`](Self::elicitation).
    pub fn with_elicitation(mut self, policy: ServerRequestPolicy) -> Self {
        self.elicitation = policy;
        self
    }
    /// Sets [`max_message_bytes`](Self::max_message_bytes).
    pub fn with_max_message_bytes(mut self, max: usize) -> Self {
        self.max_message_bytes = max;
        self
    }
    /// Sets [`drain_timeout`](Self::drain_timeout).
    pub fn with_drain_timeout(mut self, limit: Duration) -> Self {
        self.drain_timeout = limit;
        self
    }
    /// Sets [`gone_grace`](Self::gone_grace).
    pub fn with_gone_grace(mut self, grace: Duration) -> Self {
        self.gone_grace = grace;
        self
    }
    /// Sets [`caller`](Self::caller).
    pub fn with_caller(mut self, caller: aml_core::Caller) -> Self {
        self.caller = caller;
        self
    }
    /// Sets [`product`](Self::product).
    pub fn with_product(mut self, name: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        self.product = name.into();
        self
    }
    /// Sets [`max_in_flight`](Self::max_in_flight) (at least 1).
    pub fn with_max_in_flight(mut self, max: usize) -> Self {
        self.max_in_flight = max.max(1);
        self
    }
}

/// One side of the relay as framed messages: what arrives (closed when the peer has gone)
/// and where to send (one JSON-RPC message per `Bytes`, without a newline).
#[derive(Debug)]
pub struct Connection {
    /// Messages from the peer; `None` from `recv` once the peer has closed.
    pub incoming: mpsc::Receiver<Inbound>,
    /// Messages to the peer.
    pub outgoing: mpsc::Sender<Bytes>,
}

impl Connection {
    /// An in-memory connection and the peer's end of it, each direction holding up to
    /// `capacity` messages (a transport, a test or a bench drives the peer's end).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use aml_mcp::relay::{Connection, Inbound};
    ///
    /// let (mut connection, mut peer) = Connection::in_memory(8);
    /// peer.to_relay.send(Inbound::Message("{}".into())).await.unwrap();
    /// assert!(matches!(connection.incoming.recv().await, Some(Inbound::Message(_))));
    /// connection.outgoing.send("[]".into()).await.unwrap();
    /// assert_eq!(&peer.from_relay.recv().await.unwrap()[..], b"[]");
    /// # }
    /// ```
    pub fn in_memory(capacity: usize) -> (Connection, Peer) {
        let (to_relay, incoming) = mpsc::channel(capacity);
        let (outgoing, from_relay) = mpsc::channel(capacity);
        (Connection { incoming, outgoing }, Peer { to_relay, from_relay })
    }
}

/// The peer's end of an in-memory [`Connection`].
#[derive(Debug)]
pub struct Peer {
    /// What the peer sends the relay.
    pub to_relay: mpsc::Sender<Inbound>,
    /// What the relay sends the peer; `None` once the relay has let go of the connection.
    pub from_relay: mpsc::Receiver<Bytes>,
}

/// The server side: its messages, and a signal when the server process has ended (its exit
/// status as text).
#[derive(Debug)]
pub struct Upstream {
    /// The server's messages.
    pub connection: Connection,
    /// Fires when the server has exited, with its exit status; never fires for a server that
    /// is not a process of ours.
    pub exited: tokio::sync::oneshot::Receiver<String>,
}

impl Upstream {
    /// An in-memory server: the upstream for the relay, the server's end of it, and what
    /// reports the server's exit. Keep the sender for as long as the server runs: dropping
    /// it tells the relay the server has exited.
    pub fn in_memory(capacity: usize) -> (Upstream, Peer, tokio::sync::oneshot::Sender<String>) {
        let (connection, server) = Connection::in_memory(capacity);
        let (exit, exited) = tokio::sync::oneshot::channel();
        (Upstream { connection, exited }, server, exit)
    }
}

//! A session's client side as endpoints (ADR 031, ADR 032): one standing connection
//! (stdio), one client's streams (a Streamable HTTP session: one per POST, and a standing
//! one), or callers' endpoints a front opens and closes as requests come and go (2026-07-28
//! stateless HTTP: one per POST). The relay renumbers every request's id, and a caller's
//! progress tokens, in one map, so callers that pick the same ones never meet.

use bytes::Bytes;
use tokio::sync::mpsc;

use super::{Connection, Inbound};

/// Names one endpoint of a session, chosen by the front that opens it (unique among the
/// endpoints open at once on one session).
pub type EndpointId = u64;

/// What the relay sends an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToEndpoint {
    /// The answer to the endpoint's request (or to a message it sent that could not be
    /// read). The relay waits for room to deliver it.
    Answer(Bytes),
    /// A notification for the endpoint's request: its progress, or a subscription's news.
    /// Sent only to an endpoint opened with `stream`; dropped when the endpoint's queue is
    /// full (a client too slow to read its progress loses some, never its answer).
    Notification(Bytes),
}

/// What a front tells the relay about its endpoints, in order on one channel.
#[derive(Debug)]
pub enum EndpointEvent {
    /// A new endpoint: where its messages go, and whether it carries notifications besides
    /// its answer (an SSE stream does, a JSON body does not).
    Open {
        /// The endpoint's name.
        endpoint: EndpointId,
        /// Where the relay sends its messages.
        to: mpsc::Sender<ToEndpoint>,
        /// Whether it takes [`ToEndpoint::Notification`]s.
        stream: bool,
    },
    /// A message the endpoint's client sent. One for an endpoint never opened is relayed,
    /// and what answers it is dropped.
    Message {
        /// The endpoint it came from.
        endpoint: EndpointId,
        /// The message.
        inbound: Inbound,
    },
    /// The endpoint is gone (its answer was sent, or its client stopped waiting). Of
    /// [`Client::Endpoints`], what it asked and was not answered is cancelled, as if its
    /// client had cancelled it; of a [`Client::Session`], nothing is (its client may ask
    /// again on another endpoint), and what answers it later is dropped.
    Close {
        /// The endpoint's name.
        endpoint: EndpointId,
    },
}

/// A session's client side, for [`run`](super::run).
///
/// ```
/// use aml_mcp::relay::{Client, Connection, EndpointEvent};
///
/// let (connection, _peer) = Connection::in_memory(8);
/// assert!(matches!(Client::from(connection), Client::Connection(_)));
/// let (_front, endpoints) = tokio::sync::mpsc::channel::<EndpointEvent>(8);
/// let _stateless = Client::Endpoints(endpoints);
/// let (_front, streams) = tokio::sync::mpsc::channel::<EndpointEvent>(8);
/// let _session = Client::Session(streams);
/// ```
#[derive(Debug)]
pub enum Client {
    /// One standing connection: every message to the client goes on it, and the client has
    /// gone when its input ends.
    Connection(Connection),
    /// Endpoints opened and closed by a front: each answer and notification goes to the
    /// endpoint of the request it belongs to, what belongs to none is dropped (logged), and
    /// a server's request to the client is refused at once (no endpoint can answer it). The
    /// client has gone when the channel ends (every sender dropped).
    Endpoints(mpsc::Receiver<EndpointEvent>),
    /// One client's endpoints, opened and closed by a front (a Streamable HTTP session:
    /// one per POST that carries requests). They share the client's request ids (one in
    /// flight on any of them is refused on all) and its progress tokens. Endpoint
    /// [`STANDING`] is the client's standing stream, if the front opens it: a server's
    /// request, and what is tied to no request, go to the newest open endpoint that takes
    /// notifications, else to it. A closed endpoint cancels nothing. The client has gone
    /// when the channel ends.
    Session(mpsc::Receiver<EndpointEvent>),
}

impl From<Connection> for Client {
    fn from(connection: Connection) -> Self {
        Client::Connection(connection)
    }
}

/// The standing connection's endpoint (of a [`Client::Session`], its standing stream).
pub const STANDING: EndpointId = 0;

/// Where a request of endpoint `endpoint` is kept while in flight, by its id's key text:
/// the standing connection's keys are the ids' key texts ([`super::jsonrpc::key_text`],
/// which begin with a quote or a digit), another endpoint's are prefixed `endpoint#`, so
/// two endpoints' equal ids never share a key.
pub(crate) fn flight_key(endpoint: EndpointId, id: &[u8]) -> String {
    let key = super::jsonrpc::key_text(id);
    if endpoint == STANDING {
        key
    } else {
        format!("{endpoint}#{key}")
    }
}

/// The prefix of every flight key of `endpoint` (not the standing connection's).
pub(crate) fn flight_prefix(endpoint: EndpointId) -> String {
    format!("{endpoint}#")
}

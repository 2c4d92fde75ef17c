//! MCP over Streamable HTTP for [`aml_mcp::relay`]: both transports, byte-faithful.
//!
//! - [`HttpFront`] serves MCP at one path (`/mcp`) and turns every MCP session a client opens
//!   into a [`Connection`](aml_mcp::relay::Connection) for [`aml_mcp::relay::run`]: `POST`
//!   (answers as JSON or as an SSE stream, `202` for notifications and responses), `GET` (an
//!   SSE stream for server-initiated messages), `DELETE` (ends the session), the
//!   `Mcp-Session-Id` and `MCP-Protocol-Version` headers, SSE event ids and `Last-Event-ID`
//!   resumption; bearer tokens compared in constant time (a session serves only the token
//!   that opened it), an `Origin` allow-list, header and body read timeouts, a connection
//!   cap that keeps room for authenticated clients, and limits (body size, sessions,
//!   sessions per client, idle time, calls in flight per session). A session's POSTs are
//!   endpoints of its relay ([`Client::Session`](aml_mcp::relay::Client)), which addresses
//!   each answer and notification, so the front reads none of them again. Protocol 2026-07-28
//!   requests (no session, a per-request `_meta` envelope) of one caller all go to one more
//!   relay, each on an endpoint of its own ([`Client::Endpoints`](aml_mcp::relay::Client)):
//!   the relay keeps their ids and progress tokens apart.
//! - [`http_upstream`] connects to a remote Streamable HTTP server and gives an
//!   [`Upstream`](aml_mcp::relay::Upstream) for the relay.
//!
//! Messages pass as the bytes they were sent with; the only change is that line breaks
//! between JSON tokens become spaces (the relay's stdio framing is one message per line, and
//! a JSON string cannot hold a raw line break, so the meaning is unchanged).
//!
//! Which parts of the transport specification are implemented, and why the rest is not:
//! `docs/adr/015-streamable-http.md`.
//!
//! ```no_run
//! use aml_mcp_http::{FrontConfig, HttpFront};
//! # async fn serve(start_relay: impl Fn(aml_mcp::relay::Client)) -> std::io::Result<()> {
//! let mut front = HttpFront::bind("127.0.0.1:8080".parse().unwrap(), FrontConfig::default()).await?;
//! println!("MCP at http://{}/mcp", front.local_addr());
//! while let Some((client, info)) = front.accept().await {
//!     println!("session {} from {}", info.id, info.peer);
//!     start_relay(client); // e.g. tokio::spawn(aml_mcp::relay::run(tools, config, client, upstream, vec![]))
//! }
//! # Ok(()) }
//! ```

mod auth;
mod body;
mod envelope;
mod front;
mod message;
mod oauth;
pub mod ops;
mod param_headers;
mod sse;
mod upstream;

use std::time::Duration;

pub use auth::{Tokens, TokensError};
pub use front::{HttpFront, SessionInfo};
pub use oauth::{ClientAuth, ClientCredentials, CredentialsError, OAuth, OAuthError};
pub use ops::{serve_ops, Ops, OpsReply, OpsServer};
pub use upstream::{check_upstream, http_upstream, UpstreamConfig, UpstreamError};

/// The path the front serves MCP at.
pub const MCP_PATH: &str = "/mcp";

/// The protocol revisions whose `MCP-Protocol-Version` header the front accepts: those that
/// use the `initialize` handshake, and [`STATELESS_PROTOCOL_VERSIONS`]. A request that names
/// another gets `400`.
pub const PROTOCOL_VERSIONS: &[&str] = &[
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

/// The revisions served without a session (a per-request envelope, no `initialize`): a POST
/// whose `MCP-Protocol-Version` names one goes to the front's stateless connection.
pub const STATELESS_PROTOCOL_VERSIONS: &[&str] = &["2026-07-28"];

/// The scopes a tool needs, by its name (the host's catalog; read per call, so a catalog
/// reloaded while the front runs applies at once).
///
/// ```
/// let scopes = aml_mcp_http::ToolScopes::new(|tool| match tool {
///     "delete_file" => vec!["files:delete".to_owned()],
///     _ => Vec::new(),
/// });
/// assert_eq!(scopes.of("delete_file"), ["files:delete"]);
/// assert!(scopes.of("read_file").is_empty());
/// ```
#[derive(Clone)]
pub struct ToolScopes(std::sync::Arc<ScopesOf>);

/// What [`ToolScopes`] asks: a tool's scopes by its name.
type ScopesOf = dyn Fn(&str) -> Vec<String> + Send + Sync;

impl ToolScopes {
    /// The scopes `of` gives for each tool name.
    pub fn new(of: impl Fn(&str) -> Vec<String> + Send + Sync + 'static) -> Self {
        ToolScopes(std::sync::Arc::new(of))
    }

    /// The scopes `tool` needs.
    pub fn of(&self, tool: &str) -> Vec<String> {
        (self.0)(tool)
    }
}

impl core::fmt::Debug for ToolScopes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ToolScopes(..)")
    }
}

/// Where the front reports each `tools/call` it refuses together with the whole POST it came
/// in (a batch under a revision without batches, two requests with one id, an id of the
/// wrong type), so that the host records it: the caller (its token's name or its JWT's
/// subject; `None` without either), the tool's name and why. The calls the front passes on
/// are recorded by the relay.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let into = Arc::clone(&seen);
/// let refused = aml_mcp_http::RefusedCalls::new(move |caller, tool, why| {
///     into.lock().unwrap().push(format!("{caller:?} {tool}: {why}"));
/// });
/// refused.report(Some("ci-bot"), "send", "batches were removed");
/// assert_eq!(seen.lock().unwrap()[0], "Some(\"ci-bot\") send: batches were removed");
/// ```
#[derive(Clone)]
pub struct RefusedCalls(std::sync::Arc<RecordRefused>);

/// What [`RefusedCalls`] calls: the caller, the tool, why.
type RecordRefused = dyn Fn(Option<&str>, &str, &str) + Send + Sync;

impl RefusedCalls {
    /// Reports to `record`, with the caller, the tool's name and why the POST was refused.
    pub fn new(record: impl Fn(Option<&str>, &str, &str) + Send + Sync + 'static) -> Self {
        RefusedCalls(std::sync::Arc::new(record))
    }

    /// Reports one refused call of `tool` by `caller`.
    pub fn report(&self, caller: Option<&str>, tool: &str, why: &str) {
        (self.0)(caller, tool, why)
    }
}

impl core::fmt::Debug for RefusedCalls {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("RefusedCalls(..)")
    }
}

/// The front's security settings and limits.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FrontConfig {
    /// Bearer tokens a client must present (`Authorization: Bearer …`); with neither these
    /// nor [`oauth`](Self::oauth) every request is accepted (for a loopback front only: the
    /// host decides).
    pub tokens: Option<Tokens>,
    /// JWT access tokens of an OAuth authorization server, accepted besides [`tokens`](Self::tokens):
    /// the token's `sub` is the caller. A request without a valid token gets `401` naming
    /// this front's RFC 9728 metadata, which it serves without a token.
    pub oauth: Option<OAuth>,
    /// The scopes an OAuth client's token must hold to call each tool, besides
    /// [`OAuth::scopes`]: a `tools/call` of a tool whose scopes the token lacks gets `403`
    /// with `error="insufficient_scope"` naming them, and reaches nothing. Static
    /// [`tokens`](Self::tokens) are the host's own and are not scoped.
    pub tool_scopes: Option<ToolScopes>,
    /// `Origin` values accepted besides the front's own (`http://ADDR:PORT` of the address it
    /// listens on, and `http://localhost:PORT` when that is loopback); a request with any
    /// other `Origin` gets `403`, loopback pages on other ports included (any local program
    /// can serve one, and a browser lets any page POST `text/plain` across origins).
    /// Requests without `Origin` (not from a browser) are accepted.
    pub allowed_origins: Vec<String>,
    /// The largest request body, in bytes; a larger one gets `413`.
    pub max_body_bytes: usize,
    /// How long a connection may take to send a request's headers, from when it opened or
    /// its previous answer was sent: a connection still short of them then is closed (no
    /// answer: there is no request to answer). This also closes a kept-alive connection
    /// that sends no next request.
    pub header_read_timeout: Duration,
    /// How long a request's body may take to arrive once its headers are in; a body still
    /// short of its length then gets `408` and the connection is closed.
    pub body_read_timeout: Duration,
    /// How many client connections may be open at once. Connections none of whose requests
    /// has passed the `Origin` and token checks yet may hold three quarters of them; a new
    /// connection beyond that closes the oldest such one, so a flood of connections that
    /// never send a valid request cannot shut out a client that does. Only when every
    /// connection is an authenticated client's is a new one refused. Keep it below the
    /// process's open-file limit, with room for everything else the host opens.
    pub max_connections: usize,
    /// How many sessions may be open at once; an `initialize` beyond that gets `503`.
    pub max_sessions: usize,
    /// How many sessions one client may have open at once (a client: the static bearer token
    /// it presents, the subject of its JWT, or with neither [`tokens`](Self::tokens) nor
    /// [`oauth`](Self::oauth) its IP address); its `initialize`
    /// beyond that gets `429`, so one client cannot take every session slot.
    pub max_sessions_per_client: usize,
    /// A session that had no request but its `initialize` for this long (or for
    /// [`session_idle_timeout`](Self::session_idle_timeout) if that is shorter) is closed,
    /// like an idle one: abandoned handshakes free their slots soon, not after the idle
    /// limit.
    pub unused_session_timeout: Duration,
    /// A session with no request for this long is closed (its relay sees the client leave);
    /// later requests for it get `404`, and the client starts a new one.
    pub session_idle_timeout: Duration,
    /// How many requests of one session may wait for an answer at once; one more gets `429`.
    pub max_calls_per_session: usize,
    /// How many 2026-07-28 (stateless) requests, from all clients together, may wait for an
    /// answer at once; one more gets `429`.
    pub max_stateless_calls: usize,
    /// SSE events kept per stream for `Last-Event-ID` resumption.
    pub replay_events: usize,
    /// While an SSE stream has had nothing to send for this long (a slow tool call, a quiet
    /// `GET` stream), the front sends an SSE comment (`: keep-alive`), which clients ignore,
    /// so that proxies and clients that close idle connections keep it open; `None` sends
    /// none.
    pub sse_keep_alive: Option<Duration>,
    /// The host's operator endpoints (`/metrics`, `/healthz`, `/readyz`), served on the
    /// front's port besides [`MCP_PATH`]; `None` serves only MCP. See [`ops`].
    pub ops: Option<std::sync::Arc<dyn Ops>>,
    /// Where `tools/call`s refused with their whole POST are reported for the host's record;
    /// `None` records nothing of them.
    pub refused_calls: Option<RefusedCalls>,
}

impl Default for FrontConfig {
    fn default() -> Self {
        FrontConfig {
            tokens: None,
            oauth: None,
            tool_scopes: None,
            allowed_origins: Vec::new(),
            max_body_bytes: 4 << 20,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(20),
            max_connections: 1024,
            max_sessions: 64,
            max_sessions_per_client: 16,
            unused_session_timeout: Duration::from_secs(30),
            session_idle_timeout: Duration::from_secs(600),
            max_calls_per_session: 32,
            max_stateless_calls: 256,
            replay_events: 256,
            sse_keep_alive: Some(Duration::from_secs(15)),
            ops: None,
            refused_calls: None,
        }
    }
}

impl FrontConfig {
    /// Sets [`tokens`](Self::tokens).
    pub fn with_tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = Some(tokens);
        self
    }
    /// Sets [`oauth`](Self::oauth).
    pub fn with_oauth(mut self, oauth: OAuth) -> Self {
        self.oauth = Some(oauth);
        self
    }
    /// Sets [`tool_scopes`](Self::tool_scopes).
    pub fn with_tool_scopes(mut self, scopes: ToolScopes) -> Self {
        self.tool_scopes = Some(scopes);
        self
    }
    /// Sets [`refused_calls`](Self::refused_calls).
    pub fn with_refused_calls(mut self, refused: RefusedCalls) -> Self {
        self.refused_calls = Some(refused);
        self
    }
    /// Adds one accepted `Origin` (scheme, host and port as a browser sends it).
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }
    /// Sets [`max_body_bytes`](Self::max_body_bytes).
    pub fn with_max_body_bytes(mut self, max: usize) -> Self {
        self.max_body_bytes = max;
        self
    }
    /// Sets [`header_read_timeout`](Self::header_read_timeout).
    pub fn with_header_read_timeout(mut self, limit: Duration) -> Self {
        self.header_read_timeout = limit;
        self
    }
    /// Sets [`body_read_timeout`](Self::body_read_timeout).
    pub fn with_body_read_timeout(mut self, limit: Duration) -> Self {
        self.body_read_timeout = limit;
        self
    }
    /// Sets [`max_connections`](Self::max_connections) (at least 1).
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.max_connections = max.max(1);
        self
    }
    /// Sets [`max_sessions`](Self::max_sessions).
    pub fn with_max_sessions(mut self, max: usize) -> Self {
        self.max_sessions = max;
        self
    }
    /// Sets [`max_sessions_per_client`](Self::max_sessions_per_client).
    pub fn with_max_sessions_per_client(mut self, max: usize) -> Self {
        self.max_sessions_per_client = max;
        self
    }
    /// Sets [`unused_session_timeout`](Self::unused_session_timeout).
    pub fn with_unused_session_timeout(mut self, limit: Duration) -> Self {
        self.unused_session_timeout = limit;
        self
    }
    /// Sets [`session_idle_timeout`](Self::session_idle_timeout).
    pub fn with_session_idle_timeout(mut self, limit: Duration) -> Self {
        self.session_idle_timeout = limit;
        self
    }
    /// Sets [`max_stateless_calls`](Self::max_stateless_calls).
    pub fn with_max_stateless_calls(mut self, max: usize) -> Self {
        self.max_stateless_calls = max;
        self
    }
    /// Sets [`sse_keep_alive`](Self::sse_keep_alive).
    pub fn with_sse_keep_alive(mut self, every: Option<Duration>) -> Self {
        self.sse_keep_alive = every;
        self
    }
    /// Sets [`ops`](Self::ops).
    pub fn with_ops(mut self, ops: std::sync::Arc<dyn Ops>) -> Self {
        self.ops = Some(ops);
        self
    }
    /// Sets [`max_calls_per_session`](Self::max_calls_per_session).
    pub fn with_max_calls_per_session(mut self, max: usize) -> Self {
        self.max_calls_per_session = max;
        self
    }
}

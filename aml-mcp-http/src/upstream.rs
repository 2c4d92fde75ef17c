//! The HTTP upstream: the relay's server side as a Streamable HTTP client of a remote MCP
//! server (plain `http://`; TLS is for a proxy in front, see the ADR).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_mcp::relay::{Inbound, OutboundTraces, Peer, TransportTrace, Upstream};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::envelope::{encode_header_value, ClientMessage};
use crate::message::{self, Peek};
use crate::oauth::{ClientCredentials, CredentialsError, TokenSource};
use crate::param_headers::{self, ToolHeaders};
use crate::sse::Decoder;

/// Idle connections kept for reuse.
const POOL: usize = 32;
/// The pooled HTTP/1 client the upstream sends through.
type HttpClient = hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>;
/// A pooled connection unused this long is closed instead of reused. Servers end idle
/// kept-alive connections (this crate's front after its `header_read_timeout`, 10 s by
/// default); a request written just as the server closes one is lost with it, and cannot be
/// sent again (it may have reached the server). Closing ours first keeps that race away.
const POOL_IDLE: Duration = Duration::from_secs(4);
/// How often a stream that broke off is resumed with `Last-Event-ID`.
const RESUME_ATTEMPTS: u32 = 3;

/// How to reach the remote server.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct UpstreamConfig {
    /// Headers sent with every request (for instance `Authorization: Bearer …`).
    pub headers: Vec<(String, String)>,
    /// The longest message accepted from the server, in bytes.
    pub max_message_bytes: usize,
    /// How long connecting, and the server's answer to a notification, may take.
    pub connect_timeout: Duration,
    /// The relay's trace context for its requests (shared with
    /// [`RelayTools::with_outbound_traces`](aml_mcp::relay::RelayTools::with_outbound_traces)),
    /// sent as each request's `traceparent` and `tracestate` headers.
    pub outbound_traces: Option<OutboundTraces>,
    /// The gate's own access token by the client credentials grant, shared by every
    /// upstream made from this configuration (and its clones).
    tokens: Option<Arc<TokenSource>>,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            headers: Vec::new(),
            max_message_bytes: 16 << 20,
            connect_timeout: Duration::from_secs(10),
            outbound_traces: None,
            tokens: None,
        }
    }
}

impl UpstreamConfig {
    /// Adds a header sent with every request.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
    /// Sends `Authorization: Bearer TOKEN` with every request.
    pub fn with_bearer_token(self, token: &str) -> Self {
        self.with_header("authorization", format!("Bearer {}", token.trim()))
    }
    /// Sends the relay's trace context for each of its requests as W3C headers (see
    /// [`outbound_traces`](Self::outbound_traces)).
    pub fn with_outbound_traces(mut self, traces: OutboundTraces) -> Self {
        self.outbound_traces = Some(traces);
        self
    }
    /// Sends `Authorization: Bearer …` with every request, the token got from an OAuth token
    /// endpoint by the client credentials grant: cached, fetched again before it expires
    /// (one fetch at a time for all upstreams made from this configuration), and once more
    /// when the server answers 401. A request without a token is answered in the server's
    /// place with an error and not sent.
    pub fn with_client_credentials(
        mut self,
        credentials: ClientCredentials,
    ) -> Result<Self, CredentialsError> {
        self.tokens = Some(Arc::new(TokenSource::new(credentials)?));
        Ok(self)
    }
    /// The client credentials set with [`with_client_credentials`](Self::with_client_credentials).
    pub fn client_credentials(&self) -> Option<&ClientCredentials> {
        self.tokens.as_deref().map(TokenSource::credentials)
    }
    /// Sets [`max_message_bytes`](Self::max_message_bytes).
    pub fn with_max_message_bytes(mut self, max: usize) -> Self {
        self.max_message_bytes = max;
        self
    }
}

/// Why an upstream could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// Not an absolute `http://` URL.
    #[error("{0:?} is not an http:// URL with a host")]
    BadUrl(String),
    /// `https://`: TLS is not built in.
    #[error("{0:?}: https is not built in; reach the server through a local TLS proxy (http://127.0.0.1:…)")]
    Https(String),
    /// A header that cannot be sent.
    #[error("the header {0:?} is not a valid HTTP header")]
    BadHeader(String),
    /// An `Authorization` header beside client credentials: which one to send is unclear.
    #[error("an Authorization header and client credentials: give one of the two")]
    TwoAuthorizations,
    /// Called outside a Tokio runtime, which the connection's task needs.
    #[error("an HTTP upstream needs a Tokio runtime to run in (call it from within one)")]
    NoRuntime,
}

/// Whether [`http_upstream`] would take `url` and `config` (an `http://` URL with a host,
/// headers that can be sent, one way to authenticate), checked without connecting and
/// outside any runtime: for a host that reads its settings before it starts one.
///
/// ```
/// use aml_mcp_http::{check_upstream, UpstreamConfig};
/// assert!(check_upstream("http://127.0.0.1:3001/mcp", &UpstreamConfig::default()).is_ok());
/// assert!(check_upstream("https://example.com/mcp", &UpstreamConfig::default()).is_err());
/// ```
pub fn check_upstream(url: &str, config: &UpstreamConfig) -> Result<(), UpstreamError> {
    checked(url, config).map(drop)
}

/// The URL and headers of `config`, checked.
fn checked(
    url: &str,
    config: &UpstreamConfig,
) -> Result<(Uri, Vec<(HeaderName, HeaderValue)>), UpstreamError> {
    let uri: Uri = url.parse().map_err(|_| UpstreamError::BadUrl(url.into()))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => return Err(UpstreamError::Https(url.into())),
        _ => return Err(UpstreamError::BadUrl(url.into())),
    }
    if uri.authority().is_none() {
        return Err(UpstreamError::BadUrl(url.into()));
    }
    let mut headers = Vec::new();
    for (name, value) in &config.headers {
        let name = HeaderName::try_from(name.as_str()).map_err(|_| UpstreamError::BadHeader(name.clone()))?;
        let value =
            HeaderValue::try_from(value.as_str()).map_err(|_| UpstreamError::BadHeader(name.to_string()))?;
        if name == header::AUTHORIZATION && config.tokens.is_some() {
            return Err(UpstreamError::TwoAuthorizations);
        }
        headers.push((name, value));
    }
    Ok((uri, headers))
}

/// Connects the relay to the MCP server at `url` (Streamable HTTP). Nothing is sent until
/// the relay sends its first message; `exited` fires when the server ends the session
/// (`404`) or a request to it fails in transport (the relay then treats the server as gone:
/// calls in flight are `unknown`). When the relay drops its side, the session is ended with
/// `DELETE`.
///
/// ```no_run
/// # async fn f() -> Result<(), aml_mcp_http::UpstreamError> {
/// let config = aml_mcp_http::UpstreamConfig::default().with_bearer_token("secret-token-of-the-server");
/// let upstream = aml_mcp_http::http_upstream("http://127.0.0.1:3001/mcp", config)?;
/// // aml_mcp::relay::run(tools, relay_config, client, upstream, Vec::new()).await;
/// # drop(upstream); Ok(()) }
/// ```
pub fn http_upstream(url: &str, config: UpstreamConfig) -> Result<Upstream, UpstreamError> {
    let (uri, headers) = checked(url, &config)?;
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| UpstreamError::NoRuntime)?;
    let (upstream, Peer { to_relay, from_relay }, gone) = Upstream::in_memory(1024);
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(config.connect_timeout));
    // A request that a pooled connection closed before writing any of it goes once more on
    // a new connection (`retry_canceled_requests`); one that was written never does (it may
    // have reached the server). Idle connections are closed before the server's keep-alive
    // limit would close them under a request.
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(POOL)
        .pool_timer(TokioTimer::new())
        .retry_canceled_requests(true)
        .build(connector);
    let client = Arc::new(Client {
        uri,
        http,
        headers,
        session: Mutex::new(None),
        version: Mutex::new(None),
        stateless_calls: Mutex::new(HashMap::new()),
        param_headers: ToolHeaders::default(),
        to_relay,
        gone: Mutex::new(Some(gone)),
        config,
    });
    runtime.spawn(client.run(from_relay));
    Ok(upstream)
}

struct Client {
    uri: Uri,
    http: HttpClient,
    headers: Vec<(HeaderName, HeaderValue)>,
    session: Mutex<Option<HeaderValue>>,
    version: Mutex<Option<HeaderValue>>,
    /// 2026-07-28 requests waiting for their answer, by id (JSON text): cancelling one is
    /// closing its response stream.
    stateless_calls: Mutex<HashMap<String, AbortHandle>>,
    /// The `Mcp-Param-*` headers each tool of the server declares, learned from the answers
    /// to the `tools/list` requests this client posts.
    param_headers: ToolHeaders,
    to_relay: mpsc::Sender<Inbound>,
    gone: Mutex<Option<oneshot::Sender<String>>>,
    config: UpstreamConfig,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Client {
    async fn run(self: Arc<Self>, mut from_relay: mpsc::Receiver<Bytes>) {
        let mut listening = false;
        while let Some(message) = from_relay.recv().await {
            let peek = Peek::of(&message).unwrap_or_default();
            if peek.is_request() && peek.method.as_deref() != Some("initialize") {
                let headers = stateless_headers(&message, &self.param_headers);
                let id = peek.id.clone().unwrap_or_default();
                if headers.is_empty() {
                    tokio::spawn(self.clone().post(message, peek, headers));
                } else {
                    // Held while spawning: the call removes itself when done, after this.
                    let mut calls = lock(&self.stateless_calls);
                    let task = tokio::spawn(self.clone().post(message, peek, headers));
                    calls.insert(id, task.abort_handle());
                }
                continue;
            }
            if self.cancel_stateless(&message) {
                continue;
            }
            // Notifications, answers and initialize go one at a time, in order.
            let initialized = peek.method.as_deref() == Some("notifications/initialized");
            self.clone().post(message, peek, Vec::new()).await;
            if initialized && !listening && lock(&self.session).is_some() {
                listening = true;
                tokio::spawn(self.clone().listen());
            }
        }
        let session = lock(&self.session).clone();
        if let Some(session) = session {
            let _ = self.send(Method::DELETE, None, Some(session), None).await;
        }
    }

    fn fail(&self, why: String) {
        if let Some(gone) = lock(&self.gone).take() {
            tracing::warn!(target: "aml_mcp_http", "the upstream {} is gone: {why}", self.uri);
            let _ = gone.send(why);
        }
    }

    async fn deliver(&self, message: &[u8]) {
        let inbound = if message.len() > self.config.max_message_bytes {
            let prefix = Bytes::copy_from_slice(
                &message[..aml_mcp::relay::frame::OVERSIZED_PREFIX.min(message.len())],
            );
            Inbound::Oversized {
                prefix,
                len: message.len(),
            }
        } else {
            Inbound::Message(message::one_line(message))
        };
        let _ = self.to_relay.send(inbound).await;
    }

    /// Learns the tools' `Mcp-Param-*` declarations when `answer` (read as `peek`) answers
    /// `request`, a `tools/list`: where the answer to a request of ours is already told apart.
    fn learn_if_listing(&self, request: &Peek, answer: &Peek, message: &[u8]) {
        if request.method.as_deref() == Some("tools/list") && answer.is_response() && answer.id == request.id
        {
            self.param_headers.learn(message);
        }
    }

    /// Answers a request in the server's place (an HTTP error the server gave instead).
    async fn answer_error(&self, peek: &Peek, why: &str) {
        if peek.is_request() {
            let code = aml_mcp::relay::UPSTREAM_GONE;
            self.deliver(&message::error(peek.id.as_deref(), code, why)).await;
        }
    }

    /// A `notifications/cancelled` for a 2026-07-28 request still waiting: its response
    /// stream is closed instead (how that revision cancels over HTTP). True if it was.
    fn cancel_stateless(&self, message: &[u8]) -> bool {
        #[derive(serde::Deserialize)]
        struct Cancelled {
            method: String,
            params: CancelledParams,
        }
        #[derive(serde::Deserialize)]
        struct CancelledParams {
            #[serde(rename = "requestId")]
            request_id: serde_json::Value,
        }
        let Ok(note) = serde_json::from_slice::<Cancelled>(message) else {
            return false;
        };
        if note.method != "notifications/cancelled" {
            return false;
        }
        match lock(&self.stateless_calls).remove(&note.params.request_id.to_string()) {
            Some(call) => {
                call.abort();
                true
            }
            None => false,
        }
    }

    async fn post(self: Arc<Self>, message: Bytes, peek: Peek, stateless: Vec<(HeaderName, HeaderValue)>) {
        let id = peek.id.clone().unwrap_or_default();
        self.post_one(message, peek, &stateless).await;
        if !stateless.is_empty() {
            lock(&self.stateless_calls).remove(&id);
        }
    }

    async fn post_one(&self, message: Bytes, peek: Peek, stateless: &[(HeaderName, HeaderValue)]) {
        // 2026-07-28 has no sessions: such a request never carries one.
        let session = if stateless.is_empty() {
            lock(&self.session).clone()
        } else {
            None
        };
        let trace = self.outbound_trace(&peek);
        let response = match self
            .send_with(
                Method::POST,
                Some(message),
                session.clone(),
                None,
                stateless,
                trace.as_ref(),
            )
            .await
        {
            Ok(response) => response,
            // Nothing was sent: this request is refused, the server is not gone.
            Err(SendError::NoToken(why)) => {
                if !peek.is_request() {
                    tracing::warn!(target: "aml_mcp_http", "a message to the upstream {} was not sent: {why}", self.uri);
                }
                return self.answer_error(&peek, &why).await;
            }
            Err(e) => return self.fail(format!("POST failed: {e}")),
        };
        let status = response.status();
        if peek.method.as_deref() == Some("initialize") && status.is_success() {
            *lock(&self.session) = response.headers().get("mcp-session-id").cloned();
        }
        if status == StatusCode::NOT_FOUND && session.is_some() {
            return self.fail("the server ended the session (404)".into());
        }
        if status == StatusCode::ACCEPTED {
            return self
                .answer_error(&peek, "the server answered a request with 202 and no answer")
                .await;
        }
        let sse = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !status.is_success() {
            let body = self.body(response).await.unwrap_or_default();
            // The server's own JSON-RPC answer to this request (2026-07-28 servers send one
            // with 400 and 404): passed on as it is.
            let own = Peek::of(&body).is_some_and(|p| p.is_response() && p.id == peek.id);
            if own {
                return self.deliver(body.trim_ascii()).await;
            }
            let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
            return self
                .answer_error(&peek, &format!("the server answered HTTP {status}: {text}"))
                .await;
        }
        if sse {
            return self.read_stream(response, Some(peek)).await;
        }
        match self.body(response).await {
            Ok(body) if body.trim_ascii().is_empty() => {
                self.answer_error(&peek, "the server sent an empty answer").await
            }
            Ok(body) => match message::split(&body) {
                Ok(messages) => {
                    for m in &messages {
                        let answer = Peek::of(m).unwrap_or_default();
                        self.note_version(m);
                        self.learn_if_listing(&peek, &answer, m);
                        self.deliver(m).await;
                    }
                }
                // Passed on as it is: the relay answers garbage from the server.
                Err(_) => self.deliver(&body).await,
            },
            Err(e) => self.fail(format!("reading an answer failed: {e}")),
        }
    }

    /// Keeps the protocol version an answer names (`initialize`'s), for the later requests'
    /// header.
    fn note_version(&self, answer: &[u8]) {
        if let Some(version) = Peek::protocol_version(answer) {
            if let Ok(value) = HeaderValue::try_from(version.as_str()) {
                *lock(&self.version) = Some(value);
            }
        }
    }

    /// Reads an SSE answer (or the GET stream) to its end; resumes a POST stream that broke
    /// off before the answer came.
    async fn read_stream(&self, mut response: Response<Incoming>, request: Option<Peek>) {
        let mut last_id: Option<String> = None;
        let mut attempts = 0;
        loop {
            let mut decoder = Decoder::new(self.config.max_message_bytes + 1024);
            let mut answered = false;
            let mut body = response.into_body();
            let ended_cleanly = loop {
                match body.frame().await {
                    None => break true,
                    Some(Err(e)) => {
                        tracing::debug!(target: "aml_mcp_http", "the server's stream broke: {e}");
                        break false;
                    }
                    Some(Ok(frame)) => {
                        let Some(data) = frame.data_ref() else { continue };
                        let Ok(events) = decoder.feed(data) else {
                            return self
                                .fail("the server sent an SSE event longer than the message limit".into());
                        };
                        for event in events {
                            if event.id.is_some() {
                                last_id = event.id.clone();
                            }
                            if event.data.is_empty() || event.event.as_deref().is_some_and(|e| e != "message")
                            {
                                continue;
                            }
                            let peek = Peek::of(&event.data).unwrap_or_default();
                            if let Some(request) = &request {
                                self.learn_if_listing(request, &peek, &event.data);
                            }
                            self.note_version(&event.data);
                            answered |= request
                                .as_ref()
                                .is_some_and(|r| peek.is_response() && peek.id == r.id);
                            self.deliver(&event.data).await;
                        }
                    }
                }
            };
            if answered || (request.is_none() && ended_cleanly) {
                return;
            }
            let Some(last) = last_id.clone().filter(|_| attempts < RESUME_ATTEMPTS) else {
                if request.is_some() {
                    return self.fail("the server's stream ended before its answer".into());
                }
                return;
            };
            attempts += 1;
            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempts))).await;
            let session = lock(&self.session).clone();
            response = match self.send(Method::GET, None, session, Some(last)).await {
                Ok(r) if r.status().is_success() => r,
                Ok(r) if r.status() == StatusCode::NOT_FOUND => {
                    return self.fail("the server ended the session (404)".into())
                }
                Ok(r) => return self.fail(format!("resuming the stream got HTTP {}", r.status())),
                Err(e) => return self.fail(format!("resuming the stream failed: {e}")),
            };
        }
    }

    /// The GET stream for messages the server sends on its own, opened again (after a
    /// second) whenever the server ends it, for as long as the relay runs.
    async fn listen(self: Arc<Self>) {
        while !self.to_relay.is_closed() && lock(&self.gone).is_some() {
            let session = lock(&self.session).clone();
            match self.send(Method::GET, None, session, None).await {
                Ok(r) if r.status().is_success() => self.read_stream(r, None).await,
                Ok(r) if r.status() == StatusCode::NOT_FOUND => {
                    return self.fail("the server ended the session (404)".into())
                }
                Ok(r) => {
                    tracing::debug!(target: "aml_mcp_http", "the server offers no GET stream ({})", r.status());
                    return;
                }
                Err(e) => tracing::debug!(target: "aml_mcp_http", "the GET stream failed: {e}"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn body(&self, response: Response<Incoming>) -> Result<Bytes, String> {
        let limited = http_body_util::Limited::new(response.into_body(), self.config.max_message_bytes);
        limited
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|e| e.to_string())
    }

    async fn send(
        &self,
        method: Method,
        body: Option<Bytes>,
        session: Option<HeaderValue>,
        last_event: Option<String>,
    ) -> Result<Response<Incoming>, SendError> {
        self.send_with(method, body, session, last_event, &[], None).await
    }

    /// The relay's trace context for the request `peek` shows, if it gave one (a request of
    /// the relay's own numbering: its ids are integers). Never for an answer: its id is the
    /// server's, which may equal one of the relay's.
    fn outbound_trace(&self, peek: &Peek) -> Option<TransportTrace> {
        if !peek.is_request() {
            return None;
        }
        let traces = self.config.outbound_traces.as_ref()?;
        let id = peek.id.as_deref()?.parse::<u64>().ok()?;
        traces.take(id)
    }

    /// [`send`](Self::send) with a 2026-07-28 request's own headers (its protocol version
    /// replaces the session's) and the relay's trace context for it. With client
    /// credentials, the gate's token goes with it; a `401` drops that token and the request
    /// goes once more with a new one (the server refused it unread, so it ran nothing).
    async fn send_with(
        &self,
        method: Method,
        body: Option<Bytes>,
        session: Option<HeaderValue>,
        last_event: Option<String>,
        stateless: &[(HeaderName, HeaderValue)],
        trace: Option<&TransportTrace>,
    ) -> Result<Response<Incoming>, SendError> {
        let mut retried = false;
        loop {
            let authorization = match &self.config.tokens {
                Some(tokens) => Some(tokens.authorization().await.map_err(SendError::NoToken)?),
                None => None,
            };
            let response = self
                .send_once(
                    method.clone(),
                    body.clone(),
                    session.clone(),
                    last_event.clone(),
                    stateless,
                    trace,
                    authorization.clone(),
                )
                .await?;
            match (&self.config.tokens, authorization) {
                (Some(tokens), Some(used)) if response.status() == StatusCode::UNAUTHORIZED && !retried => {
                    tracing::info!(target: "aml_mcp_http", "the upstream {} refused the gate's access token (401): getting a new one", self.uri);
                    tokens.refused(&used).await;
                    retried = true;
                }
                _ => return Ok(response),
            }
        }
    }

    /// One attempt of [`send_with`](Self::send_with), with this `Authorization` if any.
    #[allow(clippy::too_many_arguments)]
    async fn send_once(
        &self,
        method: Method,
        body: Option<Bytes>,
        session: Option<HeaderValue>,
        last_event: Option<String>,
        stateless: &[(HeaderName, HeaderValue)],
        trace: Option<&TransportTrace>,
        authorization: Option<HeaderValue>,
    ) -> Result<Response<Incoming>, SendError> {
        let mut request = Request::builder().method(method.clone()).uri(self.uri.clone());
        request = match method {
            Method::GET => request.header(header::ACCEPT, "text/event-stream"),
            _ => request
                .header(header::ACCEPT, "application/json, text/event-stream")
                .header(header::CONTENT_TYPE, "application/json"),
        };
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        if stateless.is_empty() {
            if let Some(version) = lock(&self.version).clone() {
                request = request.header("mcp-protocol-version", version);
            }
        }
        for (name, value) in stateless {
            request = request.header(name, value);
        }
        if let Some(last) = last_event {
            request = request.header("last-event-id", last);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        if let Some(authorization) = authorization {
            request = request.header(header::AUTHORIZATION, authorization);
        }
        if let Some(trace) = trace {
            // The observer's own values; one that is no header value is not sent.
            let state = trace.tracestate().and_then(|s| HeaderValue::try_from(s).ok());
            if let Ok(parent) = HeaderValue::try_from(trace.traceparent()) {
                request = request.header("traceparent", parent);
                if let Some(state) = state {
                    request = request.header("tracestate", state);
                }
            }
        }
        let request = request.body(Full::new(body.unwrap_or_default()))?;
        Ok(self.http.request(request).await?)
    }
}

/// Why a request to the server got no answer.
#[derive(Debug, thiserror::Error)]
enum SendError {
    /// No access token could be had: the request was not sent.
    #[error("{0}")]
    NoToken(String),
    /// A header made the request unbuildable: it was not sent.
    #[error("the request cannot be built: {0}")]
    Request(#[from] hyper::http::Error),
    /// The request failed in transport (connecting, writing or reading the answer's head).
    #[error("{}", with_causes(.0))]
    Transport(#[from] hyper_util::client::legacy::Error),
}

/// An error with what caused it, as one line (the client's own text names only its kind).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

/// The headers 2026-07-28 puts on a request (`MCP-Protocol-Version` from its `_meta`,
/// `Mcp-Method`, `Mcp-Name` for the methods that name something, and for a `tools/call` the
/// `Mcp-Param-*` headers its tool declares, from its arguments); none for a request of the
/// handshake era (no version in `_meta`).
fn stateless_headers(message: &[u8], param_headers: &ToolHeaders) -> Vec<(HeaderName, HeaderValue)> {
    let Some(read) = std::str::from_utf8(message)
        .ok()
        .and_then(|m| ClientMessage::read(m).ok())
    else {
        return Vec::new();
    };
    let Some(Some(version)) = read.meta_version.filter(|v| {
        v.as_deref()
            .is_some_and(|v| crate::STATELESS_PROTOCOL_VERSIONS.contains(&v))
    }) else {
        return Vec::new();
    };
    let mut headers = Vec::new();
    let mut add = |name: &'static str, value: &str| {
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.push((HeaderName::from_static(name), value));
        }
    };
    add("mcp-protocol-version", &version);
    if let Some(method) = &read.method {
        add("mcp-method", method);
    }
    if let Some(name) = &read.name {
        add("mcp-name", &encode_header_value(name));
    }
    let declared = (read.method.as_deref() == Some("tools/call"))
        .then(|| read.name.as_deref().and_then(|tool| param_headers.of(tool)))
        .flatten();
    if let Some(declared) = declared {
        headers.extend(param_headers::mirror(
            &declared,
            &param_headers::arguments_of(message),
        ));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_runtime_an_upstream_is_an_error_not_a_panic() {
        let config = UpstreamConfig::default();
        assert!(check_upstream("http://127.0.0.1:9/mcp", &config).is_ok());
        let err = http_upstream("http://127.0.0.1:9/mcp", config.clone()).unwrap_err();
        assert!(matches!(err, UpstreamError::NoRuntime), "{err}");
        let bad = config.with_header("bad name", "x");
        assert!(matches!(
            check_upstream("http://127.0.0.1:9/mcp", &bad),
            Err(UpstreamError::BadHeader(_))
        ));
    }
}

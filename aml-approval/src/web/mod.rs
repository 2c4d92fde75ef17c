//! The approval page (feature `web`): a small HTTP server, on loopback by default, where a
//! person sees each pending proposal exactly and approves or denies it, live.
//!
//! Authentication is a per-run secret token in the URL (256 random bits, compared in
//! constant time), or as `Authorization: Bearer` for the JSON API under `/api/v1/`. Anyone
//! who has it can decide, so print the URL only where the approver sees it. Decisions are
//! signed server-side with the approver's key.
//!
//! What the page shows (ADR 020): each pending proposal with who asks (a [`Requester`]),
//! the tool, effect, resource, purpose, the arguments as a tree and the digest; identical
//! pending proposals grouped; a countdown to each one's expiry; the decided ones (approved,
//! denied, expired, withdrawn) from an [`ApprovalHistory`], searchable. It updates without
//! reload: `GET /api/v1/events` is a server-sent event stream of every change.
//!
//! Built on hyper. What keeps it up when peers misbehave (ADR 011):
//! - connections that have not shown the token are kept apart from those that have: at
//!   most [`WebApprovalsBuilder::max_unauthenticated`] of the first kind are held (at the
//!   cap the oldest is closed to make room, so newcomers are never refused, and the accept
//!   loop waits until its socket is closed before accepting more) and each must
//!   show the token within [`WebApprovalsBuilder::token_timeout`]; a connection that shows
//!   it takes one of [`WebApprovalsBuilder::max_authenticated`] slots, which connections
//!   without the token cannot take. A local process without the token cannot lock the
//!   approver out, and a flood cannot exhaust the process's file descriptors;
//! - a live stream gives its slot back and holds one of
//!   [`WebApprovalsBuilder::max_streams`] instead (at the cap the oldest stream closes), so
//!   tabs left open never keep the approver from loading the page or deciding;
//! - each connection serves one request; the rest of it (a form body) must arrive within
//!   [`WebApprovalsBuilder::request_timeout`], and the whole connection (a stream aside)
//!   may last at most the token timeout plus twice the request timeout;
//! - the accept loop logs accept errors and backs off instead of ending;
//! - [`WebApprovals::shutdown`] stops accepting, ends the streams, lets connections in
//!   flight finish (briefly) and fails every pending decision, which the hook turns into a
//!   block.
//!
//! Every state change (`POST /decide`, `POST /api/v1/decide`) must come from the page
//! itself: the `Origin` header must name the page's own origin and `Sec-Fetch-Site`, when
//! present, must be `same-origin`; every request must carry the page's own `Host` (against
//! DNS rebinding). Responses carry `X-Content-Type-Options: nosniff` and a strict CSP (no
//! inline script or style, `frame-ancestors 'none'`).

mod admission;
mod api;
mod board;
mod decide;
mod events;
mod form;
mod notify;
mod page;
mod render;
mod routes;
mod server;
mod tree;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::async_trait;
use aml_grants::{Clock, SystemClock};
use tokio::sync::{broadcast, oneshot, watch};

use crate::history::{ApprovalHistory, MemoryHistory};
use crate::hook::{ChannelError, DecisionChannel, PendingApproval};
use crate::keys::ApproverKey;
use crate::statement::SignedStatement;
use crate::Requester;

pub use notify::NotifyCommand;

/// Receives every signed decision the page makes (approve or deny), before it is handed to
/// the waiting request.
pub type DecisionLog = Arc<dyn Fn(&SignedStatement) + Send + Sync>;

/// What the request handlers share.
struct State {
    token: String,
    /// A random name for this run of the page, not secret: tabs of one page share their
    /// live stream under it.
    instance: String,
    /// `host:port` forms the page answers to.
    authorities: Vec<String>,
    address: SocketAddr,
    approver: ApproverKey,
    statement_ttl: Duration,
    clock: Arc<dyn Clock>,
    board: Mutex<board::Board>,
    /// Every change of the board, in order, for the live streams.
    events: broadcast::Sender<Arc<events::Event>>,
    history: Arc<dyn ApprovalHistory>,
    notify: Option<notify::Notifier>,
    on_decision: Option<DecisionLog>,
    limits: server::Limits,
    /// Connections that have not shown the token yet.
    unproven: Arc<admission::Unproven>,
    /// One permit per connection that has shown the token.
    authenticated: Arc<tokio::sync::Semaphore>,
    /// The live event streams.
    streams: Arc<admission::Streams>,
    /// Turns `true` at shutdown.
    stopped: watch::Receiver<bool>,
}

impl State {
    fn board(&self) -> std::sync::MutexGuard<'_, board::Board> {
        self.board.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The page's URL with its token.
    fn url(&self) -> String {
        format!("http://{}/?t={}", self.address, self.token)
    }
}

/// Configures and starts [`WebApprovals`].
pub struct WebApprovalsBuilder {
    approver: ApproverKey,
    bind: SocketAddr,
    statement_ttl: Duration,
    clock: Arc<dyn Clock>,
    max_unauthenticated: usize,
    max_authenticated: usize,
    max_streams: usize,
    token_timeout: Duration,
    request_timeout: Duration,
    on_decision: Option<DecisionLog>,
    history: Arc<dyn ApprovalHistory>,
    notify: Option<NotifyCommand>,
}

impl core::fmt::Debug for WebApprovalsBuilder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WebApprovalsBuilder")
            .field("approver", &self.approver)
            .field("bind", &self.bind)
            .field("statement_ttl", &self.statement_ttl)
            .field("max_unauthenticated", &self.max_unauthenticated)
            .field("max_authenticated", &self.max_authenticated)
            .field("max_streams", &self.max_streams)
            .field("token_timeout", &self.token_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("history", &self.history)
            .field("notify", &self.notify)
            .finish_non_exhaustive()
    }
}

impl WebApprovalsBuilder {
    /// Listens on `address` (default `127.0.0.1:0`, any free port on loopback). The page
    /// speaks plain HTTP and its token is in the URL: keep it on loopback unless the path
    /// to the approver is otherwise protected.
    pub fn bind(mut self, address: SocketAddr) -> Self {
        self.bind = address;
        self
    }

    /// Listens on `127.0.0.1:port` (0 for any free port).
    pub fn port(self, port: u16) -> Self {
        self.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
    }

    /// Signed decisions stay valid for `ttl` (default five minutes).
    pub fn statement_ttl(mut self, ttl: Duration) -> Self {
        self.statement_ttl = ttl;
        self
    }

    /// Reads time from `clock` (for the statements' issue and expiry times).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Holds at most `n` connections that have not shown the token yet (default 64, at
    /// least 1); when one more arrives, the oldest of them is closed.
    pub fn max_unauthenticated(mut self, n: usize) -> Self {
        self.max_unauthenticated = n.max(1);
        self
    }

    /// Serves at most `n` connections that have shown the token at once (default 16, at
    /// least 1); requests beyond are answered `503`. Live streams do not count here.
    pub fn max_authenticated(mut self, n: usize) -> Self {
        self.max_authenticated = n.max(1);
        self
    }

    /// Keeps at most `n` live event streams open (default 64, at least 1); one more closes
    /// the oldest (its tab says so and stops updating).
    pub fn max_streams(mut self, n: usize) -> Self {
        self.max_streams = n.max(1);
        self
    }

    /// A connection must show the token within `timeout` (default 2 s): its request head,
    /// or for a form that carries the token in its body, the head and the body.
    pub fn token_timeout(mut self, timeout: Duration) -> Self {
        self.token_timeout = timeout;
        self
    }

    /// The rest of a request that has shown the token (its body) must arrive within
    /// `timeout` (default 10 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Calls `log` with every signed decision, before it is handed to the waiting request.
    pub fn on_decision(mut self, log: impl Fn(&SignedStatement) + Send + Sync + 'static) -> Self {
        self.on_decision = Some(Arc::new(log));
        self
    }

    /// Keeps decided proposals in `history` and lists them from it (default: the last
    /// 1,000 in memory, lost at restart).
    pub fn history(mut self, history: Arc<dyn ApprovalHistory>) -> Self {
        self.history = history;
        self
    }

    /// Runs `command` for each new pending proposal (see [`NotifyCommand`]).
    pub fn notify(mut self, command: NotifyCommand) -> Self {
        self.notify = Some(command);
        self
    }

    /// Binds and starts serving (inside a tokio runtime with I/O and time enabled).
    pub async fn start(self) -> std::io::Result<WebApprovals> {
        let listener = server::listen(self.bind)?;
        let address = listener.local_addr()?;
        if !address.ip().is_loopback() {
            tracing::warn!(target: "aml.approval", %address, "the approval page listens beyond loopback");
        }
        let mut random = [0u8; 40];
        getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut authorities = vec![address.to_string()];
        if address.ip().is_loopback() {
            authorities.push(format!("localhost:{}", address.port()));
        }
        let token = crate::hex::encode(&random[..32]);
        let (stop, stopped) = watch::channel(false);
        let state = Arc::new(State {
            unproven: Arc::new(admission::Unproven::new(self.max_unauthenticated, &token)),
            token,
            instance: crate::hex::encode(&random[32..]),
            authorities,
            address,
            approver: self.approver,
            statement_ttl: self.statement_ttl,
            clock: self.clock,
            board: Mutex::default(),
            events: broadcast::channel(events::BACKLOG).0,
            history: self.history,
            notify: self.notify.map(notify::Notifier::new),
            on_decision: self.on_decision,
            limits: server::Limits {
                max_authenticated: self.max_authenticated,
                token_timeout: self.token_timeout,
                request_timeout: self.request_timeout,
            },
            authenticated: Arc::new(tokio::sync::Semaphore::new(self.max_authenticated)),
            streams: Arc::new(admission::Streams::new(self.max_streams)),
            stopped: stopped.clone(),
        });
        let task = tokio::spawn(server::serve(listener, Arc::clone(&state), stopped));
        Ok(WebApprovals {
            state,
            address,
            stop: Arc::new(stop),
            task: Arc::new(Mutex::new(Some(task))),
        })
    }
}

/// The approval page and the [`DecisionChannel`] it serves.
///
/// ```no_run
/// # async fn host() -> std::io::Result<()> {
/// use aml_approval::{ApproverKey, WebApprovals};
///
/// let approver = ApproverKey::generate("alice").expect("randomness");
/// let page = WebApprovals::builder(approver)
///     .port(0)
///     .max_unauthenticated(32)
///     .on_decision(|signed| eprintln!("decided: {}", signed.to_value()))
///     .start()
///     .await?;
/// eprintln!("approve at {}", page.url());
/// // ... hand `page` to a SignedApprovalHook; at the end:
/// page.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct WebApprovals {
    state: Arc<State>,
    address: SocketAddr,
    stop: Arc<watch::Sender<bool>>,
    task: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl core::fmt::Debug for WebApprovals {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WebApprovals")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl WebApprovals {
    /// A page that signs decisions with `approver`; see [`WebApprovalsBuilder`].
    pub fn builder(approver: ApproverKey) -> WebApprovalsBuilder {
        WebApprovalsBuilder {
            approver,
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            statement_ttl: Duration::from_secs(300),
            clock: Arc::new(SystemClock),
            max_unauthenticated: 64,
            max_authenticated: 16,
            max_streams: 64,
            token_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            on_decision: None,
            history: Arc::new(MemoryHistory::default()),
            notify: None,
        }
    }

    /// The page's URL, secret token included.
    pub fn url(&self) -> String {
        self.state.url()
    }

    /// The address the page listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// How many connections the page holds open now: those yet to show the token, those
    /// that have shown it, and the live streams.
    pub fn open_connections(&self) -> usize {
        self.state.unproven.len() + self.state.limits.max_authenticated
            - self.state.authenticated.available_permits()
            + self.state.streams.len()
    }

    /// How many live event streams are open.
    pub fn open_streams(&self) -> usize {
        self.state.streams.len()
    }

    /// How many proposals are waiting.
    pub fn pending_count(&self) -> usize {
        self.state.board().len()
    }

    /// The digests of the proposals waiting, in the order they arrived.
    pub fn pending_digests(&self) -> Vec<aml_core::Sha256Digest> {
        self.state
            .board()
            .in_arrival_order()
            .map(|e| e.pending.proposal.digest())
            .collect()
    }

    /// The digests of the last calls that stopped waiting before anyone decided them (their
    /// caller went away, or their wait for a decision ran out), oldest first. The page
    /// shows them as withdrawn or expired.
    pub fn withdrawn_digests(&self) -> Vec<aml_core::Sha256Digest> {
        self.state
            .board()
            .recent_undecided()
            .map(|e| e.proposal_sha256)
            .collect()
    }

    /// Stops the page: no new connections, the live streams end, connections in flight
    /// get a moment to finish, and every pending decision fails (the hook blocks those
    /// calls). Later decisions through this channel fail at once.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        self.state.board().clear();
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// Takes a pending entry off the board when its caller stops waiting (decided, timed out,
/// dropped); one that nobody had decided is recorded as expired or withdrawn.
struct Withdraw<'a>(&'a Arc<State>, String);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        board::settle_undecided(self.0, &self.1);
    }
}

#[async_trait]
impl DecisionChannel for WebApprovals {
    async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError> {
        let (tx, rx) = oneshot::channel();
        let grant_id = pending.grant_id.clone();
        // Checked under the board's lock, which `shutdown` clears with, so no entry
        // outlives it.
        if !board::add(&self.state, pending, tx, || *self.stop.borrow()) {
            return Err(ChannelError("the approval page was shut down".into()));
        }
        let _withdraw = Withdraw(&self.state, grant_id);
        rx.await
            .map_err(|_| ChannelError("the approval page stopped".into()))
    }
}

/// Shown for a requester part the host did not give.
const NOT_KNOWN: &str = "not known";

/// `requester`'s parts as JSON for the API: each `null` when not known.
fn requester_value(requester: &Requester) -> serde_json::Value {
    serde_json::to_value(requester).unwrap_or(serde_json::Value::Null)
}

//! The approval page (feature `web`): a small HTTP server, on loopback by default, where a
//! person sees each pending proposal exactly and approves or denies it.
//!
//! Authentication is a per-run secret token in the URL (256 random bits, compared in
//! constant time). Anyone who has the URL can decide, so print it only where the approver
//! sees it. Decisions are signed server-side with the approver's key.
//!
//! Built on hyper. What keeps it up when peers misbehave:
//! - at most [`WebApprovalsBuilder::max_connections`] connections are served at once;
//!   connections beyond are answered `503` and closed at once, so a flood cannot exhaust
//!   the process's file descriptors;
//! - each connection serves one request, whose head and body must arrive within
//!   [`WebApprovalsBuilder::request_timeout`] (idle and slow clients are cut off), and the
//!   whole connection may last at most twice that;
//! - the accept loop logs accept errors and backs off instead of ending;
//! - [`WebApprovals::shutdown`] stops accepting, lets connections in flight finish (briefly)
//!   and fails every pending decision, which the hook turns into a block.
//!
//! Every state change (`POST /decide`) must come from the page itself: the `Origin` header
//! must name the page's own origin and `Sec-Fetch-Site`, when present, must be
//! `same-origin`; every request must carry the page's own `Host` (against DNS rebinding).
//! Responses carry `X-Content-Type-Options: nosniff` and a CSP with
//! `frame-ancestors 'none'`.

mod form;
mod page;
mod routes;
mod server;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::async_trait;
use aml_grants::{Clock, SystemClock};
use tokio::sync::{oneshot, watch};

use crate::hook::{ChannelError, DecisionChannel, PendingApproval};
use crate::keys::ApproverKey;
use crate::statement::SignedStatement;

/// Receives every signed decision the page makes (approve or deny), before it is handed to
/// the waiting request.
pub type DecisionLog = Arc<dyn Fn(&SignedStatement) + Send + Sync>;

struct Entry {
    pending: PendingApproval,
    answer: Option<oneshot::Sender<SignedStatement>>,
}

/// What the request handlers share.
struct State {
    token: String,
    /// `host:port` forms the page answers to.
    authorities: Vec<String>,
    approver: ApproverKey,
    statement_ttl: Duration,
    clock: Arc<dyn Clock>,
    pending: Mutex<BTreeMap<String, Entry>>,
    on_decision: Option<DecisionLog>,
    limits: server::Limits,
    /// One permit per connection the page may hold open.
    permits: Arc<tokio::sync::Semaphore>,
}

impl State {
    fn pending(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Configures and starts [`WebApprovals`].
pub struct WebApprovalsBuilder {
    approver: ApproverKey,
    bind: SocketAddr,
    statement_ttl: Duration,
    clock: Arc<dyn Clock>,
    max_connections: usize,
    request_timeout: Duration,
    on_decision: Option<DecisionLog>,
}

impl core::fmt::Debug for WebApprovalsBuilder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WebApprovalsBuilder")
            .field("approver", &self.approver)
            .field("bind", &self.bind)
            .field("statement_ttl", &self.statement_ttl)
            .field("max_connections", &self.max_connections)
            .field("request_timeout", &self.request_timeout)
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

    /// Serves at most `n` connections at once (default 64, at least 1).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// A request's head and body must arrive within `timeout` (default 10 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Calls `log` with every signed decision, before it is handed to the waiting request.
    pub fn on_decision(mut self, log: impl Fn(&SignedStatement) + Send + Sync + 'static) -> Self {
        self.on_decision = Some(Arc::new(log));
        self
    }

    /// Binds and starts serving (inside a tokio runtime with I/O and time enabled).
    pub async fn start(self) -> std::io::Result<WebApprovals> {
        let listener = tokio::net::TcpListener::bind(self.bind).await?;
        let address = listener.local_addr()?;
        if !address.ip().is_loopback() {
            tracing::warn!(target: "aml.approval", %address, "the approval page listens beyond loopback");
        }
        let mut token = [0u8; 32];
        getrandom::fill(&mut token).map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut authorities = vec![address.to_string()];
        if address.ip().is_loopback() {
            authorities.push(format!("localhost:{}", address.port()));
        }
        let state = Arc::new(State {
            token: crate::hex::encode(&token),
            authorities,
            approver: self.approver,
            statement_ttl: self.statement_ttl,
            clock: self.clock,
            pending: Mutex::default(),
            on_decision: self.on_decision,
            limits: server::Limits {
                max_connections: self.max_connections,
                request_timeout: self.request_timeout,
            },
            permits: Arc::new(tokio::sync::Semaphore::new(self.max_connections)),
        });
        let (stop, stopped) = watch::channel(false);
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
///     .max_connections(32)
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
            max_connections: 64,
            request_timeout: Duration::from_secs(10),
            on_decision: None,
        }
    }

    /// The page's URL, secret token included.
    pub fn url(&self) -> String {
        format!("http://{}/?t={}", self.address, self.state.token)
    }

    /// The address the page listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// How many connections the page holds open now (at most the connection cap).
    pub fn open_connections(&self) -> usize {
        self.state.limits.max_connections - self.state.permits.available_permits()
    }

    /// How many proposals are waiting.
    pub fn pending_count(&self) -> usize {
        self.state.pending().len()
    }

    /// The digests of the proposals waiting, in grant-id order.
    pub fn pending_digests(&self) -> Vec<aml_core::Sha256Digest> {
        self.state
            .pending()
            .values()
            .map(|e| e.pending.proposal.digest())
            .collect()
    }

    /// Stops the page: no new connections, connections in flight get a moment to finish,
    /// and every pending decision fails (the hook blocks those calls). Later decisions
    /// through this channel fail at once.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        self.state.pending().clear();
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// Removes a pending entry when its caller stops waiting (decided, timed out, dropped).
struct Withdraw<'a>(&'a State, String);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.0.pending().remove(&self.1);
    }
}

#[async_trait]
impl DecisionChannel for WebApprovals {
    async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError> {
        let (tx, rx) = oneshot::channel();
        let grant_id = pending.grant_id.clone();
        {
            // Checked under the lock `shutdown` clears with, so no entry outlives it.
            let mut waiting = self.state.pending();
            if *self.stop.borrow() {
                return Err(ChannelError("the approval page was shut down".into()));
            }
            waiting.insert(
                grant_id.clone(),
                Entry {
                    pending,
                    answer: Some(tx),
                },
            );
        }
        let _withdraw = Withdraw(&self.state, grant_id);
        rx.await
            .map_err(|_| ChannelError("the approval page stopped".into()))
    }
}

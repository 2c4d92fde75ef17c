//! The HTTP front: accepts connections, checks each request (Origin, token, path, protocol
//! version, size), and hands every new MCP session to the host as a relay's client side
//! ([`Client`]).

mod authorize;
mod connections;
mod handler;
mod layers;
mod session;
mod stateless;
mod stateless_post;
mod trace;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_mcp::relay::Client;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use crate::FrontConfig;
use session::Sessions;

/// What the host learns about a new session.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionInfo {
    /// The `Mcp-Session-Id` the front gave it.
    pub id: String,
    /// Where its `initialize` came from (for the stateless connection: the first
    /// 2026-07-28 request).
    pub peer: SocketAddr,
    /// What the front's logs call it at `info` and above: `session N` (N counting sessions
    /// from 1 in the order they opened), or for the stateless connection its id. A
    /// session's id lets whoever holds it use the session, so it is logged at `debug` only.
    pub name: String,
    /// The connection for protocol 2026-07-28 requests (no session): every such request
    /// of one caller comes on it, until its relay ends; the next one then opens a new one.
    pub stateless: bool,
    /// The caller whose session this is: the name of the static bearer token that opened it
    /// (`NAME TOKEN` in the token file, else `token-N`), or the `sub` of its JWT access
    /// token; `None` on a front without tokens. Every later request on the session must
    /// present the same static token, or a JWT of the same subject.
    pub caller: Option<String>,
}

/// An MCP Streamable HTTP server at [`crate::MCP_PATH`]: each session a client opens comes
/// out of [`accept`](Self::accept) as a relay's client side ([`Client`]).
///
/// The front ends when this value is dropped: it stops listening and ends every session.
#[derive(Debug)]
pub struct HttpFront {
    local: SocketAddr,
    new_sessions: mpsc::Receiver<(Client, SessionInfo)>,
    sessions: Sessions,
    stateless: Arc<stateless::Stateless>,
    tasks: Vec<JoinHandle<()>>,
}

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: FrontConfig,
    pub(crate) sessions: Sessions,
    pub(crate) new_sessions: mpsc::Sender<(Client, SessionInfo)>,
    pub(crate) stateless: Arc<stateless::Stateless>,
    /// The origins of pages served from the front's own address: allowed besides the
    /// host's list.
    pub(crate) own_origins: Vec<String>,
    /// Sessions opened so far (for their [`SessionInfo::name`]).
    pub(crate) opened: std::sync::atomic::AtomicU64,
    /// The JWT checks and the issuer's key cache, with [`FrontConfig::oauth`].
    pub(crate) oauth: Option<Arc<crate::oauth::Verifier>>,
}

impl HttpFront {
    /// Listens on `addr` (port 0: any free port). Binding is the host's decision: this
    /// function binds where it is told, loopback or not.
    pub async fn bind(addr: SocketAddr, config: FrontConfig) -> std::io::Result<HttpFront> {
        HttpFront::bind_all(&[addr], config).await
    }

    /// Listens on every address of `addrs` (all of a name's, e.g. `localhost`'s `127.0.0.1`
    /// and `::1`), one front for all. With port 0 the first picks a free port and the others
    /// take the same one. No address: an `InvalidInput` error.
    pub async fn bind_all(addrs: &[SocketAddr], config: FrontConfig) -> std::io::Result<HttpFront> {
        let Some(first) = addrs.first() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no address to listen on",
            ));
        };
        let mut listeners = vec![TcpListener::bind(first).await?];
        let local = listeners[0].local_addr()?;
        for addr in &addrs[1..] {
            let mut addr = *addr;
            if addr.port() == 0 {
                addr.set_port(local.port());
            }
            listeners.push(TcpListener::bind(addr).await?);
        }
        let mut own_origins = Vec::new();
        for listener in &listeners {
            for origin in crate::auth::own_origins(listener.local_addr()?) {
                if !own_origins.contains(&origin) {
                    own_origins.push(origin);
                }
            }
        }
        let sessions: Sessions = Arc::new(Mutex::new(HashMap::new()));
        let (tx, new_sessions) = mpsc::channel(16);
        let idle = (config.session_idle_timeout, config.unused_session_timeout);
        let stateless = Arc::new(stateless::Stateless::default());
        let oauth = config.oauth.clone().map(crate::oauth::Verifier::new);
        let shared = Arc::new(Shared {
            oauth,
            config,
            sessions: sessions.clone(),
            new_sessions: tx,
            stateless: stateless.clone(),
            opened: Default::default(),
            own_origins,
        });
        // One cap for all the addresses: it guards one process's descriptors.
        let connections = connections::Connections::new(shared.config.max_connections);
        let mut tasks = vec![tokio::spawn(reap_idle(sessions.clone(), idle))];
        for listener in listeners {
            tasks.push(tokio::spawn(accept_loop(
                listener,
                shared.clone(),
                connections.clone(),
            )));
        }
        Ok(HttpFront {
            local,
            new_sessions,
            sessions,
            stateless,
            tasks,
        })
    }

    /// The address it listens on (with [`bind_all`](Self::bind_all), the first).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next session a client opened, or the next caller's 2026-07-28 relay: run a relay
    /// on its client side ([`aml_mcp::relay::run`]). A session's client side is a
    /// [`Client::Session`], an endpoint per POST that carries requests and a standing one
    /// for the GET stream (dropping it answers the client's `initialize` with an error and
    /// ends the session); a 2026-07-28 relay's is [`Client::Endpoints`], one endpoint per
    /// request.
    pub async fn accept(&mut self) -> Option<(Client, SessionInfo)> {
        self.new_sessions.recv().await
    }

    /// Ends every open session (each relay sees its client leave) and takes no new ones.
    pub fn close_all(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        self.new_sessions.close();
        self.stateless.close();
        let open: Vec<_> = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, s)| s)
            .collect();
        for session in open {
            session.close();
        }
    }

    /// How many sessions are open.
    pub fn open_sessions(&self) -> usize {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for HttpFront {
    fn drop(&mut self) {
        self.close_all();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, connections: Arc<connections::Connections>) {
    let mut http = hyper::server::conn::http1::Builder::new();
    // The timer also ends a kept-alive connection that sends no next request in time.
    http.timer(TokioTimer::new())
        .header_read_timeout(shared.config.header_read_timeout);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, for instance: wait instead of spinning.
                tracing::warn!(target: "aml_mcp_http", "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (slot, closed_for_room) = match connections.admit() {
            Ok(admitted) => admitted,
            Err(full) => {
                tracing::warn!(target: "aml_mcp_http", %peer, "refused a connection: {} authenticated connections are open (the limit)", full.proven);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = handler::service(shared.clone(), peer, Arc::new(slot));
        let served = http.serve_connection(
            TokioIo::new(stream),
            hyper::service::service_fn(move |request| service.clone().oneshot(Box::new(request))),
        );
        tokio::spawn(async move {
            tokio::select! {
                served = served => if let Err(e) = served {
                    tracing::debug!(target: "aml_mcp_http", %peer, "connection ended: {e}");
                },
                Ok(()) = closed_for_room => {
                    tracing::debug!(target: "aml_mcp_http", %peer, "closed a connection that sent no valid request, to make room");
                }
            }
        });
        // Let the connection closed for room (if any) and the new one run before the next
        // accept: on a backlog of connections this loop would otherwise accept many before
        // any descriptor is released, and pass the cap it keeps below the open-file limit.
        tokio::task::yield_now().await;
    }
}

/// Closes sessions that had no request for the idle limit: `used` for a session that sent a
/// request after `initialize`, `unused` for one that did not.
async fn reap_idle(sessions: Sessions, (used, unused): (Duration, Duration)) {
    // Never longer for an unused session than for a used one.
    let unused = unused.min(used);
    let tick = (used.min(unused) / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    loop {
        tokio::time::sleep(tick).await;
        let now = tokio::time::Instant::now();
        let expired: Vec<_> = {
            let mut map = sessions.lock().unwrap_or_else(|e| e.into_inner());
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, s)| {
                    s.idle_since().is_some_and(|(since, was_used)| {
                        now.duration_since(since) >= if was_used { used } else { unused }
                    })
                })
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        for session in expired {
            match session.was_used() {
                true => {
                    tracing::info!(target: "aml_mcp_http", client = %session.client, "{} closed after {used:?} idle", session.name)
                }
                false => {
                    tracing::info!(target: "aml_mcp_http", client = %session.client, "{} closed: no request after initialize for {unused:?}", session.name)
                }
            }
            tracing::debug!(target: "aml_mcp_http", "{} was {}", session.name, session.id);
            session.close();
        }
    }
}

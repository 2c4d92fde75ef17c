//! The HTTP front: accepts connections, checks each request (Origin, token, path, protocol
//! version, size), and hands every new MCP session to the host as a relay [`Connection`].

mod handler;
mod session;
mod stateless;
mod stateless_post;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_mcp::relay::Connection;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

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
    /// The connection for protocol 2026-07-28 requests (no session): every such request
    /// from any client comes on it, until its relay ends; the next one then opens a new one.
    pub stateless: bool,
}

/// An MCP Streamable HTTP server at [`crate::MCP_PATH`]: each session a client opens comes
/// out of [`accept`](Self::accept) as a relay [`Connection`].
///
/// The front ends when this value is dropped: it stops listening and ends every session.
#[derive(Debug)]
pub struct HttpFront {
    local: SocketAddr,
    new_sessions: mpsc::Receiver<(Connection, SessionInfo)>,
    sessions: Sessions,
    stateless: Arc<stateless::Stateless>,
    tasks: Vec<JoinHandle<()>>,
}

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: FrontConfig,
    pub(crate) sessions: Sessions,
    pub(crate) new_sessions: mpsc::Sender<(Connection, SessionInfo)>,
    pub(crate) stateless: Arc<stateless::Stateless>,
}

impl HttpFront {
    /// Listens on `addr` (port 0: any free port). Binding is the host's decision: this
    /// function binds where it is told, loopback or not.
    pub async fn bind(addr: SocketAddr, config: FrontConfig) -> std::io::Result<HttpFront> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let sessions: Sessions = Arc::new(Mutex::new(HashMap::new()));
        let (tx, new_sessions) = mpsc::channel(16);
        let idle = config.session_idle_timeout;
        let stateless = Arc::new(stateless::Stateless::default());
        let shared = Arc::new(Shared {
            config,
            sessions: sessions.clone(),
            new_sessions: tx,
            stateless: stateless.clone(),
        });
        let accept = tokio::spawn(accept_loop(listener, shared));
        let reaper = tokio::spawn(reap_idle(sessions.clone(), idle));
        Ok(HttpFront {
            local,
            new_sessions,
            sessions,
            stateless,
            tasks: vec![accept, reaper],
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next session a client opened: run a relay on the connection (dropping it answers
    /// the client's `initialize` with an error and ends the session).
    pub async fn accept(&mut self) -> Option<(Connection, SessionInfo)> {
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

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
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
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |request| handler::handle(shared.clone(), peer, request));
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(target: "aml_mcp_http", %peer, "connection ended: {e}");
            }
        });
    }
}

/// Closes sessions that had no request for the idle limit.
async fn reap_idle(sessions: Sessions, idle: Duration) {
    let tick = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    loop {
        tokio::time::sleep(tick).await;
        let now = tokio::time::Instant::now();
        let expired: Vec<_> = {
            let mut map = sessions.lock().unwrap_or_else(|e| e.into_inner());
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, s)| s.idle_since().is_some_and(|t| now.duration_since(t) >= idle))
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        for session in expired {
            tracing::info!(target: "aml_mcp_http", session = %session.id, "closed after {idle:?} idle");
            session.close();
        }
    }
}

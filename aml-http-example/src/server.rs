//! Serving the host's gate over HTTP/1.1: limits, the accept loop, one connection.

use std::convert::Infallible;
use std::error::Error as StdError;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aml_core::ToolGate;
use http_body_util::Full;
use hyper::body::{Body, Bytes};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// The adapter name in call records and spans.
pub const ADAPTER: &str = "http";

/// Largest request head (hyper's minimum buffer is 8 KiB).
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// How long connections in flight get to finish after shutdown.
const GRACE: Duration = Duration::from_secs(2);
/// How long a connection over the cap is kept to deliver its 503, and how much of its
/// request is discarded meanwhile.
const BUSY_LINGER: Duration = Duration::from_secs(1);
const BUSY_DISCARD_BYTES: usize = 64 * 1024;
/// The longest pause after accept errors (e.g. out of file descriptors).
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Sent, without reading the request, to a connection over the cap.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
Content-Length: 58\r\nConnection: close\r\nRetry-After: 1\r\n\r\n\
{\"error\":\"busy\",\"detail\":\"too many connections; not read\"}";

/// What a peer may use. Every request is answered within `read_timeout` (head, then body)
/// plus `call_timeout` (approval, claim and tool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerLimits {
    /// Largest request body (the arguments), in bytes; a larger one is refused with 413
    /// (`request_too_large`), unread. Default 1 MiB.
    pub max_body_bytes: usize,
    /// How long the request head, and then its body, may take to arrive; an idle
    /// keep-alive connection is closed after it too. Default 10 s.
    pub read_timeout: Duration,
    /// How long a call may take once read: approval stops waiting by then (blocked,
    /// nothing claimed), and a tool still running by then is answered with 504
    /// (`dispatch_in_progress`) while it finishes. Default 60 s; raise it for human
    /// approval.
    pub call_timeout: Duration,
    /// Most connections served at once; more are answered 503 unread. Default 256.
    pub max_connections: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_body_bytes: 1 << 20,
            read_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(60),
            max_connections: 256,
        }
    }
}

/// The host's [`ToolGate`] as HTTP/JSON endpoints: `POST /tools/{name}` calls a tool with
/// the body as its arguments, `GET /tools` lists the catalog.
///
/// It holds no policy of its own: the gate's catalog, policy, hooks and receipt sink decide
/// and record everything.
#[derive(Debug, Clone)]
pub struct HttpToolServer {
    gate: ToolGate,
    limits: ServerLimits,
}

impl HttpToolServer {
    /// Serves `gate` (renamed to adapter `http` in records) with [`ServerLimits::default`].
    pub fn new(gate: ToolGate) -> Self {
        HttpToolServer {
            gate: gate.for_adapter(ADAPTER).with_runtime(aml_core::TokioRuntime),
            limits: ServerLimits::default(),
        }
    }

    /// Sets the limits.
    pub fn with_limits(mut self, limits: ServerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The gate.
    pub fn gate(&self) -> &ToolGate {
        &self.gate
    }

    /// The limits.
    pub fn limits(&self) -> ServerLimits {
        self.limits
    }

    /// Answers one request: for a host that runs its own HTTP server (its own connection
    /// limits and timeouts around this). [`serve`] does both.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        crate::routes::handle(self, request).await
    }
}

/// Serves `server` on `listener` until `shutdown` completes, then gives connections in
/// flight 2 s to finish. An accept error (too many open files, a reset before accept) is
/// logged and followed by a growing pause: the loop never ends on its own.
pub async fn serve(listener: TcpListener, server: HttpToolServer, shutdown: impl Future<Output = ()>) {
    let server = Arc::new(server);
    let permits = Arc::new(Semaphore::new(server.limits.max_connections));
    let (stop_tx, stop) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut backoff = Duration::from_millis(5);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff = Duration::from_millis(5);
                stream
            }
            Err(e) => {
                tracing::warn!(target: "aml.http", error = %e, pause = ?backoff, "accept failed");
                tokio::select! {
                    _ = &mut shutdown => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            tracing::warn!(target: "aml.http", "connection refused: at the connection cap");
            tokio::spawn(busy(stream));
            continue;
        };
        connections.spawn(connection(stream, Arc::clone(&server), stop.clone(), permit));
    }
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(GRACE, async { while connections.join_next().await.is_some() {} }).await;
}

/// Answers a connection over the cap with 503 without reading its request, then discards
/// what the peer sends for a moment: closing with unread bytes would reset the connection
/// before the peer reads the answer.
async fn busy(mut stream: TcpStream) {
    let _ = tokio::time::timeout(BUSY_LINGER, async {
        stream.write_all(BUSY).await?;
        stream.shutdown().await?;
        let mut discard = [0u8; 4096];
        let mut total = 0;
        while total < BUSY_DISCARD_BYTES {
            match stream.read(&mut discard).await? {
                0 => break,
                n => total += n,
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Serves the requests of one connection; holds `permit` until it is closed.
async fn connection(
    stream: TcpStream,
    server: Arc<HttpToolServer>,
    mut stop: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) {
    // Without TCP_NODELAY, small replies wait out delayed ACKs.
    let _ = stream.set_nodelay(true);
    let read_timeout = server.limits.read_timeout;
    let service = service_fn(move |request| {
        let server = Arc::clone(&server);
        async move { Ok::<_, Infallible>(server.handle(request).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let served = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    tokio::select! {
        done = served.as_mut() => {
            if let Err(e) = done {
                tracing::debug!(target: "aml.http", error = %e, "connection ended");
            }
        }
        _ = stop.changed() => {
            served.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(GRACE, served).await;
        }
    }
    drop(permit);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_answer_declares_its_own_length() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let declared = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap();
        assert_eq!(declared.parse::<usize>().unwrap(), body.len());
        assert!(serde_json::from_str::<serde_json::Value>(body).is_ok());
    }
}

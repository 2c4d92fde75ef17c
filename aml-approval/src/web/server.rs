//! The accept loop and one connection: a connection cap, timeouts, graceful shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio::task::JoinSet;

use super::State;

/// What a peer may use.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_connections: usize,
    pub(super) request_timeout: Duration,
}

/// Largest request head or buffered read (hyper's minimum is 8 KiB).
const MAX_BUFFER: usize = 16 * 1024;
/// How long connections in flight get to finish after shutdown.
const GRACE: Duration = Duration::from_secs(2);
/// The longest pause after accept errors (e.g. out of file descriptors).
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Sent, without reading the request, to a connection over the cap.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
Content-Length: 42\r\nConnection: close\r\nRetry-After: 1\r\nX-Content-Type-Options: nosniff\r\n\r\n\
too many connections; try again in a moment";

/// Accepts until `stop` says so. An accept error (too many open files, a reset before
/// accept) is logged and followed by a growing pause: the loop never ends on its own.
pub(super) async fn serve(listener: TcpListener, state: Arc<State>, mut stop: watch::Receiver<bool>) {
    let permits = Arc::clone(&state.permits);
    let mut connections = JoinSet::new();
    let mut backoff = Duration::from_millis(5);
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff = Duration::from_millis(5);
                stream
            }
            Err(e) => {
                tracing::warn!(target: "aml.approval", error = %e, pause = ?backoff, "approval page: accept failed");
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            // Over the cap: answer if the socket takes it now, and close either way.
            let _ = stream.try_write(BUSY);
            tracing::debug!(target: "aml.approval", "approval page: connection refused, at the cap");
            continue;
        };
        connections.spawn(connection(stream, Arc::clone(&state), stop.clone(), permit));
    }
    // Connections watch `stop` too; give them the grace period, then drop the rest.
    let _ = tokio::time::timeout(GRACE, async { while connections.join_next().await.is_some() {} }).await;
}

/// Serves one request on `stream`, within the limits; holds `permit` until it is closed.
async fn connection(
    stream: TcpStream,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) {
    let limits = state.limits;
    let service = service_fn(move |request| {
        let state = Arc::clone(&state);
        async move { Ok::<_, Infallible>(super::routes::handle(request, &state).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.request_timeout)
        .keep_alive(false)
        .max_buf_size(MAX_BUFFER);
    let served = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    let deadline = tokio::time::sleep(limits.request_timeout * 2);
    tokio::pin!(deadline);
    tokio::select! {
        _ = served.as_mut() => {}
        _ = &mut deadline => {
            tracing::debug!(target: "aml.approval", "approval page: connection outlived its deadline");
        }
        _ = stop.changed() => {
            served.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(GRACE, served).await;
        }
    }
    drop(permit);
}

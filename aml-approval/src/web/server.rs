//! The accept loop and one connection: admission (ADR 011), timeouts, graceful shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

use super::admission::Admission;
use super::State;

/// What a peer may use.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// Connections that have shown the token; beyond, their requests are answered `503`.
    pub(super) max_authenticated: usize,
    /// How long a connection has to show the token (its request head, or a form body).
    pub(super) token_timeout: Duration,
    /// How long the rest of a request (a proven connection's body) may take.
    pub(super) request_timeout: Duration,
}

/// Largest request head or buffered read (hyper's minimum is 8 KiB).
const MAX_BUFFER: usize = 16 * 1024;
/// How long connections in flight get to finish after shutdown.
const GRACE: Duration = Duration::from_secs(2);
/// The longest pause after accept errors (e.g. out of file descriptors).
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long the accept loop waits for a shed connection to close (it closes at once unless
/// it showed the token meanwhile, and then it is served).
const SHED_WAIT: Duration = Duration::from_millis(200);

/// The kernel's queue of connections not yet accepted; Linux caps it at
/// `net.core.somaxconn` (4096 by default). A short queue (the usual 128) is filled by a
/// local flood whose connections the page closes and the peer reopens, and then the
/// kernel drops the approver's connection attempt (a browser retries only after a second).
const BACKLOG: u32 = 4096;

/// Listens on `address` with a long accept queue.
pub(super) fn listen(address: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match address {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As `TcpListener::bind` does: a restarted page can take its port again at once.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(BACKLOG)
}

/// Accepts until `stop` says so. An accept error (too many open files, a reset before
/// accept) is logged and followed by a growing pause: the loop never ends on its own.
pub(super) async fn serve(listener: TcpListener, state: Arc<State>, mut stop: watch::Receiver<bool>) {
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
        let admitted = state.unproven.admit(second_handle(&stream));
        if admitted.made_room {
            tracing::debug!(target: "aml.approval", "approval page: at the cap of connections without the token; the oldest was closed");
        }
        let admission = Admission::new(
            admitted.id,
            Arc::clone(&state.unproven),
            Arc::clone(&state.authenticated),
        );
        connections.spawn(connection(
            stream,
            Arc::clone(&state),
            stop.clone(),
            admission,
            admitted.close,
            admitted.alive,
        ));
        for ended in admitted.shed {
            let _ = tokio::time::timeout(SHED_WAIT, ended).await;
        }
    }
    // Connections watch `stop` too; give them the grace period, then drop the rest.
    let _ = tokio::time::timeout(GRACE, async { while connections.join_next().await.is_some() {} }).await;
}

/// A second handle on `stream`'s socket, so the unproven pool can look at what it sent.
#[cfg(unix)]
fn second_handle(stream: &TcpStream) -> Option<std::net::TcpStream> {
    use std::os::fd::AsFd;
    let owned = stream.as_fd().try_clone_to_owned().ok()?;
    Some(std::net::TcpStream::from(owned))
}

#[cfg(not(unix))]
fn second_handle(_: &TcpStream) -> Option<std::net::TcpStream> {
    None
}

/// Serves one request on `stream`, within the limits. Until it shows the token it may be
/// closed to make room (`shed`) and must show it within the token timeout. `_alive` is
/// dropped after the socket (parameters outlive the body's locals).
async fn connection(
    stream: TcpStream,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
    admission: Admission,
    mut shed: oneshot::Receiver<()>,
    _alive: oneshot::Sender<()>,
) {
    let limits = state.limits;
    let admission = Arc::new(admission);
    let serving = Arc::clone(&admission);
    let service = service_fn(move |request| {
        let (state, admission) = (Arc::clone(&state), Arc::clone(&serving));
        async move { Ok::<_, Infallible>(super::routes::handle(request, &state, &admission).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.token_timeout.min(limits.request_timeout))
        .keep_alive(false)
        .max_buf_size(MAX_BUFFER);
    let served = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    let token_deadline = tokio::time::sleep(limits.token_timeout);
    let deadline = tokio::time::sleep(limits.token_timeout + limits.request_timeout * 2);
    tokio::pin!(token_deadline, deadline);
    // A live stream lasts as long as its tab: no connection deadline (it holds a stream
    // slot, not a proven one, and ends at shutdown or when told to make room).
    let mut streaming = false;
    loop {
        tokio::select! {
            // The connection first: a request that shows the token is proven while it is
            // served, and then a close signal that raced with it no longer counts.
            biased;
            _ = stop.changed() => {
                served.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(GRACE, served).await;
                break;
            }
            _ = served.as_mut() => break,
            closing = &mut shed, if !shed.is_terminated() => {
                if closing.is_ok() && !admission.is_proven() {
                    tracing::debug!(target: "aml.approval", "approval page: connection without the token closed to make room");
                    break;
                }
            }
            _ = &mut token_deadline, if !admission.is_proven() => {
                if !admission.is_proven() {
                    tracing::debug!(target: "aml.approval", "approval page: connection did not show the token in time");
                    break;
                }
            }
            _ = &mut deadline, if !streaming => {
                if admission.is_streaming() {
                    streaming = true;
                    continue;
                }
                tracing::debug!(target: "aml.approval", "approval page: connection outlived its deadline");
                break;
            }
        }
    }
}

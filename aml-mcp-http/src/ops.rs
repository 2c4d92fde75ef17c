//! Operator endpoints (`/metrics`, `/healthz`, `/readyz`): the host answers them through
//! [`Ops`]; this module serves them on a listener of their own ([`serve_ops`]) or, with
//! [`FrontConfig::with_ops`](crate::FrontConfig::with_ops), on the front's own port.
//!
//! On the front, [`PUBLIC_OPS_PATHS`] (the probes) are answered after the `Origin` check and
//! before the bearer token check (an orchestrator's probe carries no token); every other
//! path the host serves, `/metrics` included, needs the token like `/mcp`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::body::Body;

/// Paths answered on the front without a bearer token: liveness and readiness probes.
pub const PUBLIC_OPS_PATHS: &[&str] = &["/healthz", "/readyz"];

/// How many connections the ops listener serves at once (scrapers and probes: a few); a
/// connection past this closes the oldest.
const MAX_OPS_CONNECTIONS: usize = 64;

/// One answer of an operator endpoint.
#[derive(Debug, Clone)]
pub struct OpsReply {
    /// The HTTP status (`200`, or `503` for a probe that fails).
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Bytes,
}

impl OpsReply {
    /// A `text/plain` answer.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        OpsReply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: Bytes::from(body.into()),
        }
    }
}

/// The future of one answer.
pub type OpsFuture<'a> = Pin<Box<dyn Future<Output = OpsReply> + Send + 'a>>;

/// The host's operator endpoints.
///
/// ```
/// use aml_mcp_http::{Ops, OpsReply};
/// use aml_mcp_http::ops::OpsFuture;
///
/// /// Alive, and ready once the host says so.
/// #[derive(Debug)]
/// struct Probes {
///     ready: bool,
/// }
///
/// impl Ops for Probes {
///     fn answer(&self, path: &str) -> Option<OpsFuture<'_>> {
///         let reply = match path {
///             "/healthz" => OpsReply::text(200, "alive"),
///             "/readyz" if self.ready => OpsReply::text(200, "ready"),
///             "/readyz" => OpsReply::text(503, "not ready"),
///             _ => return None,
///         };
///         Some(Box::pin(async move { reply }))
///     }
/// }
/// ```
pub trait Ops: Send + Sync + std::fmt::Debug {
    /// The answer to `GET path`, or `None` for a path the host does not serve.
    fn answer(&self, path: &str) -> Option<OpsFuture<'_>>;
}

/// A running ops listener; it stops when dropped.
#[derive(Debug)]
pub struct OpsServer {
    local: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl OpsServer {
    /// The address it listens on (port 0 picked a free one).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for OpsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `ops` on `addr` over HTTP/1.1: `GET` (and `HEAD`) only, headers within 10 s, at
/// most 64 connections at once (a new one closes the oldest). Binding is the host's decision.
pub async fn serve_ops(addr: SocketAddr, ops: Arc<dyn Ops>) -> std::io::Result<OpsServer> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(accept_loop(listener, ops));
    Ok(OpsServer { local, task })
}

async fn accept_loop(listener: TcpListener, ops: Arc<dyn Ops>) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    // Oldest first. When all are taken, the oldest gives way to the newcomer, so idle
    // keep-alive connections (or a client holding them open) never delay a probe.
    let mut served = Connections(VecDeque::with_capacity(MAX_OPS_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(target: "aml_mcp_http", "ops listener: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        served.0.retain(|connection| !connection.is_finished());
        if served.0.len() >= MAX_OPS_CONNECTIONS {
            if let Some(oldest) = served.0.pop_front() {
                oldest.abort();
            }
        }
        let ops = ops.clone();
        let connection = http.serve_connection(
            TokioIo::new(stream),
            hyper::service::service_fn(move |request: Request<Incoming>| {
                let ops = ops.clone();
                async move { Ok::<_, Infallible>(answer(ops.as_ref(), &request).await) }
            }),
        );
        served.0.push_back(tokio::spawn(async move {
            let _ = connection.await;
        }));
    }
}

/// The listener's connections, oldest first; closed with it (its task is aborted on drop).
struct Connections(VecDeque<JoinHandle<()>>);

impl Drop for Connections {
    fn drop(&mut self) {
        for connection in &self.0 {
            connection.abort();
        }
    }
}

/// The answer of `ops` to `request`: `404` for a path it does not serve, `405` for a method
/// other than `GET` or `HEAD`.
pub(crate) async fn answer(ops: &dyn Ops, request: &Request<Incoming>) -> Response<Body> {
    let Some(future) = ops.answer(request.uri().path()) else {
        return reply(OpsReply::text(404, "not found\n"));
    };
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut refused = reply(OpsReply::text(405, "use GET\n"));
        refused
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return refused;
    }
    let mut answered = reply(future.await);
    if request.method() == Method::HEAD {
        *answered.body_mut() = Body::empty();
    }
    answered
}

fn reply(ops: OpsReply) -> Response<Body> {
    let mut reply = Response::new(Body::from(ops.body));
    *reply.status_mut() = StatusCode::from_u16(ops.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    reply
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ops.content_type));
    reply
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    reply
}

//! The front's checks as tower layers, outermost first: `Origin`, the paths served without a
//! token, the token, the MCP path, the protocol version, and (for a POST) the body's size and
//! time limits. Each either passes the request on, with what it learned in the request's
//! extensions, or answers it; the handlers behind them (`handler.rs`) see only requests that
//! passed.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, StatusCode};
use tower::{Layer, Service};

use super::authorize::Granted;
use super::connections::Slot;
use super::handler::{refuse, refuse_code, unsupported_version, Reply};
use super::stateless_post::HEADER_MISMATCH;
use super::Shared;
use crate::auth::{self, Client};
use crate::{MCP_PATH, PROTOCOL_VERSIONS, STATELESS_PROTOCOL_VERSIONS};

/// One check in front of a service.
pub(super) trait Check<In>: Clone + Send + Sync + 'static {
    /// What the service behind it receives.
    type Out: Send;
    /// Passes the request on (`Ok`) or answers it here (`Err`).
    fn check(&self, request: In) -> impl Future<Output = Result<Self::Out, Reply>> + Send;
}

/// The layer that puts check `C` in front of a service.
#[derive(Debug, Clone)]
pub(super) struct CheckLayer<C>(pub(super) C);

impl<C: Clone, S> Layer<S> for CheckLayer<C> {
    type Service = Checked<C, S>;
    fn layer(&self, inner: S) -> Checked<C, S> {
        Checked {
            check: self.0.clone(),
            inner,
        }
    }
}

/// A service behind a check.
#[derive(Debug, Clone)]
pub(super) struct Checked<C, S> {
    check: C,
    inner: S,
}

/// What a checked service answers with.
pub(super) type Answer = Pin<Box<dyn Future<Output = Result<Reply, Infallible>> + Send>>;

impl<C, S, In> Service<In> for Checked<C, S>
where
    C: Check<In>,
    S: Service<C::Out, Response = Reply, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
    In: Send + 'static,
{
    type Response = Reply;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The inner service is asked once a request has passed: a refused one needs nothing.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: In) -> Answer {
        let check = self.check.clone();
        // The clone is the one made ready and called, as tower asks of a service moved
        // into a future.
        let mut inner = self.inner.clone();
        Box::pin(async move {
            let passed = match check.check(request).await {
                Ok(passed) => passed,
                Err(reply) => return Ok(reply),
            };
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            inner.call(passed).await
        })
    }
}

/// A request as the checks pass it on: boxed, so that each layer moves a pointer rather
/// than the request's head.
pub(super) type Asked = Box<Request<Incoming>>;

/// Who sent a request that passed [`Authenticate`], and its token's scopes.
#[derive(Debug, Clone)]
pub(super) struct Authenticated {
    pub(super) client: Client,
    pub(super) granted: Granted,
}

/// Which revision a request to the MCP path speaks, from `MCP-Protocol-Version`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Era {
    /// 2026-07-28: no session, one request per POST.
    pub(super) stateless: bool,
}

/// `403` for a browser page of a foreign origin (DNS rebinding, cross-site requests).
#[derive(Debug, Clone)]
pub(super) struct SameOrigin {
    pub(super) shared: Arc<Shared>,
    pub(super) peer: SocketAddr,
}

impl Check<Asked> for SameOrigin {
    type Out = Asked;
    async fn check(&self, request: Asked) -> Result<Asked, Reply> {
        let Some(origin) = request.headers().get(header::ORIGIN) else {
            return Ok(request);
        };
        let config = &self.shared.config;
        if auth::origin_allowed(
            origin.as_bytes(),
            &self.shared.own_origins,
            &config.allowed_origins,
        ) {
            return Ok(request);
        }
        tracing::warn!(target: "aml_mcp_http", peer = %self.peer, origin = ?origin, "refused: foreign Origin");
        Err(refuse(StatusCode::FORBIDDEN, None, "Origin not allowed"))
    }
}

/// Answers what is served without a token: the probes of the ops endpoints and the RFC 9728
/// metadata.
#[derive(Debug, Clone)]
pub(super) struct PublicPaths {
    pub(super) shared: Arc<Shared>,
}

impl Check<Asked> for PublicPaths {
    type Out = Asked;
    async fn check(&self, request: Asked) -> Result<Asked, Reply> {
        let path = request.uri().path();
        let ops = self.shared.config.ops.as_deref().filter(|_| path != MCP_PATH);
        if let Some(ops) = ops.filter(|_| crate::ops::PUBLIC_OPS_PATHS.contains(&path)) {
            return Err(crate::ops::answer(ops, &request).await);
        }
        match super::authorize::metadata(&self.shared, path, request.method()) {
            Some(reply) => Err(reply),
            None => Ok(request),
        }
    }
}

/// `401`/`403`/`503` for a request without a valid token; a request that passes has
/// [`Authenticated`], and its connection counts as a client's, not one of a flood.
#[derive(Debug, Clone)]
pub(super) struct Authenticate {
    pub(super) shared: Arc<Shared>,
    pub(super) peer: SocketAddr,
    pub(super) connection: Arc<Slot>,
}

impl Check<Asked> for Authenticate {
    type Out = Asked;
    async fn check(&self, mut request: Asked) -> Result<Asked, Reply> {
        let found = super::authorize::client_of(&self.shared, self.peer, request.headers()).await;
        let (client, granted) = found.map_err(|mut reply| {
            // The body is left unread, so the connection cannot take another request: say
            // so, or a client that reuses it finds it closed.
            reply
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            reply
        })?;
        self.connection.prove();
        request.extensions_mut().insert(Authenticated { client, granted });
        Ok(request)
    }
}

/// The ops endpoints behind the token, `404` for any other path than [`MCP_PATH`], then
/// `400` for a protocol revision the front does not speak (or one named twice) and `405`
/// for a 2026-07-28 request that is not a POST; a request that passes has its [`Era`].
#[derive(Debug, Clone)]
pub(super) struct McpPath {
    pub(super) shared: Arc<Shared>,
}

impl Check<Asked> for McpPath {
    type Out = Asked;
    async fn check(&self, mut request: Asked) -> Result<Asked, Reply> {
        if request.uri().path() != MCP_PATH {
            if let Some(ops) = self.shared.config.ops.as_deref() {
                return Err(crate::ops::answer(ops, &request).await);
            }
            let why = format!("MCP is served at {MCP_PATH}");
            return Err(refuse(StatusCode::NOT_FOUND, None, &why));
        }
        let mut versions = request.headers().get_all(super::handler::VERSION_HEADER).iter();
        let version = versions.next();
        if versions.next().is_some() {
            // Readers (a proxy, the server) could take different copies.
            let why = "the MCP-Protocol-Version header appears more than once";
            return Err(refuse_code(StatusCode::BAD_REQUEST, None, HEADER_MISMATCH, why));
        }
        let mut stateless = false;
        if let Some(version) = version {
            let named = |known: &[&str]| known.iter().any(|v| v.as_bytes() == version.as_bytes());
            if !named(PROTOCOL_VERSIONS) {
                return Err(unsupported_version(version));
            }
            stateless = named(STATELESS_PROTOCOL_VERSIONS);
        }
        if stateless && request.method() != Method::POST {
            // 2026-07-28 has no GET stream and no sessions to DELETE.
            let why = "protocol 2026-07-28 uses POST only";
            let mut reply = refuse(StatusCode::METHOD_NOT_ALLOWED, None, why);
            reply
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
            return Err(reply);
        }
        request.extensions_mut().insert(Era { stateless });
        Ok(request)
    }
}

/// A POST's body, read whole within the front's size limit (`413`, before reading when
/// `Content-Length` says so) and time limit (`408`).
#[derive(Debug, Clone)]
pub(super) struct ReadBody {
    pub(super) shared: Arc<Shared>,
    pub(super) peer: SocketAddr,
}

impl Check<Asked> for ReadBody {
    type Out = Request<Bytes>;
    async fn check(&self, request: Asked) -> Result<Request<Bytes>, Reply> {
        let max = self.shared.config.max_body_bytes;
        let too_big = || {
            let why = format!("the request body is larger than {max} bytes");
            refuse(StatusCode::PAYLOAD_TOO_LARGE, None, &why)
        };
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max as u64) {
            return Err(too_big());
        }
        let limit = self.shared.config.body_read_timeout;
        let (head, body) = (*request).into_parts();
        let read = tokio::time::timeout(limit, Limited::new(body, max).collect());
        match read.await {
            Ok(Ok(body)) => Ok(Request::from_parts(head, body.to_bytes())),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_big()),
            Ok(Err(e)) => Err(refuse(
                StatusCode::BAD_REQUEST,
                None,
                &format!("cannot read the body: {e}"),
            )),
            Err(_) => {
                tracing::warn!(target: "aml_mcp_http", peer = %self.peer, "refused: the request body did not arrive within {limit:?}");
                let why = format!("the request body did not arrive within {limit:?}");
                let mut reply = refuse(StatusCode::REQUEST_TIMEOUT, None, &why);
                // The rest of the body may still come: the connection cannot be reused.
                reply
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                Err(reply)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::Body;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Passes even numbers on as text; answers odd ones itself.
    #[derive(Clone)]
    struct Even;

    impl Check<u32> for Even {
        type Out = String;
        async fn check(&self, n: u32) -> Result<String, Reply> {
            match n % 2 {
                0 => Ok(n.to_string()),
                _ => Err(refuse(StatusCode::FORBIDDEN, None, "odd")),
            }
        }
    }

    #[tokio::test]
    async fn a_check_passes_its_output_on_or_answers_without_the_inner_service() {
        let reached = Arc::new(AtomicUsize::new(0));
        let inner = {
            let reached = reached.clone();
            tower::service_fn(move |text: String| {
                reached.fetch_add(1, Ordering::SeqCst);
                let mut reply = Reply::new(Body::empty());
                *reply.status_mut() = if text == "4" {
                    StatusCode::OK
                } else {
                    StatusCode::IM_A_TEAPOT
                };
                async move { Ok::<_, Infallible>(reply) }
            })
        };
        let mut service = CheckLayer(Even).layer(inner);
        let passed = service.call(4).await.unwrap();
        assert_eq!(passed.status(), StatusCode::OK);
        assert_eq!(reached.load(Ordering::SeqCst), 1);
        let refused = service.call(3).await.unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            reached.load(Ordering::SeqCst),
            1,
            "a refused request reaches nothing"
        );
    }
}

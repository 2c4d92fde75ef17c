//! The gated calls' way to the upstream: one HTTP/2 connection (hyper), redialed when it
//! closes, used directly from the call's own task. tonic's `Channel` sends each request
//! through a buffer task first, one more cross-task wake-up per call on the gateway's path.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tonic::body::Body;

/// The upstream's address and its current connection.
#[derive(Debug, Clone)]
pub struct Upstream {
    authority: http::uri::Authority,
    scheme: http::uri::Scheme,
    connection: Arc<Mutex<Option<SendRequest<Body>>>>,
}

impl Upstream {
    /// The upstream at `url` (`http://HOST:PORT`); nothing is dialed until the first call.
    pub fn new(url: &str) -> Result<Self, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("{url}: only plaintext http:// upstreams are supported"));
        }
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| format!("{url}: no host"))?;
        Ok(Upstream {
            authority,
            scheme: http::uri::Scheme::HTTP,
            connection: Arc::new(Mutex::new(None)),
        })
    }

    /// A sender on the current connection, dialing a new one if there is none or it closed.
    pub async fn sender(&self) -> Result<Connection, String> {
        let current = self.connection.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(send) = current.filter(|s| !s.is_closed()) {
            return Ok(self.wrap(send));
        }
        let tcp = tokio::net::TcpStream::connect(self.authority.as_str())
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.authority))?;
        let _ = tcp.set_nodelay(true);
        let (send, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .map_err(|e| format!("HTTP/2 handshake with {}: {e}", self.authority))?;
        tokio::spawn(connection);
        *self.connection.lock().unwrap_or_else(|p| p.into_inner()) = Some(send.clone());
        Ok(self.wrap(send))
    }

    fn wrap(&self, send: SendRequest<Body>) -> Connection {
        Connection {
            send,
            scheme: self.scheme.clone(),
            authority: self.authority.clone(),
        }
    }
}

/// One connection as a tower service for `tonic::client::Grpc`: each request gets the
/// upstream's scheme and authority.
#[derive(Debug, Clone)]
pub struct Connection {
    send: SendRequest<Body>,
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
}

impl tower_service::Service<http::Request<Body>> for Connection {
    type Response = http::Response<Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Incoming>, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.send.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let mut parts = request.uri().clone().into_parts();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
        Box::pin(self.send.send_request(request))
    }
}

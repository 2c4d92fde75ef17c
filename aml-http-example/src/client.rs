//! The agent's side: `POST /tools/{name}` with hyper's client, one connection per call, and
//! the reply read back.

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use tokio::net::TcpStream;

use crate::reply::CallReply;

/// The characters a tool name keeps unescaped in a path segment (RFC 3986 "unreserved").
pub const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The largest reply body the client reads.
const MAX_REPLY_BYTES: usize = 4 << 20;

/// A call could not be made or its answer could not be read. Whether the tool ran is then
/// unknown to the caller: do not retry automatically.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server could not be reached.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The server.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("http: {0}")]
    Http(#[from] hyper::Error),
    /// The request could not be built (a tool name hyper refuses as a path).
    #[error("request: {0}")]
    Request(#[from] hyper::http::Error),
    /// No answer within the client's timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The reply body was larger than the client reads, or was cut off.
    #[error("reply body: {0}")]
    Body(String),
    /// The answer is not an `aml-http-tool-reply/1`.
    #[error("HTTP {status}: not a tool reply: {detail}")]
    NotAReply {
        /// The HTTP status.
        status: StatusCode,
        /// Why (and the start of the body).
        detail: String,
    },
}

/// What a call answered: the HTTP status and the reply.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CallAnswer {
    /// The HTTP status code.
    pub status: StatusCode,
    /// The reply body.
    pub reply: CallReply,
}

/// Calls tools on one HTTP tool server.
#[derive(Debug, Clone)]
pub struct HttpToolClient {
    addr: SocketAddr,
    timeout: Duration,
}

impl HttpToolClient {
    /// A client of the server at `addr`, waiting at most 120 s for each answer.
    pub fn new(addr: SocketAddr) -> Self {
        HttpToolClient {
            addr,
            timeout: Duration::from_secs(120),
        }
    }

    /// Waits at most `timeout` for each answer (connect, send, reply).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Calls `tool` with `arguments_json`, the JSON text the agent wrote, sent as is.
    pub async fn call(
        &self,
        tool: &str,
        arguments_json: impl Into<Bytes>,
    ) -> Result<CallAnswer, ClientError> {
        let path = format!("/tools/{}", utf8_percent_encode(tool, SEGMENT));
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(HOST, self.addr.to_string())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(arguments_json.into()))?;
        let (status, body) = tokio::time::timeout(self.timeout, self.exchange(request))
            .await
            .map_err(|_| ClientError::Timeout(self.timeout))??;
        match serde_json::from_slice::<CallReply>(&body) {
            Ok(reply) if reply.protocol == crate::REPLY_PROTOCOL => Ok(CallAnswer { status, reply }),
            Ok(reply) => Err(ClientError::NotAReply {
                status,
                detail: format!("protocol {:?}", reply.protocol),
            }),
            Err(e) => Err(ClientError::NotAReply {
                status,
                detail: format!("{e}: {}", String::from_utf8_lossy(&body[..body.len().min(200)])),
            }),
        }
    }

    /// `GET /tools`: the names the server lists (what the host's policy can allow).
    pub async fn list_tools(&self) -> Result<Vec<String>, ClientError> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(crate::TOOLS_PATH)
            .header(HOST, self.addr.to_string())
            .body(Full::new(Bytes::new()))?;
        let (status, body) = tokio::time::timeout(self.timeout, self.exchange(request))
            .await
            .map_err(|_| ClientError::Timeout(self.timeout))??;
        let listing: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| ClientError::NotAReply {
                status,
                detail: e.to_string(),
            })?;
        let names = listing["tools"].as_array().into_iter().flatten();
        Ok(names
            .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
            .collect())
    }

    async fn exchange(&self, request: Request<Full<Bytes>>) -> Result<(StatusCode, Bytes), ClientError> {
        let stream = TcpStream::connect(self.addr)
            .await
            .map_err(|source| ClientError::Connect {
                addr: self.addr,
                source,
            })?;
        // Without TCP_NODELAY, small requests wait out delayed ACKs.
        let _ = stream.set_nodelay(true);
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let exchange = async move {
            let response = sender.send_request(request).await?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_REPLY_BYTES)
                .collect()
                .await
                .map_err(|e| ClientError::Body(e.to_string()))?
                .to_bytes();
            Ok::<_, ClientError>((status, body))
        };
        // The connection runs beside the exchange and ends once the sender is dropped.
        let (answer, _) = tokio::join!(exchange, connection);
        answer
    }
}

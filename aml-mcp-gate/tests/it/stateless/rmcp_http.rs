//! rmcp's Streamable HTTP client transport needs an HTTP client: rmcp ships one on reqwest
//! (with TLS, a large build), so the test gives it this one on hyper, plain `http://` only,
//! a fresh connection per request.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};

/// What went wrong below rmcp.
#[derive(Debug)]
pub(crate) struct HyperError(String);

impl std::fmt::Display for HyperError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HyperError {}

type Failed = StreamableHttpError<HyperError>;

fn failed(why: impl std::fmt::Display) -> Failed {
    StreamableHttpError::Client(HyperError(why.to_string()))
}

/// rmcp's HTTP client, on hyper.
#[derive(Debug, Clone, Default)]
pub(crate) struct HyperClient;

struct Headers<'a> {
    session: Option<Arc<str>>,
    auth: Option<String>,
    custom: &'a HashMap<HeaderName, HeaderValue>,
}

async fn exchange(
    method: Method,
    uri: &str,
    accept: &str,
    headers: Headers<'_>,
    body: Option<Vec<u8>>,
) -> Result<Response<hyper::body::Incoming>, Failed> {
    let uri: Uri = uri.parse().map_err(failed)?;
    let authority = uri
        .authority()
        .ok_or_else(|| failed("no host in the URL"))?
        .clone();
    let stream = tokio::net::TcpStream::connect(authority.as_str()).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(failed)?;
    tokio::spawn(connection);
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(HOST, authority.as_str())
        .header(ACCEPT, accept);
    if body.is_some() {
        request = request.header(CONTENT_TYPE, "application/json");
    }
    if let Some(session) = headers.session {
        request = request.header("mcp-session-id", session.as_ref());
    }
    if let Some(token) = headers.auth {
        request = request.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    for (name, value) in headers.custom {
        request = request.header(name, value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(failed)?;
    sender.send_request(request).await.map_err(failed)
}

fn session_of(response: &Response<hyper::body::Incoming>) -> Option<String> {
    response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn is_sse(response: &Response<hyper::body::Incoming>) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

impl StreamableHttpClient for HyperClient {
    type Error = HyperError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        let body = serde_json::to_vec(&message)?;
        let headers = Headers {
            session: session_id,
            auth: auth_header,
            custom: &custom_headers,
        };
        let accept = "application/json, text/event-stream";
        let response = exchange(Method::POST, &uri, accept, headers, Some(body)).await?;
        let status = response.status();
        if status == StatusCode::ACCEPTED {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        let session = session_of(&response);
        if status.is_success() && is_sse(&response) {
            let events = SseStream::new(response.into_body()).boxed();
            return Ok(StreamableHttpPostResponse::Sse(events, session));
        }
        let body = response.into_body().collect().await.map_err(failed)?.to_bytes();
        if !status.is_success() {
            return Err(failed(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        Ok(StreamableHttpPostResponse::Json(
            serde_json::from_slice(&body)?,
            session,
        ))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Failed> {
        let headers = Headers {
            session: Some(session_id),
            auth: auth_header,
            custom: &custom_headers,
        };
        exchange(Method::DELETE, &uri, "application/json", headers, None).await?;
        Ok(())
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<futures::stream::BoxStream<'static, Result<Sse, SseError>>, Failed> {
        if let Some(last) = last_event_id.and_then(|l| HeaderValue::try_from(l).ok()) {
            custom_headers.insert(HeaderName::from_static("last-event-id"), last);
        }
        let headers = Headers {
            session: session_id,
            auth: auth_header,
            custom: &custom_headers,
        };
        let response = exchange(Method::GET, &uri, "text/event-stream", headers, None).await?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !response.status().is_success() || !is_sse(&response) {
            return Err(failed(format!("GET answered HTTP {}", response.status())));
        }
        Ok(SseStream::new(response.into_body()).boxed())
    }
}

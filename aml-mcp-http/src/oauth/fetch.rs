//! One request to an authorization server (metadata, key set, token endpoint) over plain
//! HTTP with hyper's client: a new connection each time, a time limit on the whole
//! exchange, and a cap on the answer's size.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;

/// One exchange, connection to last byte.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest answer read.
pub(crate) const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// `Ok` for an `http://` URL with a host; the reason otherwise.
pub(crate) fn check_http_url(url: &str) -> Result<Uri, String> {
    let uri: Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
    match uri.scheme_str() {
        Some("http") if uri.authority().is_some() => Ok(uri),
        Some("https") => Err(format!(
            "{url:?}: https is not built in; reach it through a local TLS proxy (http://127.0.0.1:…)"
        )),
        _ => Err(format!("{url:?} is not an http:// URL")),
    }
}

/// Sends one request and reads its answer, whatever its status; bounded by
/// [`FETCH_TIMEOUT`] and [`MAX_DOCUMENT_BYTES`].
pub(crate) async fn exchange(
    method: Method,
    uri: &Uri,
    headers: &[(HeaderName, HeaderValue)],
    body: Bytes,
) -> Result<(StatusCode, Bytes), String> {
    tokio::time::timeout(FETCH_TIMEOUT, exchange_unbounded(method, uri, headers, body))
        .await
        .map_err(|_| format!("no answer within {FETCH_TIMEOUT:?}"))?
}

async fn exchange_unbounded(
    method: Method,
    uri: &Uri,
    headers: &[(HeaderName, HeaderValue)],
    body: Bytes,
) -> Result<(StatusCode, Bytes), String> {
    let authority = uri.authority().cloned().ok_or("no host")?;
    let address = format!(
        "{}:{}",
        authority.host().trim_matches(['[', ']']),
        authority.port_u16().unwrap_or(80)
    );
    let stream = tokio::net::TcpStream::connect(&address)
        .await
        .map_err(|e| format!("cannot connect to {address}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(connection);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, authority.as_str())
        .header(hyper::header::ACCEPT, "application/json");
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let request = request.body(Full::new(body)).map_err(|e| e.to_string())?;
    let result = match sender.send_request(request).await {
        Ok(response) => {
            let status = response.status();
            Limited::new(response.into_body(), MAX_DOCUMENT_BYTES)
                .collect()
                .await
                .map(|b| (status, b.to_bytes()))
                .map_err(|e| format!("cannot read the body: {e}"))
        }
        Err(e) => Err(e.to_string()),
    };
    driver.abort();
    result
}

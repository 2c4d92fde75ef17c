//! The upstream, as the gateway reaches it: one HTTP/2 connection for gated unary calls,
//! driven with `h2` directly, and a tonic [`Channel`] for reflection and relayed streams.
//!
//! Why not the channel for gated calls too: tonic's channel hands each request to a buffer
//! task, and hyper's client sends a request's headers and its message in two writes (the
//! message waits for the stream to open). Here the headers and the one message, marked as
//! the end of the stream, are queued together and leave in one write, on the call's own
//! task. That is most of what separates the gateway from a bare byte forwarder (ADR 029).

use std::sync::Mutex;
use std::time::Duration;

use base64::Engine;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use http::header::{CONTENT_TYPE, TE};
use http::{HeaderMap, HeaderValue, Uri};
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// `-bin` values are base64, padded or not.
const DETAILS: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// How long the gateway waits for a TCP connection and HTTP/2 handshake to the upstream.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The upstream's address is not one the gateway can use.
#[derive(Debug, thiserror::Error)]
#[error("--upstream {given}: {why}")]
pub struct InvalidUpstream {
    given: String,
    why: String,
}

/// A unary call to the upstream failed before it had an answer. Only for
/// [`Unreachable`](Self::Unreachable) is it certain that nothing was sent; after any other
/// the request may or may not have reached the upstream (the call is `unknown`).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No connection, or none that would open the call's stream (refused, timed out, or
    /// lost before the stream was opened): nothing of the call was sent.
    #[error("the upstream is not reachable: {0}")]
    Unreachable(String),
    /// The exchange broke after the request was handed to the connection.
    #[error("the upstream call failed: {0}")]
    Failed(String),
    /// The upstream answered with something that is not a unary gRPC response.
    #[error("the upstream's answer is not a gRPC response: {0}")]
    Malformed(String),
    /// The caller's deadline passed while the upstream had the request.
    #[error("the upstream did not answer by the caller's deadline")]
    DeadlinePassed,
}

/// What the upstream answered a unary call with.
#[derive(Debug)]
pub enum UnaryAnswer {
    /// A response message, with the response's headers and trailers as metadata.
    Message {
        /// The message, as the upstream encoded it.
        message: Bytes,
        /// The response's headers and trailers, gRPC's own keys left out.
        metadata: MetadataMap,
    },
    /// The upstream's own status (code, message, details and the rest of its metadata).
    Status(Status),
}

/// The upstream gRPC server (plaintext HTTP/2).
#[derive(Debug)]
pub struct Upstream {
    uri: Uri,
    address: String,
    channel: Channel,
    /// The connection held, and how many have been made (so a call that found it unusable
    /// can tell whether another call has already replaced it).
    connection: Mutex<(u64, Option<SendRequest<Bytes>>)>,
    /// Held while connecting: calls that find no usable connection make one, not one each.
    connecting: tokio::sync::Mutex<()>,
}

impl Upstream {
    /// The upstream at `url` (`http://HOST:PORT`), connected on first use.
    pub fn lazy(url: &str) -> Result<Upstream, InvalidUpstream> {
        let invalid = |why: &str| InvalidUpstream {
            given: url.to_owned(),
            why: why.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| invalid(&e.to_string()))?;
        if uri.scheme_str() != Some("http") {
            return Err(invalid("only plaintext http://HOST:PORT upstreams are supported"));
        }
        let Some(authority) = uri.authority() else {
            return Err(invalid("no HOST:PORT"));
        };
        let port = authority.port_u16().unwrap_or(80);
        let address = format!("{}:{port}", authority.host());
        let channel = tonic::transport::Endpoint::from(uri.clone())
            .tcp_nodelay(true)
            .connect_lazy();
        Ok(Upstream {
            uri,
            address,
            channel,
            connection: Mutex::new((0, None)),
            connecting: tokio::sync::Mutex::new(()),
        })
    }

    /// The tonic channel to the upstream (reflection, relayed streams).
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// Sends one unary request (`message` already encoded) to `path` with `metadata` and the
    /// time left to the caller's deadline, and reads the upstream's answer: at most
    /// `max_response_bytes` of message, the call cut off at the deadline.
    pub async fn unary(
        &self,
        path: &str,
        metadata: MetadataMap,
        timeout: Option<Duration>,
        message: &[u8],
        max_response_bytes: usize,
    ) -> Result<UnaryAnswer, UpstreamError> {
        let exchange = async {
            let (uri, headers) = self.request(path, metadata, timeout)?;
            let request = || {
                let mut request = http::Request::new(());
                *request.method_mut() = http::Method::POST;
                *request.uri_mut() = uri.clone();
                *request.headers_mut() = headers.clone();
                request
            };
            let mut frame = BytesMut::with_capacity(5 + message.len());
            frame.put_u8(0);
            frame.put_u32(
                u32::try_from(message.len())
                    .map_err(|_| UpstreamError::Failed("message too large".into()))?,
            );
            frame.put_slice(message);
            let (response, mut body) = self.open_stream(request).await?;
            // Queued with the headers: both leave in the connection's next write.
            body.send_data(frame.freeze(), true)
                .map_err(|e| UpstreamError::Failed(e.to_string()))?;
            let response = response.await.map_err(|e| UpstreamError::Failed(e.to_string()))?;
            let (parts, mut received) = response.into_parts();
            if parts.status != http::StatusCode::OK {
                return Ok(UnaryAnswer::Status(Status::new(
                    code_for_http(parts.status),
                    format!("the upstream answered HTTP {}", parts.status),
                )));
            }
            if received.is_end_stream() {
                // Trailers-only: the status is in the headers.
                return status_from(&parts.headers).map(UnaryAnswer::Status);
            }
            let mut data = BytesMut::new();
            while let Some(chunk) = received.data().await {
                let chunk = chunk.map_err(|e| UpstreamError::Failed(e.to_string()))?;
                let _ = received.flow_control().release_capacity(chunk.len());
                if data.len() + chunk.len() > max_response_bytes.saturating_add(5) {
                    return Err(UpstreamError::Malformed(format!(
                        "the response message is larger than {max_response_bytes} bytes"
                    )));
                }
                data.extend_from_slice(&chunk);
            }
            let trailers = received
                .trailers()
                .await
                .map_err(|e| UpstreamError::Failed(e.to_string()))?
                .ok_or_else(|| UpstreamError::Malformed("no trailers (no grpc-status)".into()))?;
            let status = status_from(&trailers)?;
            if status.code() != Code::Ok {
                return Ok(UnaryAnswer::Status(status));
            }
            let message = one_message(data.freeze())?;
            let mut headers = parts.headers;
            for (key, value) in status.metadata().as_ref() {
                headers.append(key.clone(), value.clone());
            }
            Ok(UnaryAnswer::Message {
                message,
                metadata: MetadataMap::from_headers(headers),
            })
        };
        match timeout {
            None => exchange.await,
            Some(left) => tokio::time::timeout(left, exchange)
                .await
                .unwrap_or(Err(UpstreamError::DeadlinePassed)),
        }
    }

    /// The URI and headers of a call to `path`.
    fn request(
        &self,
        path: &str,
        metadata: MetadataMap,
        timeout: Option<Duration>,
    ) -> Result<(Uri, HeaderMap), UpstreamError> {
        let mut parts = self.uri.clone().into_parts();
        parts.path_and_query = Some(
            path.parse()
                .map_err(|e: http::uri::InvalidUri| UpstreamError::Failed(e.to_string()))?,
        );
        let uri = Uri::from_parts(parts).map_err(|e| UpstreamError::Failed(e.to_string()))?;
        let mut headers = metadata.into_headers();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(TE, HeaderValue::from_static("trailers"));
        if let Some(left) = timeout {
            headers.insert("grpc-timeout", grpc_timeout(left));
        }
        Ok((uri, headers))
    }

    /// Opens the call's stream: on the connection held, or, when that one can take no new
    /// stream (closed, or going away), on a new one. h2 refuses a stream before anything of
    /// it is written, so opening it again on a new connection re-sends nothing.
    async fn open_stream(
        &self,
        request: impl Fn() -> http::Request<()>,
    ) -> Result<(h2::client::ResponseFuture, h2::SendStream<Bytes>), UpstreamError> {
        let (made, held) = self.held();
        if let Some(opened) = Self::try_open(held, &request).await {
            return Ok(opened);
        }
        let _connecting = self.connecting.lock().await;
        let (now, held) = self.held();
        if now != made {
            // Another call connected while this one waited: use its connection.
            if let Some(opened) = Self::try_open(held, &request).await {
                return Ok(opened);
            }
        }
        let fresh = tokio::time::timeout(CONNECT_TIMEOUT, self.connect())
            .await
            .map_err(|_| UpstreamError::Unreachable(format!("no connection within {CONNECT_TIMEOUT:?}")))??;
        {
            let mut connection = self.connection.lock().unwrap_or_else(|p| p.into_inner());
            *connection = (connection.0 + 1, Some(fresh.clone()));
        }
        let mut ready = fresh
            .ready()
            .await
            .map_err(|e| UpstreamError::Unreachable(e.to_string()))?;
        ready
            .send_request(request(), false)
            .map_err(|e| UpstreamError::Unreachable(e.to_string()))
    }

    fn held(&self) -> (u64, Option<SendRequest<Bytes>>) {
        self.connection.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The call's stream on `held`, if it can take one.
    async fn try_open(
        held: Option<SendRequest<Bytes>>,
        request: &impl Fn() -> http::Request<()>,
    ) -> Option<(h2::client::ResponseFuture, h2::SendStream<Bytes>)> {
        let mut ready = held?.ready().await.ok()?;
        ready.send_request(request(), false).ok()
    }

    async fn connect(&self) -> Result<SendRequest<Bytes>, UpstreamError> {
        let unreachable =
            |e: &dyn std::fmt::Display| UpstreamError::Unreachable(format!("{}: {e}", self.address));
        let tcp = tokio::net::TcpStream::connect(&self.address)
            .await
            .map_err(|e| unreachable(&e))?;
        tcp.set_nodelay(true).map_err(|e| unreachable(&e))?;
        let (sender, connection) = h2::client::handshake(tcp).await.map_err(|e| unreachable(&e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("upstream connection closed: {e}");
            }
        });
        Ok(sender)
    }
}

/// The one message of a unary response body (gRPC framing: a flag byte, a length, the
/// message), uncompressed.
fn one_message(mut body: Bytes) -> Result<Bytes, UpstreamError> {
    if body.len() < 5 {
        return Err(UpstreamError::Malformed("no response message".into()));
    }
    if body[0] != 0 {
        return Err(UpstreamError::Malformed(
            "a compressed message (none was offered)".into(),
        ));
    }
    body.advance(1);
    let length = body.get_u32() as usize;
    if body.len() != length {
        return Err(UpstreamError::Malformed(format!(
            "the body holds {} bytes after a length prefix of {length} (one message expected)",
            body.len()
        )));
    }
    Ok(body)
}

/// The status in `headers` (trailers, or the headers of a trailers-only answer); a missing
/// or undecodable status is a malformed answer rather than a status the gateway invents.
fn status_from(headers: &HeaderMap) -> Result<Status, UpstreamError> {
    let code = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .ok_or_else(|| UpstreamError::Malformed("no valid grpc-status".into()))?;
    let message = match headers.get("grpc-message") {
        None => String::new(),
        Some(v) => percent_encoding::percent_decode(v.as_bytes())
            .decode_utf8()
            .map_err(|_| UpstreamError::Malformed("grpc-message is not UTF-8".into()))?
            .into_owned(),
    };
    let details = match headers.get("grpc-status-details-bin") {
        None => Bytes::new(),
        Some(v) => DETAILS
            .decode(v.as_bytes())
            .map_err(|_| UpstreamError::Malformed("grpc-status-details-bin is not base64".into()))?
            .into(),
    };
    let mut rest = headers.clone();
    for reserved in [
        "grpc-status",
        "grpc-message",
        "grpc-status-details-bin",
        "content-type",
    ] {
        rest.remove(reserved);
    }
    Ok(Status::with_details_and_metadata(
        Code::from_i32(code),
        message,
        details,
        MetadataMap::from_headers(rest),
    ))
}

/// The gRPC code for an HTTP status other than 200 (the gRPC HTTP/2 mapping).
fn code_for_http(status: http::StatusCode) -> Code {
    match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// `grpc-timeout` for `left`: at most 8 digits, in the finest unit that fits.
fn grpc_timeout(left: Duration) -> HeaderValue {
    let micros = left.as_micros().max(1);
    let text = if micros < 100_000_000 {
        format!("{micros}u")
    } else {
        format!("{}m", (micros / 1000).min(99_999_999))
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("1m"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_message_takes_exactly_one_uncompressed_frame() {
        let framed = |flag: u8, len: u32, rest: &[u8]| {
            let mut b = vec![flag];
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(rest);
            Bytes::from(b)
        };
        assert_eq!(
            one_message(framed(0, 3, b"abc")).unwrap(),
            Bytes::from_static(b"abc")
        );
        assert!(one_message(framed(1, 3, b"abc")).is_err(), "compressed");
        assert!(one_message(framed(0, 4, b"abc")).is_err(), "short");
        assert!(one_message(framed(0, 2, b"abc")).is_err(), "two messages' worth");
        assert!(one_message(Bytes::from_static(b"\0\0")).is_err(), "no prefix");
    }

    #[test]
    fn a_status_is_read_from_headers_and_a_bad_one_is_malformed_not_a_panic() {
        let mut h = HeaderMap::new();
        h.insert("grpc-status", HeaderValue::from_static("5"));
        h.insert("grpc-message", HeaderValue::from_static("no%20such%20order"));
        h.insert("grpc-status-details-bin", HeaderValue::from_static("AQI"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        let status = status_from(&h).unwrap();
        assert_eq!(status.code(), Code::NotFound);
        assert_eq!(status.message(), "no such order");
        assert_eq!(status.details(), &[1, 2], "unpadded base64");
        assert!(status.metadata().get("x-kept").is_some());
        h.insert(
            "grpc-status-details-bin",
            HeaderValue::from_static("!!not base64"),
        );
        assert!(matches!(status_from(&h), Err(UpstreamError::Malformed(_))));
        assert!(matches!(
            status_from(&HeaderMap::new()),
            Err(UpstreamError::Malformed(_))
        ));
    }

    #[test]
    fn timeouts_fit_eight_digits() {
        assert_eq!(grpc_timeout(Duration::from_millis(5)), "5000u");
        assert_eq!(grpc_timeout(Duration::from_secs(1000)), "1000000m");
        assert_eq!(grpc_timeout(Duration::ZERO), "1u");
        assert_eq!(grpc_timeout(Duration::from_secs(10_000_000)), "99999999m");
    }

    #[test]
    fn only_plaintext_upstreams_with_an_address() {
        assert!(Upstream::lazy("https://example.com:443").is_err());
        assert!(Upstream::lazy("not a url").is_err());
        assert!(Upstream::lazy("http:///x").is_err());
    }
}

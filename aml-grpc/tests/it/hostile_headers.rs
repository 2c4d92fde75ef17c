//! A raw HTTP/2 client sends what no well-behaved gRPC client would: hostile `grpc-timeout`
//! values and oversized metadata. Every request gets a status in time, and nothing panics
//! anywhere in the process (a panic hook counts them; tokio would otherwise swallow a
//! panicking handler).

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request};
use prost::Message;
use support::{host, rt, start, Setup};

static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Extra request headers.
type Headers = Vec<(&'static str, HeaderValue)>;

/// What the server answered one request with.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// A gRPC status code (from the headers of a trailers-only response, or the trailers).
    Grpc(u16),
    /// An HTTP status without a gRPC status (e.g. 431 for headers above the server's limit).
    Http(u16),
    /// The stream was reset with this HTTP/2 error code.
    Reset(String),
}

fn frame(tool: &str, arguments: &str) -> Bytes {
    let message = aml_grpc::pb::CallToolRequest::new(tool, arguments).encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    Bytes::from(framed)
}

fn grpc_status(headers: &http::HeaderMap) -> Option<u16> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

async fn send(address: SocketAddr, headers: Headers) -> Answer {
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let mut request = Request::builder()
        .method("POST")
        .uri(format!("http://{address}/aml.v1.ToolService/CallTool"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let (response, mut body) = match client.send_request(request.body(()).unwrap(), false) {
        Ok(sent) => sent,
        Err(e) => return Answer::Reset(e.to_string()),
    };
    // The body may be refused once the server has answered; the answer is what counts.
    let _ = body.send_data(frame("fetch_record", r#"{"id":1}"#), true);
    let response = match response.await {
        Ok(response) => response,
        Err(e) => return Answer::Reset(e.reason().map_or(e.to_string(), |r| format!("{r:?}"))),
    };
    if let Some(code) = grpc_status(response.headers()) {
        return Answer::Grpc(code);
    }
    let status = response.status().as_u16();
    let mut data = response.into_body();
    while let Some(chunk) = data.data().await {
        match chunk {
            Ok(chunk) => {
                let _ = data.flow_control().release_capacity(chunk.len());
            }
            Err(_) => return Answer::Http(status),
        }
    }
    match data.trailers().await {
        Ok(Some(trailers)) => grpc_status(&trailers).map_or(Answer::Http(status), Answer::Grpc),
        _ => Answer::Http(status),
    }
}

#[test]
fn hostile_headers_get_a_status_and_never_panic() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
    rt().block_on(async {
        let host = host(Setup::default());
        let (address, _stop) = start(host.service.clone()).await;
        let timeout = |v: &'static [u8]| vec![("grpc-timeout", HeaderValue::from_bytes(v).unwrap())];
        const OK: u16 = 0;
        const INVALID_ARGUMENT: u16 = 3;
        // `None`: the connection is refused (an HTTP/2 reset or GOAWAY, no HTTP status).
        let cases: Vec<(Headers, Option<Answer>)> = vec![
            // 20 digits: the value that overflowed `Instant + Duration` before.
            (
                timeout(b"18446744073709551615S"),
                Some(Answer::Grpc(INVALID_ARGUMENT)),
            ),
            (
                timeout(b"18446744073709551615H"),
                Some(Answer::Grpc(INVALID_ARGUMENT)),
            ),
            (timeout(b"999999999n"), Some(Answer::Grpc(INVALID_ARGUMENT))),
            (timeout(b"-1S"), Some(Answer::Grpc(INVALID_ARGUMENT))),
            (timeout(b"S"), Some(Answer::Grpc(INVALID_ARGUMENT))),
            (timeout(b"12"), Some(Answer::Grpc(INVALID_ARGUMENT))),
            (timeout(b"\xff\xfe\xfdS"), Some(Answer::Grpc(INVALID_ARGUMENT))),
            (timeout(b"1\xc3\xa9"), Some(Answer::Grpc(INVALID_ARGUMENT))),
            (
                vec![(
                    "grpc-timeout",
                    HeaderValue::from_str(&"9".repeat(8 * 1024)).unwrap(),
                )],
                Some(Answer::Grpc(INVALID_ARGUMENT)),
            ),
            // The largest valid value saturates to "no deadline in practice".
            (timeout(b"99999999H"), Some(Answer::Grpc(OK))),
            // Metadata just under the server's 16 KiB header list limit is served...
            (
                (0..100)
                    .map(|_| ("x-pad", HeaderValue::from_str(&"p".repeat(100)).unwrap()))
                    .collect(),
                Some(Answer::Grpc(OK)),
            ),
            // ...above it, HTTP/2 refuses the stream with 431 before any handler runs...
            (
                vec![("x-pad", HeaderValue::from_str(&"p".repeat(20 * 1024)).unwrap())],
                Some(Answer::Http(431)),
            ),
            // ...and a header block of 1 MiB (dozens of CONTINUATION frames) closes the
            // connection: h2's guard against header floods, an HTTP/2 error, not a status.
            (
                vec![("x-pad", HeaderValue::from_str(&"p".repeat(1024 * 1024)).unwrap())],
                None,
            ),
        ];
        let count = cases.len();
        for (headers, expected) in cases {
            let shown: String = format!("{:?}", headers.first().map(|(_, v)| v))
                .chars()
                .take(60)
                .collect();
            let answer = tokio::time::timeout(Duration::from_secs(10), send(address, headers))
                .await
                .unwrap_or_else(|_| panic!("no answer within 10 s: {shown}"));
            match expected {
                Some(expected) => assert_eq!(answer, expected, "{shown}"),
                None => assert!(matches!(answer, Answer::Reset(_)), "{shown}: {answer:?}"),
            }
        }
        // The server is still serving, and every request that reached the service left a record.
        assert_eq!(send(address, vec![]).await, Answer::Grpc(OK));
        assert_eq!(
            host.records().len(),
            count - 2 + 1,
            "all but the two refused by HTTP/2, plus the last"
        );
    });
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a panic was logged");
}

//! The ops listener against hostile peers: garbage, other methods and unknown paths get a
//! clear status, and connections held open (idle keep-alive, or a client that never sends a
//! header) never keep a probe from its answer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use aml_mcp_http::ops::OpsFuture;
use aml_mcp_http::{serve_ops, Ops, OpsReply, OpsServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Past this, an answer counts as not given (the listener's header timeout is 10 s).
const ANSWER_WITHIN: Duration = Duration::from_secs(3);

#[derive(Debug)]
struct Probes;

impl Ops for Probes {
    fn answer(&self, path: &str) -> Option<OpsFuture<'_>> {
        let reply = match path {
            "/healthz" => OpsReply::text(200, "alive\n"),
            "/readyz" => OpsReply::text(200, "ready\n"),
            _ => return None,
        };
        Some(Box::pin(async move { reply }))
    }
}

async fn listener() -> OpsServer {
    serve_ops("127.0.0.1:0".parse().unwrap(), Arc::new(Probes))
        .await
        .unwrap()
}

/// Sends `raw` on a new connection and returns the status line of the answer.
async fn status_of(addr: SocketAddr, raw: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut answer = Vec::new();
    timeout(ANSWER_WITHIN, async {
        let mut chunk = [0u8; 1024];
        while !answer.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the listener closed without an answer to {raw:?}");
            answer.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no answer within {ANSWER_WITHIN:?} to {raw:?}"));
    let text = String::from_utf8_lossy(&answer);
    text.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn hostile_requests_get_a_clear_status() {
    let server = listener().await;
    let addr = server.local_addr();
    let cases: [(&[u8], &str); 5] = [
        (b"\x00\x01garbage\r\n\r\n", "400"),
        (
            b"POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            "405",
        ),
        (b"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n", "404"),
        (b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", "200"),
        (b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "200"),
    ];
    for (raw, status) in cases {
        let line = status_of(addr, raw).await;
        assert!(
            line.starts_with(&format!("HTTP/1.1 {status}")),
            "{raw:?} answered {line:?}"
        );
    }
}

#[tokio::test]
async fn held_connections_never_delay_a_probe() {
    let server = listener().await;
    let addr = server.local_addr();
    let mut held = Vec::new();
    // More than the listener serves at once: half idle after one answered request
    // (keep-alive), half that never send a byte.
    for n in 0..80 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        if n % 2 == 0 {
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut chunk = [0u8; 512];
            let read = timeout(ANSWER_WITHIN, stream.read(&mut chunk)).await;
            assert!(
                matches!(read, Ok(Ok(n)) if n > 0),
                "held connection {n} got no answer"
            );
        }
        held.push(stream);
    }
    let line = status_of(addr, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(line.starts_with("HTTP/1.1 200"), "the probe answered {line:?}");
    drop(held);
}

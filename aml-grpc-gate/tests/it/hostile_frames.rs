//! Hostile HTTP/2 gRPC requests to the gateway binary, sent with `h2`: a 100 MB length
//! prefix, a truncated frame, a compressed flag nobody negotiated, a bad flag byte, two
//! messages on a unary method, a malformed `grpc-timeout`. Each gets a gRPC status and the
//! gateway keeps serving; nothing reaches the upstream (there is none listening).

use crate::support;

use bytes::Bytes;
use http::HeaderMap;
use support::gateway_on;

const TOOLS: &str = r#"{"tools": [{"name": "lookup_order", "method": "payments.v1.Payments/Lookup",
  "effect": "read", "purpose": "Look up an order", "resource": {"argument": "order_id"}}]}"#;
const POLICY: &str = r#"{"protocol": "aml-action-policy/1", "rules": [
  {"tool": "lookup_order", "effect": "read", "resource": "A-1", "requires_approval": false}]}"#;

/// Sends one request with `body` (and `timeout` as `grpc-timeout`); returns the status
/// headers (trailers, or the headers of a trailers-only answer).
async fn send(address: &str, body: Vec<u8>, timeout: Option<&str>) -> HeaderMap {
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let mut request = http::Request::post(format!("http://{address}/payments.v1.Payments/Lookup"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(timeout) = timeout {
        request = request.header("grpc-timeout", timeout);
    }
    let (answer, mut stream) = client.send_request(request.body(()).unwrap(), false).unwrap();
    // The peer may answer and reset before all of it is sent: that is what is tested.
    let _ = stream.send_data(Bytes::from(body), true);
    let answer = answer.await.unwrap();
    if answer.headers().contains_key("grpc-status") {
        return answer.headers().clone();
    }
    let mut body = answer.into_body();
    while let Some(data) = body.data().await {
        let _ = data.map(|d| body.flow_control().release_capacity(d.len()));
    }
    body.trailers().await.unwrap().expect("trailers with a status")
}

fn frame(flag: u8, declared: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![flag];
    out.extend(declared.to_be_bytes());
    out.extend(payload);
    out
}

fn status(headers: &HeaderMap) -> (i32, Option<String>) {
    let status = tonic::Status::from_header_map(headers).expect("a grpc-status");
    let reason = aml_grpc::report_of(&status).map(|r| r.reason);
    (status.code() as i32, reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_get_statuses_and_the_gateway_keeps_serving() {
    // Nothing listens on port 9 (discard): any forward would fail, and none is attempted.
    let (mut gate, address, _) = gateway_on(
        "hostile",
        TOOLS,
        POLICY,
        "http://127.0.0.1:9",
        &["--max-request-bytes", "65536"],
    );

    // 100 MB declared, a few bytes sent: refused from the prefix, never read.
    let huge = send(&address, frame(0, 100 << 20, &[0; 64]), None).await;
    assert_eq!(
        status(&huge),
        (
            tonic::Code::ResourceExhausted as i32,
            Some("request_too_large".into())
        )
    );

    // A frame that ends early, a compressed flag, a flag that is no flag, two messages.
    let truncated = send(&address, frame(0, 10, b"\x0a\x03A-1"), None).await;
    assert_ne!(status(&truncated).0, 0, "{truncated:?}");
    let compressed = send(&address, frame(1, 5, b"\x0a\x03A-1"), None).await;
    assert_ne!(status(&compressed).0, 0, "{compressed:?}");
    let bad_flag = send(&address, frame(7, 5, b"\x0a\x03A-1"), None).await;
    assert_ne!(status(&bad_flag).0, 0, "{bad_flag:?}");
    let mut two = frame(0, 5, b"\x0a\x03A-1");
    two.extend(frame(0, 5, b"\x0a\x03A-1"));
    let two = send(&address, two, None).await;
    assert_eq!(
        status(&two),
        (
            tonic::Code::InvalidArgument as i32,
            Some("malformed_request".into())
        )
    );
    // A malformed grpc-timeout: INVALID_ARGUMENT, invalid_grpc_timeout.
    let body = frame(0, 5, b"\x0a\x03A-1");
    let timeout = send(&address, body, Some("999999999S")).await;
    assert_eq!(
        status(&timeout),
        (
            tonic::Code::InvalidArgument as i32,
            Some("invalid_grpc_timeout".into())
        )
    );
    assert!(gate.alive(), "the gateway is still serving");
}

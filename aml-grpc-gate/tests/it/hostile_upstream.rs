//! A hostile or broken upstream behind the gateway binary, written with `h2`: each answer
//! the gRPC spec does not allow (undecodable details, no trailers, a compressed message
//! nobody offered, an oversize message, a reset stream, silence past the deadline) leaves
//! the call `unknown` with a status and never a panic; what the spec does allow (an HTTP
//! error, a trailers-only status with details, a message) is relayed and `dispatched`.
//! A dropped connection is reconnected for the next call, and the gateway keeps serving.

use std::time::Duration;

use crate::support;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use prost::Message;
use support::gateway_on;
use tokio::sync::mpsc;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::Code;

const TOOLS: &str = r#"{"tools": [{"name": "lookup_order", "method": "payments.v1.Payments/Lookup",
  "effect": "read", "purpose": "Look up an order", "resource": {"argument": "order_id"}}]}"#;
const POLICY: &str = r#"{"protocol": "aml-action-policy/1", "rules": [
  {"tool": "lookup_order", "effect": "read", "resource": "A-1", "requires_approval": false}]}"#;

/// What the scripted upstream does with a request whose `cursor` is this number.
const BAD_DETAILS: i64 = 1;
const NO_TRAILERS: i64 = 2;
const HTTP_503: i64 = 3;
const COMPRESSED: i64 = 4;
const OVERSIZE: i64 = 5;
const NOT_FOUND: i64 = 6;
const RESET: i64 = 7;
const OK: i64 = 8;
const SILENT: i64 = 9;
const OK_THEN_CLOSE: i64 = 10;

fn pool() -> prost_reflect::DescriptorPool {
    static POOL: std::sync::OnceLock<prost_reflect::DescriptorPool> = std::sync::OnceLock::new();
    POOL.get_or_init(support::descriptor_pool).clone()
}

fn framed(flag: u8, message: &[u8]) -> Bytes {
    let mut out = vec![flag];
    out.extend(u32::try_from(message.len()).unwrap().to_be_bytes());
    out.extend(message);
    Bytes::from(out)
}

fn trailers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        map.insert(*k, HeaderValue::from_static(v));
    }
    map
}

/// The `cursor` of a framed `LookupRequest`.
fn cursor_of(body: &[u8]) -> i64 {
    let pool = pool();
    let desc = pool.get_message_by_name("payments.v1.LookupRequest").unwrap();
    let message = prost_reflect::DynamicMessage::decode(desc, &body[5..]).unwrap();
    message.get_field_by_name("cursor").unwrap().as_i64().unwrap()
}

/// Serves one connection: answers each request as its cursor says; reports each cursor
/// seen, and whether the silent request was reset, on `seen`.
async fn serve_connection(tcp: tokio::net::TcpStream, seen: mpsc::UnboundedSender<String>) {
    let mut connection = h2::server::handshake(tcp).await.unwrap();
    while let Some(Ok((request, mut respond))) = connection.accept().await {
        let seen = seen.clone();
        if request.uri().path() != "/payments.v1.Payments/Lookup" {
            // The gateway's health follower asks: this upstream has no health service.
            let head = http::Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", "12")
                .body(())
                .unwrap();
            respond.send_response(head, true).unwrap();
            continue;
        }
        let mut body = request.into_body();
        let mut received = Vec::new();
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
            received.extend_from_slice(&chunk);
        }
        let cursor = cursor_of(&received);
        let _ = seen.send(format!("cursor {cursor}"));
        let ok_head = || {
            http::Response::builder()
                .header("content-type", "application/grpc")
                .body(())
                .unwrap()
        };
        match cursor {
            BAD_DETAILS => {
                let mut send = respond.send_response(ok_head(), false).unwrap();
                send.send_trailers(trailers(&[
                    ("grpc-status", "5"),
                    ("grpc-status-details-bin", "%%%not base64"),
                ]))
                .unwrap();
            }
            NO_TRAILERS => {
                let mut send = respond.send_response(ok_head(), false).unwrap();
                send.send_data(framed(0, b"\x0a\x03A-1"), true).unwrap();
            }
            HTTP_503 => {
                let head = http::Response::builder().status(503).body(()).unwrap();
                respond.send_response(head, true).unwrap();
            }
            COMPRESSED => {
                let mut send = respond.send_response(ok_head(), false).unwrap();
                send.send_data(framed(1, b"\x0a\x03A-1"), false).unwrap();
                send.send_trailers(trailers(&[("grpc-status", "0")])).unwrap();
            }
            OVERSIZE => {
                let mut send = respond.send_response(ok_head(), false).unwrap();
                // Declares 5 MiB (over the gateway's 4 MiB) and sends it.
                send.send_data(framed(0, &vec![0; 5 << 20]), false).unwrap();
                tokio::spawn(async move {
                    // Flow control may hold some back; the gateway refuses before the end.
                    let _ = std::future::poll_fn(|cx| send.poll_reset(cx)).await;
                });
            }
            NOT_FOUND => {
                // Trailers-only, with padded base64 details.
                let head = http::Response::builder()
                    .header("content-type", "application/grpc")
                    .header("grpc-status", "5")
                    .header("grpc-message", "no%20such%20order")
                    .header("grpc-status-details-bin", "AQID")
                    .body(())
                    .unwrap();
                respond.send_response(head, true).unwrap();
            }
            RESET => respond.send_reset(h2::Reason::INTERNAL_ERROR),
            SILENT => {
                let mut send = respond.send_response(ok_head(), false).unwrap();
                tokio::spawn(async move {
                    let reason = std::future::poll_fn(|cx| send.poll_reset(cx)).await;
                    let _ = seen.send(format!("silent call reset: {reason:?}"));
                });
            }
            OK | OK_THEN_CLOSE => {
                let mut send = respond.send_response(ok_head(), false).unwrap();
                send.send_data(framed(0, b"\x0a\x03A-1"), false).unwrap();
                send.send_trailers(trailers(&[("grpc-status", "0")])).unwrap();
                if cursor == OK_THEN_CLOSE {
                    // Say GOAWAY, let the answer leave, then drop the connection.
                    connection.graceful_shutdown();
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        std::future::poll_fn(|cx| connection.poll_closed(cx)),
                    )
                    .await;
                    let _ = seen.send("closed".to_owned());
                    return;
                }
            }
            other => panic!("no script for cursor {other}"),
        }
    }
}

async fn call(
    channel: &tonic::transport::Channel,
    cursor: i64,
    timeout: Option<Duration>,
) -> Result<Bytes, tonic::Status> {
    let pool = pool();
    let desc = pool.get_message_by_name("payments.v1.LookupRequest").unwrap();
    let mut message = prost_reflect::DynamicMessage::new(desc);
    message.set_field_by_name("order_id", prost_reflect::Value::String("A-1".into()));
    message.set_field_by_name("cursor", prost_reflect::Value::I64(cursor));
    let mut request = tonic::Request::new(Bytes::from(message.encode_to_vec()));
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let path = PathAndQuery::from_static("/payments.v1.Payments/Lookup");
    grpc.unary(request, path, aml_grpc_gate::codec::RawCodec)
        .await
        .map(tonic::Response::into_inner)
}

/// The receipt status the gateway's refusal or answer names.
fn receipt_status(status: &tonic::Status) -> Option<String> {
    let report = aml_grpc::report_of(status)?;
    Some(
        report.receipt?.to_value()["execution_status"]
            .as_str()?
            .to_owned(),
    )
}

/// The scripted upstream: its address, and its log (connections, cursors, resets).
async fn scripted_upstream() -> (std::net::SocketAddr, mpsc::UnboundedReceiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let (seen_tx, seen) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let _ = seen_tx.send("connection".to_owned());
            tokio::spawn(serve_connection(tcp, seen_tx.clone()));
        }
    });
    (upstream, seen)
}

/// The gateway (in a scratch folder named `tag`) in front of `upstream`, a channel to it,
/// and its receipts file.
async fn gateway_before(
    upstream: std::net::SocketAddr,
    tag: &str,
) -> (support::Running, tonic::transport::Channel, std::path::PathBuf) {
    let (gate, address, receipts) = gateway_on(tag, TOOLS, POLICY, &format!("http://{upstream}"), &[]);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (gate, channel, receipts)
}

/// The `execution_status` of each record in `receipts`, once there are `count`.
fn record_statuses(receipts: &std::path::Path, count: usize) -> Vec<String> {
    aml_test_support::wait_until("the records", support::WAIT, || {
        let text = std::fs::read_to_string(receipts).unwrap_or_default();
        let statuses: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["receipt"]["execution_status"]
                    .as_str()
                    .unwrap_or("?")
                    .to_owned()
            })
            .collect();
        (statuses.len() >= count).then_some(statuses)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_upstream_leaves_calls_unknown_and_the_gateway_serving() {
    let (upstream, mut seen) = scripted_upstream().await;
    let (mut gate, channel, receipts) = gateway_before(upstream, "hostile-upstream").await;
    let bounded = |f| async move {
        tokio::time::timeout(support::WAIT, f)
            .await
            .expect("an answer in time")
    };

    // Answers outside the spec: unknown, with UNKNOWN and the receipt, never a panic.
    for cursor in [BAD_DETAILS, NO_TRAILERS, COMPRESSED, OVERSIZE, RESET] {
        let status = bounded(call(&channel, cursor, None))
            .await
            .expect_err("a failure");
        assert_eq!(status.code(), Code::Unknown, "cursor {cursor}: {status:?}");
        assert_eq!(
            receipt_status(&status).as_deref(),
            Some("unknown"),
            "cursor {cursor}: {status:?}"
        );
    }
    // Answers inside it: relayed as they are, the call dispatched.
    let unavailable = bounded(call(&channel, HTTP_503, None))
        .await
        .expect_err("a status");
    assert_eq!(unavailable.code(), Code::Unavailable);
    let not_found = bounded(call(&channel, NOT_FOUND, None))
        .await
        .expect_err("a status");
    assert_eq!(not_found.code(), Code::NotFound);
    assert_eq!(not_found.message(), "no such order");
    assert_eq!(not_found.details(), &[1, 2, 3]);
    assert_eq!(
        bounded(call(&channel, OK, None)).await.unwrap(),
        Bytes::from_static(b"\x0a\x03A-1")
    );

    // Silence past the caller's deadline: the client gets its answer by the deadline, the
    // upstream's stream is reset (the gateway stops waiting at the caller's deadline).
    let started = std::time::Instant::now();
    let silent = bounded(call(&channel, SILENT, Some(Duration::from_millis(1500))))
        .await
        .expect_err("a status");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(silent.code(), Code::DeadlineExceeded | Code::Unknown),
        "{silent:?}"
    );

    // The upstream says GOAWAY after an answer and closes: the next call connects again
    // (nothing was sent on the closed connection, so connecting again re-sends nothing).
    assert!(bounded(call(&channel, OK_THEN_CLOSE, None)).await.is_ok());
    let mut log = Vec::new();
    while !log.iter().any(|l| l == "closed") {
        let line = tokio::time::timeout(support::WAIT, seen.recv())
            .await
            .expect("the upstream's log")
            .unwrap();
        log.push(line);
    }
    assert!(bounded(call(&channel, OK, None)).await.is_ok());
    assert!(gate.alive(), "the gateway is still running");

    // 11 calls, each seen once by the upstream; the silent one reset at its deadline.
    let cursors = |log: &[String]| log.iter().filter(|l| l.starts_with("cursor")).count();
    while cursors(&log) < 11 || !log.iter().any(|l| l.starts_with("silent call reset")) {
        match tokio::time::timeout(support::WAIT, seen.recv()).await {
            Ok(Some(line)) => log.push(line),
            _ => panic!("the upstream's log stopped short: {log:?}"),
        }
    }
    assert_eq!(cursors(&log), 11, "each call reached the upstream once: {log:?}");
    let closed = log.iter().position(|l| l == "closed").unwrap();
    assert_eq!(
        log[closed..].iter().filter(|l| *l == "connection").count(),
        1,
        "one new connection after the upstream closed one: {log:?}"
    );

    // Every call has one record: the six broken ones unknown, the other five dispatched.
    let statuses = record_statuses(&receipts, 11);
    assert_eq!(statuses.len(), 11, "{statuses:?}");
    assert_eq!(
        statuses.iter().filter(|s| *s == "unknown").count(),
        6,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| *s == "dispatched").count(),
        5,
        "{statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_workers_share_the_listener_each_with_its_own_upstream_connection() {
    let (upstream, mut seen) = scripted_upstream().await;
    let (mut gate, address, receipts) = gateway_on(
        "workers",
        TOOLS,
        POLICY,
        &format!("http://{upstream}"),
        &["--workers", "3"],
    );
    let calls = (0..12).map(|_| {
        let address = address.clone();
        tokio::spawn(async move {
            // A connection of its own each, so the workers' accept loops share them out.
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            tokio::time::timeout(support::WAIT, call(&channel, OK, None)).await
        })
    });
    for call in calls.collect::<Vec<_>>() {
        let answer = call.await.unwrap().expect("an answer in time");
        assert_eq!(answer.unwrap(), Bytes::from_static(b"\x0a\x03A-1"));
    }
    let statuses = record_statuses(&receipts, 12);
    assert_eq!(statuses, vec!["dispatched"; 12]);
    let mut connections = 0;
    while let Ok(line) = seen.try_recv() {
        connections += usize::from(line == "connection");
    }
    // At most one per worker, and the health follower's.
    assert!(
        (1..=4).contains(&connections),
        "one upstream connection per worker at most: {connections}"
    );
    assert!(gate.alive());

    // Zero workers is a usage error, not a gateway that serves nothing.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_aml-grpc-gate"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9",
            "--tools",
            "t",
            "--policy",
            "p",
        ])
        .args(["--workers", "0"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--workers"),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_refuses_the_connection_blocks_the_call_as_not_entered() {
    // A port nothing listens on: the connection is refused, so nothing can have been sent.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = closed.local_addr().unwrap();
    drop(closed);
    let (mut gate, channel, receipts) = gateway_before(upstream, "refused-upstream").await;
    let status = tokio::time::timeout(support::WAIT, call(&channel, OK, None))
        .await
        .expect("an answer in time")
        .expect_err("no upstream to answer");
    // The one retried code: nothing reached the tool.
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        status.message(),
        "the tool could not be reached; nothing of the call was sent"
    );
    let report = aml_grpc::report_of(&status).expect("an ErrorInfo");
    assert_eq!(report.reason, "host_dispatch_not_entered");
    assert_eq!(receipt_status(&status).as_deref(), Some("blocked"));
    let detail = report.detail.unwrap_or_default();
    assert!(detail.contains("not reachable"), "{detail}");
    assert_eq!(record_statuses(&receipts, 1), ["blocked"]);
    assert!(gate.alive(), "the gateway keeps serving");
}

/// Sends `SIGHUP` to the gateway, as `kill -HUP PID` does.
fn hang_up(gate: &support::Running) {
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &gate.child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_policy_and_a_malformed_one_blocks_every_call() {
    let (upstream, _seen) = scripted_upstream().await;
    let (mut gate, channel, receipts) = gateway_before(upstream, "reload").await;
    let policy = receipts.with_file_name("policy.json");
    let answered = |channel: tonic::transport::Channel| async move {
        tokio::time::timeout(support::WAIT, call(&channel, OK, None))
            .await
            .expect("an answer in time")
    };
    assert!(answered(channel.clone()).await.is_ok(), "allowed at start");
    // Until the reload, nothing changes; after it, each edit is in force.
    let steps = [
        (
            r#"{"protocol": "aml-action-policy/1", "rules": []}"#,
            Some(Code::PermissionDenied),
        ),
        (
            r#"{"protocol": "aml-action-policy/1", "rules": ["#,
            Some(Code::FailedPrecondition),
        ),
        (POLICY, None),
    ];
    for (text, refused) in steps {
        std::fs::write(&policy, text).unwrap();
        hang_up(&gate);
        let code = |answer: Result<Bytes, tonic::Status>| answer.err().map(|s| s.code());
        let mut seen = code(answered(channel.clone()).await);
        let started = std::time::Instant::now();
        while seen != refused && started.elapsed() < support::WAIT {
            tokio::time::sleep(Duration::from_millis(50)).await;
            seen = code(answered(channel.clone()).await);
        }
        assert_eq!(seen, refused, "after reloading {text}");
        assert!(gate.alive(), "SIGHUP does not end the gateway");
    }
    let statuses = record_statuses(&receipts, 4);
    assert!(statuses.contains(&"blocked".to_owned()), "{statuses:?}");
}

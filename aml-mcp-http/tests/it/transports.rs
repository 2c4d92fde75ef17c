//! The two transports against each other, and against raw HTTP, with a scripted server in
//! place of the relay: answers and server messages reach the right stream, a batch answered
//! as JSON is an array, a session whose host gives up answers instead of hanging, and an
//! upstream that cannot be reached is reported gone.

use std::time::Duration;

use aml_mcp::relay::{Client, Connection, EndpointEvent, Inbound, ToEndpoint};
use aml_mcp_http::{http_upstream, FrontConfig, HttpFront, UpstreamConfig};
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(10);

/// Told each time a `hold` request reaches [`serve`] (which never answers it).
static HELD: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// A scripted server: answers every request with its method and the bytes it received (as a
/// string); before answering a request that has a progress token it sends a progress
/// notification; `hold` it never answers (and says so through [`HELD`]); on `ping` it also
/// sends a notification of its own (which has no request to go with).
async fn serve(mut connection: Connection) {
    while let Some(Inbound::Message(message)) = connection.incoming.recv().await {
        let request: Value = serde_json::from_slice(&message).unwrap();
        let Some(id) = request.get("id").cloned() else {
            continue;
        };
        if let Some(token) = request["params"]["_meta"].get("progressToken") {
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 1}});
            let _ = connection.outgoing.send(Bytes::from(progress.to_string())).await;
        }
        if request["method"] == "hold" {
            HELD.notify_one();
            continue;
        }
        if request["method"] == "initialize" && request["params"]["refuse"] == true {
            let refused =
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "refused"}});
            let _ = connection.outgoing.send(Bytes::from(refused.to_string())).await;
            continue;
        }
        if request["method"] == "ping" {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "unprompted"}});
            let _ = connection.outgoing.send(Bytes::from(note.to_string())).await;
        }
        // The id as it came (a `Value` would round a big integer and respell a string).
        let raw_id = aml_mcp::relay::jsonrpc::Members::of(std::str::from_utf8(&message).unwrap())
            .unwrap()
            .unwrap()
            .get("id")
            .unwrap()
            .get()
            .to_owned();
        let result = json!({"method": request["method"], "received": String::from_utf8_lossy(&message),
                            "protocolVersion": "2025-06-18"});
        let answer = format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"result":{result}}}"#);
        let _ = connection.outgoing.send(Bytes::from(answer)).await;
    }
}

/// A session's client side as one connection (this file's scripted servers serve sessions,
/// but one).
fn session(client: Client) -> Connection {
    aml_test_support::relay::session_connection(client)
}

async fn front() -> String {
    let mut front = HttpFront::bind("127.0.0.1:0".parse().unwrap(), FrontConfig::default())
        .await
        .unwrap();
    let url = format!("http://{}/mcp", front.local_addr());
    tokio::spawn(async move {
        while let Some((client, _)) = front.accept().await {
            tokio::spawn(serve(session(client)));
        }
    });
    url
}

/// [`front`]'s address (`host:port`), for raw HTTP.
async fn front_addr() -> String {
    let url = front().await;
    url.trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string()
}

async fn next_message(connection: &mut Connection) -> Value {
    match timeout(LIMIT, connection.incoming.recv()).await.expect("in time") {
        Some(Inbound::Message(bytes)) => serde_json::from_slice(&bytes).unwrap(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_upstream_client_and_the_front_carry_requests_progress_and_server_messages() {
    let url = front().await;
    let upstream = http_upstream(&url, UpstreamConfig::default()).unwrap();
    let mut client = upstream.connection;
    let outgoing = client.outgoing.clone();
    let send = |m: Value| {
        let outgoing = outgoing.clone();
        async move { outgoing.send(Bytes::from(m.to_string())).await }
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}))
        .await
        .unwrap();
    assert_eq!(next_message(&mut client).await["result"]["method"], "initialize");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await
        .unwrap();

    // Bytes as sent: key order and number spelling survive both hops.
    let raw = r#"{"jsonrpc":"2.0","id":"a","method":"x/unknown","params":{"z":1.50,"a":[1e2],"_meta":{"progressToken":"t"}}}"#;
    client
        .outgoing
        .send(Bytes::from_static(raw.as_bytes()))
        .await
        .unwrap();
    let progress = next_message(&mut client).await;
    assert_eq!(progress["method"], "notifications/progress");
    assert_eq!(progress["params"]["progressToken"], "t");
    let answer = next_message(&mut client).await;
    assert_eq!(answer["result"]["received"], raw);

    // A server message with no request to go with reaches the client too (on the GET
    // stream, or the answer's stream while one is open).
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(next_message(&mut client).await);
    }
    assert!(
        seen.iter().any(|m| m["params"]["data"] == "unprompted"),
        "{seen:?}"
    );
    assert!(seen.iter().any(|m| m["id"] == 2), "{seen:?}");
}

/// One raw HTTP/1.1 exchange; the whole reply as text.
async fn raw(addr: &str, request: String) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    timeout(LIMIT, stream.read_to_end(&mut reply))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8(reply).unwrap()
}

/// Opens a session with a raw `initialize`; its id.
async fn initialize(addr: &str) -> String {
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let reply = raw(addr, post(addr, None, "application/json", init)).await;
    reply
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .unwrap_or_else(|| panic!("no session id: {reply}"))
        .to_string()
}

fn post(addr: &str, session: Option<&str>, accept: &str, body: &str) -> String {
    let session = session
        .map(|s| format!("mcp-session-id: {s}\r\n"))
        .unwrap_or_default();
    format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\naccept: {accept}\r\n{session}content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn a_batch_answered_as_json_is_an_array_in_order() {
    let addr = front_addr().await;
    let session = initialize(&addr).await;
    let batch = r#"[{"jsonrpc":"2.0","method":"notifications/initialized"},
        {"jsonrpc":"2.0","id":7,"method":"a"},{"jsonrpc":"2.0","id":8,"method":"b"}]"#;
    let reply = raw(&addr, post(&addr, Some(&session), "application/json", batch)).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let body: Value = serde_json::from_str(reply.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let ids: Vec<&Value> = body.as_array().unwrap().iter().map(|m| &m["id"]).collect();
    assert_eq!(ids, [&json!(7), &json!(8)]);
}

#[tokio::test]
async fn a_session_the_host_drops_answers_its_initialize_with_an_error() {
    let mut front = HttpFront::bind("127.0.0.1:0".parse().unwrap(), FrontConfig::default())
        .await
        .unwrap();
    let addr = front.local_addr().to_string();
    tokio::spawn(async move {
        // The host cannot start a server for it: it drops the connection.
        while let Some((client, _)) = front.accept().await {
            drop(client);
        }
    });
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let reply = raw(&addr, post(&addr, None, "application/json", init)).await;
    let body: Value = serde_json::from_str(reply.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["id"], 1);
    assert_eq!(body["error"]["code"], aml_mcp::relay::UPSTREAM_GONE);
}

#[tokio::test]
async fn an_upstream_that_cannot_be_reached_is_reported_gone() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let upstream = http_upstream(&format!("http://127.0.0.1:{port}/mcp"), UpstreamConfig::default()).unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}});
    upstream
        .connection
        .outgoing
        .send(Bytes::from(init.to_string()))
        .await
        .unwrap();
    let why = timeout(LIMIT, upstream.exited).await.unwrap().unwrap();
    assert!(why.contains("connect"), "{why}");
}

/// A 2026-07-28 request through the upstream client reaches a stateless front (which checks
/// the request's headers against its envelope): with its own protocol version, `Mcp-Method`
/// and `Mcp-Name` (encoded when not plain ASCII), no session; its progress and answer come
/// back; the server's own JSON-RPC error passes as it is; and cancelling it closes its
/// response stream, which the front passes on to its relay by closing the request's
/// endpoint (the relay then cancels it upstream: ADR 031).
#[tokio::test]
async fn a_2026_07_28_request_goes_without_a_session_with_its_headers_and_is_cancelled_by_closing_its_stream()
{
    let mut front = HttpFront::bind("127.0.0.1:0".parse().unwrap(), FrontConfig::default())
        .await
        .unwrap();
    let url = format!("http://{}/mcp", front.local_addr());
    let (seen_tx, mut seen) = tokio::sync::mpsc::channel::<Value>(16);
    // In place of the relay: each request answered on its own endpoint, and an endpoint's
    // close reported as `{"closed": endpoint}`.
    tokio::spawn(async move {
        let (client, info) = front.accept().await.unwrap();
        assert!(info.stateless, "{info:?}");
        let Client::Endpoints(mut events) = client else {
            panic!("a 2026-07-28 relay has endpoints")
        };
        let mut endpoints = std::collections::HashMap::new();
        while let Some(event) = events.recv().await {
            let (endpoint, message) = match event {
                EndpointEvent::Open { endpoint, to, .. } => {
                    endpoints.insert(endpoint, to);
                    continue;
                }
                EndpointEvent::Close { endpoint } => {
                    let _ = seen_tx.send(json!({"closed": endpoint})).await;
                    continue;
                }
                EndpointEvent::Message {
                    endpoint,
                    inbound: Inbound::Message(message),
                } => (endpoint, message),
                EndpointEvent::Message { inbound, .. } => panic!("{inbound:?}"),
            };
            let request: Value = serde_json::from_slice(&message).unwrap();
            let _ = seen_tx
                .send(json!({"endpoint": endpoint, "request": request}))
                .await;
            let Some(to) = endpoints.get(&endpoint) else {
                continue;
            };
            if request["method"] == "slow" {
                continue;
            }
            let say = |m: Value, answer: bool| {
                let m = Bytes::from(m.to_string());
                to.try_send(if answer {
                    ToEndpoint::Answer(m)
                } else {
                    ToEndpoint::Notification(m)
                })
            };
            if request["method"] == "subscriptions/listen" {
                let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": request["id"]}}});
                let _ = say(note, false);
            }
            if let Some(token) = request["params"]["_meta"].get("progressToken") {
                let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": 1}});
                let _ = say(progress, false);
            }
            let answer =
                json!({"jsonrpc": "2.0", "id": request["id"], "result": {"name": request["params"]["name"]}});
            let _ = say(answer, true);
        }
        drop(front);
    });
    let upstream = http_upstream(&url, UpstreamConfig::default()).unwrap();
    let mut client = upstream.connection;
    let outgoing = client.outgoing.clone();
    let send = |id: u64, method: &str, mut params: Value| {
        params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let outgoing = outgoing.clone();
        async move { outgoing.send(Bytes::from(message.to_string())).await.unwrap() }
    };

    send(
        1,
        "tools/call",
        json!({"name": "héllo wörld", "_meta": {"progressToken": "t"}}),
    )
    .await;
    let progress = next_message(&mut client).await;
    assert_eq!(progress["params"]["progressToken"], "t", "{progress}");
    let answer = next_message(&mut client).await;
    assert_eq!(
        (&answer["id"], &answer["result"]["name"]),
        (&json!(1), &json!("héllo wörld")),
        "{answer}"
    );

    // A subscription: its notification comes on its stream, named by the client's id, then
    // its answer ends it.
    send(
        2,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    )
    .await;
    let note = next_message(&mut client).await;
    assert_eq!(
        note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!(2),
        "{note}"
    );
    let ended = next_message(&mut client).await;
    assert_eq!(ended["id"], json!(2), "{ended}");

    send(3, "slow", json!({})).await;
    let mut slow = Value::Null;
    while slow.is_null() {
        let m = timeout(LIMIT, seen.recv()).await.expect("in time").unwrap();
        if m["request"]["method"] == "slow" {
            assert_eq!(
                m["request"]["id"], 3,
                "the client's own id reaches the relay: {m}"
            );
            slow = m["endpoint"].clone();
        }
    }
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}});
    client
        .outgoing
        .send(Bytes::from(cancel.to_string()))
        .await
        .unwrap();
    loop {
        let m = timeout(LIMIT, seen.recv())
            .await
            .expect("a cancellation in time")
            .unwrap();
        if m.get("closed") == Some(&slow) {
            break;
        }
    }
}

/// A front whose server answers every request after `delay`, with SSE keep-alives every
/// `keep_alive`.
async fn slow_front(delay: Duration, keep_alive: Option<Duration>) -> String {
    let config = FrontConfig::default().with_sse_keep_alive(keep_alive);
    let mut front = HttpFront::bind("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    let addr = front.local_addr().to_string();
    tokio::spawn(async move {
        while let Some((client, _)) = front.accept().await {
            let mut connection = session(client);
            tokio::spawn(async move {
                while let Some(Inbound::Message(message)) = connection.incoming.recv().await {
                    let request: Value = serde_json::from_slice(&message).unwrap();
                    let Some(id) = request.get("id").cloned() else {
                        continue;
                    };
                    if request["method"] != "initialize" {
                        tokio::time::sleep(delay).await; // a slow server (simulated)
                    }
                    let answer = json!({"jsonrpc": "2.0", "id": id,
                        "result": {"protocolVersion": "2025-06-18", "done": request["method"]}});
                    let _ = connection.outgoing.send(Bytes::from(answer.to_string())).await;
                }
            });
        }
    });
    addr
}

/// A slow call over SSE: with keep-alives the quiet stream gets `: keep-alive` comments
/// before its answer; without, only the answer.
#[tokio::test]
async fn a_quiet_sse_stream_gets_keep_alive_comments_until_its_answer() {
    for keep_alive in [Some(Duration::from_millis(100)), None] {
        let addr = slow_front(Duration::from_millis(700), keep_alive).await;
        let session = initialize(&addr).await;
        let call = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow"}}"#;
        let accept = "application/json, text/event-stream";
        let reply = raw(&addr, post(&addr, Some(&session), accept, call)).await;
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.contains("text/event-stream"), "{reply}");
        let comments = reply.matches(": keep-alive\n\n").count();
        let answer = reply.find(r#""done":"tools/call""#).expect("the answer");
        match keep_alive {
            // 700 ms of quiet at 100 ms: several, all before the answer.
            Some(_) => {
                assert!(comments >= 3, "{comments} keep-alives: {reply}");
                assert!(reply.rfind(": keep-alive").unwrap() < answer, "{reply}");
            }
            None => assert_eq!(comments, 0, "{reply}"),
        }
    }
}

#[tokio::test]
async fn a_request_whose_id_is_not_a_string_or_an_integer_is_refused_at_once() {
    let addr = front_addr().await;
    let session = initialize(&addr).await;
    // More than the session's 32 waiting requests: none of them may hold a slot.
    for round in 0..12 {
        for id in ["true", "null", "1.5", r#"{"a":1}"#, "[1]"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            for accept in ["application/json", "text/event-stream"] {
                let reply = raw(&addr, post(&addr, Some(&session), accept, &body)).await;
                assert!(
                    reply.starts_with("HTTP/1.1 400"),
                    "{round} {id} {accept}: {reply}"
                );
                assert!(reply.contains("-32600"), "{reply}");
            }
        }
    }
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let reply = raw(&addr, post(&addr, Some(&session), "application/json", ping)).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

/// The front keys ids as the stdio relay does: an integer of any size is an id, and a string
/// is one id however it is spelled; each answer carries the id as the client wrote it.
#[tokio::test]
async fn an_integer_id_of_any_size_and_an_escaped_string_id_are_answered_with_the_ids_sent() {
    let addr = front_addr().await;
    let session = initialize(&addr).await;
    for id in ["123456789012345678901234567890", r#""\u0061b""#, "-0"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        for accept in ["application/json", "text/event-stream"] {
            let reply = raw(&addr, post(&addr, Some(&session), accept, &body)).await;
            assert!(reply.starts_with("HTTP/1.1 200"), "{id} {accept}: {reply}");
            let answer = reply.split("\r\n\r\n").nth(1).unwrap();
            assert!(
                answer.contains(&format!(r#""id":{id}"#)),
                "{id} {accept}: {answer}"
            );
            assert!(answer.contains(r#""method":"ping""#), "{id} {accept}: {answer}");
        }
    }
}

#[tokio::test]
async fn a_request_waiting_when_the_client_deletes_its_session_gets_an_error_answer() {
    let addr = front_addr().await;
    let session = initialize(&addr).await;
    for accept in ["application/json", "text/event-stream"] {
        let session = if accept == "application/json" {
            session.clone()
        } else {
            initialize(&addr).await
        };
        let held = r#"{"jsonrpc":"2.0","id":"h","method":"hold"}"#;
        let waiting = tokio::spawn(raw_owned(addr.clone(), post(&addr, Some(&session), accept, held)));
        timeout(LIMIT, HELD.notified())
            .await
            .expect("the held request reaches the server");
        let delete = format!(
            "DELETE /mcp HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\nmcp-session-id: {session}\r\n\r\n"
        );
        let deleted = raw(&addr, delete).await;
        assert!(deleted.starts_with("HTTP/1.1 204"), "{deleted}");
        let reply = waiting.await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(
            reply.contains(r#""id":"h""#) && reply.contains("-32000"),
            "{accept}: {reply}"
        );
        assert!(reply.contains("DELETE"), "{reply}");
    }
}

async fn raw_owned(addr: String, request: String) -> String {
    raw(&addr, request).await
}

#[tokio::test]
async fn an_initialize_the_server_refuses_opens_no_session_and_a_batch_cannot_hold_one() {
    let addr = front_addr().await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"refuse":true}}"#;
    // Refused, whether the client takes JSON only or JSON and SSE: the answer carries the
    // server's error and no session id.
    for accept in ["application/json", "application/json, text/event-stream"] {
        let reply = raw(&addr, post(&addr, None, accept, init)).await;
        assert!(
            reply.starts_with("HTTP/1.1 200") && reply.contains("-32602"),
            "{accept}: {reply}"
        );
        assert!(
            !reply.to_ascii_lowercase().contains("mcp-session-id"),
            "{accept}: {reply}"
        );
    }
    // An accepted one, with both, is answered as JSON with its session id.
    let accepted = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let reply = raw(
        &addr,
        post(&addr, None, "application/json, text/event-stream", accepted),
    )
    .await;
    assert!(reply.contains("content-type: application/json"), "{reply}");
    let session = reply
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .unwrap_or_else(|| panic!("an accepted initialize names its session: {reply}"))
        .to_string();
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let alive = raw(&addr, post(&addr, Some(&session), "application/json", ping)).await;
    assert!(alive.starts_with("HTTP/1.1 200"), "{alive}");
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}]"#;
    let reply = raw(&addr, post(&addr, None, "application/json", batch)).await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert!(!reply.contains("mcp-session-id"), "{reply}");
}

/// A TCP relay in front of `to` that counts the connections made through it.
async fn counting_relay(
    to: std::net::SocketAddr,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (format!("http://{address}/mcp"), count)
}

/// Requests one after another reuse their session's connection: many sessions on one
/// runtime open one connection each, not one per request (`aml-mcp-gate/tests/load/http_load.rs`
/// is the load at which a connection not yet ready again was once passed over for a new one).
#[tokio::test]
async fn back_to_back_requests_reuse_their_connection() {
    // Under the front's default quota of sessions per client.
    const SESSIONS: usize = 12;
    let to = front_addr().await.parse().unwrap();
    let (through, connections) = counting_relay(to).await;
    let sessions: Vec<_> = (0..SESSIONS)
        .map(|_| {
            let through = through.clone();
            tokio::spawn(async move {
                let upstream = http_upstream(&through, UpstreamConfig::default()).unwrap();
                let mut client = upstream.connection;
                let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}});
                client.outgoing.send(Bytes::from(init.to_string())).await.unwrap();
                assert_eq!(next_message(&mut client).await["result"]["method"], "initialize");
                for id in 1..=100 {
                    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"});
                    client.outgoing.send(Bytes::from(call.to_string())).await.unwrap();
                    assert_eq!(next_message(&mut client).await["id"], id);
                }
            })
        })
        .collect();
    for session in sessions {
        session.await.unwrap();
    }
    // Per session: one for its requests, one spare at most.
    let opened = connections.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        opened <= 2 * SESSIONS,
        "{SESSIONS} sessions of 100 requests one after another opened {opened} connections"
    );
}

/// A pooled connection left idle for 4 s is not reused: the next request opens a new one,
/// so it is never written into a connection the server is closing for idleness (this
/// front does after its `header_read_timeout`, 10 s).
#[tokio::test]
async fn a_connection_idle_for_four_seconds_is_not_reused() {
    /// Longer than the client's 4 s, shorter than the front's 10 s.
    const IDLE_PAST_THE_CLIENTS_LIMIT: Duration = Duration::from_millis(4500);
    let to = front_addr().await.parse().unwrap();
    let (through, connections) = counting_relay(to).await;
    let upstream = http_upstream(&through, UpstreamConfig::default()).unwrap();
    let mut client = upstream.connection;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}});
    client.outgoing.send(Bytes::from(init.to_string())).await.unwrap();
    assert_eq!(next_message(&mut client).await["result"]["method"], "initialize");
    let list = |id: u64| Bytes::from(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}).to_string());
    client.outgoing.send(list(1)).await.unwrap();
    assert_eq!(next_message(&mut client).await["id"], 1);
    let opened = connections.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(opened, 1, "back-to-back requests share a connection");

    // Simulated idleness: nothing to wait for, the point is time passing.
    tokio::time::sleep(IDLE_PAST_THE_CLIENTS_LIMIT).await;
    client.outgoing.send(list(2)).await.unwrap();
    assert_eq!(next_message(&mut client).await["id"], 2);
    let opened = connections.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(opened, 2, "the idle connection was reused");
}

/// A hostile upstream that reads each request whole and then answers `reply` (nothing: the
/// connection is closed unanswered). Counts the requests it read.
async fn hostile_upstream(reply: &'static [u8]) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut read = Vec::new();
                let mut buf = [0u8; 4096];
                // Up to the end of the JSON body (every request here is one object).
                while !read.ends_with(b"}") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read.extend_from_slice(&buf[..n]),
                    }
                }
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = stream.write_all(reply).await;
            });
        }
    });
    (format!("http://{address}/mcp"), count)
}

/// An upstream that answers garbage, or closes the connection after reading a request: the
/// relay is told the server is gone (so a call in flight ends `unknown`) within the limit,
/// and the request, which reached the server, is never sent again.
#[tokio::test]
async fn a_garbage_or_silently_closed_answer_ends_the_upstream_without_sending_again() {
    for (shape, reply) in [
        ("garbage", &b"SSH-2.0-OpenSSH_9.6\r\n\r\n\x00\xff"[..]),
        ("closed unanswered", &b""[..]),
        ("a truncated head", &b"HTTP/1.1 200 OK\r\ncontent-le"[..]),
    ] {
        let (url, requests) = hostile_upstream(reply).await;
        let upstream = http_upstream(&url, UpstreamConfig::default()).unwrap();
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}});
        upstream
            .connection
            .outgoing
            .send(Bytes::from(call.to_string()))
            .await
            .unwrap();
        let why = timeout(LIMIT, upstream.exited)
            .await
            .unwrap_or_else(|_| panic!("{shape}: no end within {LIMIT:?}"))
            .unwrap();
        assert!(why.contains("POST failed"), "{shape}: {why}");
        // Time for a second attempt to arrive, were one made.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            requests.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{shape}: sent again"
        );
    }
}

/// A message with a member the front reads given twice (ids, method, a tool's name, a
/// progress token, an answer's protocol version) or of the wrong type is ambiguous: the front
/// refuses its whole POST at once (a request, a notification, an answer, or a batch with a
/// valid message beside it), and its server never sees any of it.
#[tokio::test]
async fn a_member_read_twice_or_of_the_wrong_type_is_refused_and_nothing_of_its_post_is_relayed() {
    let mut front = HttpFront::bind("127.0.0.1:0".parse().unwrap(), FrontConfig::default())
        .await
        .unwrap();
    let addr = front.local_addr().to_string();
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    tokio::spawn(async move {
        while let Some((client, _)) = front.accept().await {
            let mut connection = session(client);
            let seen_tx = seen_tx.clone();
            tokio::spawn(async move {
                while let Some(Inbound::Message(message)) = connection.incoming.recv().await {
                    let _ = seen_tx.send(message.clone());
                    let text = std::str::from_utf8(&message).unwrap();
                    let members = aml_mcp::relay::jsonrpc::Members::of(text).unwrap().unwrap();
                    if let (Some(id), Some(_)) = (members.get("id"), members.get("method")) {
                        let answer = format!(
                            r#"{{"jsonrpc":"2.0","id":{},"result":{{"protocolVersion":"2025-06-18"}}}}"#,
                            id.get()
                        );
                        let _ = connection.outgoing.send(Bytes::from(answer)).await;
                    }
                }
            });
        }
    });
    let session = initialize(&addr).await;
    let first = timeout(LIMIT, seen.recv()).await.unwrap().unwrap();
    assert!(std::str::from_utf8(&first).unwrap().contains("initialize"));
    let hostile = [
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":7}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"a","name":"b"}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"ping","params":{"_meta":{"progressToken":1,"progressToken":2}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/x","method":"notifications/y"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progressToken":2}}"#,
        r#"{"jsonrpc":"2.0","id":6,"result":{"protocolVersion":"a","protocolVersion":"b"}}"#,
        r#"[{"jsonrpc":"2.0","id":7,"method":"ping"},{"jsonrpc":"2.0","id":8,"id":9,"method":"ping"}]"#,
        r#"[{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":10,"method":["ping"]}]"#,
    ];
    for body in hostile {
        for accept in ["application/json", "application/json, text/event-stream"] {
            let reply = raw(&addr, post(&addr, Some(&session), accept, body)).await;
            assert!(reply.starts_with("HTTP/1.1 400"), "{body} {accept}: {reply}");
            assert!(
                reply.contains("not a JSON-RPC request"),
                "{body} {accept}: {reply}"
            );
        }
    }
    // The session still works, and the ping below is the first thing its server sees.
    let ping = r#"{"jsonrpc":"2.0","id":11,"method":"ping"}"#;
    let reply = raw(&addr, post(&addr, Some(&session), "application/json", ping)).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let next = timeout(LIMIT, seen.recv()).await.unwrap().unwrap();
    assert_eq!(&next[..], ping.as_bytes());
}

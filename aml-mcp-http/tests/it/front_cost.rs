//! What the 2026-07-28 path costs next to a session, measured in the front alone: the same
//! request (`tools/call`, JSON answer) to the same scripted server over one kept-alive
//! connection each, interleaved one for one. Every answer is checked (its id, the client's).
//!
//! `cargo test --release -p aml-mcp-http --test it -- --ignored --nocapture`

use std::time::{Duration, Instant};

use aml_mcp::relay::{Client as RelayClient, EndpointEvent, Inbound, ToEndpoint};
use aml_mcp_http::{FrontConfig, HttpFront};
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const CALLS: usize = 2000;

/// The answer to `message`, if it is a request: an empty result.
fn answer(message: &[u8]) -> Option<Bytes> {
    let request: Value = serde_json::from_slice(message).unwrap();
    let id = request.get("id")?;
    Some(Bytes::from(
        json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}}).to_string(),
    ))
}

/// Answers every request at once, on its endpoint.
async fn serve(client: RelayClient) {
    let (RelayClient::Endpoints(mut events) | RelayClient::Session(mut events)) = client else {
        panic!("the front's relays have endpoints")
    };
    let mut endpoints = std::collections::HashMap::new();
    while let Some(event) = events.recv().await {
        match event {
            EndpointEvent::Open { endpoint, to, .. } => drop(endpoints.insert(endpoint, to)),
            EndpointEvent::Message {
                endpoint,
                inbound: Inbound::Message(message),
            } => {
                if let (Some(to), Some(answer)) = (endpoints.get(&endpoint), answer(&message)) {
                    let _ = to.send(ToEndpoint::Answer(answer)).await;
                }
            }
            EndpointEvent::Close { endpoint } => drop(endpoints.remove(&endpoint)),
            EndpointEvent::Message { .. } => {}
        }
    }
}

/// One kept-alive HTTP/1.1 connection.
struct Client(BufReader<TcpStream>);

impl Client {
    async fn post(&mut self, headers: &[(&str, &str)], body: &str) -> (Option<String>, Value) {
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        head.push_str(body);
        self.0.get_mut().write_all(head.as_bytes()).await.unwrap();
        let (mut length, mut session) = (0, None);
        loop {
            let mut line = String::new();
            self.0.read_line(&mut line).await.unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap(),
                    "mcp-session-id" => session = Some(value.trim().to_owned()),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        self.0.read_exact(&mut body).await.unwrap();
        (session, serde_json::from_slice(&body).unwrap())
    }
}

fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort();
    samples[(samples.len() * p / 100).min(samples.len() - 1)]
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "a measurement: run with --ignored --nocapture (and --release)"]
async fn the_cost_of_a_stateless_request_next_to_a_session_request() {
    let mut front = HttpFront::bind("127.0.0.1:0".parse().unwrap(), FrontConfig::default())
        .await
        .unwrap();
    let addr = front.local_addr();
    tokio::spawn(async move {
        while let Some((connection, _)) = front.accept().await {
            tokio::spawn(serve(connection));
        }
    });
    let connect = || async { Client(BufReader::new(TcpStream::connect(addr).await.unwrap())) };
    let (mut old, mut new) = (connect().await, connect().await);
    let json_only = ("accept", "application/json");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}});
    let (session, _) = old.post(&[json_only], &init.to_string()).await;
    let session = session.expect("a session");
    let session_headers = [
        json_only,
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let stateless_headers = [
        json_only,
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];
    let (mut old_times, mut new_times) = (Vec::new(), Vec::new());
    for i in 0..CALLS + 100 {
        let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "echo",
            "arguments": {"message": "hello"}, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string();
        let started = Instant::now();
        let (_, answer) = old.post(&session_headers, &call).await;
        let old_took = started.elapsed();
        assert_eq!(answer["id"], i);
        let started = Instant::now();
        let (_, answer) = new.post(&stateless_headers, &call).await;
        let new_took = started.elapsed();
        assert_eq!(answer["id"], i);
        // The first 100 of each warm up.
        if i >= 100 {
            old_times.push(old_took);
            new_times.push(new_took);
        }
    }
    println!(
        "{CALLS} calls each, interleaved; session: p50 {:?} p99 {:?}; stateless: p50 {:?} p99 {:?}",
        percentile(&mut old_times, 50),
        percentile(&mut old_times, 99),
        percentile(&mut new_times, 50),
        percentile(&mut new_times, 99),
    );
}

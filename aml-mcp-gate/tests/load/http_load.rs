//! Load on loopback, bounded in count and time: 200 concurrent MCP sessions over Streamable
//! HTTP make `tools/call`s back to back for 30 s, first straight to a fixture server, then
//! through `aml-mcp-gate --listen … --upstream …` (HTTP to HTTP, one upstream session per
//! client session). Every answered call through the gate has exactly one receipt: the set of
//! receipt digests equals the set of digests of the calls made (none lost, none twice). The
//! p50/p99 latencies of both runs and their difference (what the gate adds) are printed.
//!
//! `AML_HTTP_LOAD_SESSIONS` and `AML_HTTP_LOAD_SECONDS` change the size. The numbers in docs/GATE.md
//! come from `cargo test --release -p aml-mcp-gate --test load -- --nocapture`.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use aml_core::{Effect, FrozenProposal, ProposalParts};
use aml_mcp::relay::{Client, Connection, Inbound};
use aml_mcp_http::{http_upstream, FrontConfig, HttpFront, UpstreamConfig};
use bytes::Bytes;
use common::*;
use serde_json::{json, Value};

fn setting(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// A minimal MCP server over the crate's own HTTP front (one tool, `echo`), served by a
/// task of the current runtime; its URL.
async fn fixture_server() -> String {
    let config = FrontConfig::default()
        .with_max_sessions(4096)
        .with_max_sessions_per_client(4096)
        .with_max_calls_per_session(64);
    let mut front = HttpFront::bind("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    let url = format!("http://{}/mcp", front.local_addr());
    tokio::spawn(async move {
        while let Some((client, _)) = front.accept().await {
            // Its clients open sessions; a 2026-07-28 relay's callers are not served.
            if let Client::Session(_) = client {
                tokio::spawn(answer(aml_test_support::relay::session_connection(client)));
            }
        }
    });
    url
}

async fn answer(mut connection: Connection) {
    while let Some(Inbound::Message(message)) = connection.incoming.recv().await {
        let request: Value = serde_json::from_slice(&message).unwrap();
        let Some(id) = request.get("id") else { continue };
        let result = match request["method"].as_str().unwrap_or("") {
            "initialize" => json!({"protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "load-fixture", "version": "1"}}),
            "tools/call" => {
                json!({"content": [{"type": "text", "text": request["params"]["arguments"]["message"]}]})
            }
            _ => json!({}),
        };
        let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
        if connection
            .outgoing
            .send(Bytes::from(reply.to_string()))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// What one client session measured.
#[derive(Default)]
struct Run {
    latencies: Vec<Duration>,
    /// The `message` argument of every answered call.
    answered: Vec<String>,
    errors: Vec<String>,
}

/// One client session: initialize, then `echo` calls one after another until `until`.
async fn session(url: String, number: usize, until: Instant) -> Run {
    let mut run = Run::default();
    let upstream = http_upstream(&url, UpstreamConfig::default()).unwrap();
    let mut exited = upstream.exited;
    let Connection {
        mut incoming,
        outgoing,
    } = upstream.connection;
    // Why the client's upstream ended, if it did (its reason says which request failed).
    let mut gone = move || match exited.try_recv() {
        Ok(why) => format!("; the client's upstream ended: {why}"),
        Err(_) => String::new(),
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "load", "version": "1"}}});
    if let Err(why) = exchange(&outgoing, &mut incoming, init.to_string()).await {
        run.errors
            .push(format!("session {number}: initialize: {why}{}", gone()));
        return run;
    }
    let _ = outgoing
        .send(Bytes::from_static(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
        ))
        .await;
    let mut id = 1u64;
    while Instant::now() < until {
        let text = format!("s{number}-c{id}");
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": text}}});
        match exchange(&outgoing, &mut incoming, call.to_string()).await {
            Ok((reply, took)) if reply["result"]["content"][0]["text"] == text.as_str() => {
                run.latencies.push(took);
                run.answered.push(text);
            }
            Ok((reply, _)) => run.errors.push(format!("{text}: {reply}")),
            Err(why) => {
                run.errors.push(format!("{text}: {why}{}", gone()));
                break;
            }
        }
        id += 1;
    }
    run
}

/// Sends a request and waits (30 s at most) for an answer; the answer and how long it took,
/// or why there is none.
async fn exchange(
    outgoing: &tokio::sync::mpsc::Sender<Bytes>,
    incoming: &mut tokio::sync::mpsc::Receiver<Inbound>,
    message: String,
) -> Result<(Value, Duration), String> {
    let sent = Instant::now();
    outgoing
        .send(Bytes::from(message))
        .await
        .map_err(|_| "the client connection was closed before the send".to_string())?;
    loop {
        let reply = tokio::time::timeout(Duration::from_secs(30), incoming.recv())
            .await
            .map_err(|_| "no answer within 30 s".to_string())?
            .ok_or_else(|| "the client connection closed while waiting".to_string())?;
        match reply {
            Inbound::Message(bytes) => {
                let value: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("unparsable reply ({e}): {}", String::from_utf8_lossy(&bytes)))?;
                if value.get("id").is_some() {
                    return Ok((value, sent.elapsed()));
                }
            }
            other => return Err(format!("the connection reported {other:?}")),
        }
    }
}

/// `sessions` sessions against `url` for `seconds`; all their measurements.
async fn load(url: &str, sessions: usize, seconds: u64) -> Run {
    let until = Instant::now() + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..sessions)
        .map(|n| tokio::spawn(session(url.to_string(), n, until)))
        .collect();
    let mut all = Run::default();
    for task in tasks {
        let run = task.await.unwrap();
        all.latencies.extend(run.latencies);
        all.answered.extend(run.answered);
        all.errors.extend(run.errors);
    }
    all.latencies.sort();
    all
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn digest(message: &str) -> String {
    let arguments = json!({"message": message});
    FrozenProposal::freeze(ProposalParts {
        tool: "echo",
        effect: Effect::Read,
        resource: "fixture",
        purpose: "Echo for the load test",
        arguments: arguments.as_object().unwrap(),
    })
    .unwrap()
    .digest()
    .to_string()
}

#[test]
fn two_hundred_sessions_for_thirty_seconds_every_call_has_one_receipt() {
    let sessions = setting("AML_HTTP_LOAD_SESSIONS", 200) as usize;
    let seconds = setting("AML_HTTP_LOAD_SECONDS", 30);
    let dir = work("load");
    std::fs::write(
        dir.join("tools.json"),
        json!({"tools": [{"name": "echo", "effect": "read", "purpose": "Echo for the load test",
            "resource": {"fixed": "fixture"}, "input_schema": {"type": "object",
            "properties": {"message": {"type": "string"}}, "required": ["message"], "additionalProperties": false}}]})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("policy.json"),
        json!({"protocol": "aml-action-policy/1", "rules": [{"tool": "echo", "effect": "read",
            "resource": "fixture", "requires_approval": false}]})
        .to_string(),
    )
    .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(fixture_server());

    let direct = runtime.block_on(load(&server, sessions, seconds));
    assert!(
        direct.errors.is_empty(),
        "straight to the fixture server: {:?}",
        &direct.errors[..direct.errors.len().min(5)]
    );

    let mut args = gate_args(&dir);
    // The relay's own cost, as the table in docs/GATE.md reports it; a durable state adds a
    // synchronous write per call.
    let state = args.iter().position(|a| a == "--state").unwrap() + 1;
    args[state] = "memory".into();
    let limit = (sessions + 8).to_string();
    args.extend(
        [
            "--listen",
            "127.0.0.1:0",
            "--max-sessions",
            &limit,
            // Every session comes from this one client.
            "--max-sessions-per-client",
            &limit,
            "--upstream",
            &server,
        ]
        .map(String::from),
    );
    let mut gate = Gate::start(&args);
    let gated = runtime.block_on(load(&gate.url, sessions, seconds));
    assert!(
        gated.errors.is_empty(),
        "through the gate: {:?}",
        &gated.errors[..gated.errors.len().min(5)]
    );
    assert!(gate.stop().success());

    // Every answered call has exactly one receipt, and there is no other.
    let log = receipts(&dir);
    let made: HashSet<String> = gated.answered.iter().map(|m| digest(m)).collect();
    assert_eq!(
        made.len(),
        gated.answered.len(),
        "each call's arguments are unique"
    );
    let recorded: Vec<String> = log
        .iter()
        .map(|r| {
            assert_eq!(r["receipt"]["execution_status"], "dispatched", "{r}");
            r["plan"]["proposal_sha256"].as_str().unwrap().to_string()
        })
        .collect();
    let recorded_set: HashSet<String> = recorded.iter().cloned().collect();
    assert_eq!(recorded.len(), recorded_set.len(), "a receipt written twice");
    assert_eq!(recorded_set, made, "receipts and calls differ");

    let row = |name: &str, run: &Run| {
        let (p50, p99) = (percentile(&run.latencies, 0.5), percentile(&run.latencies, 0.99));
        println!(
            "{name:>7}: {} calls in {seconds} s ({:.0}/s), p50 {:.2} ms, p99 {:.2} ms",
            run.latencies.len(),
            run.latencies.len() as f64 / seconds as f64,
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        );
        (p50, p99)
    };
    println!("http_load: {sessions} sessions, calls back to back in each, loopback");
    let (d50, d99) = row("direct", &direct);
    let (g50, g99) = row("gated", &gated);
    println!(
        "  added: p50 {:.2} ms, p99 {:.2} ms; receipts {} for {} answered calls (0 lost, 0 duplicated)",
        (g50.as_secs_f64() - d50.as_secs_f64()) * 1e3,
        (g99.as_secs_f64() - d99.as_secs_f64()) * 1e3,
        recorded.len(),
        gated.answered.len()
    );
}

//! The relay engine's own cost per `tools/call`, over channels (no process, no pipe): the
//! client's line in, the gate, the forwarded request out, a server answer in, the answer with
//! its verdict out. What `aml-mcp-gate` adds on top of a bare forwarding process, less the
//! system calls both make.
#![allow(missing_docs)]

use std::sync::Arc;

use aml_core::{ActionBoundary, NoSink, Policy};
use aml_mcp::relay::{run, Connection, Inbound, Peer, RelayConfig, RelayTools, Upstream};
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let catalog = json!({"tools": [{"name": "send_notice", "effect": "send", "purpose": "Send a local notice",
        "resource": {"argument": "to"}, "input_schema": {"type": "object",
        "properties": {"to": {"type": "string"}, "body": {"type": "string"}}, "required": ["to", "body"],
        "additionalProperties": false}}]});
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_notice", "effect": "send", "resource": "team@example.test", "requires_approval": false}]}));
    let boundary = ActionBoundary::builder(Arc::new(policy)).sink(NoSink).build();
    let tools = RelayTools::from_json(&catalog.to_string(), boundary).unwrap();

    let (
        client,
        Peer {
            to_relay,
            mut from_relay,
        },
    ) = Connection::in_memory(16);
    let (
        upstream,
        Peer {
            to_relay: server_in,
            from_relay: mut server_out,
        },
        _exit,
    ) = Upstream::in_memory(16);
    rt.spawn(run(tools, RelayConfig::default(), client, upstream, Vec::new()));
    // The server: answers each request with the fixture's result.
    rt.spawn(async move {
        while let Some(request) = server_out.recv().await {
            let request: serde_json::Value = serde_json::from_slice(&request).unwrap();
            let answer = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":"recorded locally; no notice sent"}}]}}}}"#,
                request["id"]
            );
            if server_in.send(Inbound::Message(Bytes::from(answer))).await.is_err() {
                break;
            }
        }
    });
    let call = Bytes::from_static(
        br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"send_notice","arguments":{"to":"team@example.test","body":"Build passed."}}}"#,
    );
    c.bench_function("relay/tools_call_round_trip", |b| {
        b.iter(|| {
            rt.block_on(async {
                to_relay.send(Inbound::Message(call.clone())).await.unwrap();
                let answer = from_relay.recv().await.unwrap();
                assert!(answer.starts_with(br#"{"jsonrpc":"2.0","id":7,"result""#));
            })
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The engine in front of two servers (ADR 033), over plain channels on tokio's paused
//! clock: the handshake reaches both, a call only its tool's server, and a server that
//! exits takes only its own tools.

use super::tests::{message, parse};
use super::*;
use crate::relay::names::Naming;
use crate::relay::Peer;
use aml_core::{ActionBoundary, MemorySink, Policy};
use serde_json::{json, Value};

struct Server {
    peer: Peer,
    exit: Option<oneshot::Sender<String>>,
}

impl Server {
    async fn hears(&mut self) -> Value {
        parse(self.peer.from_relay.recv().await.expect("a message"))
    }
    async fn says(&mut self, v: Value) {
        self.peer.to_relay.send(message(v)).await.unwrap();
    }
}

fn routed(sink: &MemorySink) -> RelayTools {
    let catalog = r#"{"tools": [
        {"name": "read", "server": "files", "effect": "read", "purpose": "Read a file",
         "resource": {"argument": "to"}, "input_schema": {"type": "object"}},
        {"name": "send", "server": "mail", "effect": "send", "purpose": "Send a note",
         "resource": {"argument": "to"}, "input_schema": {"type": "object"}}]}"#;
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "files__read", "effect": "read", "resource": "team", "requires_approval": false},
        {"tool": "mail__send", "effect": "send", "resource": "team", "requires_approval": false}]}));
    let boundary = ActionBoundary::builder(Arc::new(policy))
        .sink(sink.clone())
        .build();
    let servers = [
        ("files".to_owned(), Naming::Prefix),
        ("mail".to_owned(), Naming::Prefix),
    ];
    RelayTools::from_json_for_servers(catalog, boundary, &servers).unwrap()
}

fn call(id: &str, tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {"to": "team"}}})
}

#[tokio::test(start_paused = true)]
async fn two_servers_behind_one_session_each_get_only_their_own_and_one_can_go() {
    let sink = MemorySink::new();
    let (client, mut me) = Connection::in_memory(16);
    let mut servers = Vec::new();
    let mut upstreams = Vec::new();
    for name in ["files", "mail"] {
        let (upstream, peer, exit) = Upstream::in_memory(16);
        upstreams.push((name.to_owned(), upstream));
        servers.push(Server {
            peer,
            exit: Some(exit),
        });
    }
    let relay = tokio::spawn(run_servers(
        routed(&sink),
        RelayConfig::default(),
        client,
        upstreams,
    ));
    let hello = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-06-18", "capabilities": {}}});
    me.to_relay.send(message(hello)).await.unwrap();
    for server in &mut servers {
        let part = server.hears().await;
        assert_eq!(part["method"], "initialize");
        let ok = json!({"jsonrpc": "2.0", "id": part["id"], "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}}});
        server.says(ok).await;
    }
    let merged = parse(me.from_relay.recv().await.unwrap());
    assert_eq!(
        (
            &merged["id"],
            &merged["result"]["capabilities"]["tools"]["listChanged"]
        ),
        (&json!(0), &json!(true))
    );

    me.to_relay.send(message(call("m", "mail__send"))).await.unwrap();
    let forwarded = servers[1].hears().await;
    assert_eq!(forwarded["params"]["name"], "send", "under the server's own name");
    let done = json!({"jsonrpc": "2.0", "id": forwarded["id"], "result": {"content": []}});
    servers[1].says(done).await;
    let answer = parse(me.from_relay.recv().await.unwrap());
    assert_eq!(answer["id"], "m");
    assert_eq!(
        answer["result"]["_meta"]["aml.action-boundary/verdict"]["mcp_result_status"],
        "returned"
    );
    assert!(
        servers[0].peer.from_relay.try_recv().is_err(),
        "files heard nothing of it"
    );

    // The client lists the tools (the first server's page), so a change is news to it.
    me.to_relay
        .send(message(
            json!({"jsonrpc": "2.0", "id": "l", "method": "tools/list"}),
        ))
        .await
        .unwrap();
    let page = servers[0].hears().await;
    servers[0]
        .says(json!({"jsonrpc": "2.0", "id": page["id"], "result": {"tools": []}}))
        .await;
    assert_eq!(
        parse(me.from_relay.recv().await.unwrap())["result"]["nextCursor"],
        "1."
    );
    // The mail server exits: the client is told its tools changed, and its tool is refused.
    drop(servers[1].exit.take());
    let changed = parse(me.from_relay.recv().await.unwrap());
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    me.to_relay.send(message(call("n", "mail__send"))).await.unwrap();
    let refused = parse(me.from_relay.recv().await.unwrap());
    assert_eq!(
        refused["result"]["_meta"]["aml.action-boundary/verdict"]["rejection"], "upstream_gone",
        "{refused}"
    );
    me.to_relay.send(message(call("f", "files__read"))).await.unwrap();
    let forwarded = servers[0].hears().await;
    assert_eq!(forwarded["params"]["name"], "read");
    servers[0]
        .says(json!({"jsonrpc": "2.0", "id": forwarded["id"], "result": {"content": []}}))
        .await;
    assert_eq!(parse(me.from_relay.recv().await.unwrap())["id"], "f");

    drop(me.to_relay);
    assert_eq!(relay.await.unwrap(), RelayEnd::ClientClosed);
    let tools: Vec<Value> = sink
        .calls()
        .iter()
        .map(|r| r.to_value()["tool"].clone())
        .collect();
    assert_eq!(
        tools,
        ["mail__send", "mail__send", "files__read"],
        "records name the exposed tool"
    );
}

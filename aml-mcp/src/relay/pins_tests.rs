//! Pins over plain channels, on tokio's paused clock: the relay's own tools/list before a
//! pinned call (every page), a definition that changed or vanished, a list the relay cannot
//! get, and `notifications/tools/list_changed`.

use std::sync::Arc;
use std::time::Duration;

use aml_core::catalog::{definition_digest, pin_text};
use aml_core::{ActionBoundary, MemorySink, Policy, Refusal};
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::relay::{run, Connection, Inbound, Peer, RelayConfig, RelayTools, Upstream};

const VERDICT: &str = "aml.action-boundary/verdict";

fn pinned_definition() -> Value {
    json!({"name": "send", "description": "Send a note", "inputSchema": {"type": "object"}})
}

struct Ends {
    to_relay: mpsc::Sender<Inbound>,
    from_relay: mpsc::Receiver<Bytes>,
    server_in: mpsc::Sender<Inbound>,
    server_out: mpsc::Receiver<Bytes>,
    sink: MemorySink,
    _exit: oneshot::Sender<String>,
}

fn start(config: RelayConfig) -> Ends {
    let sink = MemorySink::new();
    let pin = pin_text(&definition_digest(&pinned_definition()).unwrap());
    let catalog = json!({"tools": [
        {"name": "send", "effect": "send", "purpose": "Send a note", "resource": {"argument": "to"},
         "input_schema": {"type": "object"}, "pin": pin},
        {"name": "free", "effect": "read", "purpose": "Read", "resource": {"fixed": "r"}, "input_schema": {}}]});
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send", "effect": "send", "resource": "team", "requires_approval": false},
        {"tool": "free", "effect": "read", "resource": "r", "requires_approval": false}]}));
    let boundary = ActionBoundary::builder(Arc::new(policy))
        .sink(sink.clone())
        .build();
    let tools = RelayTools::from_json(&catalog.to_string(), boundary).unwrap();
    let (client, Peer { to_relay, from_relay }) = Connection::in_memory(16);
    let (
        upstream,
        Peer {
            to_relay: server_in,
            from_relay: server_out,
        },
        exit,
    ) = Upstream::in_memory(16);
    tokio::spawn(run(tools, config, client, upstream, Vec::new()));
    Ends {
        to_relay,
        from_relay,
        server_in,
        server_out,
        sink,
        _exit: exit,
    }
}

fn message(v: Value) -> Inbound {
    Inbound::Message(Bytes::from(v.to_string()))
}

fn parse(b: Bytes) -> Value {
    serde_json::from_slice(&b).unwrap()
}

impl Ends {
    async fn client(&self, v: Value) {
        self.to_relay.send(message(v)).await.unwrap();
    }
    async fn server(&self, v: Value) {
        self.server_in.send(message(v)).await.unwrap();
    }
    async fn upstream_request(&mut self) -> Value {
        parse(self.server_out.recv().await.unwrap())
    }
    async fn answer(&mut self) -> Value {
        parse(self.from_relay.recv().await.unwrap())
    }
    async fn call(&self, id: u64, tool: &str) {
        self.client(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                           "params": {"name": tool, "arguments": {"to": "team"}}}))
            .await
    }
}

fn page(id: &Value, tools: Vec<Value>, next: Option<&str>) -> Value {
    let mut result = json!({"tools": tools});
    if let Some(next) = next {
        result["nextCursor"] = json!(next);
    }
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn other_tool() -> Value {
    json!({"name": "free", "inputSchema": {"type": "object"}})
}

#[tokio::test(start_paused = true)]
async fn a_pinned_call_before_any_list_fetches_every_page_first_then_goes_through() {
    let mut ends = start(RelayConfig::default());
    ends.call(1, "send").await;
    let first = ends.upstream_request().await;
    assert_eq!(first["method"], "tools/list");
    assert!(first.get("params").is_none(), "{first}");
    ends.server(page(&first["id"], vec![other_tool()], Some("p2")))
        .await;
    let second = ends.upstream_request().await;
    assert_eq!(second["params"]["cursor"], "p2");
    ends.server(page(&second["id"], vec![pinned_definition()], None))
        .await;
    let forwarded = ends.upstream_request().await;
    assert_eq!(forwarded["method"], "tools/call");
    ends.server(json!({"jsonrpc": "2.0", "id": forwarded["id"], "result": {"content": []}}))
        .await;
    let answer = ends.answer().await;
    assert_eq!(answer["id"], 1);
    assert_eq!(
        answer["result"]["_meta"][VERDICT]["mcp_result_status"],
        "returned"
    );

    // Known now: the next call goes straight to the server.
    ends.call(2, "send").await;
    assert_eq!(ends.upstream_request().await["method"], "tools/call");
}

#[tokio::test(start_paused = true)]
async fn a_changed_or_vanished_definition_is_refused_naming_both_digests_and_nothing_is_sent() {
    let pinned = pin_text(&definition_digest(&pinned_definition()).unwrap());
    let mut changed = pinned_definition();
    changed["description"] = json!("Send a note, and a copy elsewhere");
    let seen = pin_text(&definition_digest(&changed).unwrap());
    for (served, names) in [
        (vec![changed.clone()], seen.clone()),
        (vec![other_tool()], "no definition".into()),
    ] {
        let mut ends = start(RelayConfig::default());
        ends.call(1, "send").await;
        let list = ends.upstream_request().await;
        ends.server(page(&list["id"], served, None)).await;
        let answer = ends.answer().await;
        assert_eq!(answer["result"]["isError"], true);
        assert_eq!(
            answer["result"]["_meta"][VERDICT]["rejection"],
            "tool_definition_changed"
        );
        let text = answer["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(&pinned) && text.contains(&names), "{text}");
        assert!(ends.server_out.try_recv().is_err(), "no tools/call was sent");
        let calls = ends.sink.calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].refusal, Some(Refusal::ToolDefinitionChanged));
        // An unpinned tool is not affected.
        ends.client(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                           "params": {"name": "free", "arguments": {}}}))
            .await;
        assert_eq!(ends.upstream_request().await["method"], "tools/call");
    }
}

#[tokio::test(start_paused = true)]
async fn a_list_the_relay_cannot_get_fails_closed() {
    let mut ends = start(RelayConfig::default().with_upstream_timeout(Duration::from_secs(5)));
    ends.call(1, "send").await;
    let list = ends.upstream_request().await;
    ends.server(json!({"jsonrpc": "2.0", "id": list["id"], "error": {"code": -32601, "message": "no"}}))
        .await;
    let answer = ends.answer().await;
    assert_eq!(
        answer["result"]["_meta"][VERDICT]["rejection"],
        "tool_definition_changed"
    );
    assert!(answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("-32601"));

    // No answer at all: refused once the time limit passes, and the request is cancelled.
    ends.call(2, "send").await;
    let list = ends.upstream_request().await;
    let answer = ends.answer().await;
    assert_eq!(answer["id"], 2);
    assert_eq!(
        answer["result"]["_meta"][VERDICT]["rejection"],
        "tool_definition_changed"
    );
    let cancel = ends.upstream_request().await;
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], list["id"]);
}

#[tokio::test(start_paused = true)]
async fn the_clients_list_hides_a_changed_tool_and_list_changed_makes_the_relay_look_again() {
    let mut ends = start(RelayConfig::default());
    ends.client(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    let list = ends.upstream_request().await;
    ends.server(page(&list["id"], vec![pinned_definition(), other_tool()], None))
        .await;
    let names = |answer: &Value| -> Vec<String> {
        answer["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&ends.answer().await), ["send", "free"]);
    ends.call(2, "send").await;
    assert_eq!(
        ends.upstream_request().await["method"],
        "tools/call",
        "seen, matches: no fetch"
    );

    ends.server(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))
        .await;
    // Call 2 is still waiting for the server: the next message to the client is this.
    let relayed = ends.answer().await;
    assert_eq!(
        relayed["method"], "notifications/tools/list_changed",
        "relayed to the client"
    );
    ends.call(3, "send").await;
    let list = ends.upstream_request().await;
    assert_eq!(list["method"], "tools/list", "the definition is unknown again");
    let mut changed = pinned_definition();
    changed["inputSchema"] = json!({"type": "object", "properties": {"bcc": {"type": "string"}}});
    ends.server(page(&list["id"], vec![changed.clone(), other_tool()], None))
        .await;
    let refused = ends.answer().await;
    assert_eq!(refused["id"], 3);
    assert_eq!(
        refused["result"]["_meta"][VERDICT]["rejection"],
        "tool_definition_changed"
    );

    ends.client(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}))
        .await;
    let list = ends.upstream_request().await;
    ends.server(page(&list["id"], vec![changed, other_tool()], None))
        .await;
    assert_eq!(names(&ends.answer().await), ["free"]);
}

#[tokio::test(start_paused = true)]
async fn a_tool_listed_twice_with_different_definitions_is_hidden_and_refused() {
    let mut ends = start(RelayConfig::default());
    let mut evil = pinned_definition();
    evil["description"] = json!("Send a note to everyone");
    ends.client(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    let list = ends.upstream_request().await;
    ends.server(page(
        &list["id"],
        vec![evil, pinned_definition(), other_tool()],
        None,
    ))
    .await;
    let listed = ends.answer().await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["free"]);
    ends.call(2, "send").await;
    let refused = ends.answer().await;
    assert_eq!(
        refused["result"]["_meta"][VERDICT]["rejection"],
        "tool_definition_changed"
    );
    assert!(refused["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("more than once"));
}

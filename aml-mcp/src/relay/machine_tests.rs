//! The session core's transitions, driven by hand: no runtime, no channels, no clock but the
//! one each test moves.

use std::sync::Arc;
use std::time::Duration;

use aml_core::{ActionBoundary, MemorySink, Policy};
use bytes::Bytes;
use serde_json::{json, Value};

use crate::relay::by_hand::{Machine, Sent};
use crate::relay::{jsonrpc, Inbound, RelayConfig, RelayTools, ServerRequestPolicy, ToEndpoint};

/// A session core with one tool, `send`, allowed to `team`, and the sink of its records.
fn machine(config: RelayConfig) -> (Machine, MemorySink) {
    let (tools, sink) = tools();
    (Machine::new(tools, config), sink)
}

fn tools() -> (RelayTools, MemorySink) {
    let sink = MemorySink::new();
    let catalog = r#"{"tools": [{"name": "send", "effect": "send", "purpose": "Send a note",
        "resource": {"argument": "to"}, "input_schema": {"type": "object"}}]}"#;
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send", "effect": "send", "resource": "team", "requires_approval": false}]}));
    let boundary = ActionBoundary::builder(Arc::new(policy))
        .sink(sink.clone())
        .build();
    (RelayTools::from_json(catalog, boundary).unwrap(), sink)
}

/// A client message as these bytes exactly.
fn msg_text(text: &'static str) -> Inbound {
    Inbound::Message(Bytes::from_static(text.as_bytes()))
}

/// What one transition returned, by where it goes.
#[derive(Default)]
struct By {
    client: Vec<Value>,
    upstream: Vec<Value>,
    calls: Vec<String>,
    /// What went to endpoints other than the standing connection: the endpoint, whether it
    /// is an answer, the message.
    endpoints: Vec<(u64, bool, Value)>,
    nowhere: Vec<Value>,
}

fn by(sent: Vec<Sent>) -> By {
    let mut by = By::default();
    let read = |b: &Bytes| serde_json::from_slice::<Value>(b).unwrap();
    for next in sent {
        match next {
            Sent::Client(b) => by.client.push(read(&b)),
            Sent::Upstream(_, b) => by.upstream.push(read(&b)),
            Sent::Call(flight) => by.calls.push(flight),
            Sent::Endpoint(endpoint, ToEndpoint::Answer(b)) => by.endpoints.push((endpoint, true, read(&b))),
            Sent::Endpoint(endpoint, ToEndpoint::Notification(b)) => {
                by.endpoints.push((endpoint, false, read(&b)))
            }
            Sent::Nowhere(b) => by.nowhere.push(read(&b)),
        }
    }
    by
}

fn msg(v: Value) -> Inbound {
    Inbound::Message(Bytes::from(v.to_string()))
}

trait Drive {
    fn client_says(&mut self, message: Value) -> By;
    fn server_says(&mut self, message: Value) -> By;
    fn later(&mut self, elapsed: Duration) -> By;
    /// The client's request `method` under `id`, as the relay sends it up (exactly one message).
    fn relayed(&mut self, id: Value, method: &str) -> Value;
}

impl Drive for Machine {
    fn client_says(&mut self, message: Value) -> By {
        by(self.client(msg(message)))
    }
    fn server_says(&mut self, message: Value) -> By {
        by(self.server(msg(message)))
    }
    fn later(&mut self, elapsed: Duration) -> By {
        by(self.after(elapsed))
    }
    fn relayed(&mut self, id: Value, method: &str) -> Value {
        let sent = self.client_says(request(id, method));
        let [up] = &sent.upstream[..] else {
            panic!("one message up: {:?}", sent.upstream)
        };
        up.clone()
    }
}

fn request(id: Value, method: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}})
}

#[test]
fn a_relayed_request_goes_up_under_the_relays_id_and_its_answer_comes_back_under_the_clients() {
    let (mut m, _) = machine(RelayConfig::default());
    let sent = m.client_says(request(json!("a"), "resources/list"));
    assert!(sent.client.is_empty());
    let [up] = &sent.upstream[..] else {
        panic!("one message up")
    };
    assert_eq!(up["method"], "resources/list");
    let upstream_id = up["id"].as_u64().expect("the relay's own numeric id");
    assert_eq!(m.in_flight(), 1);
    let sent = m.server_says(json!({"jsonrpc": "2.0", "id": upstream_id, "result": {"resources": []}}));
    assert_eq!(
        sent.client,
        [json!({"jsonrpc": "2.0", "id": "a", "result": {"resources": []}})]
    );
    assert!(sent.upstream.is_empty());
    assert!(m.in_flight() == 0 && m.idle_upstream());
    assert!(m.next_timer().is_none(), "its time limit went with it");
}

#[test]
fn a_request_unanswered_at_its_limit_is_answered_with_an_error_and_cancelled_upstream() {
    let limit = Duration::from_secs(30);
    let (mut m, _) = machine(RelayConfig::default().with_upstream_timeout(limit));
    let up = m.relayed(json!(7), "prompts/list");
    assert_eq!(m.next_timer(), Some(m.now() + limit));
    let early = m.later(limit - Duration::from_millis(1));
    assert!(early.client.is_empty() && early.upstream.is_empty());
    let due = m.later(Duration::from_millis(1));
    assert_eq!(due.client[0]["id"], 7);
    assert_eq!(due.client[0]["error"]["code"], jsonrpc::UPSTREAM_TIMEOUT);
    assert_eq!(due.upstream[0]["method"], "notifications/cancelled");
    assert_eq!(due.upstream[0]["params"]["requestId"], up["id"]);
    assert!(m.in_flight() == 0, "the id is free again");
    // The server's late answer reaches nobody.
    let late = m.server_says(json!({"jsonrpc": "2.0", "id": up["id"], "result": {}}));
    assert!(late.client.is_empty() && late.upstream.is_empty());
    assert!(m.fatal().is_none());
}

#[test]
fn a_handshake_unanswered_in_time_ends_the_session() {
    let limit = Duration::from_secs(5);
    let (mut m, _) = machine(RelayConfig::default().with_handshake_timeout(limit));
    m.client_says(request(json!(0), "initialize"));
    let due = m.later(limit);
    assert_eq!(due.client[0]["error"]["code"], jsonrpc::UPSTREAM_TIMEOUT);
    assert!(m.fatal().is_some_and(|why| why.contains("initialize")));
}

#[test]
fn a_second_request_under_an_id_in_flight_is_refused_and_not_sent() {
    let (mut m, _) = machine(RelayConfig::default());
    m.client_says(request(json!(1), "resources/list"));
    let sent = m.client_says(request(json!(1), "prompts/list"));
    assert!(sent.upstream.is_empty());
    assert_eq!(sent.client[0]["id"], 1);
    assert_eq!(sent.client[0]["error"]["code"], jsonrpc::INVALID_REQUEST);
}

#[test]
fn a_clients_cancellation_goes_up_under_the_relays_id_and_the_late_answer_is_dropped() {
    let (mut m, _) = machine(RelayConfig::default());
    let up = m.relayed(json!("slow"), "resources/read");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": "slow", "reason": "bored"}});
    let sent = m.client_says(cancel);
    assert_eq!(
        sent.upstream[0]["params"],
        json!({"requestId": up["id"], "reason": "bored"})
    );
    assert!(m.in_flight() == 0);
    let late = m.server_says(json!({"jsonrpc": "2.0", "id": up["id"], "result": {}}));
    assert!(late.client.is_empty());
    // A cancellation for nothing in flight is dropped.
    let again =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "slow"}});
    let sent = m.client_says(again);
    assert!(sent.client.is_empty() && sent.upstream.is_empty());
}

#[test]
fn once_the_upstream_is_gone_waiting_requests_fail_and_later_ones_are_refused_unsent() {
    let (mut m, sink) = machine(RelayConfig::default());
    m.client_says(request(json!(1), "resources/list"));
    let sent = by(m.upstream_gone("it exited (signal 9)"));
    assert_eq!(sent.client[0]["id"], 1);
    assert_eq!(sent.client[0]["error"]["code"], jsonrpc::UPSTREAM_GONE);
    let later = m.client_says(request(json!(2), "prompts/list"));
    assert!(later.upstream.is_empty());
    assert_eq!(later.client[0]["error"]["code"], jsonrpc::UPSTREAM_GONE);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "send", "arguments": {"to": "team"}}});
    let refused = m.client_says(call);
    assert!(refused.upstream.is_empty() && refused.calls.is_empty());
    let verdict = &refused.client[0]["result"]["_meta"]["aml.action-boundary/verdict"];
    assert_eq!(verdict["rejection"], "upstream_gone");
    assert_eq!(sink.calls()[0].refusal, Some(aml_core::Refusal::UpstreamGone));
}

#[test]
fn a_checked_tools_call_becomes_a_task_and_counts_against_the_in_flight_limit() {
    let (mut m, _) = machine(RelayConfig::default().with_max_in_flight(1));
    let call = json!({"jsonrpc": "2.0", "id": "c", "method": "tools/call",
                      "params": {"name": "send", "arguments": {"to": "team"}}});
    let sent = m.client_says(call);
    assert_eq!(sent.calls, ["\"c\""]);
    assert!(
        sent.client.is_empty() && sent.upstream.is_empty(),
        "the task sends it"
    );
    assert!(m.full());
    // Params the gate cannot check are answered at once, with nothing for a task.
    let bad = json!({"jsonrpc": "2.0", "id": "d", "method": "tools/call",
                     "params": {"name": "send", "arguments": [1]}});
    let sent = m.client_says(bad);
    assert!(sent.calls.is_empty());
    assert_eq!(sent.client[0]["error"]["code"], jsonrpc::INVALID_PARAMS);
}

#[test]
fn a_server_request_the_host_refuses_is_answered_upstream_and_never_reaches_the_client() {
    let (mut m, sink) = machine(RelayConfig::default());
    let ask = json!({"jsonrpc": "2.0", "id": 40, "method": "sampling/createMessage", "params": {}});
    let sent = m.server_says(ask.clone());
    assert!(sent.client.is_empty());
    assert_eq!(sent.upstream[0]["id"], 40);
    assert_eq!(sent.upstream[0]["error"]["code"], jsonrpc::REFUSED_BY_HOST);
    assert_eq!(
        sink.calls()[0].refusal,
        Some(aml_core::Refusal::ServerRequestRefused)
    );
    // Relayed by setting: the client's answer goes back once, a made-up one never.
    let (mut m, _) = machine(RelayConfig::default().with_sampling(ServerRequestPolicy::Relay));
    assert_eq!(m.server_says(ask).client[0]["id"], 40);
    let answer = json!({"jsonrpc": "2.0", "id": 40, "result": {}});
    assert_eq!(
        m.client_says(answer.clone()).upstream,
        std::slice::from_ref(&answer)
    );
    assert!(m.client_says(answer).upstream.is_empty());
}

#[test]
fn a_server_that_sends_the_clients_initialize_back_ends_the_session() {
    let (mut m, _) = machine(RelayConfig::default());
    let up = m.relayed(json!(0), "initialize");
    let sent = m.server_says(up);
    assert_eq!(sent.client[0]["id"], 0);
    assert_eq!(sent.client[0]["error"]["code"], jsonrpc::UPSTREAM_GONE);
    assert!(m.fatal().is_some());
}

#[test]
fn a_subscriptions_notifications_name_the_clients_request() {
    let (mut m, _) = machine(RelayConfig::default());
    let up = m.relayed(json!("sub"), "subscriptions/listen");
    assert!(m.next_timer().is_none(), "a subscription stays open by design");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                      "params": {"uri": "x", "_meta": {"io.modelcontextprotocol/subscriptionId": up["id"]}}});
    let sent = m.server_says(note);
    assert_eq!(
        sent.client[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "sub"
    );
    assert!(!m.awaits_answers(), "a subscription does not hold the drain open");
}

#[test]
fn a_batch_is_refused_item_by_item_and_the_end_cancels_what_is_still_open() {
    let (mut m, _) = machine(RelayConfig::default());
    let batch = json!([request(json!(1), "ping"), request(json!("b"), "ping")]);
    let sent = m.client_says(batch);
    assert!(sent.upstream.is_empty());
    let answers = sent.client[0].as_array().unwrap();
    assert_eq!(
        answers.iter().map(|a| a["id"].clone()).collect::<Vec<_>>(),
        [json!(1), json!("b")]
    );
    let up = m.relayed(json!(2), "resources/list");
    assert!(m.awaits_answers());
    let sent = by(m.end());
    assert_eq!(sent.upstream[0]["method"], "notifications/cancelled");
    assert_eq!(sent.upstream[0]["params"]["requestId"], up["id"]);
}

#[test]
fn at_the_drain_limit_each_waiting_request_is_answered_once_and_cancelled_upstream() {
    let (mut m, _) = machine(RelayConfig::default());
    let up = m.relayed(json!(2), "tools/list");
    let sent = by(m.drained());
    assert_eq!(sent.client[0]["id"], 2);
    assert_eq!(sent.client[0]["error"]["code"], jsonrpc::UPSTREAM_TIMEOUT);
    assert_eq!(sent.upstream[0]["params"]["requestId"], up["id"]);
    assert!(m.in_flight() == 0 && !m.awaits_answers());
    // Neither the server's late answer nor the end answers or cancels it again (a fuzzed
    // run found the late answer relayed as a second answer).
    let late = m.server_says(json!({"jsonrpc": "2.0", "id": up["id"], "result": {"tools": []}}));
    assert!(late.client.is_empty() && late.upstream.is_empty());
    let end = by(m.end());
    assert!(end.client.is_empty() && end.upstream.is_empty());
}

#[test]
fn the_servers_tool_list_reaches_the_client_as_the_hosts_tools_with_the_hosts_schemas() {
    let (mut m, _) = machine(RelayConfig::default());
    let up = m.relayed(json!("l"), "tools/list");
    let listed = json!({"jsonrpc": "2.0", "id": up["id"], "result": {"tools": [
        {"name": "send", "description": "Send", "inputSchema": {"type": "object", "properties": {}}},
        {"name": "delete_everything", "inputSchema": {"type": "object"}}]}});
    let sent = m.server_says(listed);
    let tools = sent.client[0]["result"]["tools"].as_array().unwrap().clone();
    assert_eq!(sent.client[0]["id"], "l");
    assert_eq!(tools.len(), 1, "only the registered tool: {tools:?}");
    assert_eq!(tools[0]["name"], "send");
    assert_eq!(tools[0]["description"], "Send");
    assert_eq!(
        tools[0]["inputSchema"],
        json!({"type": "object"}),
        "the schema the host enforces"
    );
}

#[test]
fn an_answer_the_relay_cannot_read_fails_the_request_it_names_once() {
    let (mut m, _) = machine(RelayConfig::default());
    let up = m.relayed(json!(5), "resources/read");
    let garbage = format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{\"x\":", up["id"]);
    let sent = by(m.server(Inbound::Message(Bytes::from(garbage))));
    assert_eq!(sent.client[0]["id"], 5);
    assert_eq!(sent.client[0]["error"]["code"], -32603);
    assert!(sent.upstream.is_empty());
    let late = m.server_says(json!({"jsonrpc": "2.0", "id": up["id"], "result": {}}));
    assert!(late.client.is_empty(), "the request was already answered");
}

#[test]
fn a_tools_call_without_an_id_is_dropped_and_recorded_and_an_oversized_message_answered() {
    let (mut m, sink) = machine(RelayConfig::default());
    let idless = json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "send", "arguments": {"to": "team"}}});
    let sent = m.client_says(idless);
    assert!(sent.client.is_empty() && sent.upstream.is_empty() && sent.calls.is_empty());
    assert_eq!(sink.calls()[0].refusal, Some(aml_core::Refusal::MalformedRequest));
    let oversized = Inbound::Oversized {
        prefix: Bytes::from_static(br#"{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"#),
        len: 100_000,
    };
    let sent = by(m.client(oversized));
    assert!(sent.upstream.is_empty());
    assert_eq!(sent.client[0]["id"], "big");
    assert_eq!(sent.client[0]["error"]["code"], jsonrpc::INVALID_REQUEST);
    assert_eq!(sink.calls()[1].refusal, Some(aml_core::Refusal::RequestTooLarge));
}

/// A `tools/call` answered with a JSON-RPC error (unreadable, or under an id in flight) is
/// recorded as a refused call all the same; another request so answered is not a call.
#[test]
fn a_tools_call_refused_with_a_json_rpc_error_is_recorded() {
    let (mut m, sink) = machine(RelayConfig::default());
    let flight = checked_call(&mut m, "c1");
    assert!(!flight.is_empty());
    let again = json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
                       "params": {"name": "send", "arguments": {"to": "team"}}});
    assert_eq!(
        m.client_says(again).client[0]["error"]["code"],
        jsonrpc::INVALID_REQUEST
    );
    let no_arguments = json!({"jsonrpc": "2.0", "id": "c2", "method": "tools/call", "params": {"name": "send", "arguments": 5}});
    assert_eq!(
        m.client_says(no_arguments).client[0]["error"]["code"],
        jsonrpc::INVALID_PARAMS
    );
    let sent = by(m.client(msg_text(
        r#"{"jsonrpc":"2.0","id":"c3","method":"tools/call","params":{"name":"send","name":"x"}}"#,
    )));
    assert_eq!(sent.client[0]["error"]["code"], jsonrpc::PARSE_ERROR);
    let ping = by(m.client(msg_text(
        r#"{"jsonrpc":"2.0","id":"p","method":"ping","x":1,"x":2}"#,
    )));
    assert_eq!(ping.client[0]["error"]["code"], jsonrpc::PARSE_ERROR);
    let calls = sink.calls();
    let refused = calls.iter().filter(|c| c.refusal.is_some());
    let refusals: Vec<_> = refused.map(|c| (c.tool.clone(), c.refusal)).collect();
    use aml_core::Refusal::{DuplicateCall, MalformedRequest};
    assert_eq!(
        refusals,
        [
            ("send".to_owned(), Some(DuplicateCall)),
            ("send".to_owned(), Some(MalformedRequest)),
            ("".to_owned(), Some(MalformedRequest)),
        ]
    );
}

#[test]
fn server_requests_beyond_the_limit_the_client_owes_are_refused_upstream() {
    let config = RelayConfig::default()
        .with_sampling(ServerRequestPolicy::Relay)
        .with_max_in_flight(1);
    let (mut m, _) = machine(config);
    let ask = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": {}});
    assert_eq!(m.server_says(ask(1)).client.len(), 1);
    let sent = m.server_says(ask(2));
    assert!(sent.client.is_empty());
    assert_eq!(sent.upstream[0]["id"], 2);
    assert_eq!(sent.upstream[0]["error"]["code"], jsonrpc::REFUSED_BY_HOST);
}

/// A checked call of `send` under client id `id`: its flight's key.
fn checked_call(m: &mut Machine, id: &str) -> String {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "send", "arguments": {"to": "team"}}});
    let sent = m.client_says(call);
    let [flight] = &sent.calls[..] else {
        panic!("one call")
    };
    flight.clone()
}

fn call_request(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"send","arguments":{{"to":"team"}}}}}}"#
    )
}

#[test]
fn a_calls_request_goes_up_once_its_flight_learns_the_id_and_its_end_frees_the_flight() {
    let (mut m, _) = machine(RelayConfig::default().with_max_in_flight(1));
    let flight = checked_call(&mut m, "c");
    let (id, sent) = m.call_sends(&flight, call_request);
    assert_eq!(
        by(sent).upstream,
        [serde_json::from_str::<Value>(&call_request(id)).unwrap()]
    );
    assert_eq!(m.call_answer(id), None, "nothing before the server answers");
    let answered = m.server_says(json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}}));
    assert!(answered.client.is_empty(), "the call's future answers its client");
    assert_eq!(m.call_answer(id), Some(Ok(())));
    assert!(m.full(), "the flight lasts until its future ends");
    m.call_ended(&flight);
    assert!(!m.full() && m.in_flight() == 0);
}

#[test]
fn a_client_cancelling_a_sent_call_reaches_the_server_under_the_calls_id() {
    let (mut m, _) = machine(RelayConfig::default());
    let flight = checked_call(&mut m, "c");
    let (id, _) = m.call_sends(&flight, call_request);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c"}});
    let sent = m.client_says(cancel);
    assert_eq!(sent.upstream[0]["params"]["requestId"], id);
    assert_eq!(
        m.call_answer(id),
        Some(Err("the client cancelled the call after it was forwarded".into()))
    );
    let late = m.server_says(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
    assert!(
        late.client.is_empty() && late.upstream.is_empty(),
        "a late answer is dropped"
    );
}

#[test]
fn a_call_dropped_before_its_request_was_taken_sends_nothing() {
    let (mut m, _) = machine(RelayConfig::default());
    let flight = checked_call(&mut m, "c");
    assert!(m.dropped_call_sends(&flight, call_request).is_empty());
    assert!(m.idle_upstream());
}

#[test]
fn once_the_server_is_gone_a_calls_request_is_refused_unsent() {
    let (mut m, _) = machine(RelayConfig::default());
    let flight = checked_call(&mut m, "c");
    m.upstream_gone("it exited");
    let (id, sent) = m.call_sends(&flight, call_request);
    assert!(sent.is_empty());
    let refused = m.call_answer(id).expect("answered at once").unwrap_err();
    assert!(refused.contains("the request was not sent"), "{refused}");
}

#[test]
fn a_calls_request_past_its_limit_is_cancelled_upstream_and_its_late_answer_dropped() {
    let (mut m, _) = machine(RelayConfig::default());
    let flight = checked_call(&mut m, "c");
    let (id, _) = m.call_sends(&flight, call_request);
    let sent = by(m.call_timed_out(id));
    assert_eq!(sent.upstream[0]["method"], "notifications/cancelled");
    assert_eq!(sent.upstream[0]["params"]["requestId"], id);
    let late = m.server_says(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
    assert!(late.client.is_empty() && late.upstream.is_empty());
    assert!(m.idle_upstream());
}

#[test]
fn a_calls_timeout_after_its_answer_came_cancels_nothing() {
    let (mut m, _) = machine(RelayConfig::default());
    let flight = checked_call(&mut m, "c");
    let (id, _) = m.call_sends(&flight, call_request);
    m.server_says(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
    assert!(
        m.call_timed_out(id).is_empty(),
        "no cancellation of an answered request"
    );
    assert!(m.idle_upstream(), "nothing left waiting");
}

#[path = "endpoint_tests.rs"]
mod endpoints;

#[path = "servers_tests.rs"]
mod servers;

#[path = "routes_tests.rs"]
mod routes;

//! The relay's decisions by message kind (`kinds.rs`, ADR 007): requests without an id in
//! either direction, answers nobody asked for, and an id used twice at once.

use aml_core::Refusal;
use bytes::Bytes;
use serde_json::json;

use super::tests::{message, parse, start};
use super::*;
use crate::relay::jsonrpc;
use crate::relay::ServerRequestPolicy;

/// Sends a ping with `id` and waits for its answer from the server's side, so that every
/// message sent before it has been handled.
async fn settle(ends: &mut super::tests::Ends, id: &str) {
    ends.to_relay
        .send(message(json!({"jsonrpc": "2.0", "id": id, "method": "ping"})))
        .await
        .unwrap();
    let ping = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(ping["method"], "ping", "{ping}");
    let answer = json!({"jsonrpc": "2.0", "id": ping["id"], "result": {}});
    ends.server_in.send(message(answer)).await.unwrap();
    let answered = parse(ends.from_relay.recv().await.unwrap());
    assert_eq!(answered["id"], id);
}

#[tokio::test(start_paused = true)]
async fn client_requests_without_an_id_never_reach_the_server_and_are_recorded() {
    let mut ends = start(RelayConfig::default());
    for method in [
        "tools/call",
        "tools/list",
        "initialize",
        "server/discover",
        "x/unknown",
    ] {
        let params = json!({"name": "send", "arguments": {"to": "team"}});
        let note = json!({"jsonrpc": "2.0", "method": method, "params": params});
        ends.to_relay.send(message(note)).await.unwrap();
    }
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    ends.to_relay.send(message(initialized)).await.unwrap();
    // The only notification the server gets is the real one; then the ping.
    let first = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(first["method"], "notifications/initialized", "{first}");
    settle(&mut ends, "p").await;
    assert!(ends.from_relay.try_recv().is_err(), "nothing was answered");
    let calls = ends.sink.calls();
    let named: Vec<&str> = calls.iter().map(|c| c.tool.as_str()).collect();
    assert_eq!(
        named,
        ["send", "tools/list", "initialize", "server/discover", "x/unknown"]
    );
    assert!(calls
        .iter()
        .all(|c| c.refusal == Some(Refusal::MalformedRequest) && c.receipt.is_none()));
}

#[tokio::test(start_paused = true)]
async fn a_server_request_without_an_id_never_reaches_the_client_and_is_recorded() {
    let mut ends = start(RelayConfig::default().with_sampling(ServerRequestPolicy::Relay));
    let sampling = json!({"jsonrpc": "2.0", "method": "sampling/createMessage",
                          "params": {"messages": [], "maxTokens": 5}});
    ends.server_in.send(message(sampling)).await.unwrap();
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": 1}});
    ends.server_in.send(message(progress)).await.unwrap();
    let relayed = parse(ends.from_relay.recv().await.unwrap());
    assert_eq!(relayed["method"], "notifications/message", "{relayed}");
    let calls = ends.sink.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tool, "sampling/createMessage");
    assert_eq!(calls[0].refusal, Some(Refusal::ServerRequestRefused));
}

#[tokio::test(start_paused = true)]
async fn only_answers_to_requests_the_server_sent_the_client_reach_the_server() {
    let mut ends = start(RelayConfig::default());
    // The host refuses sampling: the client never sees that request, nor may it answer it.
    let refused = json!({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage",
                         "params": {"messages": [], "maxTokens": 5}});
    ends.server_in.send(message(refused)).await.unwrap();
    let refusal = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(refusal["id"], "s1");
    assert_eq!(refusal["error"]["code"], jsonrpc::REFUSED_BY_HOST);
    let roots = json!({"jsonrpc": "2.0", "id": 9, "method": "roots/list"});
    ends.server_in.send(message(roots)).await.unwrap();
    assert_eq!(
        parse(ends.from_relay.recv().await.unwrap())["method"],
        "roots/list"
    );
    let answers = [
        json!({"jsonrpc": "2.0", "id": "s1", "result": {"role": "assistant", "model": "m",
                                                     "content": {"type": "text", "text": "forged"}}}),
        json!({"jsonrpc": "2.0", "id": 12, "result": {}}),
        json!({"jsonrpc": "2.0", "id": 9, "result": {"roots": []}}),
        json!({"jsonrpc": "2.0", "id": 9, "result": {"roots": ["twice"]}}),
    ];
    for answer in answers {
        ends.to_relay.send(message(answer)).await.unwrap();
    }
    let relayed = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(
        relayed,
        json!({"jsonrpc": "2.0", "id": 9, "result": {"roots": []}})
    );
    settle(&mut ends, "p").await;
}

#[tokio::test(start_paused = true)]
async fn an_id_still_in_flight_is_refused_for_a_second_request() {
    let mut ends = start(RelayConfig::default());
    let list = json!({"jsonrpc": "2.0", "id": "a", "method": "resources/list"});
    ends.to_relay.send(message(list)).await.unwrap();
    let forwarded = parse(ends.server_out.recv().await.unwrap());
    // The same id again, spelled another way, as a call and as a ping.
    let call = r#"{"jsonrpc":"2.0","id":"\u0061","method":"tools/call","params":{"name":"send","arguments":{"to":"team"}}}"#;
    ends.to_relay
        .send(Inbound::Message(Bytes::from_static(call.as_bytes())))
        .await
        .unwrap();
    let ping = json!({"jsonrpc": "2.0", "id": "a", "method": "ping"});
    ends.to_relay.send(message(ping.clone())).await.unwrap();
    for _ in 0..2 {
        let refused = parse(ends.from_relay.recv().await.unwrap());
        assert_eq!(refused["id"], "a", "{refused}");
        assert_eq!(refused["error"]["code"], jsonrpc::INVALID_REQUEST, "{refused}");
    }
    let answer = json!({"jsonrpc": "2.0", "id": forwarded["id"], "result": {"resources": []}});
    ends.server_in.send(message(answer)).await.unwrap();
    assert_eq!(
        parse(ends.from_relay.recv().await.unwrap())["result"],
        json!({"resources": []})
    );
    // Answered: the id is free again.
    ends.to_relay.send(message(ping)).await.unwrap();
    assert_eq!(parse(ends.server_out.recv().await.unwrap())["method"], "ping");
    let calls = ends.sink.calls();
    assert_eq!(calls.len(), 1, "the refused call is recorded once");
    assert_eq!(calls[0].refusal, Some(aml_core::Refusal::DuplicateCall));
    assert!(calls[0].plan.is_none(), "the refused call was never planned");
}

//! The engine over plain channels (no process, no stdio), on tokio's paused clock: time
//! limits pass at once when nothing else can happen.

use std::sync::Arc;
use std::time::Duration;

use aml_core::{ActionBoundary, MemorySink, Policy};
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::relay::Peer;

use super::*;
use crate::relay::jsonrpc;

pub(super) struct Ends {
    pub(super) to_relay: mpsc::Sender<Inbound>,
    pub(super) from_relay: mpsc::Receiver<Bytes>,
    pub(super) server_in: mpsc::Sender<Inbound>,
    pub(super) server_out: mpsc::Receiver<Bytes>,
    pub(super) exit: oneshot::Sender<String>,
    pub(super) sink: MemorySink,
    pub(super) relay: tokio::task::JoinHandle<RelayEnd>,
}

pub(super) fn start(config: RelayConfig) -> Ends {
    start_with(config, |tools| tools)
}

/// [`start`], the tools first given to `host` (to add its hooks).
pub(super) fn start_with(config: RelayConfig, host: impl FnOnce(RelayTools) -> RelayTools) -> Ends {
    let sink = MemorySink::new();
    let catalog = r#"{"tools": [{"name": "send", "effect": "send", "purpose": "Send a note",
        "resource": {"argument": "to"}, "input_schema": {"type": "object", "required": ["to"]}}]}"#;
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send", "effect": "send", "resource": "team", "requires_approval": false}]}));
    let boundary = ActionBoundary::builder(Arc::new(policy))
        .sink(sink.clone())
        .build();
    let tools = host(RelayTools::from_json(catalog, boundary).unwrap());
    let (client, Peer { to_relay, from_relay }) = Connection::in_memory(16);
    let (
        upstream,
        Peer {
            to_relay: server_in,
            from_relay: server_out,
        },
        exit,
    ) = Upstream::in_memory(16);
    let relay = tokio::spawn(run(tools, config, client, upstream, Vec::new()));
    Ends {
        to_relay,
        from_relay,
        server_in,
        server_out,
        exit,
        sink,
        relay,
    }
}

pub(super) fn message(v: Value) -> Inbound {
    Inbound::Message(Bytes::from(v.to_string()))
}

pub(super) fn parse(b: Bytes) -> Value {
    serde_json::from_slice(&b).unwrap()
}

const VERDICT: &str = "aml.action-boundary/verdict";

#[tokio::test(start_paused = true)]
async fn a_call_the_server_never_answers_is_unknown_once_the_limit_passes() {
    let mut ends = start(RelayConfig::default().with_upstream_timeout(Duration::from_secs(30)));
    let call = json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
                      "params": {"name": "send", "arguments": {"to": "team", "n": 1.50}}});
    ends.to_relay.send(message(call)).await.unwrap();
    let forwarded = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(forwarded["params"]["arguments"], json!({"n": 1.5, "to": "team"}));
    let upstream_id = forwarded["id"].clone();
    assert!(upstream_id.is_u64());
    // The server stays silent; the paused clock runs to the limit.
    let started = tokio::time::Instant::now();
    let answer = parse(ends.from_relay.recv().await.unwrap());
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    assert_eq!(answer["id"], "c1");
    assert_eq!(answer["result"]["isError"], true);
    assert_eq!(answer["result"]["_meta"][VERDICT]["mcp_result_status"], "unknown");
    let cancel = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], upstream_id);
    // A late answer is dropped; the client closes; the one record says unknown.
    let late = json!({"jsonrpc": "2.0", "id": upstream_id, "result": {"content": []}});
    ends.server_in.send(message(late)).await.unwrap();
    drop(ends.to_relay);
    assert_eq!(ends.relay.await.unwrap(), RelayEnd::ClientClosed);
    let calls = ends.sink.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].receipt.as_ref().unwrap().execution_status(),
        aml_core::ExecutionStatus::Unknown
    );
    assert!(ends.from_relay.try_recv().is_err(), "nothing more for the client");
}

#[tokio::test(start_paused = true)]
async fn after_the_server_exits_calls_are_refused_and_the_relay_ends_after_its_grace() {
    let mut ends = start(RelayConfig::default().with_gone_grace(Duration::from_secs(3)));
    ends.to_relay
        .send(message(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "send", "arguments": {"to": "team"}}})))
        .await
        .unwrap();
    ends.server_out.recv().await.unwrap();
    ends.exit.send("signal: 9 (SIGKILL)".into()).unwrap();
    let in_flight = parse(ends.from_relay.recv().await.unwrap());
    assert_eq!(
        in_flight["result"]["_meta"][VERDICT]["mcp_result_status"],
        "unknown"
    );
    ends.to_relay
        .send(message(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                             "params": {"name": "send", "arguments": {"to": "team"}}})))
        .await
        .unwrap();
    let refused = parse(ends.from_relay.recv().await.unwrap());
    assert_eq!(refused["result"]["_meta"][VERDICT]["rejection"], "upstream_gone");
    ends.to_relay
        .send(message(
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}),
        ))
        .await
        .unwrap();
    let gone = parse(ends.from_relay.recv().await.unwrap());
    assert_eq!(gone["error"]["code"], jsonrpc::UPSTREAM_GONE);
    let started = tokio::time::Instant::now();
    let end = ends.relay.await.unwrap();
    assert!(
        matches!(end, RelayEnd::UpstreamGone(ref why) if why.contains("SIGKILL")),
        "{end:?}"
    );
    assert!(started.elapsed() <= Duration::from_secs(3));
    assert!(
        ends.server_out.try_recv().is_err(),
        "nothing was sent after the exit"
    );
    let calls = ends.sink.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].refusal, Some(aml_core::Refusal::UpstreamGone));
}

#[tokio::test(start_paused = true)]
async fn an_answered_call_keeps_the_servers_bytes_and_gains_the_verdict() {
    let mut ends = start(RelayConfig::default());
    ends.to_relay
        .send(message(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                             "params": {"name": "send", "arguments": {"to": "team"}, "_meta": {"progressToken": 4}}})))
        .await
        .unwrap();
    let forwarded = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(forwarded["params"]["_meta"], json!({"progressToken": 4}));
    let id = forwarded["id"].to_string();
    let progress =
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":4,"progress":1}}"#;
    ends.server_in
        .send(Inbound::Message(Bytes::from_static(progress.as_bytes())))
        .await
        .unwrap();
    let result = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"ok"}}],"x":1.50}}}}"#
    );
    ends.server_in
        .send(Inbound::Message(Bytes::from(result)))
        .await
        .unwrap();
    assert_eq!(&ends.from_relay.recv().await.unwrap()[..], progress.as_bytes());
    let answer = ends.from_relay.recv().await.unwrap();
    let text = std::str::from_utf8(&answer).unwrap();
    assert!(
        text.starts_with(r#"{"jsonrpc":"2.0","id":9,"result":{"_meta":{"aml.action-boundary/verdict":{"#),
        "{text}"
    );
    assert!(
        text.ends_with(r#"},"content":[{"type":"text","text":"ok"}],"x":1.50}}"#),
        "{text}"
    );
    let verdict = &parse(answer)["result"]["_meta"][VERDICT];
    assert_eq!(verdict["mcp_result_status"], "returned");
    drop(ends.to_relay);
    ends.relay.await.unwrap();
    let calls = ends.sink.calls();
    assert_eq!(
        calls[0].result.map(|r| r.sha256.to_string()),
        verdict["result_digest"]["sha256"].as_str().map(String::from)
    );
}

/// A server's error whose `data` is not an object (JSON-RPC lets it be any value) cannot
/// carry the verdict: the client is told the server answered with that error, not that its
/// answer could not be read.
#[tokio::test]
async fn a_server_error_whose_data_is_not_an_object_is_named_with_its_code_and_message() {
    let mut ends = start(RelayConfig::default());
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "send", "arguments": {"to": "team"}}});
    ends.to_relay.send(message(call)).await.unwrap();
    let forwarded = parse(ends.server_out.recv().await.unwrap());
    let error = format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32602,"message":"Invalid request parameters","data":""}}}}"#,
        forwarded["id"]
    );
    ends.server_in
        .send(Inbound::Message(Bytes::from(error)))
        .await
        .unwrap();
    let answer = parse(ends.from_relay.recv().await.unwrap());
    assert_eq!(
        (&answer["id"], &answer["result"]["isError"]),
        (&json!(3), &json!(true))
    );
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(r#"the server's error was -32602: "Invalid request parameters""#),
        "{text}"
    );
    assert!(!text.contains("could not be read"), "{text}");
    let verdict = &answer["result"]["_meta"][VERDICT];
    assert_eq!(verdict["mcp_result_status"], "unknown", "{verdict}");
    drop(ends.to_relay);
    ends.relay.await.unwrap();
    let calls = ends.sink.calls();
    let detail = calls[0].detail.clone().unwrap_or_default();
    assert!(detail.contains("answered with an error (-32602)"), "{detail}");
}

#[tokio::test(start_paused = true)]
async fn when_the_client_leaves_a_call_still_running_is_recorded_after_the_drain_limit() {
    let config = RelayConfig::default()
        .with_drain_timeout(Duration::from_secs(10))
        .with_upstream_timeout(Duration::from_secs(600));
    let mut ends = start(config);
    ends.to_relay
        .send(message(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "send", "arguments": {"to": "team"}}})))
        .await
        .unwrap();
    let forwarded = parse(ends.server_out.recv().await.unwrap());
    drop(ends.to_relay);
    let started = tokio::time::Instant::now();
    assert_eq!(ends.relay.await.unwrap(), RelayEnd::ClientClosed);
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    let calls = ends.sink.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].receipt.as_ref().unwrap().execution_status(),
        aml_core::ExecutionStatus::Unknown
    );
    assert!(calls[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("went away while the tool was running"));
    // The server is told the abandoned request is cancelled.
    let cancel = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(cancel["params"]["requestId"], forwarded["id"]);
}

/// Fuzzing finding: serde reads a struct from an array of its fields, so a server message
/// written as an array (`["2.0", id, method, params, result]`) was taken for a response.
#[tokio::test(start_paused = true)]
async fn a_server_answer_written_as_an_array_is_not_a_response() {
    let mut ends = start(RelayConfig::default().with_upstream_timeout(Duration::from_secs(30)));
    let request = json!({"jsonrpc": "2.0", "id": 5, "method": "resources/list"});
    ends.to_relay.send(message(request)).await.unwrap();
    let forwarded = parse(ends.server_out.recv().await.unwrap());
    let array = json!(["2.0", forwarded["id"], null, null, {"resources": []}]);
    ends.server_in.send(message(array)).await.unwrap();
    let answer = ends.from_relay.recv().await.unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert!(answer.is_object(), "{text}");
    assert_eq!(answer["id"], 5, "{text}");
    assert!(answer.get("result").is_none(), "{text}");
    assert_eq!(answer["error"]["code"], jsonrpc::UPSTREAM_TIMEOUT, "{text}");
}

/// Fuzzing finding: a server that sends the client's `initialize` back ends the relay, and a
/// `tools/call` already forwarded to it was dropped with the relay: no answer for the
/// client, no record of the call.
#[tokio::test(start_paused = true)]
async fn a_call_in_flight_when_the_server_echoes_initialize_is_answered_and_recorded() {
    let mut ends = start(RelayConfig::default());
    ends.to_relay
        .send(message(
            json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
                             "params": {"name": "send", "arguments": {"to": "team"}}}),
        ))
        .await
        .unwrap();
    let forwarded = parse(ends.server_out.recv().await.unwrap());
    let echo = json!({"jsonrpc": "2.0", "id": forwarded["id"], "method": "initialize"});
    ends.server_in.send(message(echo)).await.unwrap();
    let answer = parse(ends.from_relay.recv().await.unwrap());
    assert_eq!(answer["id"], "c1");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(
        answer["result"]["_meta"][VERDICT]["mcp_result_status"], "unknown",
        "{answer}"
    );
    assert!(matches!(ends.relay.await.unwrap(), RelayEnd::Handshake(_)));
    let calls = ends.sink.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].receipt.as_ref().unwrap().execution_status(),
        aml_core::ExecutionStatus::Unknown
    );
}

/// Fuzzing finding: serde_json does not check UTF-8 inside the raw values the relay keeps,
/// so a server message with bytes that are not UTF-8 (not JSON text) went to the client
/// as it was: a notification verbatim, an answer spliced with the client's id.
#[tokio::test(start_paused = true)]
async fn server_messages_that_are_not_utf8_never_reach_the_client() {
    let mut ends = start(RelayConfig::default());
    // In a member the relay does not read (serde skips it without checking its bytes).
    let note = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{},\"x\":\"\xff\"}";
    ends.server_in
        .send(Inbound::Message(Bytes::from_static(note)))
        .await
        .unwrap();
    let request = json!({"jsonrpc": "2.0", "id": 5, "method": "resources/list"});
    ends.to_relay.send(message(request)).await.unwrap();
    let forwarded = parse(ends.server_out.recv().await.unwrap());
    let answer = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{\"resources\":[]}},\"x\":\"\u{0}\"}}",
        forwarded["id"]
    )
    .replace('\u{0}', "\u{fffd}")
    .into_bytes();
    // The same answer with the replacement character's bytes cut to one invalid byte.
    let at = answer
        .windows(3)
        .position(|w| w == "\u{fffd}".as_bytes())
        .unwrap();
    let mut broken = answer[..at].to_vec();
    broken.push(0xff);
    broken.extend_from_slice(&answer[at + 3..]);
    ends.server_in
        .send(Inbound::Message(Bytes::from(broken)))
        .await
        .unwrap();
    let received = ends.from_relay.recv().await.unwrap();
    let text = std::str::from_utf8(&received).expect("the client only receives UTF-8");
    let received: Value = serde_json::from_str(text).unwrap();
    assert_eq!(received["id"], 5, "{received}");
    assert_eq!(received["error"]["code"], -32603, "{received}");
    assert!(
        ends.from_relay.try_recv().is_err(),
        "the notification was not relayed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_subscription_has_no_time_limit_and_its_notifications_carry_the_clients_id() {
    let mut ends = start(RelayConfig::default().with_upstream_timeout(Duration::from_secs(5)));
    let listen = json!({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen",
                        "params": {"notifications": {"toolsListChanged": true},
                                   "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    ends.to_relay.send(message(listen)).await.unwrap();
    let forwarded = parse(ends.server_out.recv().await.unwrap());
    let upstream_id = forwarded["id"].clone();
    assert_ne!(upstream_id, json!("sub-1"));
    // Long past the request time limit: no timeout answer, no cancellation sent.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(ends.from_relay.try_recv().is_err());
    assert!(ends.server_out.try_recv().is_err());
    let note = |method: &str, id: &Value| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"_meta":{{"io.modelcontextprotocol/subscriptionId":{id},"k":1.50}}}}}}"#
        )
    };
    for method in [
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
    ] {
        let sent = note(method, &upstream_id);
        ends.server_in
            .send(Inbound::Message(Bytes::from(sent.clone())))
            .await
            .unwrap();
        let received = ends.from_relay.recv().await.unwrap();
        // Only the id changes; every other byte is the server's.
        assert_eq!(
            std::str::from_utf8(&received).unwrap(),
            sent.replace(&format!(":{upstream_id},"), r#":"sub-1","#)
        );
    }
    // A subscription id the relay never sent passes unchanged, and so does one that names a
    // request that is not a subscription.
    let list = json!({"jsonrpc": "2.0", "id": "l-1", "method": "tools/list"});
    ends.to_relay.send(message(list)).await.unwrap();
    let list_id = parse(ends.server_out.recv().await.unwrap())["id"].clone();
    let not_a_subscription = note("notifications/tools/list_changed", &list_id);
    ends.server_in
        .send(Inbound::Message(Bytes::from(not_a_subscription.clone())))
        .await
        .unwrap();
    assert_eq!(
        &ends.from_relay.recv().await.unwrap()[..],
        not_a_subscription.as_bytes()
    );
    let stranger = note("notifications/tools/list_changed", &json!(987));
    ends.server_in
        .send(Inbound::Message(Bytes::from(stranger.clone())))
        .await
        .unwrap();
    assert_eq!(&ends.from_relay.recv().await.unwrap()[..], stranger.as_bytes());
    // The client ends the subscription: the server is told, with its id.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": "sub-1"}});
    ends.to_relay.send(message(cancel)).await.unwrap();
    let passed = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(passed["params"]["requestId"], upstream_id);
    // Its notifications after that are the server's to explain: passed on unchanged.
    let late = note("notifications/tools/list_changed", &upstream_id);
    ends.server_in
        .send(Inbound::Message(Bytes::from(late.clone())))
        .await
        .unwrap();
    assert_eq!(&ends.from_relay.recv().await.unwrap()[..], late.as_bytes());
}

#[tokio::test(start_paused = true)]
async fn at_its_in_flight_limit_a_client_is_not_read_until_a_request_is_answered() {
    let mut ends = start(RelayConfig::default().with_max_in_flight(2));
    for n in 0..4 {
        let ping = json!({"jsonrpc": "2.0", "id": n, "method": "ping"});
        ends.to_relay.send(message(ping)).await.unwrap();
    }
    let first = parse(ends.server_out.recv().await.unwrap());
    parse(ends.server_out.recv().await.unwrap());
    // Two in flight: the third waits, however long, until one is answered.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        ends.server_out.try_recv().is_err(),
        "a third request was forwarded"
    );
    let answer = json!({"jsonrpc": "2.0", "id": first["id"], "result": {}});
    ends.server_in.send(message(answer)).await.unwrap();
    assert_eq!(parse(ends.from_relay.recv().await.unwrap())["id"], 0);
    let third = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(third["method"], "ping");
    assert!(ends.server_out.try_recv().is_err(), "the fourth waits too");
    drop(ends.exit);
}

#[tokio::test(start_paused = true)]
async fn a_request_that_runs_out_of_time_makes_room_at_the_in_flight_limit() {
    let config = RelayConfig::default()
        .with_max_in_flight(1)
        .with_upstream_timeout(Duration::from_secs(30));
    let mut ends = start(config);
    for n in 0..2 {
        let ping = json!({"jsonrpc": "2.0", "id": n, "method": "ping"});
        ends.to_relay.send(message(ping)).await.unwrap();
    }
    parse(ends.server_out.recv().await.unwrap());
    // The server never answers: at 30 s the first request gets its timeout error, and the
    // second goes out (the request's own timer wakes the session at the limit).
    let timed_out = parse(ends.from_relay.recv().await.unwrap());
    assert_eq!(timed_out["id"], 0);
    assert_eq!(timed_out["error"]["code"], crate::relay::UPSTREAM_TIMEOUT);
    let cancel = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(cancel["method"], "notifications/cancelled");
    let second = tokio::time::timeout(Duration::from_secs(60), ends.server_out.recv())
        .await
        .expect("the waiting request goes out once the first ran out of time")
        .unwrap();
    assert_eq!(parse(second)["method"], "ping");
    drop(ends.exit);
}

#[tokio::test(start_paused = true)]
async fn a_server_request_the_relay_cannot_read_is_answered_not_left_waiting() {
    let mut ends = start(RelayConfig::default());
    for (id, text) in [
        (
            "\"s3\"",
            r#"{"jsonrpc":"2.0","id":"s3","method":"sampling/createMessage","method":"x"}"#.as_bytes(),
        ),
        (
            "7",
            b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"roots/list\",\"params\":{\"x\":\"\xff\"}}",
        ),
    ] {
        ends.server_in
            .send(Inbound::Message(Bytes::copy_from_slice(text)))
            .await
            .unwrap();
        let answer = parse(ends.server_out.recv().await.unwrap());
        assert_eq!(answer["id"].to_string(), id, "{answer}");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
    }
    assert!(ends.from_relay.try_recv().is_err(), "the client saw neither");
    drop(ends.exit);
}

#[tokio::test(start_paused = true)]
async fn requests_read_before_the_client_left_are_answered_within_the_drain_limit() {
    let mut ends = start(RelayConfig::default().with_drain_timeout(Duration::from_secs(10)));
    for (id, method) in [(1, "resources/list"), (2, "prompts/list")] {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method});
        ends.to_relay.send(message(request)).await.unwrap();
    }
    let first = parse(ends.server_out.recv().await.unwrap());
    let second = parse(ends.server_out.recv().await.unwrap());
    drop(ends.to_relay);
    // The server answers the first after the client has left; it still reaches the client.
    let answer = json!({"jsonrpc": "2.0", "id": first["id"], "result": {"resources": []}});
    ends.server_in.send(message(answer)).await.unwrap();
    let relayed = parse(ends.from_relay.recv().await.unwrap());
    assert_eq!(relayed["id"], 1, "{relayed}");
    // The second is never answered: the drain limit answers it.
    let started = tokio::time::Instant::now();
    let timed_out = parse(ends.from_relay.recv().await.unwrap());
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    assert_eq!(timed_out["id"], 2, "{timed_out}");
    assert_eq!(timed_out["error"]["code"], jsonrpc::UPSTREAM_TIMEOUT);
    assert_eq!(ends.relay.await.unwrap(), RelayEnd::ClientClosed);
    let cancel = parse(ends.server_out.recv().await.unwrap());
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], second["id"]);
}

/// Holds each forward until the test lets it go (as an approval would), and says when it
/// is held.
#[derive(Debug)]
struct HeldForward {
    held: mpsc::UnboundedSender<()>,
    release: Arc<tokio::sync::Semaphore>,
}

#[derive(Debug)]
struct Held(
    Arc<dyn aml_core::ToolExecutor>,
    mpsc::UnboundedSender<()>,
    Arc<tokio::sync::Semaphore>,
);

#[aml_core::async_trait]
impl aml_core::ToolExecutor for Held {
    async fn execute(&self, call: aml_core::ToolCall) -> Result<Value, aml_core::ToolError> {
        let _ = self.1.send(());
        let _permit = self.2.acquire().await;
        self.0.execute(call).await
    }
}

impl crate::relay::ForwardWrapper for HeldForward {
    fn wrap(&self, forward: Arc<dyn aml_core::ToolExecutor>) -> Arc<dyn aml_core::ToolExecutor> {
        Arc::new(Held(forward, self.held.clone(), Arc::clone(&self.release)))
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_server_went_before_its_request_left_is_blocked_not_entered() {
    let (held, mut holding) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let wrapper = HeldForward {
        held,
        release: Arc::clone(&release),
    };
    let mut ends = start_with(
        RelayConfig::default().with_gone_grace(Duration::from_secs(3)),
        |tools| tools.with_forward_wrapper(Arc::new(wrapper)),
    );
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "send", "arguments": {"to": "team"}}});
    ends.to_relay.send(message(call)).await.unwrap();
    holding.recv().await.expect("the forward is held");
    ends.exit.send("signal: 9 (SIGKILL)".into()).unwrap();
    // Let the relay take the exit before the forward goes on.
    tokio::time::sleep(Duration::from_millis(10)).await;
    release.add_permits(1);
    let answer = parse(ends.from_relay.recv().await.unwrap());
    let verdict = &answer["result"]["_meta"][VERDICT];
    assert_eq!(verdict["mcp_result_status"], "not_called", "{answer}");
    assert_eq!(verdict["receipt"]["execution_status"], "blocked");
    assert_eq!(verdict["receipt"]["reason"], "host_dispatch_not_entered");
    ends.relay.await.unwrap();
    assert!(ends.server_out.try_recv().is_err(), "nothing was sent");
    let calls = ends.sink.calls();
    assert_eq!(calls.len(), 1);
    let receipt = calls[0].receipt.as_ref().unwrap();
    assert_eq!(receipt.execution_status(), aml_core::ExecutionStatus::Blocked);
}

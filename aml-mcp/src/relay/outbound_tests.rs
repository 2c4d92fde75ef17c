//! [`OutboundTraces`]: the observer's trace context for a forwarded call waits in the table,
//! under the relay's request id, for the server's transport to take; what it gave is the
//! ended call's `forwarded`; a request that ends untaken leaves nothing behind; and the
//! message sent is the same with or without it.

use std::sync::Mutex;

use serde_json::json;

use super::tests::{message, parse, start_with, Ends};
use super::*;
use crate::relay::{CallObserver, ForwardedCall, ObservedCall, OutboundTraces, TransportTrace};

const SENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Gives every forward the same context, and keeps each ended call's `forwarded`.
#[derive(Debug, Default)]
struct Tracing {
    asked: Mutex<Vec<(String, Option<String>)>>,
    ended: Mutex<Vec<Option<TransportTrace>>>,
}

impl CallObserver for Tracing {
    fn call_ended(&self, call: &ObservedCall<'_>) {
        self.ended.lock().unwrap().push(call.forwarded.cloned());
    }

    fn forward_trace(&self, call: &ForwardedCall<'_>) -> Option<TransportTrace> {
        let asked = (call.tool.to_owned(), call.meta.map(str::to_owned));
        self.asked.lock().unwrap().push(asked);
        Some(TransportTrace::new(SENT, Some("vendor=a1".into())))
    }
}

fn call(id: u64) -> Inbound {
    message(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "send", "arguments": {"to": "team"}, "_meta": {"progressToken": 4}}}))
}

/// The client sends call `id`; the request the server receives.
async fn forwarded(ends: &mut Ends, id: u64) -> serde_json::Value {
    ends.to_relay.send(call(id)).await.unwrap();
    parse(ends.server_out.recv().await.unwrap())
}

/// The server answers its request `upstream`; the client gets the answer to its call `id`.
async fn answered(ends: &mut Ends, upstream: u64, id: u64) {
    let answer = format!(r#"{{"jsonrpc":"2.0","id":{upstream},"result":{{"content":[]}}}}"#);
    ends.server_in
        .send(Inbound::Message(Bytes::from(answer)))
        .await
        .unwrap();
    assert_eq!(parse(ends.from_relay.recv().await.unwrap())["id"], id);
}

#[tokio::test(start_paused = true)]
async fn the_transport_takes_each_forwards_trace_by_the_relays_request_id() {
    let observer = Arc::new(Tracing::default());
    let traces = OutboundTraces::default();
    let hooks = (Arc::clone(&observer), traces.clone());
    let mut ends = start_with(RelayConfig::default(), move |tools| {
        tools
            .with_call_observer(hooks.0 as Arc<dyn CallObserver>)
            .with_outbound_traces(hooks.1)
    });

    // Taken by the transport when it sends the request.
    let request = forwarded(&mut ends, 9).await;
    let id = request["id"].as_u64().unwrap();
    let taken = traces
        .take(id)
        .expect("the forward's trace, under the relay's id");
    assert_eq!(
        (taken.traceparent(), taken.tracestate()),
        (SENT, Some("vendor=a1"))
    );
    assert!(traces.take(id).is_none(), "taken once");
    assert_eq!(
        request["params"],
        json!({"name": "send", "arguments": {"to": "team"}, "_meta": {"progressToken": 4}}),
        "the message is the call's own"
    );
    answered(&mut ends, id, 9).await;

    // Not taken (a transport that carries none): forgotten once the request has ended.
    let second = forwarded(&mut ends, 10).await["id"].as_u64().unwrap();
    answered(&mut ends, second, 10).await;
    assert!(traces.take(second).is_none(), "nothing left behind");

    drop(ends.to_relay);
    ends.relay.await.unwrap();
    let asked = observer.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2);
    assert_eq!(
        asked[0],
        ("send".to_owned(), Some(r#"{"progressToken":4}"#.to_owned()))
    );
    let ended = observer.ended.lock().unwrap().clone();
    assert_eq!(ended.len(), 2);
    assert!(ended
        .iter()
        .all(|f| f.as_ref().map(TransportTrace::traceparent) == Some(SENT)));
}

#[tokio::test(start_paused = true)]
async fn without_the_table_the_observer_is_never_asked() {
    let observer = Arc::new(Tracing::default());
    let hooks = Arc::clone(&observer);
    let mut ends = start_with(RelayConfig::default(), move |tools| {
        tools.with_call_observer(hooks as Arc<dyn CallObserver>)
    });
    let id = forwarded(&mut ends, 9).await["id"].as_u64().unwrap();
    answered(&mut ends, id, 9).await;
    drop(ends.to_relay);
    ends.relay.await.unwrap();
    assert!(observer.asked.lock().unwrap().is_empty());
    assert_eq!(*observer.ended.lock().unwrap(), vec![None]);
}

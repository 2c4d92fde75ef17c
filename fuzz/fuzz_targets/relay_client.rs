//! The MCP relay's handling of client messages: the input is a client's byte stream,
//! framed into lines as the stdio transport does; a well-behaved server answers every
//! request the relay forwards. Each message gets exactly one answer if it is a request or
//! is not a valid message at all, and none if it is a valid notification; at most one
//! error if it is a response. The answer to a request carries its id. Nothing hangs: the
//! paused clock runs past every time limit after each message.
#![no_main]

use aml_core::strict;
use aml_fuzz::relay::{drain, frames, server_answer, start, SETTLE};
use aml_mcp::relay::Inbound;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[derive(Debug, PartialEq)]
enum Expect {
    /// Exactly one answer, for this id (`None`: an error with no usable id, or a batch).
    One(Option<Value>),
    /// No answer, or one error (a notification or response the relay found invalid).
    NoneOrError,
    /// No answer: a valid notification.
    Nothing,
}

/// What a JSON-RPC 2.0 peer owes this message, judged by value, independently of the relay.
fn expect(inbound: &Inbound) -> Expect {
    let Inbound::Message(bytes) = inbound else {
        return Expect::One(None);
    };
    let Ok(Value::Object(m)) = strict::parse_slice(bytes) else {
        return Expect::One(None);
    };
    let valid_id = |id: &Value| id.is_string() || id.is_i64() || id.is_u64();
    let two = m.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
    let method = m.get("method").map(Value::is_string);
    let answer = m.contains_key("result") || m.contains_key("error");
    match (two, m.get("id"), method, answer) {
        (true, Some(id), Some(true), false) if valid_id(id) => Expect::One(Some(id.clone())),
        (true, None, Some(true), false) if !m.contains_key("id") => {
            // `params`, when present, must be structured (JSON-RPC 2.0 §4.2).
            match m.get("params") {
                None | Some(Value::Object(_)) | Some(Value::Array(_)) => Expect::Nothing,
                Some(_) => Expect::NoneOrError,
            }
        }
        (true, Some(_), None, true) => Expect::NoneOrError,
        // Invalid: one error, for its id when it has a usable one.
        (_, Some(id), _, _) if valid_id(id) => Expect::One(Some(id.clone())),
        _ => Expect::One(None),
    }
}

fuzz_target!(|data: &[u8]| {
    let runtime = aml_fuzz::paused_runtime();
    runtime.block_on(async {
        let mut ends = start();
        for inbound in frames(data).into_iter().take(32) {
            let expected = expect(&inbound);
            let shown = format!("{inbound:?}");
            if ends.to_relay.send(inbound).await.is_err() {
                panic!("the relay ended while the client was still there");
            }
            // Play the server until everything has settled.
            let deadline = tokio::time::Instant::now() + SETTLE;
            loop {
                tokio::select! {
                    Some(sent) = ends.server_out.recv() => {
                        if let Ok(request) = serde_json::from_slice::<Value>(&sent) {
                            if let Some(answer) = server_answer(&request) {
                                ends.server_in.send(Inbound::Message(answer)).await.unwrap();
                            }
                        }
                    }
                    _ = tokio::time::sleep_until(deadline) => break,
                }
            }
            let answers = drain(&mut ends.from_relay);
            let parsed: Vec<Value> = answers
                .iter()
                .map(|a| serde_json::from_slice(a).unwrap_or_else(|e| panic!("unreadable answer {e}: {a:?}")))
                .collect();
            for answer in &parsed {
                let objects = match answer {
                    Value::Array(items) => items.iter().collect(),
                    other => vec![other],
                };
                for object in objects {
                    assert_eq!(object["jsonrpc"], "2.0", "{shown} -> {answer}");
                    assert!(
                        object.get("result").is_some() != object.get("error").is_some(),
                        "{shown} -> {answer}"
                    );
                }
            }
            match expected {
                Expect::Nothing => assert!(
                    parsed.is_empty(),
                    "a notification was answered: {shown} -> {parsed:?}"
                ),
                Expect::NoneOrError => {
                    assert!(parsed.len() <= 1, "{shown} -> {parsed:?}");
                    assert!(
                        parsed.iter().all(|a| a.get("error").is_some()),
                        "{shown} -> {parsed:?}"
                    );
                }
                Expect::One(id) => {
                    assert_eq!(parsed.len(), 1, "{shown} -> {parsed:?}");
                    if let Some(id) = id {
                        assert_eq!(parsed[0]["id"], id, "{shown} -> {parsed:?}");
                    }
                }
            }
        }
        drop(ends.to_relay);
        let deadline = tokio::time::Instant::now() + SETTLE;
        tokio::select! {
            end = ends.relay => { end.expect("the relay task ended cleanly"); }
            _ = tokio::time::sleep_until(deadline) => panic!("the relay did not end after the client left"),
        }
        drop(ends.exit);
    });
});

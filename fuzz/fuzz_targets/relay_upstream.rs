//! The MCP relay's handling of server messages: each framed line of the input is what the
//! server sends while a client request waits (`@ID` in the line becomes the id the relay
//! gave that request). Whatever the server says, the waiting request gets exactly one
//! answer, with the client's id, within the time limit; everything the client receives is a
//! JSON-RPC object; nothing is sent for a request twice.
#![no_main]

use aml_fuzz::relay::{drain, frames, start, with_id, SETTLE};
use aml_mcp::relay::{Inbound, RelayEnd};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let runtime = aml_fuzz::paused_runtime();
    runtime.block_on(async {
        let mut ends = start();
        for (n, inbound) in frames(data).into_iter().take(16).enumerate() {
            let client_id = json!(format!("c{n}"));
            let request = if n % 2 == 0 {
                json!({"jsonrpc": "2.0", "id": client_id, "method": "resources/list"})
            } else {
                json!({"jsonrpc": "2.0", "id": client_id, "method": "tools/call",
                       "params": {"name": "send", "arguments": {"to": "team"}}})
            };
            if ends.to_relay.send(Inbound::Message(Bytes::from(request.to_string()))).await.is_err() {
                panic!("the relay ended while the client was still there");
            }
            let deadline = tokio::time::Instant::now() + SETTLE;
            let mut sent_line = false;
            let mut forwarded = 0;
            loop {
                tokio::select! {
                    Some(sent) = ends.server_out.recv() => {
                        let Ok(message) = serde_json::from_slice::<Value>(&sent) else {
                            panic!("the relay sent the server unreadable bytes: {sent:?}");
                        };
                        if message.get("method").and_then(Value::as_str) == Some("resources/list")
                            || message.get("method").and_then(Value::as_str) == Some("tools/call")
                        {
                            forwarded += 1;
                            if !sent_line {
                                sent_line = true;
                                let id = message["id"].to_string();
                                let line = match &inbound {
                                    Inbound::Message(b) => Inbound::Message(Bytes::from(with_id(b, id.as_bytes()))),
                                    other => other.clone(),
                                };
                                ends.server_in.send(line).await.unwrap();
                            }
                        }
                    }
                    _ = tokio::time::sleep_until(deadline) => break,
                }
            }
            assert!(forwarded <= 1, "the request was sent to the server {forwarded} times");
            let received: Vec<Value> = drain(&mut ends.from_relay)
                .iter()
                .map(|m| serde_json::from_slice(m).unwrap_or_else(|e| panic!("unreadable message {e}: {m:?}")))
                .collect();
            let mut answers = 0;
            for message in &received {
                assert!(message.is_object(), "the client received a non-object: {message}");
                assert_eq!(message["jsonrpc"], "2.0", "{message}");
                if message.get("method").is_none() {
                    assert_eq!(message["id"], client_id, "an answer for another id: {message}");
                    answers += 1;
                }
            }
            assert_eq!(answers, 1, "{inbound:?} -> {received:?}");
            if ends.relay.is_finished() {
                // Only a server that fails the handshake (echoes the client's `initialize`)
                // ends the relay while the client is there; the waiting request was answered.
                let end = (&mut ends.relay).await.expect("the relay task ended cleanly");
                assert!(matches!(end, RelayEnd::Handshake(_)), "{inbound:?} ended the relay: {end:?}");
                return;
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

//! The MCP relay's session core, driven directly (no runtime, no channels): each framed line
//! of the input is one event, chosen by its first byte: `s` a message from the server (`@ID`
//! becomes the id of the relay's latest request to it), `t` the clock moving on (the next
//! byte in seconds), `g` the server gone, `d` the drain limit passed, anything else a message
//! from the client (the whole line). Whatever comes: every message the core sends either
//! side is JSON, each request it sends the server has an id it never used before, no client
//! id (but `null`) is answered more often than the client used it, and once the session ends nothing
//! waits on the server.
#![no_main]

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use aml_fuzz::relay::{frames, tools, with_id, UPSTREAM_TIMEOUT};
use aml_mcp::relay::by_hand::{Machine, Sent};
use aml_mcp::relay::{Inbound, RelayConfig};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The id of a message as `serde_json` writes it, if it is an object with one other than
/// `null` (which answers what had no readable id).
fn id_of(message: &Value) -> Option<String> {
    message
        .as_object()?
        .get("id")
        .filter(|id| !id.is_null())
        .map(Value::to_string)
}

#[derive(Default)]
struct Seen {
    /// The ids the relay gave its requests to the server.
    upstream_ids: HashSet<String>,
    latest_upstream: Option<String>,
    /// How often the client used each id, and how often the relay answered it.
    used: HashMap<String, usize>,
    answered: HashMap<String, usize>,
    /// Client lines that are not strict JSON: the relay may answer an id it scans out of
    /// them.
    unreadable: usize,
}

impl Seen {
    fn check(&mut self, sent: Vec<Sent>) {
        for next in sent {
            match next {
                Sent::Client(bytes) => {
                    let Ok(message) = serde_json::from_slice::<Value>(&bytes) else {
                        panic!("the client was sent unreadable bytes: {bytes:?}");
                    };
                    let answer = message.get("method").is_none();
                    if let (true, Some(id)) = (answer, id_of(&message)) {
                        *self.answered.entry(id).or_default() += 1;
                    }
                }
                Sent::Upstream(bytes) => {
                    let Ok(message) = serde_json::from_slice::<Value>(&bytes) else {
                        panic!("the server was sent unreadable bytes: {bytes:?}");
                    };
                    assert!(message.is_object(), "the server was sent a non-object: {message}");
                    if message.get("method").is_some() {
                        if let Some(id) = id_of(&message) {
                            assert!(
                                self.upstream_ids.insert(id.clone()),
                                "the relay used its request id {id} twice"
                            );
                            self.latest_upstream = Some(id);
                        }
                    }
                }
                Sent::Call(_) => {}
            }
        }
        for (id, answers) in &self.answered {
            let used = self.used.get(id).copied().unwrap_or_default();
            assert!(
                *answers <= used + self.unreadable,
                "client id {id} answered {answers} times, used {used} times"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let config = RelayConfig::default()
        .with_upstream_timeout(UPSTREAM_TIMEOUT)
        .with_handshake_timeout(UPSTREAM_TIMEOUT)
        .with_max_message_bytes(aml_fuzz::relay::MAX_MESSAGE)
        .with_max_in_flight(8);
    let mut machine = Machine::new(tools(), config);
    let mut seen = Seen::default();
    for inbound in frames(data).into_iter().take(64) {
        let line = match &inbound {
            Inbound::Message(bytes) => bytes.clone(),
            _ => Bytes::new(),
        };
        let sent = match line.first() {
            Some(b's') => {
                let id = seen.latest_upstream.clone().unwrap_or_default();
                let message = Bytes::from(with_id(&line[1..], id.as_bytes()));
                machine.server(Inbound::Message(message))
            }
            Some(b't') => {
                let seconds = line.get(1).copied().unwrap_or(1);
                machine.after(Duration::from_secs(u64::from(seconds)))
            }
            Some(b'g') => machine.upstream_gone("it exited (fuzzed)"),
            Some(b'd') => machine.drained(),
            _ => {
                // As the relay reads it: a member twice (which `serde_json` would take the last
                // of) makes the line unreadable.
                match aml_core::strict::parse_slice(&line) {
                    Ok(message) => {
                        if let Some(id) = id_of(&message) {
                            *seen.used.entry(id).or_default() += 1;
                        }
                        if let Value::Array(items) = &message {
                            for id in items.iter().filter_map(id_of) {
                                *seen.used.entry(id).or_default() += 1;
                            }
                        }
                    }
                    Err(_) => seen.unreadable += 1,
                }
                machine.client(inbound)
            }
        };
        seen.check(sent);
    }
    let sent = machine.end();
    seen.check(sent);
    assert!(machine.idle_upstream(), "requests still wait on the server after the end");
});

//! The MCP relay's session core, driven directly (no runtime, no channels): each framed line
//! of the input is one event, chosen by its first byte: `s` a message from the server (`@ID`
//! becomes the id of the relay's latest request to it), `t` the clock moving on (the next
//! byte in seconds), `g` the server gone, `d` the drain limit passed, `c` the oldest checked
//! call's future sending its request, `k` the same for a future dropped meanwhile, `x` the
//! latest call request passing its limit, `e` the oldest call's future ending, `o`/`q` an
//! endpoint opening/closing and `p` a message from one (the next byte picks the endpoint,
//! 1 to 4, and for `o` whether it streams), anything else a message from the client's
//! standing connection (the whole line). The endpoints are one client's (its ids shared: a
//! Streamable HTTP session), or, in an input that begins with `E`, callers' in a session
//! without a standing connection (2026-07-28 stateless HTTP). An input that begins with `M`
//! drives a session in front of two servers (ADR 033): `S`, `G` and `C` are then `s`, `g` and
//! `c` for the second server. Whatever comes: every message the core sends either side is
//! JSON, each request it sends a server has an id it never used before, an answer it sends a
//! server names an id that server sent, no client id (but `null`) is answered on an endpoint
//! more often than that endpoint used it, nothing goes to an endpoint that is not open, and
//! once the session ends nothing waits on any server.
#![no_main]

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use aml_fuzz::relay::{frames, tools, with_id, UPSTREAM_TIMEOUT};
use aml_mcp::relay::by_hand::{Machine, Sent};
use aml_mcp::relay::jsonrpc::Envelope;
use aml_mcp::relay::{EndpointEvent, Inbound, RelayConfig, ToEndpoint};
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
    /// The ids the relay gave its requests to the servers, and its latest one to each.
    upstream_ids: HashSet<String>,
    latest_upstream: [Option<String>; 2],
    /// What each server sent (its lines), where an answer the relay sends it must find its id.
    from_server: [Vec<u8>; 2],
    /// How often each endpoint (0: the standing connection) used each id, and how often
    /// the relay answered it there.
    used: HashMap<(u64, String), usize>,
    answered: HashMap<(u64, String), usize>,
    /// The endpoints open (besides the standing connection).
    open: HashSet<u64>,
    /// Whether the session has a standing connection.
    standing: bool,
    /// Client lines that are not strict JSON: the relay may answer an id it scans out of
    /// them.
    unreadable: usize,
    /// Checked calls (their flights) whose futures have not sent their request yet, and
    /// those that have, with the request's id.
    unsent: VecDeque<String>,
    sent_calls: Vec<(String, usize, u64)>,
}

impl Seen {
    fn check(&mut self, sent: Vec<Sent>) {
        for next in sent {
            match next {
                Sent::Client(bytes) => {
                    assert!(
                        self.standing,
                        "a standing connection's message in a session without one"
                    );
                    self.to_client(0, &bytes)
                }
                Sent::Endpoint(endpoint, sent) => {
                    assert!(self.open.contains(&endpoint), "endpoint {endpoint} is not open");
                    match sent {
                        ToEndpoint::Answer(bytes) => self.to_client(endpoint, &bytes),
                        ToEndpoint::Notification(bytes) => {
                            let note = serde_json::from_slice::<Value>(&bytes).expect("a JSON notification");
                            assert!(note.get("method").is_some(), "not a notification: {note}");
                        }
                    }
                }
                Sent::Nowhere(bytes) => {
                    assert!(!self.standing, "dropped with a standing connection to take it");
                    serde_json::from_slice::<Value>(&bytes).expect("a JSON message");
                }
                Sent::Upstream(server, bytes) => {
                    let Ok(message) = serde_json::from_slice::<Value>(&bytes) else {
                        panic!("the server was sent unreadable bytes: {bytes:?}");
                    };
                    assert!(message.is_object(), "the server was sent a non-object: {message}");
                    assert!(server < 2, "a message for server {server}, which is not there");
                    let id = id_of(&message);
                    match (message.get("method").is_some(), id) {
                        (true, Some(id)) => {
                            assert!(
                                self.upstream_ids.insert(id.clone()),
                                "the relay used its request id {id} twice"
                            );
                            self.latest_upstream[server] = Some(id);
                        }
                        (false, Some(id)) => {
                            // An answer to a request of this server's: under its id, in the
                            // very bytes the server wrote it with.
                            let raw = Envelope::parse(&bytes).ok().and_then(|env| env.id).map(|id| id.get().as_bytes().to_vec());
                            let raw = raw.expect("an answer's id can be read back");
                            let sent = &self.from_server[server];
                            assert!(
                                sent.windows(raw.len()).any(|w| w == raw),
                                "server {server} was sent an answer to {id}, which it never asked"
                            );
                        }
                        _ => {}
                    }
                }
                Sent::Call(flight) => self.unsent.push_back(flight),
            }
        }
        for (id, answers) in &self.answered {
            let used = self.used.get(id).copied().unwrap_or_default();
            assert!(
                *answers <= used + self.unreadable,
                "client id {id:?} answered {answers} times, used {used} times"
            );
        }
    }

    fn to_client(&mut self, endpoint: u64, bytes: &Bytes) {
        let Ok(message) = serde_json::from_slice::<Value>(bytes) else {
            panic!("the client was sent unreadable bytes: {bytes:?}");
        };
        let answer = message.get("method").is_none();
        if let (true, Some(id)) = (answer, id_of(&message)) {
            *self.answered.entry((endpoint, id)).or_default() += 1;
        }
    }

    /// Counts the ids a client line uses, as the relay reads it: a member twice (which
    /// `serde_json` would take the last of) makes the line unreadable.
    fn uses(&mut self, endpoint: u64, line: &[u8]) {
        match aml_core::strict::parse_slice(line) {
            Ok(message) => {
                if let Some(id) = id_of(&message) {
                    *self.used.entry((endpoint, id)).or_default() += 1;
                }
                if let Value::Array(items) = &message {
                    for id in items.iter().filter_map(id_of) {
                        *self.used.entry((endpoint, id)).or_default() += 1;
                    }
                }
            }
            Err(_) => self.unreadable += 1,
        }
    }
}

/// A call's request to the server, made with the id the relay gave it.
fn call_request(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"send","arguments":{{}}}}}}"#
    )
}

fuzz_target!(|data: &[u8]| {
    let config = RelayConfig::default()
        .with_upstream_timeout(UPSTREAM_TIMEOUT)
        .with_handshake_timeout(UPSTREAM_TIMEOUT)
        .with_max_message_bytes(aml_fuzz::relay::MAX_MESSAGE)
        .with_max_in_flight(8);
    let standing = data.first() != Some(&b'E');
    let two = data.first() == Some(&b'M');
    let mut machine = match (standing, two) {
        (true, true) => Machine::with_servers(tools(), config, &["a", "b"]),
        (true, false) => Machine::of_session(tools(), config),
        (false, _) => Machine::of_endpoints(tools(), config),
    };
    let mut seen = Seen {
        standing,
        ..Seen::default()
    };
    for inbound in frames(data).into_iter().take(64) {
        let line = match &inbound {
            Inbound::Message(bytes) => bytes.clone(),
            _ => Bytes::new(),
        };
        // The second server's events, in a session that has one.
        let server = usize::from(two && matches!(line.first(), Some(b'S' | b'G' | b'C')));
        let event = line.first().map(|b| if server == 1 { b.to_ascii_lowercase() } else { *b });
        let sent = match event {
            Some(b's') => {
                let id = seen.latest_upstream[server].clone().unwrap_or_default();
                let message = with_id(&line[1..], id.as_bytes());
                seen.from_server[server].extend_from_slice(&message);
                machine.server_at(server, Inbound::Message(Bytes::from(message)))
            }
            Some(b't') => {
                let seconds = line.get(1).copied().unwrap_or(1);
                machine.after(Duration::from_secs(u64::from(seconds)))
            }
            Some(b'g') => machine.server_gone(server, "it exited (fuzzed)"),
            Some(b'd') => machine.drained(),
            Some(b'c') => match seen.unsent.pop_front() {
                Some(flight) => {
                    let (id, sent) = machine.call_sends_to(server, &flight, call_request);
                    seen.sent_calls.push((flight, server, id));
                    sent
                }
                None => Vec::new(),
            },
            Some(b'k') => match seen.unsent.pop_front() {
                Some(flight) => machine.dropped_call_sends(&flight, call_request),
                None => Vec::new(),
            },
            Some(b'x') => match seen.sent_calls.last() {
                Some((_, server, id)) => machine.call_timed_out_at(*server, *id),
                None => Vec::new(),
            },
            Some(b'e') => match seen.unsent.pop_front() {
                Some(flight) => machine.call_ended(&flight),
                None if !seen.sent_calls.is_empty() => {
                    let (flight, _, _) = seen.sent_calls.remove(0);
                    machine.call_ended(&flight)
                }
                None => Vec::new(),
            },
            Some(kind @ (b'o' | b'p' | b'q')) => {
                let pick = line.get(1).copied().unwrap_or(0);
                let endpoint = u64::from(pick % 4) + 1;
                match kind {
                    b'o' => {
                        seen.open.insert(endpoint);
                        machine.open(endpoint, pick & 0x10 != 0)
                    }
                    b'q' => {
                        let sent = machine.endpoint(EndpointEvent::Close { endpoint });
                        seen.open.remove(&endpoint);
                        sent
                    }
                    _ => {
                        let message = line.slice(2.min(line.len())..);
                        seen.uses(endpoint, &message);
                        let inbound = Inbound::Message(message);
                        machine.endpoint(EndpointEvent::Message { endpoint, inbound })
                    }
                }
            }
            _ => {
                seen.uses(0, &line);
                machine.client(inbound)
            }
        };
        seen.check(sent);
    }
    let sent = machine.end();
    seen.check(sent);
    assert!(
        machine.idle_upstream(),
        "requests still wait on the server after the end"
    );
});

//! Pinned tool definitions (rug-pull protection): what the server advertises for each tool,
//! compared with the host's pin before the tool is listed or called.
//!
//! The relay remembers the digest of every definition it sees in a `tools/list` answer. A
//! pinned tool whose definition differs is left out of `tools/list` and its calls are refused
//! (`tool_definition_changed`, naming both digests). After the server's
//! `notifications/tools/list_changed` every definition is unknown again; a call to a pinned
//! tool whose definition is unknown makes the relay fetch `tools/list` itself (every page)
//! before the gate sees the call. Design: `docs/adr/018-pinned-tool-definitions.md`.

use std::collections::HashMap;

use aml_core::catalog::{definition_digest, pin_text};
use aml_core::Sha256Digest;
use serde_json::value::RawValue;

use super::jsonrpc::{json_string, Envelope, Members};
use super::machine::{Relay, Reply, ServerId, State};
use super::session::Session;
use super::RelayTools;

/// The most `tools/list` pages the relay follows when it fetches the list itself.
const MAX_PAGES: usize = 64;

/// One definition as the server advertised it.
#[derive(Debug, Clone)]
enum Definition {
    Digest(Sha256Digest),
    /// It could not be hashed (not strict JSON, a number without an exact double, …).
    Unreadable(String),
}

/// The definitions this session has seen from the server.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    tools: HashMap<String, Definition>,
    /// Set by a complete fetch: a tool not in `tools` is not advertised at all.
    complete: bool,
}

impl Seen {
    /// The names of the tools seen.
    pub(crate) fn names(&self) -> impl Iterator<Item = &String> {
        self.tools.keys()
    }

    /// After `notifications/tools/list_changed`: nothing is known until the next list.
    pub(crate) fn forget(&mut self) {
        self.tools.clear();
        self.complete = false;
    }
}

/// What the pin says about one tool now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PinCheck {
    /// Not pinned (or not registered: the gate refuses that itself), or the definition
    /// matches its pin.
    Pass,
    /// Pinned, and the server's definition differs: why, naming both digests.
    Changed(String),
    /// Pinned, and this session has not seen the server's definition since it last changed.
    Unknown,
}

/// Checks `tool` (the name the host registered) against its pin; `own` is its server's name
/// for it, under which `seen` holds the server's definition.
pub(crate) fn check(tools: &RelayTools, seen: &Seen, tool: &str, own: &str) -> PinCheck {
    let Some(pin) = tools.pin(tool) else {
        return PinCheck::Pass;
    };
    let pinned = pin_text(&pin);
    let changed = |now: &str| {
        PinCheck::Changed(format!(
            "the server's definition of tool {tool:?} is not the one the host pinned (pinned {pinned}, the server now advertises {now}); the host must review it and re-pin it in its tools file"
        ))
    };
    match seen.tools.get(own) {
        Some(Definition::Digest(digest)) if *digest == pin => PinCheck::Pass,
        Some(Definition::Digest(digest)) => changed(&pin_text(digest)),
        Some(Definition::Unreadable(why)) => changed(&format!("a definition that cannot be hashed: {why}")),
        None if seen.complete => changed("no definition: it is no longer in the server's tools/list"),
        None => PinCheck::Unknown,
    }
}

/// Records the definitions in one `tools/list` answer (a whole JSON-RPC message); returns
/// the `nextCursor`, if any. `None` when the answer holds no readable tool list.
fn observe(seen: &mut HashMap<String, Definition>, message: &[u8]) -> Option<Option<String>> {
    let env = Envelope::parse(message).ok()?;
    let result = Members::parse(env.result?).ok()?;
    let items: Vec<&RawValue> = serde_json::from_str(result.get("tools")?.get()).ok()?;
    for item in items {
        let Some(name) = Members::parse(item)
            .ok()
            .and_then(|m| m.get("name"))
            .and_then(|n| serde_json::from_str::<String>(n.get()).ok())
        else {
            continue;
        };
        let definition = match aml_core::strict::parse_str(item.get()) {
            Ok(value) => match definition_digest(&value) {
                Ok(digest) => Definition::Digest(digest),
                Err(e) => Definition::Unreadable(e.to_string()),
            },
            Err(e) => Definition::Unreadable(e.to_string()),
        };
        // Two definitions under one name: neither can be trusted to be the one a client uses.
        let twice = |held: &Definition| match (held, &definition) {
            (Definition::Digest(a), Definition::Digest(b)) => a != b,
            _ => true,
        };
        if seen.get(&name).is_some_and(twice) {
            let why = "the server advertises it more than once, with different definitions";
            seen.insert(name, Definition::Unreadable(why.into()));
        } else {
            seen.insert(name, definition);
        }
    }
    let cursor = result
        .get("nextCursor")
        .and_then(|c| serde_json::from_str::<Option<String>>(c.get()).ok())
        .flatten();
    Some(cursor)
}

/// Records `server`'s `tools/list` answer relayed to the client (and its tool names, for
/// [`super::advertised`]).
pub(crate) fn observe_answer(relay: &Relay, state: &mut State, server: ServerId, message: &[u8]) {
    let mut found = HashMap::new();
    if let Some(cursor) = observe(&mut found, message) {
        let names: Vec<String> = found.keys().cloned().collect();
        let Some(seen) = state.seen.get_mut(server) else {
            return;
        };
        seen.tools.extend(found);
        super::advertised::page(relay, state, server, names, cursor.is_none());
    }
}

/// Fetches `server`'s whole `tools/list` (every page): what was seen, complete (for the
/// engine to keep, [`super::machine::CallEvent::Listed`]).
pub(crate) async fn fetch(session: &Session, server: ServerId) -> Result<Seen, String> {
    let mut found = HashMap::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let reply = request_page(session, server, cursor.as_deref()).await?;
        let body = match &reply.body {
            Ok(_) => observe(&mut found, &reply.message),
            Err(error) => {
                let error = String::from_utf8_lossy(&reply.message[error.clone()]).into_owned();
                return Err(format!("the server answered tools/list with an error: {error}"));
            }
        };
        match body {
            None => return Err("the server's tools/list answer holds no readable tool list".into()),
            Some(None) => {
                return Ok(Seen {
                    tools: found,
                    complete: true,
                })
            }
            Some(Some(next)) => cursor = Some(next),
        }
    }
    Err(format!("the server's tools/list has more than {MAX_PAGES} pages"))
}

/// Sends one `tools/list` of the relay's own and waits for its answer.
async fn request_page(session: &Session, server: ServerId, cursor: Option<&str>) -> Result<Reply, String> {
    let params = cursor
        .map(|c| format!(",\"params\":{{\"cursor\":{}}}", json_string(c)))
        .unwrap_or_default();
    let request = |id| {
        (
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/list\"{params}}}"),
            (),
        )
    };
    session
        .ask(server, None, request)
        .await
        .map_err(|e| format!("tools/list: {e}"))
}

/// Whether a `tools/list` item may be shown: its pin (if any) matches what was seen. A
/// hidden tool is logged, so the host learns of the change before any call is refused.
pub(crate) fn visible(tools: &RelayTools, seen: &Seen, tool: &str, own: &str) -> bool {
    match check(tools, seen, tool, own) {
        PinCheck::Pass => true,
        PinCheck::Changed(why) => {
            tracing::warn!(target: "aml_mcp::relay", tool, "hidden from tools/list: {why}");
            false
        }
        PinCheck::Unknown => false,
    }
}

#[cfg(test)]
#[path = "pins_tests.rs"]
mod tests;

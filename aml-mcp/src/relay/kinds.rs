//! Decisions the relay makes by a message's kind alone, where the kind is what keeps a
//! message away from the gate: a request-only method sent without an `"id"` (a notification
//! to JSON-RPC, which the relay would otherwise pass on untouched), and an answer the other
//! side never asked for. What was audited and why: ADR 007, "Decisions by message kind".

use aml_core::Refusal;

use super::call::tool_named;
use super::jsonrpc::key_text;
use super::jsonrpc::Envelope;
use super::machine::{Asked, Relay, ServerId, State};
use bytes::Bytes;

/// The namespace of every MCP notification, in both protocol eras.
const NOTIFICATIONS: &str = "notifications/";

/// Whether a message without an `"id"` that names `method` is relayed as a notification.
///
/// Every notification MCP defines is named `notifications/…`; any other method is a request
/// (`tools/call`, `tools/list`, `initialize`, `sampling/createMessage`, …) that cannot be
/// answered without an id. A server that dispatches by method alone would still run it, so
/// the relay drops it (with a log line and a record) in either direction instead of passing
/// it on where the gate cannot see it. A name rather than a list of the methods the gate acts
/// on, so that a method the gate learns to act on later is covered without being listed here.
///
/// ```
/// use aml_mcp::relay::is_notification_method;
/// assert!(is_notification_method("notifications/initialized"));
/// assert!(!is_notification_method("tools/call"));
/// assert!(!is_notification_method("notifications"));
/// ```
pub fn is_notification_method(method: &str) -> bool {
    method.len() > NOTIFICATIONS.len() && method.starts_with(NOTIFICATIONS)
}

/// A client's request without an id: not relayed (it cannot be answered either); logged and
/// recorded as a malformed request, under the tool it names for a `tools/call`.
pub(crate) fn drop_client_request_without_id(relay: &Relay, method: &str, env: &Envelope<'_>) {
    let tool = match method {
        "tools/call" => tool_named(env),
        _ => String::new(),
    };
    let named = if tool.is_empty() { method.to_owned() } else { tool };
    tracing::warn!(target: "aml_mcp::relay", method, tool = %named,
                   "a client request without an \"id\" was dropped: it was not relayed, run or answered");
    let detail = format!(
        "{method} sent without an \"id\" (as a notification): a request needs an id to be answered, so nothing was relayed or run"
    );
    relay.record_refusal(&named, Refusal::MalformedRequest, detail);
}

/// A server's request without an id (`sampling/createMessage` as a notification, say): not
/// relayed to the client, whose settings the host's refusal of such requests protects;
/// logged and recorded.
pub(crate) fn drop_server_request_without_id(relay: &Relay, server: &str, method: &str) {
    tracing::warn!(target: "aml_mcp::relay", server, method,
                   "a server request without an \"id\" was dropped: it was not relayed to the client");
    let detail = format!(
        "the server sent {method} without an \"id\" (as a notification); a request needs an id, so it was not relayed to the client"
    );
    relay.record_refusal(method, Refusal::ServerRequestRefused, detail);
}

/// Notes that `server`'s request with id `id` (raw text) goes to the client, and returns
/// the id the client is to see it under: the server's own with one server, else one of the
/// relay's (two servers may use one id). `None` when the client already owes `server` as
/// many answers as the relay keeps track of: the request is then not relayed.
pub(crate) fn expect_client_answer(
    relay: &Relay,
    state: &mut State,
    server: ServerId,
    id: &[u8],
) -> Option<Bytes> {
    let owed = state
        .asked
        .values()
        .filter(|asked| asked.server == server)
        .count();
    if owed >= relay.config.max_in_flight {
        return None;
    }
    let seen_as = match state.servers {
        1 => Bytes::copy_from_slice(id),
        _ => Bytes::from(format!("\"{SERVER_REQUEST_PREFIX}{}\"", relay.next_id())),
    };
    let server_id = Bytes::copy_from_slice(id);
    state
        .asked
        .insert(key_text(&seen_as), Asked { server, server_id });
    Some(seen_as)
}

/// The prefix of the ids the client sees servers' requests under when the gate fronts
/// several servers.
const SERVER_REQUEST_PREFIX: &str = "aml-server-request-";

/// The server request that the client's answer with id `id` (raw text) answers, when the
/// relay passed one to it under that id (each is relayed once); an answer to anything else
/// is dropped, logged: no server asked the client that (a request the host refused, a
/// made-up id).
pub(crate) fn takes_client_answer(state: &mut State, id: &[u8]) -> Option<Asked> {
    let asked = state.asked.remove(&key_text(id));
    if asked.is_none() {
        tracing::warn!(target: "aml_mcp::relay", id = %String::from_utf8_lossy(id),
                       "the client answered no request the server sent it; dropped");
    }
    asked
}

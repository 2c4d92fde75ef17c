//! Messages from the server: answers routed to what waits for them, unreadable ones failing
//! the request they name, server requests relayed or refused by host setting, and a server
//! that sends the client's own requests back.

use bytes::Bytes;
use serde_json::value::RawValue;

use super::answer::{filter_tools_list, relay_reply, without_task_calls};
use super::endpoint::{EndpointId, STANDING};
use super::frame::Inbound;
use super::jsonrpc::{self, error_response, key_text, range_in, scan_id, splice, Envelope, Kind, Members};
use super::kinds::{drop_server_request_without_id, expect_client_answer, is_notification_method};
use super::machine::{Pending, Reply, State, Step};
use super::pins::{observe_answer, visible};
use super::ServerRequestPolicy;
use crate::ForwardError;

/// Where a 2026-07-28 subscription's notifications carry the id of the request that opened it.
const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";
use aml_core::Refusal;

pub(super) fn on_upstream(step: &mut Step<'_>, inbound: Inbound) {
    let relay = step.relay;
    let bytes = match inbound {
        // A server's transport has no trace context for the relay.
        Inbound::Message(bytes) | Inbound::Traced { message: bytes, .. } => bytes,
        Inbound::Oversized { prefix, len } => {
            let why = format!(
                "a message of {len} bytes, over the limit of {} bytes",
                relay.config.max_message_bytes
            );
            return unreadable(step, scan_id(&prefix), why);
        }
    };
    // JSON text is UTF-8; serde skips the members the relay does not read without checking
    // their bytes, so the check is here, before anything is relayed.
    if let Err(e) = std::str::from_utf8(&bytes) {
        let why = format!("not JSON-RPC (not UTF-8 at byte {})", e.valid_up_to());
        return unreadable(step, scan_id(&bytes), why);
    }
    let env = match Envelope::parse(&bytes) {
        Ok(env) => env,
        Err(e) => return unreadable(step, scan_id(&bytes), format!("not JSON-RPC ({e})")),
    };
    match env.kind() {
        Ok(Kind::Response) => {
            let body = match (env.result, env.error) {
                (Some(result), _) => Ok(range_in(&bytes, result)),
                (None, Some(error)) => Err(range_in(&bytes, error)),
                _ => return,
            };
            if let Some(id) = env.id {
                let answer = Reply {
                    id: range_in(&bytes, id),
                    body,
                    message: bytes.clone(),
                };
                reply(step, id.get(), answer);
            }
        }
        Ok(Kind::Request) => {
            let method = env.method.as_deref().unwrap_or_default();
            if matches!(method, "initialize" | "server/discover") {
                // Only clients send these: the "server" sends our requests back.
                return echoed(step, method);
            }
            let policy = match method {
                "sampling/createMessage" => relay.config.sampling,
                "elicitation/create" => relay.config.elicitation,
                _ => ServerRequestPolicy::Relay,
            };
            let Some(id) = env.id else { return };
            match policy {
                ServerRequestPolicy::Refuse => refuse_server_request(step, id.get(), method),
                // Say so at once rather than let the server wait for nobody.
                _ if !step.state.one_client => {
                    let message = format!(
                        "{}: no client can answer a server request here (2026-07-28 stateless HTTP has no stream for it)",
                        relay.config.product
                    );
                    step.upstream(error_response(Some(id.get().as_bytes()), -32601, &message, None));
                }
                _ if expect_client_answer(relay, step.state, id.get().as_bytes()) => {
                    step.notify(STANDING, bytes.clone())
                }
                _ => {
                    let message = format!(
                        "{}: {} requests of this server already wait for the client's answer (the limit); not relayed",
                        relay.config.product, relay.config.max_in_flight
                    );
                    let answer = error_response(
                        Some(id.get().as_bytes()),
                        jsonrpc::REFUSED_BY_HOST,
                        &message,
                        None,
                    );
                    step.upstream(answer);
                }
            }
        }
        Ok(Kind::Notification) if !is_notification_method(env.method.as_deref().unwrap_or_default()) => {
            drop_server_request_without_id(relay, env.method.as_deref().unwrap_or_default())
        }
        Ok(Kind::Notification) => {
            if env.method.as_deref() == Some("notifications/tools/list_changed") {
                // Pinned tools are unknown until the next list (ADR 018).
                step.state.seen.forget();
            }
            let progress = env.method.as_deref() == Some("notifications/progress");
            let routed = if progress {
                progress_for_endpoint(step.state, &bytes, env.params)
            } else {
                subscription_for_client(step.state, &bytes, env.params)
            };
            match routed {
                Some((endpoint, renamed)) => step.notify(endpoint, renamed),
                None => step.notify(STANDING, bytes.clone()),
            }
        }
        Err(why) => {
            let id = env.id.map(|id| Bytes::copy_from_slice(id.get().as_bytes()));
            unreadable(step, id, format!("not a valid JSON-RPC message ({why})"))
        }
    }
}

/// A notification of a 2026-07-28 subscription names it by the id of the
/// `subscriptions/listen` request that opened it: the relay's id, which the client never saw.
/// Returns the subscription's endpoint and the notification with the client's id in its
/// place, when it names a subscription the relay has open (never another kind of request).
fn subscription_for_client(
    state: &State,
    message: &[u8],
    params: Option<&RawValue>,
) -> Option<(EndpointId, Bytes)> {
    let meta = Members::parse(params?).ok()?.get("_meta")?;
    let id = Members::parse(meta).ok()?.get(SUBSCRIPTION_ID_META)?;
    let upstream_id: u64 = id.get().parse().ok()?;
    let (endpoint, client_id) = match state.pending.get(&upstream_id) {
        Some(Pending::Relayed {
            endpoint,
            client_id,
            subscription: true,
            ..
        }) => (*endpoint, client_id),
        _ => return None,
    };
    let renamed = splice(message, &mut [(range_in(message, id), &client_id[..])]);
    Some((endpoint, Bytes::from(renamed)))
}

/// A `notifications/progress` for an endpoint's request: that endpoint, and the
/// notification with a caller's own token in the place of the relay's (one client's token
/// went up as it was).
fn progress_for_endpoint(
    state: &State,
    message: &Bytes,
    params: Option<&RawValue>,
) -> Option<(EndpointId, Bytes)> {
    if state.tokens.is_empty() {
        return None;
    }
    let token = Members::parse(params?).ok()?.get("progressToken")?;
    let (endpoint, client_token) = state.tokens.get(&key_text(token.get().as_bytes()))?;
    if state.one_client {
        return Some((*endpoint, message.clone()));
    }
    let renamed = splice(message, &mut [(range_in(message, token), &client_token[..])]);
    Some((*endpoint, Bytes::from(renamed)))
}

/// The upstream repeats what it is sent: it is not an MCP server. Whoever waits is told.
fn echoed(step: &mut Step<'_>, method: &str) {
    let why = format!(
        "the server sent the client's {method} back instead of answering it: it does not speak MCP (JSON-RPC) on stdio"
    );
    let pending = step.state.take_all_pending();
    for (_, waiting) in pending {
        match waiting {
            Pending::Relayed {
                endpoint, client_id, ..
            } => {
                let message = format!("{}: {why}", step.relay.config.product);
                step.answer_error_at(endpoint, &client_id, jsonrpc::UPSTREAM_GONE, &message);
            }
            // A gated call already sent: it ends unknown, with its receipt (the relay drains
            // its calls before it ends).
            Pending::Call { reply } => {
                let _ = reply.send(Err(ForwardError::UpstreamGone(why.clone())));
            }
            Pending::Cancelled => {}
        }
    }
    step.fail(why);
}

/// Routes the server's answer to what waits for it.
fn reply(step: &mut Step<'_>, id: &str, answer: Reply) {
    let relay = step.relay;
    let Ok(upstream_id) = id.parse::<u64>() else {
        tracing::warn!(target: "aml_mcp::relay", id, "the server answered an id the gate never sent; dropped");
        return;
    };
    let state = &mut *step.state;
    let waiting = state.take_pending(upstream_id);
    if let Some(Pending::Relayed { flight, .. }) = &waiting {
        state.flights.remove(flight);
    }
    match waiting {
        Some(Pending::Relayed {
            endpoint,
            client_id,
            tools_list,
            handshake,
            ..
        }) => {
            let answer = if tools_list {
                observe_answer(relay, state, &answer.message);
                let visible = |tool: &str| visible(&relay.tools, &state.seen, tool);
                filter_tools_list(&answer.message, &client_id, &relay.tools, &visible)
            } else if handshake {
                Some(without_task_calls(&answer, &client_id))
            } else {
                Some(relay_reply(&answer, &client_id, None))
            };
            match answer {
                Some(answer) => step.answer_at(endpoint, Bytes::from(answer)),
                None => {
                    let text = format!("{}: the server's answer could not be read", relay.config.product);
                    step.answer_error_at(endpoint, &client_id, -32603, &text)
                }
            }
        }
        Some(Pending::Call { reply }) => {
            let _ = reply.send(Ok(answer));
        }
        Some(Pending::Cancelled) => {
            tracing::info!(target: "aml_mcp::relay", upstream_id,
                           "the server answered a request after it was cancelled; the answer was dropped");
        }
        None => {
            tracing::warn!(target: "aml_mcp::relay", upstream_id, "the server answered no pending request; dropped");
        }
    }
}

/// A message from the server that cannot be read: if its id names a request in flight,
/// that request fails now; if it names none, it may be a request of the server's, which is
/// answered with an error rather than left waiting; without an id it is dropped (logged).
fn unreadable(step: &mut Step<'_>, id: Option<Bytes>, why: String) {
    let relay = step.relay;
    let upstream_id = id
        .as_ref()
        .and_then(|id| std::str::from_utf8(id).ok()?.parse::<u64>().ok());
    let state = &mut *step.state;
    let waiting = upstream_id.and_then(|id| {
        let waiting = state.take_pending(id)?;
        if let Pending::Relayed { flight, .. } = &waiting {
            state.flights.remove(flight);
        }
        state.pending.insert(id, Pending::Cancelled);
        Some(waiting)
    });
    match waiting {
        Some(Pending::Relayed {
            endpoint, client_id, ..
        }) => {
            let message = format!(
                "{}: the server's answer could not be read: {why}",
                relay.config.product
            );
            step.answer_error_at(endpoint, &client_id, -32603, &message);
        }
        Some(Pending::Call { reply }) => {
            let _ = reply.send(Err(ForwardError::Unreadable(why)));
        }
        Some(Pending::Cancelled) => {
            tracing::info!(target: "aml_mcp::relay", "dropped a late answer from the server that cannot be read: {why}")
        }
        None => {
            tracing::warn!(target: "aml_mcp::relay", "dropped a message from the server: {why}");
            if let Some(id) = id {
                let message = format!("{} could not read this message: {why}", relay.config.product);
                let answer = error_response(Some(&id), jsonrpc::INVALID_REQUEST, &message, None);
                step.upstream(answer);
            }
        }
    }
}

/// A server request the host does not relay: answered with an error, recorded.
fn refuse_server_request(step: &mut Step<'_>, id: &str, method: &str) {
    let relay = step.relay;
    let setting = if method == "sampling/createMessage" {
        "sampling"
    } else {
        "elicitation"
    };
    // Without a standing connection (2026-07-28 stateless HTTP) no setting would help.
    let hint = if step.state.one_client {
        format!("its {setting} setting `relay` allows it")
    } else {
        "and no client here could answer it: 2026-07-28 stateless HTTP has no stream for it".to_owned()
    };
    let message = format!(
        "{}: the host does not relay {method} from this server to the client ({hint})",
        relay.config.product
    );
    relay.record_refusal(method, Refusal::ServerRequestRefused, message.clone());
    let answer = error_response(Some(id.as_bytes()), jsonrpc::REFUSED_BY_HOST, &message, None);
    step.upstream(answer);
}

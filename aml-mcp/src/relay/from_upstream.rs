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
use super::machine::{Pending, Reply, ServerId, State, Step};
use super::pins::{observe_answer, visible};
use super::ServerRequestPolicy;
use crate::ForwardError;

/// Where a 2026-07-28 subscription's notifications carry the id of the request that opened it.
const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";
use aml_core::Refusal;

/// A message (or an oversized frame) from `server`.
pub(super) fn on_upstream(step: &mut Step<'_>, server: ServerId, inbound: Inbound) {
    let relay = step.relay;
    let bytes = match inbound {
        // A server's transport has no trace context for the relay.
        Inbound::Message(bytes) | Inbound::Traced { message: bytes, .. } => bytes,
        Inbound::Oversized { prefix, len } => {
            let why = format!(
                "a message of {len} bytes, over the limit of {} bytes",
                relay.config.max_message_bytes
            );
            return unreadable(step, server, scan_id(&prefix), why);
        }
    };
    // JSON text is UTF-8; serde skips the members the relay does not read without checking
    // their bytes, so the check is here, before anything is relayed.
    if let Err(e) = std::str::from_utf8(&bytes) {
        let why = format!("not JSON-RPC (not UTF-8 at byte {})", e.valid_up_to());
        return unreadable(step, server, scan_id(&bytes), why);
    }
    let env = match Envelope::parse(&bytes) {
        Ok(env) => env,
        Err(e) => return unreadable(step, server, scan_id(&bytes), format!("not JSON-RPC ({e})")),
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
                reply(step, server, id.get(), answer);
            }
        }
        Ok(Kind::Request) => {
            let method = env.method.as_deref().unwrap_or_default();
            if matches!(method, "initialize" | "server/discover") {
                // Only clients send these: the "server" sends our requests back.
                return echoed(step, server, method);
            }
            let policy = match method {
                "sampling/createMessage" => relay.config.sampling,
                "elicitation/create" => relay.config.elicitation,
                _ => ServerRequestPolicy::Relay,
            };
            let Some(id) = env.id else { return };
            match policy {
                ServerRequestPolicy::Refuse => refuse_server_request(step, server, id.get(), method),
                // Say so at once rather than let the server wait for nobody.
                _ if !step.state.one_client => {
                    let message = format!(
                        "{}: no client can answer a server request here (2026-07-28 stateless HTTP has no stream for it)",
                        relay.config.product
                    );
                    step.upstream(
                        server,
                        error_response(Some(id.get().as_bytes()), -32601, &message, None),
                    );
                }
                _ => to_client(step, server, &bytes, id),
            }
        }
        Ok(Kind::Notification) if !is_notification_method(env.method.as_deref().unwrap_or_default()) => {
            let name = step.state.server_name(server);
            drop_server_request_without_id(relay, &name, env.method.as_deref().unwrap_or_default())
        }
        Ok(Kind::Notification) => {
            let method = env.method.as_deref();
            if method == Some("notifications/tools/list_changed") {
                // Pinned tools are unknown until the next list (ADR 018).
                if let Some(seen) = step.state.seen.get_mut(server) {
                    seen.forget();
                }
            }
            if method == Some("notifications/cancelled") && step.state.servers > 1 {
                return server_cancelled(step, server, &bytes, env.params);
            }
            let routed = if method == Some("notifications/progress") {
                progress_for_endpoint(step.state, server, &bytes, env.params)
            } else {
                subscription_for_client(step.state, server, &bytes, env.params)
                    .map_or(Route::Loose, |(endpoint, renamed)| Route::To(endpoint, renamed))
            };
            match routed {
                Route::To(endpoint, renamed) => step.notify(endpoint, renamed),
                Route::Loose => step.notify(STANDING, bytes.clone()),
                Route::Drop => {}
            }
        }
        Err(why) => {
            let id = env.id.map(|id| Bytes::copy_from_slice(id.get().as_bytes()));
            unreadable(step, server, id, format!("not a valid JSON-RPC message ({why})"))
        }
    }
}

/// A notification of a 2026-07-28 subscription names it by the id of the
/// `subscriptions/listen` request that opened it: the relay's id, which the client never saw.
/// Returns the subscription's endpoint and the notification with the client's id in its
/// place, when it names a subscription the relay has open (never another kind of request).
fn subscription_for_client(
    state: &State,
    server: ServerId,
    message: &[u8],
    params: Option<&RawValue>,
) -> Option<(EndpointId, Bytes)> {
    let meta = Members::parse(params?).ok()?.get("_meta")?;
    let id = Members::parse(meta).ok()?.get(SUBSCRIPTION_ID_META)?;
    let upstream_id: u64 = id.get().parse().ok()?;
    let (endpoint, client_id) = match state.pending.get(&(server, upstream_id)) {
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

/// Where a server's notification goes.
enum Route {
    /// To this endpoint, as these bytes.
    To(EndpointId, Bytes),
    /// Where what is tied to no request goes, as it is.
    Loose,
    /// Nowhere.
    Drop,
}

/// A `notifications/progress` for an endpoint's request: that endpoint, and the
/// notification with a caller's own token in the place of the relay's (one client's token
/// went up as it was). Progress under a token of a request sent to another server is
/// dropped.
fn progress_for_endpoint(
    state: &State,
    server: ServerId,
    message: &Bytes,
    params: Option<&RawValue>,
) -> Route {
    if state.tokens.is_empty() {
        return Route::Loose;
    }
    let token = params
        .and_then(|p| Members::parse(p).ok())
        .and_then(|m| m.get("progressToken"));
    let Some(token) = token else { return Route::Loose };
    let Some((endpoint, of, client_token)) = state.tokens.get(&key_text(token.get().as_bytes())) else {
        return Route::Loose;
    };
    if *of != server {
        tracing::debug!(target: "aml_mcp::relay", server, "progress under another server's request's token; dropped");
        return Route::Drop;
    }
    if state.one_client {
        return Route::To(*endpoint, message.clone());
    }
    let renamed = splice(message, &mut [(range_in(message, token), &client_token[..])]);
    Route::To(*endpoint, Bytes::from(renamed))
}

/// A server's request for the client: relayed under the id the client is to see it by,
/// or, when the client already owes that server as many answers as the relay keeps track
/// of, refused to the server.
fn to_client(step: &mut Step<'_>, server: ServerId, bytes: &Bytes, id: &RawValue) {
    let relay = step.relay;
    match expect_client_answer(relay, step.state, server, id.get().as_bytes()) {
        Some(seen_as) if seen_as[..] == *id.get().as_bytes() => step.notify(STANDING, bytes.clone()),
        Some(seen_as) => {
            let renamed = splice(bytes, &mut [(range_in(bytes, id), &seen_as[..])]);
            step.notify(STANDING, Bytes::from(renamed))
        }
        None => {
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
            step.upstream(server, answer);
        }
    }
}

/// A server's `notifications/cancelled` for one of its requests to the client, when the
/// gate fronts several servers: the client saw that request under an id of the relay's, so
/// the notification is passed on under it (and dropped when it names no request the client
/// still owes that server an answer to).
fn server_cancelled(step: &mut Step<'_>, server: ServerId, message: &Bytes, params: Option<&RawValue>) {
    let named = params
        .and_then(|p| Members::parse(p).ok())
        .and_then(|m| m.get("requestId"));
    let Some(named) = named else {
        return step.notify(STANDING, message.clone());
    };
    let server_id = named.get().as_bytes();
    let seen_as = step
        .state
        .asked
        .iter()
        .find(|(_, asked)| asked.server == server && asked.server_id[..] == *server_id)
        .map(|(key, _)| key.clone());
    let Some(seen_as) = seen_as else {
        tracing::debug!(target: "aml_mcp::relay", server, "a server cancelled no request the client owes it an answer to; dropped");
        return;
    };
    // The client owes no answer now; a late one is dropped. The relay's ids have no
    // escapes, so the key is the id's text.
    step.state.asked.remove(&seen_as);
    let renamed = splice(message, &mut [(range_in(message, named), seen_as.as_bytes())]);
    step.notify(STANDING, Bytes::from(renamed));
}

/// The upstream repeats what it is sent: it is not an MCP server. Whoever waits is told. With
/// one server the session cannot go on; with several, only that server is gone.
fn echoed(step: &mut Step<'_>, server: ServerId, method: &str) {
    let why = format!(
        "the server sent the client's {method} back instead of answering it: it does not speak MCP (JSON-RPC) on stdio"
    );
    if step.state.servers > 1 {
        return step.upstream_gone(server, why);
    }
    let pending = step.state.take_all_pending(None);
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

/// Routes `server`'s answer to what waits for it (only a request sent to that server).
fn reply(step: &mut Step<'_>, server: ServerId, id: &str, answer: Reply) {
    let relay = step.relay;
    let Ok(upstream_id) = id.parse::<u64>() else {
        let server = step.state.server_name(server);
        tracing::warn!(target: "aml_mcp::relay", %server, id, "the server answered an id the gate never sent; dropped");
        return;
    };
    let state = &mut *step.state;
    let waiting = state.take_pending(server, upstream_id);
    if let Some(Pending::Relayed {
        flight, gather: None, ..
    }) = &waiting
    {
        state.flights.remove(flight);
    }
    match waiting {
        Some(Pending::Relayed {
            gather: Some(gather), ..
        }) => {
            let said = super::gather::read_answer(&answer.message, &answer.body);
            super::gather::said(step, gather, server, said)
        }
        Some(Pending::Relayed {
            endpoint,
            client_id,
            tools_list,
            handshake,
            paged,
            method,
            ..
        }) => {
            let answer = if tools_list {
                state.tools_listed = true;
                observe_answer(relay, state, server, &answer.message);
                let seen = &state.seen[server];
                let visible = |tool: &str, own: &str| visible(&relay.tools, seen, tool, own);
                let routes = relay.tools.routes();
                let shown = |own: &str| routes.exposed(server, own).map(str::to_owned);
                filter_tools_list(&answer.message, &client_id, &relay.tools, &shown, &visible)
            } else if handshake {
                Some(without_task_calls(&answer, &client_id))
            } else {
                Some(relay_reply(&answer, &client_id, None))
            };
            let answer = match answer {
                Some(answer) if paged => {
                    let answer = match &*method {
                        "prompts/list" => super::prompts::expose_page(relay, state, server, answer),
                        "resources/list" | "resources/templates/list" => {
                            super::resources::note_page(state, server, &method, answer)
                        }
                        _ => answer,
                    };
                    Some(super::pages::with_gate_cursor(state, server, &method, answer))
                }
                answer => answer,
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
            let server = state.server_name(server);
            tracing::info!(target: "aml_mcp::relay", %server, upstream_id,
                           "the server answered a request after it was cancelled; the answer was dropped");
        }
        None => {
            let server = state.server_name(server);
            tracing::warn!(target: "aml_mcp::relay", %server, upstream_id, "the server answered no request of the relay's to it; dropped");
        }
    }
}

/// A message from the server that cannot be read: if its id names a request in flight,
/// that request fails now; if it names none, it may be a request of the server's, which is
/// answered with an error rather than left waiting; without an id it is dropped (logged).
fn unreadable(step: &mut Step<'_>, server: ServerId, id: Option<Bytes>, why: String) {
    let relay = step.relay;
    let upstream_id = id
        .as_ref()
        .and_then(|id| std::str::from_utf8(id).ok()?.parse::<u64>().ok());
    let state = &mut *step.state;
    let waiting = upstream_id.and_then(|id| {
        let waiting = state.take_pending(server, id)?;
        if let Pending::Relayed {
            flight, gather: None, ..
        } = &waiting
        {
            state.flights.remove(flight);
        }
        state.pending.insert((server, id), Pending::Cancelled);
        Some(waiting)
    });
    match waiting {
        Some(Pending::Relayed {
            gather: Some(gather), ..
        }) => super::gather::said(
            step,
            gather,
            server,
            Err(format!("its answer cannot be read: {why}")),
        ),
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
            let server = step.state.server_name(server);
            tracing::info!(target: "aml_mcp::relay", %server, "dropped a late answer from the server that cannot be read: {why}")
        }
        None => {
            let name = step.state.server_name(server);
            tracing::warn!(target: "aml_mcp::relay", server = %name, "dropped a message from the server: {why}");
            if let Some(id) = id {
                let message = format!("{} could not read this message: {why}", relay.config.product);
                let answer = error_response(Some(&id), jsonrpc::INVALID_REQUEST, &message, None);
                step.upstream(server, answer);
            }
        }
    }
}

/// A server request the host does not relay: answered with an error, recorded.
fn refuse_server_request(step: &mut Step<'_>, server: ServerId, id: &str, method: &str) {
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
    step.upstream(server, answer);
}

//! Who a request is from: a static bearer token, a JWT of the OAuth issuer (its `sub`), or,
//! with neither configured, its address; and the 401/403/503 answers when none fits. A
//! refused request reaches nothing; each refusal is logged, never with the token.

use std::net::SocketAddr;

use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::StatusCode;

use super::handler::{refuse, Reply};
use super::Shared;
use crate::auth::{self, Client};
use crate::oauth::{Rejection, Verdict, Verifier};

/// The scopes an OAuth client's token holds (`None`: a static token or no authentication,
/// which per-tool scopes do not apply to).
pub(super) type Granted = Option<std::sync::Arc<[String]>>;

/// The request's client and its token's scopes, or the answer that refuses it.
pub(super) async fn client_of(
    shared: &Shared,
    peer: SocketAddr,
    headers: &HeaderMap,
) -> Result<(Client, Granted), Reply> {
    let (tokens, verifier) = (&shared.config.tokens, shared.oauth.as_deref());
    if tokens.is_none() && verifier.is_none() {
        return Ok((Client::Address(peer.ip()), None));
    }
    let presented = headers.get(header::AUTHORIZATION).map(HeaderValue::as_bytes);
    if let Some(id) = tokens.as_ref().and_then(|t| t.identify_header(presented)) {
        return Ok((Client::Token(id), None));
    }
    let token = presented.and_then(auth::bearer);
    let Some(verifier) = verifier else {
        tracing::warn!(target: "aml_mcp_http", %peer, token_sent = presented.is_some(), "refused: no valid bearer token");
        return Err(unauthorized(None, false));
    };
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        tracing::warn!(target: "aml_mcp_http", %peer, token_sent = presented.is_some(), "refused: no bearer token (answered 401 with the resource metadata URL)");
        return Err(unauthorized(Some(verifier), false));
    };
    let Ok(token) = std::str::from_utf8(token) else {
        tracing::warn!(target: "aml_mcp_http", %peer, "refused: the bearer token is not text");
        return Err(unauthorized(Some(verifier), true));
    };
    match verifier.verify(token).await {
        Verdict::Accepted(accepted) => Ok((
            Client::Subject(accepted.subject.into()),
            Some(accepted.scopes.into()),
        )),
        Verdict::Rejected(Rejection::Invalid(why)) => {
            tracing::warn!(target: "aml_mcp_http", %peer, "refused: bearer token: {why}");
            Err(unauthorized(Some(verifier), true))
        }
        Verdict::Rejected(Rejection::UnknownKey(kid)) => {
            tracing::warn!(target: "aml_mcp_http", %peer, "refused: bearer token: signed with key {kid:?}, which the issuer's key set lacks");
            Err(unauthorized(Some(verifier), true))
        }
        Verdict::Rejected(Rejection::InsufficientScope(missing)) => {
            tracing::warn!(target: "aml_mcp_http", %peer, "refused: bearer token lacks scope {}", missing.join(" "));
            Err(forbidden(verifier, &[]))
        }
        Verdict::Unavailable(why) => {
            tracing::error!(target: "aml_mcp_http", %peer, "refused: cannot check the bearer token: {why}");
            Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                "the authorization server's keys cannot be fetched: try again later",
            ))
        }
    }
}

/// `401`: with OAuth, naming the metadata (and `invalid_token` when a token was sent).
fn unauthorized(verifier: Option<&Verifier>, token_sent: bool) -> Reply {
    let mut reply = refuse(StatusCode::UNAUTHORIZED, None, "a valid bearer token is required");
    let challenge = match verifier {
        None => "Bearer realm=\"mcp\"".to_owned(),
        Some(v) => {
            let error = if token_sent {
                "error=\"invalid_token\", "
            } else {
                ""
            };
            let scope = match v.oauth.scopes.is_empty() {
                true => String::new(),
                false => format!("scope=\"{}\", ", v.oauth.scopes.join(" ")),
            };
            format!("Bearer {error}{scope}resource_metadata=\"{}\"", v.metadata_url)
        }
    };
    set_challenge(&mut reply, &challenge);
    reply
}

/// `403` for a valid token without the required scopes: those of every request, and `more`
/// (a tool's), so the client can ask for all it needs.
fn forbidden(verifier: &Verifier, more: &[String]) -> Reply {
    let mut reply = refuse(
        StatusCode::FORBIDDEN,
        None,
        "the bearer token lacks a required scope",
    );
    let mut needed: Vec<&str> = verifier.oauth.scopes.iter().map(String::as_str).collect();
    needed.extend(
        more.iter()
            .map(String::as_str)
            .filter(|s| !verifier.oauth.scopes.iter().any(|g| g == s)),
    );
    let challenge = format!(
        "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
        needed.join(" "),
        verifier.metadata_url
    );
    set_challenge(&mut reply, &challenge);
    reply
}

/// `403` when a body's `tools/call`s name a tool whose scopes (the host's catalog) the
/// token lacks; `None` lets the request on (no per-tool scopes, a static token, or a body
/// that is answered as malformed later).
pub(super) fn tool_scopes_refusal(
    shared: &Shared,
    peer: SocketAddr,
    granted: Option<&[String]>,
    body: &bytes::Bytes,
) -> Option<Reply> {
    let (Some(granted), Some(per_tool), Some(verifier)) =
        (granted, &shared.config.tool_scopes, shared.oauth.as_deref())
    else {
        return None;
    };
    let mut missing: Vec<String> = Vec::new();
    for message in crate::message::split(body).ok()? {
        let Some(tool) = crate::message::Peek::of(&message).and_then(|p| p.tool) else {
            continue;
        };
        for scope in per_tool.of(&tool) {
            if !granted.contains(&scope) && !missing.contains(&scope) {
                missing.push(scope);
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    tracing::warn!(target: "aml_mcp_http", %peer, "refused: a tools/call needs scope {} the bearer token lacks", missing.join(" "));
    Some(forbidden(verifier, &missing))
}

fn set_challenge(reply: &mut Reply, challenge: &str) {
    // Scopes and the audience were checked for header-safe characters when configured.
    if let Ok(value) = HeaderValue::from_str(challenge) {
        reply.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
}

/// The RFC 9728 document, when `path` is one of its paths (served without a token).
pub(super) fn metadata(shared: &Shared, path: &str, method: &hyper::Method) -> Option<Reply> {
    let verifier = shared.oauth.as_deref()?;
    if !verifier.metadata_paths.iter().any(|p| p == path) {
        return None;
    }
    if method != hyper::Method::GET {
        let mut reply = refuse(StatusCode::METHOD_NOT_ALLOWED, None, "use GET");
        reply
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return Some(reply);
    }
    Some(super::handler::json_reply(
        StatusCode::OK,
        verifier.metadata.clone(),
    ))
}

//! Requests: who may ask (host, token, origin), and what each path does.

use std::collections::BTreeMap;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use super::page::{escape, listing, page};
use super::{form, State};
use crate::statement::{Statement, StatementDecision, Validity};

/// Largest accepted form body.
const MAX_BODY: usize = 16 * 1024;

/// Answers one request, and records it (`debug` level, target `aml.approval`).
pub(super) async fn handle(request: Request<Incoming>, state: &State) -> Response<Full<Bytes>> {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = route(request, state).await;
    tracing::debug!(target: "aml.approval", %method, %path, status = response.status().as_u16(), "approval page request");
    response
}

async fn route(request: Request<Incoming>, state: &State) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let host = parts.headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if !host.is_some_and(|h| state.authorities.iter().any(|a| a.eq_ignore_ascii_case(h))) {
        return text(
            StatusCode::MISDIRECTED_REQUEST,
            "this page answers only to its own address",
        );
    }
    let Some(mut params) = form::parse(parts.uri.query().unwrap_or("")) else {
        return text(StatusCode::BAD_REQUEST, "malformed query string");
    };
    if parts.method == Method::POST {
        if let Err(why) = same_origin(&parts.headers, state) {
            tracing::warn!(target: "aml.approval", why, "approval page: state change refused");
            return text(StatusCode::FORBIDDEN, why);
        }
        let form_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if !form_type {
            return text(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "a decision is an application/x-www-form-urlencoded form",
            );
        }
        let read = tokio::time::timeout(
            state.limits.request_timeout,
            Limited::new(body, MAX_BODY).collect(),
        )
        .await;
        let bytes = match read {
            Err(_) => return text(StatusCode::REQUEST_TIMEOUT, "the request body was too slow"),
            Ok(Err(e)) if e.is::<LengthLimitError>() => {
                return text(StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large")
            }
            Ok(Err(_)) => return text(StatusCode::BAD_REQUEST, "the request body was cut off"),
            Ok(Ok(collected)) => collected.to_bytes(),
        };
        let Some(fields) = std::str::from_utf8(&bytes).ok().and_then(form::parse) else {
            return text(StatusCode::BAD_REQUEST, "malformed form body");
        };
        params.extend(fields);
    }
    let authorized = params
        .get("t")
        .is_some_and(|t| bool::from(t.as_bytes().ct_eq(state.token.as_bytes())));
    if !authorized {
        return text(StatusCode::FORBIDDEN, "missing or wrong token");
    }
    match (&parts.method, parts.uri.path()) {
        (&Method::GET, "/") => {
            let pending = state.pending();
            html(StatusCode::OK, listing(pending.values(), &state.token))
        }
        (&Method::GET, "/pending.json") => respond(
            StatusCode::OK,
            "application/json",
            pending_json(state).to_string(),
        ),
        (&Method::POST, "/decide") => {
            let (status, message) = decide(state, &params);
            let body = page(
                "Decision",
                &format!(
                    "<p class=\"result\">{}</p><p><a href=\"/?t={}\">Back to pending proposals</a></p>",
                    escape(&message),
                    escape(&state.token)
                ),
            );
            html(status, body)
        }
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

/// A state change must come from the page itself: `Origin` names one of the page's own
/// origins (browsers send it with every POST; the page's `Referrer-Policy: same-origin`
/// keeps it from being `null`), and `Sec-Fetch-Site`, when the browser sends it, is
/// `same-origin`.
fn same_origin(headers: &HeaderMap, state: &State) -> Result<(), &'static str> {
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .ok_or("a decision must carry the Origin header of the approval page")?;
    let own = origin.strip_prefix("http://").is_some_and(|authority| {
        state
            .authorities
            .iter()
            .any(|a| a.eq_ignore_ascii_case(authority))
    });
    if !own {
        return Err("cross-origin request refused: a decision must come from the approval page");
    }
    match headers.get("sec-fetch-site").map(HeaderValue::as_bytes) {
        None | Some(b"same-origin") => Ok(()),
        Some(_) => Err("cross-site request refused: a decision must come from the approval page"),
    }
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let mut set = |name: header::HeaderName, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    set(header::CONTENT_TYPE, &format!("{content_type}; charset=utf-8"));
    set(header::CACHE_CONTROL, "no-store");
    set(header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(header::X_FRAME_OPTIONS, "DENY");
    set(header::REFERRER_POLICY, "same-origin");
    set(
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    response
}

fn text(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    respond(status, "text/plain", message.to_owned())
}

fn html(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    respond(status, "text/html", body)
}

fn pending_json(state: &State) -> Value {
    let pending = state.pending();
    Value::Array(
        pending
            .values()
            .map(|e| {
                let p = &e.pending.proposal;
                json!({"grant_id": e.pending.grant_id, "proposal_sha256": p.digest().to_string(), "tool": p.tool(),
                       "effect": p.effect().as_str(), "resource": p.resource(), "purpose": p.purpose(),
                       "canonical_json": p.canonical_json()})
            })
            .collect(),
    )
}

/// Applies one click. Only a click for a proposal still pending, with the digest the page
/// showed, counts; the first click decides.
fn decide(state: &State, params: &BTreeMap<String, String>) -> (StatusCode, String) {
    let field = |k: &str| params.get(k).map(String::as_str).unwrap_or_default();
    let decision = match field("decision") {
        "approve" => StatementDecision::Approve,
        "deny" => StatementDecision::Deny,
        _ => return (StatusCode::BAD_REQUEST, "Unknown decision.".into()),
    };
    let mut pending = state.pending();
    let Some(entry) = pending.get_mut(field("grant_id")) else {
        return (
            StatusCode::CONFLICT,
            "This proposal is no longer pending; nothing was approved.".into(),
        );
    };
    let digest = entry.pending.proposal.digest();
    if digest.to_string() != field("proposal_sha256") {
        return (
            StatusCode::CONFLICT,
            "The proposal changed since this page loaded; nothing was approved. Reload.".into(),
        );
    }
    if entry.answer.is_none() {
        return (StatusCode::CONFLICT, "This proposal was already decided.".into());
    }
    let signed = Validity::lasting(state.clock.now_ms(), state.statement_ttl).and_then(|validity| {
        Statement::new(
            digest,
            entry.pending.grant_id.clone(),
            state.approver.key_id(),
            decision,
            validity,
        )
        .sign(&state.approver)
    });
    let signed = match signed {
        Ok(signed) => signed,
        Err(e) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Could not sign the decision: {e}"),
            )
        }
    };
    let Some(answer) = entry.answer.take() else {
        return (StatusCode::CONFLICT, "This proposal was already decided.".into());
    };
    if let Some(log) = &state.on_decision {
        log(&signed);
    }
    tracing::info!(target: "aml.approval", digest = %digest, grant_id = %entry.pending.grant_id,
                   decision = decision.as_str(), "approval page decision signed");
    let said = match decision {
        StatementDecision::Approve => "Approved",
        StatementDecision::Deny => "Denied",
    };
    match answer.send(signed) {
        Ok(()) => (
            StatusCode::OK,
            format!("{said}. The decision was signed and handed to the boundary."),
        ),
        Err(_) => (
            StatusCode::CONFLICT,
            "The request stopped waiting; nothing was approved.".into(),
        ),
    }
}

//! The wire in: one HTTP request to a tool name and argument bytes, through the gate, and
//! the outcome back as a reply. The checks a request meets, in order: path, method,
//! content type, size, body arrival; then the gate (lookup, schema, strict parse, plan,
//! approval, claim, dispatch).

use std::error::Error as StdError;

use aml_core::{CallOutcome, CallRequest, Refusal};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Bytes};
use hyper::header::{HeaderMap, HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::json;
use tokio::time::Instant;

use crate::reply::CallReply;
use crate::server::HttpToolServer;

/// Where calls go: `POST /tools/{name}`.
pub const TOOLS_PATH: &str = "/tools";

/// Answers one request. Every request under `/tools/` names a tool and is a call: it ends
/// in exactly one record in the gate's sink, whatever was wrong with it.
pub(crate) async fn handle<B>(server: &HttpToolServer, request: Request<B>) -> Response<Full<Bytes>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = match path.strip_prefix(TOOLS_PATH) {
        Some(rest) if rest.starts_with('/') => call(server, request, &rest[1..]).await,
        Some("") if method == Method::GET => listing(server),
        Some("") => with_allow(
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "GET /tools lists the tools",
            ),
            "GET",
        ),
        _ => error(
            StatusCode::NOT_FOUND,
            "not_found",
            "calls are POST /tools/{name}; GET /tools lists the tools",
        ),
    };
    tracing::debug!(target: "aml.http", %method, %path, status = response.status().as_u16(), "request answered");
    response
}

async fn call<B>(server: &HttpToolServer, request: Request<B>, encoded_tool: &str) -> Response<Full<Bytes>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let arrived = Instant::now();
    let limits = server.limits();
    let gate = server.gate();
    let tool = match percent_decode_str(encoded_tool).decode_utf8() {
        Ok(tool) => tool.into_owned(),
        Err(_) => {
            let lossy =
                String::from_utf8_lossy(&percent_decode_str(encoded_tool).collect::<Vec<u8>>()).into_owned();
            let outcome = gate.refuse_request(
                &lossy,
                Refusal::MalformedRequest,
                "the tool name is not UTF-8".into(),
            );
            return refused(&lossy, outcome, StatusCode::BAD_REQUEST);
        }
    };
    let (parts, body) = request.into_parts();
    if parts.method != Method::POST {
        let detail = format!(
            "method {} is not allowed: a call is POST /tools/{{name}}",
            parts.method
        );
        let outcome = gate.refuse_request(&tool, Refusal::MalformedRequest, detail);
        return with_allow(refused(&tool, outcome, StatusCode::METHOD_NOT_ALLOWED), "POST");
    }
    if !is_json(&parts.headers) {
        let detail = "a call's body is its arguments as JSON: Content-Type: application/json".to_owned();
        let outcome = gate.refuse_request(&tool, Refusal::MalformedRequest, detail);
        return refused(&tool, outcome, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
    let too_large = || {
        let detail = format!(
            "the body is larger than {} bytes; it was not read",
            limits.max_body_bytes
        );
        refused(
            &tool,
            gate.refuse_request(&tool, Refusal::RequestTooLarge, detail),
            StatusCode::PAYLOAD_TOO_LARGE,
        )
    };
    if declared_length(&parts.headers).is_some_and(|n| n > limits.max_body_bytes as u64) {
        return too_large();
    }
    let read = tokio::time::timeout(
        limits.read_timeout,
        Limited::new(body, limits.max_body_bytes).collect(),
    )
    .await;
    let arguments = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<LengthLimitError>() => return too_large(),
        Ok(Err(e)) => {
            let detail = format!("the body was cut off: {e}");
            let outcome = gate.refuse_request(&tool, Refusal::MalformedRequest, detail);
            return refused(&tool, outcome, StatusCode::BAD_REQUEST);
        }
        Err(_) => {
            let detail = format!("the body did not arrive within {:?}", limits.read_timeout);
            let outcome = gate.refuse_request(&tool, Refusal::MalformedRequest, detail);
            return refused(&tool, outcome, StatusCode::REQUEST_TIMEOUT);
        }
    };

    // Everything from here is the gate's, on these bytes (ADR 019). If hyper drops this
    // handler (the client went away), nothing is claimed before the claim, and from the
    // claim on the gate finishes the call on its own; at the deadline a tool still running
    // is answered `dispatch_in_progress`.
    let request = CallRequest::bytes(&tool, &arguments).deadline((arrived + limits.call_timeout).into_std());
    let outcome = gate.call(request).await;
    reply(&CallReply::of(&tool, &outcome), None)
}

/// `GET /tools`: what an agent may call, with the input schemas the host enforces.
fn listing(server: &HttpToolServer) -> Response<Full<Bytes>> {
    let tools: Vec<_> = server
        .gate()
        .listing()
        .iter()
        .map(|tool| {
            json!({"name": tool.name(), "description": tool.description(), "effect": tool.effect(),
                   "input_schema": tool.input_schema()})
        })
        .collect();
    respond(StatusCode::OK, json!({"tools": tools}).to_string())
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// A refusal this adapter found, already recorded by the gate, with its own status code.
fn refused(tool: &str, outcome: CallOutcome, code: StatusCode) -> Response<Full<Bytes>> {
    reply(&CallReply::of(tool, &outcome), Some(code))
}

fn reply(reply: &CallReply, code: Option<StatusCode>) -> Response<Full<Bytes>> {
    respond(code.unwrap_or_else(|| reply.status_code()), reply.to_json())
}

/// An answer to a request that is not a call (nothing to record in the receipt stream).
fn error(code: StatusCode, error: &str, detail: &str) -> Response<Full<Bytes>> {
    respond(code, json!({"error": error, "detail": detail}).to_string())
}

fn with_allow(mut response: Response<Full<Bytes>>, allow: &'static str) -> Response<Full<Bytes>> {
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}

pub(crate) fn respond(code: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}

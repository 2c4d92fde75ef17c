//! Requests: who may ask (host, token, origin), and what each path does.

use std::sync::Arc;

use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use super::admission::{Admission, Busy};
use super::api::{self, Answer};
use super::decide::{self, Click};
use super::events::{self, EventBody, View};
use super::page::{ICON, SCRIPT, STYLE};
use super::{form, render, State};

/// Largest accepted request body (a form or a JSON decision).
const MAX_BODY: usize = 16 * 1024;

/// The page's Content-Security-Policy: its own script and style files, nothing inline.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// What a request is answered with: a whole body, or a live stream.
pub(super) type Reply = Either<Full<Bytes>, EventBody>;

/// Answers one request, and records it (`debug` level, target `aml.approval`).
pub(super) async fn handle(
    request: Request<Incoming>,
    state: &Arc<State>,
    admission: &Admission,
) -> Response<Reply> {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = route(request, state, admission).await;
    tracing::debug!(target: "aml.approval", %method, %path, status = response.status().as_u16(), "approval page request");
    response
}

/// Whether `token` is the page's token (in constant time).
fn is_token(state: &State, token: &str) -> bool {
    bool::from(token.as_bytes().ct_eq(state.token.as_bytes()))
}

/// Who is asking, as far as the route is concerned.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// The page in a browser (or a script speaking its forms).
    Page,
    /// An integration on `/api/v1/`.
    Api,
}

impl Caller {
    /// The answer to a missing or wrong token.
    fn unauthorized(self) -> Response<Reply> {
        match self {
            Caller::Page => text(StatusCode::FORBIDDEN, "missing or wrong token"),
            Caller::Api => {
                let mut response = json_response(
                    StatusCode::UNAUTHORIZED,
                    &json!({"error": "unauthorized", "message": "missing or wrong token (Authorization: Bearer TOKEN)"}),
                );
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                response
            }
        }
    }

    fn refuse(self, status: StatusCode, code: &str, message: &str) -> Response<Reply> {
        match self {
            Caller::Page => text(status, message),
            Caller::Api => json_response(status, &json!({"error": code, "message": message})),
        }
    }
}

/// Moves the connection to the proven pool; the answer instead, if it has no place there.
fn prove(admission: &Admission, caller: Caller) -> Option<Response<Reply>> {
    let Busy = admission.prove().err()?;
    Some(caller.refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "busy",
        "too many requests with the token open at once; try again in a moment",
    ))
}

/// The token in an `Authorization: Bearer` header, if there is one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

async fn route(request: Request<Incoming>, state: &Arc<State>, admission: &Admission) -> Response<Reply> {
    let (parts, body) = request.into_parts();
    let caller = if parts.uri.path().starts_with("/api/") {
        Caller::Api
    } else {
        Caller::Page
    };
    let host = parts.headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if !host.is_some_and(|h| state.authorities.iter().any(|a| a.eq_ignore_ascii_case(h))) {
        return caller.refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "wrong_host",
            "this page answers only to its own address",
        );
    }
    let Some(mut params) = form::parse(parts.uri.query().unwrap_or("")) else {
        return caller.refuse(StatusCode::BAD_REQUEST, "bad_request", "malformed query string");
    };
    // A token in the URL or the Authorization header is checked before anything else is
    // read: a wrong one is refused at once, the right one makes this an approver's
    // connection.
    let mut authorized = false;
    let shown_token = params
        .get("t")
        .map(String::as_str)
        .or_else(|| bearer(&parts.headers))
        .map(str::to_owned);
    if let Some(token) = shown_token {
        if !is_token(state, &token) {
            return caller.unauthorized();
        }
        if let Some(refused) = prove(admission, caller) {
            return refused;
        }
        authorized = true;
    }
    let post = parts.method == Method::POST;
    if post || caller == Caller::Api {
        if let Err(why) = same_origin(&parts.headers, state, post) {
            tracing::warn!(target: "aml.approval", why, path = parts.uri.path(), "approval page: request from elsewhere refused");
            return caller.refuse(StatusCode::FORBIDDEN, "foreign_origin", why);
        }
    }
    let mut body_bytes = Bytes::new();
    if post {
        let (wanted, what) = match caller {
            Caller::Page => (
                "application/x-www-form-urlencoded",
                "a decision is an application/x-www-form-urlencoded form",
            ),
            Caller::Api => (
                "application/json",
                "a decision is a JSON object (Content-Type: application/json)",
            ),
        };
        let typed = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(wanted));
        if !typed {
            return caller.refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", what);
        }
        let read = tokio::time::timeout(
            state.limits.request_timeout,
            Limited::new(body, MAX_BODY).collect(),
        )
        .await;
        body_bytes = match read {
            Err(_) => {
                return caller.refuse(
                    StatusCode::REQUEST_TIMEOUT,
                    "timeout",
                    "the request body was too slow",
                )
            }
            Ok(Err(e)) if e.is::<LengthLimitError>() => {
                return caller.refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    "the request body is too large",
                )
            }
            Ok(Err(_)) => {
                return caller.refuse(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "the request body was cut off",
                )
            }
            Ok(Ok(collected)) => collected.to_bytes(),
        };
        if caller == Caller::Page {
            let Some(fields) = std::str::from_utf8(&body_bytes).ok().and_then(form::parse) else {
                return text(StatusCode::BAD_REQUEST, "malformed form body");
            };
            // The page's own form carries the token in its body.
            if !authorized && fields.get("t").is_some_and(|t| is_token(state, t)) {
                if let Some(refused) = prove(admission, caller) {
                    return refused;
                }
                authorized = true;
            }
            params.extend(fields);
        }
    }
    if !authorized {
        return caller.unauthorized();
    }
    let view = if params.get("view").is_some_and(|v| v == "page") {
        View::Page
    } else {
        View::Api
    };
    let path = parts.uri.path();
    match (&parts.method, path) {
        (&Method::GET, "/") => {
            let query = api::history_query(&params).unwrap_or_default();
            let history = api::search(state, &query).await;
            let board = state.board();
            let html = render::listing(state, &board, &history, &query);
            respond(StatusCode::OK, "text/html", html)
        }
        (&Method::GET, "/app.js") => respond(StatusCode::OK, "text/javascript", SCRIPT.to_owned()),
        (&Method::GET, "/app.css") => respond(StatusCode::OK, "text/css", STYLE.to_owned()),
        (&Method::GET, "/icon.svg") => respond(StatusCode::OK, "image/svg+xml", ICON.to_owned()),
        (&Method::GET, "/pending.json") => {
            let board = state.board();
            let list: Vec<Value> = board.in_arrival_order().map(api::pending_value).collect();
            json_response(StatusCode::OK, &Value::Array(list))
        }
        (&Method::GET, "/withdrawn.json") => {
            let board = state.board();
            let list: Vec<Value> = board.recent_undecided().map(api::history_value).collect();
            json_response(StatusCode::OK, &Value::Array(list))
        }
        (&Method::POST, "/decide") => {
            let field = |k: &str| params.get(k).map(String::as_str).unwrap_or_default();
            let click = Click {
                grant_id: field("grant_id"),
                proposal_sha256: field("proposal_sha256"),
                decision: field("decision"),
                reason: params.get("reason").map(String::as_str),
            };
            let (status, message) = match decide::decide(state, click).await {
                Ok(decided) => {
                    let said = match decided.outcome.outcome {
                        crate::history::Outcome::Approved => "Approved",
                        _ => "Denied",
                    };
                    (
                        StatusCode::OK,
                        format!("{said}. The decision was signed and handed to the boundary."),
                    )
                }
                Err(refused) => (refused.status, refused.message),
            };
            respond(status, "text/html", render::result(state, &message))
        }
        (&Method::GET, "/api/v1/pending") => answer(api::pending(state, view)),
        (&Method::GET, "/api/v1/events") => stream(state, admission, view),
        (&Method::GET, "/api/v1/history") => answer(api::history(state, &params, view).await),
        (&Method::POST, "/api/v1/decide") => answer(api::decide(state, &body_bytes).await),
        (&Method::GET, _) if path.starts_with("/api/v1/pending/") => {
            let id = &path["/api/v1/pending/".len()..];
            match percent_encoding::percent_decode_str(id).decode_utf8() {
                Ok(id) => answer(api::pending_one(state, &id)),
                Err(_) => caller.refuse(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "the grant id is not UTF-8",
                ),
            }
        }
        (_, "/api/v1/pending" | "/api/v1/events" | "/api/v1/history" | "/api/v1/decide") => caller.refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "GET pending, pending/{grant id}, events and history; POST decide",
        ),
        _ => caller.refuse(StatusCode::NOT_FOUND, "not_found", "not found"),
    }
}

/// `GET /api/v1/events`: the connection becomes a live stream. It gives back its place
/// among the requests with the token and takes a stream's (ADR 020).
fn stream(state: &Arc<State>, admission: &Admission, view: View) -> Response<Reply> {
    admission.become_stream();
    let (slot, closing) = state.streams.open();
    let body = events::start(Arc::clone(state), view, slot, closing);
    let mut response = Response::new(Either::Right(body));
    set_headers(response.headers_mut(), "text/event-stream");
    response
}

/// Requests from elsewhere are refused: an `Origin`, when sent (and on every `POST` it
/// must be), names one of the page's own origins (browsers send it with every POST; the
/// page's `Referrer-Policy: same-origin` keeps it from being `null`), and `Sec-Fetch-Site`,
/// when the browser sends it, is `same-origin` (or `none`, a URL the person opened).
fn same_origin(headers: &HeaderMap, state: &State, required: bool) -> Result<(), &'static str> {
    match headers.get(header::ORIGIN).map(|v| v.to_str()) {
        None if required => return Err("a decision must carry the Origin header of the approval page"),
        None => {}
        Some(origin) => {
            let own = origin
                .ok()
                .and_then(|o| o.strip_prefix("http://"))
                .is_some_and(|authority| {
                    state
                        .authorities
                        .iter()
                        .any(|a| a.eq_ignore_ascii_case(authority))
                });
            if !own {
                return Err("cross-origin request refused: it must come from the approval page");
            }
        }
    }
    match headers.get("sec-fetch-site").map(HeaderValue::as_bytes) {
        None | Some(b"same-origin") => Ok(()),
        Some(b"none") if !required => Ok(()),
        Some(_) => Err("cross-site request refused: it must come from the approval page"),
    }
}

fn set_headers(headers: &mut HeaderMap, content_type: &str) {
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
    set(header::CONTENT_SECURITY_POLICY, CSP);
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Reply> {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    set_headers(response.headers_mut(), content_type);
    response
}

fn text(status: StatusCode, message: &str) -> Response<Reply> {
    respond(status, "text/plain", message.to_owned())
}

fn json_response(status: StatusCode, value: &Value) -> Response<Reply> {
    respond(status, "application/json", value.to_string())
}

fn answer(Answer(status, value): Answer) -> Response<Reply> {
    json_response(status, &value)
}

#[cfg(test)]
mod tests {
    use super::{api, form};
    use crate::history::HistoryQuery;

    fn query_of(text: &str) -> Option<HistoryQuery> {
        api::history_query(&form::parse(text)?).ok()
    }

    #[test]
    fn history_filters_come_from_the_query() {
        let q = query_of("t=x&tool=send&caller=&limit=5").unwrap();
        assert_eq!(
            (q.tool.as_deref(), q.caller.as_deref(), q.limit),
            (Some("send"), None, 5)
        );
        assert!(query_of("limit=0").is_none());
        assert!(query_of("limit=many").is_none());
    }
}

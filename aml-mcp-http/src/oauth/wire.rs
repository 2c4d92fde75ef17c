//! The client credentials grant on the wire (RFC 6749 §4.4): the form the token endpoint is
//! sent, client authentication (§2.3.1), the answer read (§5.1, §5.2), and when a token is
//! fetched again.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hyper::header::HeaderValue;
use hyper::StatusCode;

use super::MAX_TOKEN_BYTES;

/// A token without `expires_in` is taken to last this long (the upstream's 401 still
/// replaces it sooner).
pub(crate) const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);
/// The longest lifetime believed (keeps `Instant` arithmetic far from overflowing).
const MAX_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// A token is fetched again at least this long before it expires, when its lifetime allows.
const EARLY: Duration = Duration::from_secs(60);

/// A token the endpoint issued: the `Authorization` value to send, and its lifetime.
#[derive(Debug)]
pub(crate) struct Issued {
    pub(crate) header: HeaderValue,
    pub(crate) lifetime: Duration,
}

/// `application/x-www-form-urlencoded` for one name or value.
pub(crate) fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A form body from its pairs.
pub(crate) fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(name, value)| format!("{}={}", form_encode(name), form_encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// `client_secret_basic`: both parts form-encoded before Base64 (RFC 6749 §2.3.1).
pub(crate) fn basic(client_id: &str, secret: &str) -> String {
    let pair = format!("{}:{}", form_encode(client_id), form_encode(secret));
    format!("Basic {}", STANDARD.encode(pair))
}

/// When to fetch a token again, from when it was asked for: at 80% of its lifetime or
/// [`EARLY`] before it expires, whichever is earlier, but never before half of it (a
/// short-lived token would otherwise be fetched for every request).
pub(crate) fn refresh_after(lifetime: Duration) -> Duration {
    (lifetime * 4 / 5)
        .min(lifetime.saturating_sub(EARLY))
        .max(lifetime / 2)
}

/// Reads the token endpoint's answer: a Bearer token, or why there is none. Text from the
/// server is shortened and stripped of anything but printable ASCII before it is shown.
pub(crate) fn read_answer(status: StatusCode, body: &[u8]) -> Result<Issued, String> {
    let doc = serde_json::from_slice::<serde_json::Value>(body).ok();
    if let Some(error) = doc.as_ref().and_then(|d| d.get("error")) {
        let description = doc
            .as_ref()
            .and_then(|d| d["error_description"].as_str())
            .map(|d| format!(": {}", printable(d)))
            .unwrap_or_default();
        let code = error.as_str().map_or_else(|| "?".into(), printable);
        return Err(format!("refused (HTTP {status}): {code}{description}"));
    }
    if !status.is_success() {
        return Err(format!("answered HTTP {status}"));
    }
    let Some(doc) = doc else {
        return Err("the answer is not JSON".into());
    };
    let token = match doc.get("access_token") {
        Some(serde_json::Value::String(t)) if !t.is_empty() => t,
        Some(_) => return Err("access_token is not a string".into()),
        None => return Err("the answer has no access_token".into()),
    };
    match doc.get("token_type").and_then(|t| t.as_str()) {
        Some(t) if t.eq_ignore_ascii_case("bearer") => {}
        Some(t) => return Err(format!("token_type {:?} is not Bearer", printable(t))),
        None => return Err("the answer has no token_type".into()),
    }
    if token.len() > MAX_TOKEN_BYTES || !is_b64token(token) {
        return Err(format!(
            "the access_token is not a bearer token (RFC 6750 characters, at most {MAX_TOKEN_BYTES} bytes)"
        ));
    }
    let header = HeaderValue::try_from(format!("Bearer {token}"))
        .map_err(|_| "the access_token cannot be sent as a header".to_owned())?;
    Ok(Issued {
        header,
        lifetime: lifetime(doc.get("expires_in"))?,
    })
}

/// `expires_in` in seconds: a number (some servers send a string of digits); absent:
/// [`DEFAULT_LIFETIME`].
fn lifetime(value: Option<&serde_json::Value>) -> Result<Duration, String> {
    let seconds = match value {
        None | Some(serde_json::Value::Null) => return Ok(DEFAULT_LIFETIME),
        Some(serde_json::Value::Number(n)) => n.as_f64(),
        Some(serde_json::Value::String(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    }
    .filter(|s| s.is_finite())
    .ok_or("expires_in is not a number")?;
    Ok(Duration::from_secs_f64(
        seconds.clamp(0.0, MAX_LIFETIME.as_secs_f64()),
    ))
}

/// RFC 6750 §2.1 `b64token`.
fn is_b64token(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(200)
        .collect()
}

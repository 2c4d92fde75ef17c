//! The approval page: a small HTTP server on loopback where a person sees each pending
//! proposal exactly and approves or denies it.
//!
//! Authentication is a per-run secret token in the URL (256 random bits, compared in
//! constant time). Anyone who has the URL can decide, so print it only where the approver
//! sees it. Decisions are signed server-side with the approver's key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::async_trait;
use aml_grants::{Clock, SystemClock};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::hook::{ChannelError, DecisionChannel, PendingApproval};
use crate::html::{escape, page};
use crate::statement::{ApproverKey, SignedStatement, Statement, Verdict, STATEMENT_PROTOCOL};

/// Receives every signed decision the page makes.
pub type DecisionLog = Arc<dyn Fn(&SignedStatement) + Send + Sync>;

struct Entry {
    pending: PendingApproval,
    answer: Option<oneshot::Sender<SignedStatement>>,
}

struct State {
    token: String,
    approver: ApproverKey,
    statement_ttl: Duration,
    clock: Arc<dyn Clock>,
    pending: Mutex<BTreeMap<String, Entry>>,
    log: Option<DecisionLog>,
}

/// The approval page and the [`DecisionChannel`] it serves.
#[derive(Clone)]
pub struct WebApprovals {
    state: Arc<State>,
    address: SocketAddr,
}

impl core::fmt::Debug for WebApprovals {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WebApprovals")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl WebApprovals {
    /// Starts the page on `127.0.0.1:port` (0 for any free port), signing with `approver`.
    pub async fn start(port: u16, approver: ApproverKey, log: Option<DecisionLog>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let address = listener.local_addr()?;
        let mut token = [0u8; 32];
        getrandom::fill(&mut token).map_err(|e| std::io::Error::other(e.to_string()))?;
        let state = Arc::new(State {
            token: crate::hex::encode(&token),
            approver,
            statement_ttl: Duration::from_secs(300),
            clock: Arc::new(SystemClock),
            pending: Mutex::default(),
            log,
        });
        let serving = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&serving);
                tokio::spawn(async move {
                    let _ = serve_connection(stream, &state).await;
                });
            }
        });
        Ok(WebApprovals { state, address })
    }

    /// The page's URL, secret token included.
    pub fn url(&self) -> String {
        format!("http://{}/?t={}", self.address, self.state.token)
    }

    /// How many proposals are waiting.
    pub fn pending_count(&self) -> usize {
        self.state.pending.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The digests of the proposals waiting, in grant-id order.
    pub fn pending_digests(&self) -> Vec<aml_core::Sha256Digest> {
        let pending = self.state.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.values().map(|e| e.pending.proposal.digest()).collect()
    }
}

/// Removes a pending entry when its caller stops waiting (decided, timed out, dropped).
struct Withdraw<'a>(&'a State, String);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.0
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.1);
    }
}

#[async_trait]
impl DecisionChannel for WebApprovals {
    async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError> {
        let (tx, rx) = oneshot::channel();
        let grant_id = pending.grant_id.clone();
        self.state
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                grant_id.clone(),
                Entry {
                    pending,
                    answer: Some(tx),
                },
            );
        let _withdraw = Withdraw(&self.state, grant_id);
        rx.await
            .map_err(|_| ChannelError("the approval page stopped".into()))
    }
}

/// Constant-time comparison, so the token cannot be guessed byte by byte from timing.
fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

struct Request {
    method: String,
    path: String,
    params: BTreeMap<String, String>,
}

const MAX_REQUEST: usize = 16 * 1024;

async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_REQUEST {
            return None;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_owned(), first.next()?.to_owned());
    let length: usize = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    if length > MAX_REQUEST {
        return None;
    }
    while buf.len() < head_end + length {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut params = parse_form(query);
    params.extend(parse_form(
        std::str::from_utf8(&buf[head_end..head_end + length]).ok()?,
    ));
    Some(Request {
        method,
        path: path.to_owned(),
        params,
    })
}

fn parse_form(text: &str) -> BTreeMap<String, String> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((percent_decode(k)?, percent_decode(v)?))
        })
        .collect()
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}; charset=utf-8\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nX-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n\
         Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; form-action 'self'\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

async fn serve_connection(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
    let Some(request) = read_request(&mut stream).await else {
        return respond(&mut stream, "400 Bad Request", "text/plain", "bad request").await;
    };
    let authorized = request
        .params
        .get("t")
        .is_some_and(|t| same_secret(t, &state.token));
    if !authorized {
        return respond(
            &mut stream,
            "403 Forbidden",
            "text/plain",
            "missing or wrong token",
        )
        .await;
    }
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/") => respond(&mut stream, "200 OK", "text/html", &listing(state)).await,
        ("GET", "/pending.json") => {
            respond(
                &mut stream,
                "200 OK",
                "application/json",
                &pending_json(state).to_string(),
            )
            .await
        }
        ("POST", "/decide") => {
            let (status, message) = decide(state, &request.params);
            let body = page(
                "Decision",
                &format!(
                    "<p class=\"result\">{}</p><p><a href=\"/?t={}\">Back to pending proposals</a></p>",
                    escape(&message),
                    state.token
                ),
            );
            respond(&mut stream, status, "text/html", &body).await
        }
        _ => respond(&mut stream, "404 Not Found", "text/plain", "not found").await,
    }
}

fn pending_json(state: &State) -> Value {
    let pending = state.pending.lock().unwrap_or_else(|p| p.into_inner());
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

fn listing(state: &State) -> String {
    let pending = state.pending.lock().unwrap_or_else(|p| p.into_inner());
    if pending.is_empty() {
        return page(
            "Pending proposals",
            "<p class=\"empty\">Nothing is waiting for a decision.</p>",
        );
    }
    let mut body = String::new();
    for entry in pending.values() {
        let p = &entry.pending.proposal;
        let pretty = aml_core::strict::parse_str(p.canonical_json())
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_default();
        let digest = p.digest().to_string();
        body.push_str(&format!(
            "<section class=\"proposal\" data-digest=\"{digest}\">\
             <h2>{tool} <span class=\"effect\">{effect}</span> → {resource}</h2>\
             <p class=\"purpose\">{purpose}</p>\
             <p>SHA-256 of the canonical bytes: <code class=\"digest\">{digest}</code></p>\
             <pre class=\"proposal-json\">{pretty}</pre>\
             <details><summary>Canonical bytes (what is signed and hashed)</summary><pre>{canonical}</pre></details>\
             <form method=\"post\" action=\"/decide\">\
             <input type=\"hidden\" name=\"t\" value=\"{token}\">\
             <input type=\"hidden\" name=\"grant_id\" value=\"{grant}\">\
             <input type=\"hidden\" name=\"proposal_sha256\" value=\"{digest}\">\
             <button type=\"submit\" name=\"decision\" value=\"approve\" class=\"approve\">Approve</button>\
             <button type=\"submit\" name=\"decision\" value=\"deny\" class=\"deny\">Deny</button>\
             </form></section>",
            tool = escape(p.tool()),
            effect = escape(p.effect().as_str()),
            resource = escape(p.resource()),
            purpose = escape(p.purpose()),
            pretty = escape(&pretty),
            canonical = escape(p.canonical_json()),
            token = state.token,
            grant = escape(&entry.pending.grant_id),
        ));
    }
    page("Pending proposals", &body)
}

/// Applies one click. Only a click for a proposal still pending, with the digest the page
/// showed, counts; the first click decides.
fn decide(state: &State, params: &BTreeMap<String, String>) -> (&'static str, String) {
    let field = |k: &str| params.get(k).map(String::as_str).unwrap_or_default();
    let verdict = match field("decision") {
        "approve" => Verdict::Approve,
        "deny" => Verdict::Deny,
        _ => return ("400 Bad Request", "Unknown decision.".into()),
    };
    let mut pending = state.pending.lock().unwrap_or_else(|p| p.into_inner());
    let Some(entry) = pending.get_mut(field("grant_id")) else {
        return (
            "409 Conflict",
            "This proposal is no longer pending; nothing was approved.".into(),
        );
    };
    let digest = entry.pending.proposal.digest().to_string();
    if digest != field("proposal_sha256") {
        return (
            "409 Conflict",
            "The proposal changed since this page loaded; nothing was approved. Reload.".into(),
        );
    }
    let Some(answer) = entry.answer.take() else {
        return ("409 Conflict", "This proposal was already decided.".into());
    };
    let now = state.clock.now_ms();
    let statement = Statement {
        protocol: STATEMENT_PROTOCOL.into(),
        proposal_sha256: digest,
        grant_id: entry.pending.grant_id.clone(),
        approver_key_id: state.approver.key_id().into(),
        decision: verdict,
        issued_at_ms: now,
        expires_at_ms: now.saturating_add(i64::try_from(state.statement_ttl.as_millis()).unwrap_or(i64::MAX)),
    };
    let signed = match statement.sign(&state.approver) {
        Ok(signed) => signed,
        Err(e) => {
            return (
                "500 Internal Server Error",
                format!("Could not sign the decision: {e}"),
            )
        }
    };
    if let Some(log) = &state.log {
        log(&signed);
    }
    let said = if verdict == Verdict::Approve {
        "Approved"
    } else {
        "Denied"
    };
    match answer.send(signed) {
        Ok(()) => (
            "200 OK",
            format!("{said}. The decision was signed and handed to the boundary."),
        ),
        Err(_) => (
            "409 Conflict",
            "The request stopped waiting; nothing was approved.".into(),
        ),
    }
}

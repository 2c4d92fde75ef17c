//! The JSON API beside the page, under `/api/v1/` (docs/APPROVAL.md): the same token (as
//! `Authorization: Bearer`), the same origin checks and the same decisions as the page.

use std::sync::Arc;

use hyper::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

use super::board::Entry;
use super::decide::{self, Click};
use super::events::{self, View};
use super::{render, requester_value, State};
use crate::display::{proposal_fields, shown_lines};
use crate::history::{HistoryEntry, HistoryQuery};

/// A pending request as the API shows it: the proposal exactly, who asks, when it expires,
/// and `display`, the same fields as a person should see them (hidden characters escaped).
pub(super) fn pending_value(entry: &Entry) -> Value {
    let p = &entry.pending.proposal;
    let arguments = Value::Object(p.arguments());
    let pretty = serde_json::to_string_pretty(&arguments).unwrap_or_default();
    let [tool, effect, resource, purpose, canonical] = proposal_fields(p);
    let arguments_shown = shown_lines(&pretty);
    let escaped = [&tool, &effect, &resource, &purpose, &canonical, &arguments_shown]
        .iter()
        .any(|f| f.escaped());
    let [tool, effect, resource, purpose, arguments_shown] =
        [tool, effect, resource, purpose, arguments_shown].map(|f| f.text().to_owned());
    json!({
        "grant_id": entry.pending.grant_id,
        "proposal_sha256": p.digest().to_string(),
        "tool": p.tool(),
        "effect": p.effect().as_str(),
        "resource": p.resource(),
        "purpose": p.purpose(),
        "arguments": arguments,
        "canonical_json": p.canonical_json(),
        "requester": requester_value(&entry.pending.requester),
        "asked_at_ms": entry.asked_at_ms,
        "expires_at_ms": entry.pending.expires_at_ms,
        "display": {"tool": tool, "effect": effect, "resource": resource, "purpose": purpose,
                    "arguments": arguments_shown, "escaped": escaped},
    })
}

/// A decided proposal as the API shows it.
pub(super) fn history_value(entry: &HistoryEntry) -> Value {
    entry.to_value()
}

/// An API answer: JSON with the status.
pub(super) struct Answer(pub(super) StatusCode, pub(super) Value);

fn error(status: StatusCode, code: &str, message: &str) -> Answer {
    Answer(status, json!({"error": code, "message": message}))
}

/// `GET /api/v1/pending`: everything pending, oldest first, and the sequence number of the
/// last change it reflects.
pub(super) fn pending(state: &State, view: View) -> Answer {
    let board = state.board();
    Answer(StatusCode::OK, events::snapshot(state, &board, view))
}

/// `GET /api/v1/pending/{grant id}`: one pending request; `404` with what became of it if
/// it is no longer pending.
pub(super) fn pending_one(state: &State, grant_id: &str) -> Answer {
    let board = state.board();
    match board.get(grant_id) {
        Some(entry) => Answer(StatusCode::OK, json!({"pending": pending_value(entry)})),
        None => Answer(
            StatusCode::NOT_FOUND,
            json!({"error": "not_pending", "message": "no pending request has this grant id",
                   "outcome": board.recent(grant_id).map(history_value)}),
        ),
    }
}

/// The body of `POST /api/v1/decide`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    grant_id: String,
    proposal_sha256: String,
    decision: String,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /api/v1/decide`: `{grant_id, proposal_sha256, decision, reason?}`, exactly as the
/// page's buttons decide.
pub(super) async fn decide(state: &Arc<State>, body: &[u8]) -> Answer {
    let parsed = std::str::from_utf8(body)
        .map_err(|e| e.to_string())
        .and_then(|text| aml_core::strict::parse_str(text).map_err(|e| e.to_string()))
        .and_then(|value| serde_json::from_value::<DecideBody>(value).map_err(|e| e.to_string()));
    let body = match parsed {
        Ok(body) => body,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                &format!(
                    "expected {{\"grant_id\", \"proposal_sha256\", \"decision\": \"approve\"|\"deny\", \"reason\"?}}: {e}"
                ),
            )
        }
    };
    let click = Click {
        grant_id: &body.grant_id,
        proposal_sha256: &body.proposal_sha256,
        decision: &body.decision,
        reason: body.reason.as_deref(),
    };
    match decide::decide(state, click).await {
        Ok(decided) => Answer(
            StatusCode::OK,
            json!({"outcome": history_value(&decided.outcome), "statement": decided.signed.to_value()}),
        ),
        Err(refused) => error(refused.status, refused.code, &refused.message),
    }
}

/// `GET /api/v1/history?tool=&caller=&limit=&before=`: decided proposals, newest first.
pub(super) async fn history(
    state: &State,
    params: &std::collections::BTreeMap<String, String>,
    view: View,
) -> Answer {
    let query = match history_query(params) {
        Ok(query) => query,
        Err(why) => return error(StatusCode::BAD_REQUEST, "bad_request", &why),
    };
    match search(state, &query).await {
        Ok(entries) => {
            let mut answer = json!({"history": entries.iter().map(history_value).collect::<Vec<_>>()});
            if view == View::Page {
                answer["html"] = Value::String(render::history_rows(&entries, &query));
            }
            Answer(StatusCode::OK, answer)
        }
        Err((_, e)) => error(StatusCode::SERVICE_UNAVAILABLE, "history_unavailable", &e),
    }
}

/// The history `query` lists, with the board's own last outcomes merged in: an outcome
/// shows at once, even while (or if) the history is still writing it. On a history error,
/// the board's outcomes and the error.
pub(super) async fn search(
    state: &State,
    query: &HistoryQuery,
) -> Result<Vec<HistoryEntry>, (Vec<HistoryEntry>, String)> {
    let stored = state.history.search(query).await.map_err(|e| e.to_string());
    let board = state.board();
    let mut merged: Vec<HistoryEntry> = board
        .recent_all()
        .rev()
        .filter(|e| query.matches(e))
        .cloned()
        .collect();
    drop(board);
    let (stored, failed) = match stored {
        Ok(stored) => (stored, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    for entry in stored {
        if !merged
            .iter()
            .any(|m| m.grant_id == entry.grant_id && m.outcome == entry.outcome)
        {
            merged.push(entry);
        }
    }
    merged.sort_by_key(|e| std::cmp::Reverse(e.at_ms));
    merged.truncate(query.limit);
    match failed {
        None => Ok(merged),
        Some(e) => Err((merged, e)),
    }
}

/// The history query in a request's parameters (`tool`, `caller`, `limit`, `before`).
pub(super) fn history_query(
    params: &std::collections::BTreeMap<String, String>,
) -> Result<HistoryQuery, String> {
    let number = |name: &str| {
        params
            .get(name)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| format!("{name} must be an integer, not {}", crate::display::quoted(v)))
            })
            .transpose()
    };
    let limit = match number("limit")? {
        None => 50,
        Some(n) if (1..=HistoryQuery::MAX_LIMIT as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(format!(
                "limit must be between 1 and {}, not {n}",
                HistoryQuery::MAX_LIMIT
            ))
        }
    };
    let mut query = HistoryQuery::newest(limit)
        .tool(params.get("tool").map(String::as_str).unwrap_or_default())
        .caller(params.get("caller").map(String::as_str).unwrap_or_default());
    if let Some(before) = number("before")? {
        query = query.before(before);
    }
    Ok(query)
}

//! The page's HTML: pending proposals grouped by digest, each request with who asks and its
//! countdown, and the decided ones. Everything that came from a proposal or a requester is
//! shown through [`shown`] (visible escapes) and then HTML-escaped. The live stream sends
//! the same fragments, so the page looks the same loaded or updated.

use std::time::{Duration, UNIX_EPOCH};

use super::board::{Board, Entry};
use super::page::{escape, page};
use super::{tree, State, NOT_KNOWN};
use crate::display::{shown, ESCAPE_WARNING};
use crate::history::{HistoryEntry, HistoryQuery, Outcome};
use crate::Requester;

/// `text` shown (escapes) and HTML-escaped.
fn safe(text: &str) -> String {
    escape(shown(text).text())
}

/// A time as the page prints it before its script shows local time.
fn when(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    format!(
        "<time data-ms=\"{ms}\" datetime=\"{ms}\">{}</time>",
        httpdate::fmt_http_date(at)
    )
}

/// The time left until `expires_at_ms`, as the countdown starts.
fn left(expires_at_ms: i64, now_ms: i64) -> String {
    let seconds = (expires_at_ms - now_ms).max(0) / 1000;
    if seconds == 0 {
        return "expiring".into();
    }
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02} left")
    } else {
        format!("{m}:{s:02} left")
    }
}

fn requester(who: &Requester) -> String {
    let mut out = String::from("<dl class=\"requester\">");
    for (label, part) in who.parts() {
        match part {
            Some(value) => out.push_str(&format!("<div><dt>{label}</dt><dd>{}</dd></div>", safe(&value))),
            None => out.push_str(&format!(
                "<div><dt>{label}</dt><dd class=\"unknown\">{NOT_KNOWN}</dd></div>"
            )),
        }
    }
    out.push_str("</dl>");
    out
}

/// The hidden fields every decision form carries.
fn decision_fields(entry: &Entry, token: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"t\" value=\"{}\">\
         <input type=\"hidden\" name=\"grant_id\" value=\"{}\">\
         <input type=\"hidden\" name=\"proposal_sha256\" value=\"{}\">",
        escape(token),
        escape(&entry.pending.grant_id),
        entry.pending.proposal.digest()
    )
}

/// One request waiting: who asks, its countdown, and its own Approve and Deny (with an
/// optional reason). Approve and Deny are separate forms, so Enter in the reason field can
/// only deny.
pub(super) fn member(entry: &Entry, token: &str, now_ms: i64) -> String {
    let grant = escape(&entry.pending.grant_id);
    let countdown = match entry.pending.expires_at_ms {
        Some(at) => format!(
            "<span class=\"countdown\" data-expires-at-ms=\"{at}\">{}</span>",
            left(at, now_ms)
        ),
        None => "<span class=\"countdown\">no time limit</span>".into(),
    };
    let fields = decision_fields(entry, token);
    format!(
        "<li class=\"member\" id=\"m-{grant}\" tabindex=\"0\" data-grant=\"{grant}\" data-digest=\"{digest}\">\
         {who}<p class=\"timing\">Asked {asked} · {countdown}</p>\
         <div class=\"actions\">\
         <form method=\"post\" action=\"/decide\" class=\"approve-form\">{fields}\
         <button type=\"submit\" name=\"decision\" value=\"approve\" class=\"approve\">Approve</button></form>\
         <form method=\"post\" action=\"/decide\" class=\"deny-form\">{fields}\
         <input type=\"text\" name=\"reason\" class=\"reason\" maxlength=\"500\" autocomplete=\"off\" \
         placeholder=\"Reason, sent to the agent (optional)\" aria-label=\"Reason for denying, sent to the agent (optional)\">\
         <button type=\"submit\" name=\"decision\" value=\"deny\" class=\"deny\">Deny</button></form>\
         </div><p class=\"status\" role=\"status\"></p></li>",
        digest = entry.pending.proposal.digest(),
        who = requester(&entry.pending.requester),
        asked = when(entry.asked_at_ms),
    )
}

/// Identical pending proposals (one digest): the proposal once, then each request.
pub(super) fn group(members: &[&Entry], token: &str, now_ms: i64) -> String {
    let Some(first) = members.first() else {
        return String::new();
    };
    let p = &first.pending.proposal;
    let (arguments, arguments_escaped) = tree::render(&serde_json::Value::Object(p.arguments()));
    let fields = crate::display::proposal_fields(p);
    let warning = if arguments_escaped || fields.iter().any(|f| f.escaped()) {
        format!("<p class=\"warning\">{}</p>", escape(ESCAPE_WARNING))
    } else {
        String::new()
    };
    let [tool, effect, resource, purpose, canonical] = fields.map(|f| escape(f.text()));
    let digest = p.digest();
    let n = members.len();
    let rows: String = members.iter().map(|m| member(m, token, now_ms)).collect();
    format!(
        "<section class=\"proposal\" id=\"g-{digest}\" data-digest=\"{digest}\">\
         <h2><span class=\"tool\">{tool}</span> <span class=\"effect\">{effect}</span> → <span class=\"resource\">{resource}</span></h2>\
         <p class=\"purpose\">{purpose}</p>{warning}\
         <p class=\"same\"{hidden}><span class=\"n\">{n}</span> identical requests wait for this proposal; each is decided on its own.</p>\
         <p class=\"digest-line\">SHA-256 of the canonical bytes: <code class=\"digest\">{digest}</code></p>\
         <div class=\"arguments\">{arguments}</div>\
         <details class=\"canonical\"><summary>Canonical bytes (what is signed and hashed)</summary><pre>{canonical}</pre></details>\
         <ol class=\"members\">{rows}</ol></section>",
        hidden = if n > 1 { "" } else { " hidden" },
    )
}

/// Every pending group, oldest first.
pub(super) fn groups(board: &Board, token: &str, now_ms: i64) -> String {
    board
        .groups()
        .iter()
        .map(|members| group(members, token, now_ms))
        .collect()
}

fn outcome_label(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Approved => "Approved",
        Outcome::Denied => "Denied",
        Outcome::Expired => "Expired",
        Outcome::Withdrawn => "Withdrawn",
    }
}

/// One decided proposal.
pub(super) fn history_row(entry: &HistoryEntry) -> String {
    let caller = entry.requester.caller().map(shown);
    let who = match &caller {
        Some(c) => format!("asked by {}", escape(c.text())),
        None => format!("caller {NOT_KNOWN}"),
    };
    let by = match &entry.decided_by {
        Some(key) => format!("{} by {}, ", entry.outcome, safe(key)),
        None => String::new(),
    };
    let note = match entry.outcome {
        Outcome::Withdrawn => {
            "<span class=\"note\">stopped waiting before anyone decided it; nothing was approved</span>"
        }
        Outcome::Expired => {
            "<span class=\"note\">its wait for a decision ran out; nothing was approved</span>"
        }
        _ => "",
    };
    let reason = match &entry.reason {
        Some(r) => format!(" <q class=\"why\">{}</q>", safe(r)),
        None => String::new(),
    };
    format!(
        "<li class=\"outcome {kind}\" id=\"h-{grant}\" data-grant=\"{grant}\" data-digest=\"{digest}\" \
         data-tool=\"{tool}\" data-caller=\"{caller_attr}\">\
         <span class=\"badge\">{label}</span> <span class=\"what\"><span class=\"tool\">{tool}</span> \
         <span class=\"effect\">{effect}</span> → <span class=\"resource\">{resource}</span></span> \
         <span class=\"who\">{who}</span> · <span class=\"when\">{by}{at}</span> {note}{reason} \
         <code class=\"digest\" title=\"{digest}\">{short}…</code></li>",
        kind = entry.outcome.as_str(),
        label = outcome_label(entry.outcome),
        grant = escape(&entry.grant_id),
        digest = entry.proposal_sha256,
        short = &entry.proposal_sha256.to_string()[..12],
        tool = safe(&entry.tool),
        effect = safe(&entry.effect),
        resource = safe(&entry.resource),
        caller_attr = caller.map(|c| escape(c.text())).unwrap_or_default(),
        at = when(entry.at_ms),
    )
}

/// Decided proposals, newest first (for `query`).
pub(super) fn history_rows(entries: &[HistoryEntry], query: &HistoryQuery) -> String {
    if entries.is_empty() {
        return match (&query.tool, &query.caller) {
            (None, None) => "<li class=\"empty\">Nothing decided yet.</li>".into(),
            _ => "<li class=\"empty\">Nothing decided matches the search.</li>".into(),
        };
    }
    entries.iter().map(history_row).collect()
}

/// The approval page: what is pending, then what was decided (as `query` asks).
pub(super) fn listing(
    state: &State,
    board: &Board,
    history: &Result<Vec<HistoryEntry>, (Vec<HistoryEntry>, String)>,
    query: &HistoryQuery,
) -> String {
    let now = state.clock.now_ms();
    let token = &state.token;
    let filter = |part: &Option<String>| escape(part.as_deref().unwrap_or_default());
    let data = format!(
        "data-token=\"{}\" data-instance=\"{}\" data-seq=\"{}\" data-now-ms=\"{now}\" \
         data-filter-tool=\"{}\" data-filter-caller=\"{}\"",
        escape(token),
        escape(&state.instance),
        board.seq(),
        filter(&query.tool),
        filter(&query.caller),
    );
    let history = match history {
        Ok(entries) => history_rows(entries, query),
        Err((entries, e)) => format!(
            "<li class=\"error\">The history could not be read: {}</li>{}",
            safe(e),
            entries.iter().map(history_row).collect::<String>()
        ),
    };
    let body = format!(
        "<p class=\"live\" id=\"live\" data-state=\"off\">Live updates are off: reload to see new proposals.</p>\
         <p class=\"keys\">Keyboard: <kbd>j</kbd>/<kbd>k</kbd> (or <kbd>↓</kbd>/<kbd>↑</kbd>) move between requests; \
         <kbd>a</kbd> then <kbd>Enter</kbd> approves; <kbd>d</kbd>, a reason if you like, then <kbd>Enter</kbd> denies; \
         <kbd>Esc</kbd> goes back.</p>\
         <div id=\"pending\"><p class=\"empty\" id=\"empty\"{empty_hidden}>Nothing is waiting for a decision.</p>\
         <div id=\"groups\">{groups}</div></div>\
         <section id=\"history\"><h2>Decided</h2>\
         <form class=\"search\" method=\"get\" action=\"/\"><input type=\"hidden\" name=\"t\" value=\"{token}\">\
         <label>Tool <input type=\"search\" name=\"tool\" value=\"{tool}\"></label> \
         <label>Caller <input type=\"search\" name=\"caller\" value=\"{caller}\"></label> \
         <button type=\"submit\">Search</button></form>\
         <ol id=\"history-list\">{history}</ol></section>",
        empty_hidden = if board.len() == 0 { "" } else { " hidden" },
        groups = groups(board, token, now),
        token = escape(token),
        tool = filter(&query.tool),
        caller = filter(&query.caller),
    );
    page("Pending proposals", token, &data, &body)
}

/// The answer page of a form decision (for browsers without the script).
pub(super) fn result(state: &State, message: &str) -> String {
    page(
        "Decision",
        &state.token,
        "",
        &format!(
            "<p class=\"result\">{}</p><p><a href=\"/?t={}\">Back to pending proposals</a></p>",
            escape(message),
            escape(&state.token)
        ),
    )
}

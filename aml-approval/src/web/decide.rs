//! One decision, from the page's form or the API: only for a proposal still pending, with
//! the digest the person was shown, and only the first counts.

use std::sync::Arc;

use hyper::StatusCode;

use super::{board, State};
use crate::display::quoted;
use crate::history::{HistoryEntry, Outcome};
use crate::statement::{SignedStatement, Statement, StatementDecision, Validity};

/// What the person clicked (or an integration sent).
pub(super) struct Click<'a> {
    pub(super) grant_id: &'a str,
    pub(super) proposal_sha256: &'a str,
    pub(super) decision: &'a str,
    /// A deny's reason; blank is none.
    pub(super) reason: Option<&'a str>,
}

/// Why a click decided nothing.
#[derive(Debug)]
pub(super) struct Refused {
    pub(super) status: StatusCode,
    /// A short, stable name for integrations (`withdrawn`, `already_decided`, …).
    pub(super) code: &'static str,
    pub(super) message: String,
}

fn refused(status: StatusCode, code: &'static str, message: impl Into<String>) -> Refused {
    Refused {
        status,
        code,
        message: message.into(),
    }
}

/// A click that decided: the signed statement handed to the waiting request, and the
/// outcome the history keeps.
pub(super) struct Decided {
    pub(super) signed: SignedStatement,
    pub(super) outcome: HistoryEntry,
}

/// Applies one click: signs the decision and hands it to the waiting request.
pub(super) async fn decide(state: &Arc<State>, click: Click<'_>) -> Result<Decided, Refused> {
    let decision = match click.decision {
        "approve" => StatementDecision::Approve,
        "deny" => StatementDecision::Deny,
        _ => {
            return Err(refused(
                StatusCode::BAD_REQUEST,
                "bad_decision",
                "Unknown decision.",
            ))
        }
    };
    let reason = click.reason.filter(|r| !r.trim().is_empty());
    let now = state.clock.now_ms();
    let decided = {
        let mut board = state.board();
        let Some(entry) = board.get(click.grant_id) else {
            return Err(gone(board.recent(click.grant_id)));
        };
        let digest = entry.pending.proposal.digest();
        if digest.to_string() != click.proposal_sha256 {
            return Err(refused(
                StatusCode::CONFLICT,
                "changed",
                "The proposal changed since this page loaded; nothing was approved. Reload.",
            ));
        }
        let statement = Validity::lasting(now, state.statement_ttl).map(|validity| {
            Statement::new(
                digest,
                entry.pending.grant_id.clone(),
                state.approver.key_id(),
                decision,
                validity,
            )
        });
        let statement = match (statement, reason) {
            (Ok(statement), Some(reason)) => statement.with_reason(reason).map_err(|e| {
                refused(
                    StatusCode::BAD_REQUEST,
                    "bad_reason",
                    format!("The reason cannot be signed ({e}); nothing was decided."),
                )
            })?,
            (Ok(statement), None) => statement,
            (Err(e), _) => {
                return Err(refused(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "signing_failed",
                    format!("Could not sign the decision: {e}"),
                ))
            }
        };
        let signed = statement.sign(&state.approver).map_err(|e| {
            refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                "signing_failed",
                format!("Could not sign the decision: {e}"),
            )
        })?;
        let Some(mut entry) = board.remove(click.grant_id) else {
            return Err(gone(None));
        };
        if let Some(log) = &state.on_decision {
            log(&signed);
        }
        // Handed over under the lock: a request that stopped waiting meanwhile is recorded
        // as withdrawn, not as decided.
        let handed = entry
            .answer
            .take()
            .is_some_and(|answer| answer.send(signed.clone()).is_ok());
        let outcome = match (handed, decision) {
            (false, _) => Outcome::Withdrawn,
            (true, StatementDecision::Approve) => Outcome::Approved,
            (true, StatementDecision::Deny) => Outcome::Denied,
        };
        let mut outcome = HistoryEntry::new(&entry.pending, entry.asked_at_ms, outcome, now);
        if handed {
            outcome = outcome.decided_by(state.approver.key_id(), signed.statement().reason());
        }
        board::publish(state, &mut board, &outcome);
        Decided { signed, outcome }
    };
    board::record(state, &decided.outcome).await;
    if decided.outcome.outcome == Outcome::Withdrawn {
        return Err(refused(
            StatusCode::CONFLICT,
            "withdrawn",
            "The request stopped waiting; nothing was approved.",
        ));
    }
    tracing::info!(target: "aml.approval", digest = %decided.outcome.proposal_sha256,
                   grant_id = %decided.outcome.grant_id, decision = decision.as_str(),
                   "approval page decision signed");
    Ok(decided)
}

/// The answer to a click for a request no longer on the board.
fn gone(last: Option<&HistoryEntry>) -> Refused {
    match last.map(|e| (e.outcome, e)) {
        Some((Outcome::Withdrawn, _)) => refused(
            StatusCode::CONFLICT,
            "withdrawn",
            "This call was withdrawn: it stopped waiting before anyone decided it (its client went away, \
             or an approval given elsewhere served it); nothing was approved.",
        ),
        Some((Outcome::Expired, _)) => refused(
            StatusCode::CONFLICT,
            "expired",
            "This call was withdrawn: its wait for a decision ran out before anyone decided it; \
             nothing was approved.",
        ),
        Some((outcome, e)) => refused(
            StatusCode::CONFLICT,
            "already_decided",
            format!(
                "This proposal was already decided ({outcome} by {}); this click changed nothing.",
                quoted(e.decided_by.as_deref().unwrap_or_default())
            ),
        ),
        None => refused(
            StatusCode::CONFLICT,
            "not_pending",
            "This proposal is no longer pending; nothing was approved.",
        ),
    }
}

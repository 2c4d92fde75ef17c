//! The board: the proposals waiting now and the last outcomes. Every change happens under
//! its lock, takes the next sequence number and is published to the live streams in that
//! order, so a stream (and every tab it feeds) sees the changes exactly as they happened.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use aml_core::Sha256Digest;
use tokio::sync::oneshot;

use super::{events, State};
use crate::history::{HistoryEntry, Outcome};
use crate::hook::PendingApproval;
use crate::statement::SignedStatement;

/// How many outcomes the board remembers (for the answer to a late click, and
/// `/withdrawn.json`).
const RECENT: usize = 64;

/// One proposal waiting for its decision.
pub(super) struct Entry {
    pub(super) pending: PendingApproval,
    /// Taken by the decision.
    pub(super) answer: Option<oneshot::Sender<SignedStatement>>,
    /// When it arrived (ms since the epoch).
    pub(super) asked_at_ms: i64,
    arrival: u64,
}

#[derive(Default)]
pub(super) struct Board {
    /// By grant id.
    pending: BTreeMap<String, Entry>,
    next_arrival: u64,
    /// The number of the last change.
    seq: u64,
    /// The last outcomes, oldest first.
    recent: VecDeque<HistoryEntry>,
}

impl Board {
    pub(super) fn len(&self) -> usize {
        self.pending.len()
    }

    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    pub(super) fn get(&self, grant_id: &str) -> Option<&Entry> {
        self.pending.get(grant_id)
    }

    /// Every waiting proposal, oldest first.
    pub(super) fn in_arrival_order(&self) -> impl Iterator<Item = &Entry> {
        let mut entries: Vec<&Entry> = self.pending.values().collect();
        entries.sort_by_key(|e| e.arrival);
        entries.into_iter()
    }

    /// The waiting proposals grouped by digest (identical proposals together), groups in
    /// the order their first member arrived.
    pub(super) fn groups(&self) -> Vec<Vec<&Entry>> {
        let mut groups: Vec<Vec<&Entry>> = Vec::new();
        let mut at: BTreeMap<Sha256Digest, usize> = BTreeMap::new();
        for entry in self.in_arrival_order() {
            let digest = entry.pending.proposal.digest();
            match at.get(&digest) {
                Some(&i) => groups[i].push(entry),
                None => {
                    at.insert(digest, groups.len());
                    groups.push(vec![entry]);
                }
            }
        }
        groups
    }

    /// The waiting proposals with `digest`, oldest first.
    pub(super) fn group_of(&self, digest: Sha256Digest) -> Vec<&Entry> {
        self.in_arrival_order()
            .filter(|e| e.pending.proposal.digest() == digest)
            .collect()
    }

    /// How request `grant_id` left the board, if it did lately.
    pub(super) fn recent(&self, grant_id: &str) -> Option<&HistoryEntry> {
        self.recent.iter().rev().find(|e| e.grant_id == grant_id)
    }

    /// The last outcomes, oldest first.
    pub(super) fn recent_all(&self) -> impl DoubleEndedIterator<Item = &HistoryEntry> {
        self.recent.iter()
    }

    /// The last requests that stopped waiting before anyone decided them, oldest first.
    pub(super) fn recent_undecided(&self) -> impl Iterator<Item = &HistoryEntry> {
        self.recent
            .iter()
            .filter(|e| matches!(e.outcome, Outcome::Withdrawn | Outcome::Expired))
    }

    /// Drops every waiting proposal (their requests fail: the page stopped).
    pub(super) fn clear(&mut self) {
        self.pending.clear();
    }

    /// Takes `grant_id`'s request off the board (it was decided).
    pub(super) fn remove(&mut self, grant_id: &str) -> Option<Entry> {
        self.pending.remove(grant_id)
    }

    fn remember(&mut self, outcome: HistoryEntry) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(outcome);
    }
}

/// Puts `pending` on the board, unless `stopped` says the page is shutting down (checked
/// under the lock); announces it to the streams and to the notification command.
pub(super) fn add(
    state: &Arc<State>,
    pending: PendingApproval,
    answer: oneshot::Sender<SignedStatement>,
    stopped: impl Fn() -> bool,
) -> bool {
    let now = state.clock.now_ms();
    let (digest, tool, grant_id) = (
        pending.proposal.digest(),
        pending.proposal.tool().to_owned(),
        pending.grant_id.clone(),
    );
    {
        let mut board = state.board();
        if stopped() {
            return false;
        }
        let arrival = board.next_arrival;
        board.next_arrival += 1;
        board.pending.insert(
            grant_id.clone(),
            Entry {
                pending,
                answer: Some(answer),
                asked_at_ms: now,
                arrival,
            },
        );
        board.seq += 1;
        let event = events::pending(state, &board, &grant_id, now);
        let _ = state.events.send(Arc::new(event));
    }
    if let Some(notifier) = &state.notify {
        notifier.run(state, digest, &tool, &grant_id);
    }
    true
}

/// Records that `entry` left the board with `outcome` (under the board's lock): the next
/// sequence number, the streams told, the outcome remembered.
pub(super) fn publish(state: &State, board: &mut Board, outcome: &HistoryEntry) {
    board.seq += 1;
    let event = events::outcome(board, outcome);
    let _ = state.events.send(Arc::new(event));
    board.remember(outcome.clone());
}

/// The request for `grant_id` stopped waiting: if nobody had decided it, it leaves the board
/// as expired (its wait ran out) or withdrawn (its caller went away), and the history keeps
/// that.
pub(super) fn settle_undecided(state: &Arc<State>, grant_id: &str) {
    let now = state.clock.now_ms();
    let outcome = {
        let mut board = state.board();
        let Some(entry) = board.pending.remove(grant_id) else {
            return;
        };
        let expired = entry.pending.expires_at_ms.is_some_and(|at| now >= at);
        let outcome = if expired {
            Outcome::Expired
        } else {
            Outcome::Withdrawn
        };
        let outcome = HistoryEntry::new(&entry.pending, entry.asked_at_ms, outcome, now);
        publish(state, &mut board, &outcome);
        outcome
    };
    tracing::info!(target: "aml.approval", digest = %outcome.proposal_sha256, grant_id = %outcome.grant_id,
                   outcome = outcome.outcome.as_str(), "approval page: the call stopped waiting before a decision");
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(target: "aml.approval", "approval page: no runtime to record the outcome in the history");
        return;
    };
    let state = Arc::clone(state);
    runtime.spawn(async move { record(&state, &outcome).await });
}

/// Keeps `outcome` in the history; a failure is logged (the decision itself is journaled by
/// the hook, which blocks when it cannot).
pub(super) async fn record(state: &State, outcome: &HistoryEntry) {
    if let Err(e) = state.history.record(outcome).await {
        tracing::error!(target: "aml.approval", error = %e, grant_id = %outcome.grant_id,
                        "approval page: the history did not keep an outcome");
    }
}

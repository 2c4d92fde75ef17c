//! The history of decided proposals: how each left the pending list (approved, denied,
//! expired, withdrawn), who decided and when, searchable by tool and caller.
//!
//! The page records every outcome in an [`ApprovalHistory`] and reads it back for its
//! "Decided" list and `GET /api/v1/history`. [`MemoryHistory`] keeps the last ones in
//! memory; [`ReceiptHistory`] keeps them in a host's durable [`ReceiptStore`] (the SQLite
//! file or PostgreSQL database of `aml-grants`), so the history survives a restart.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::{async_trait, Sha256Digest};
use aml_grants::{Clock, ReceiptStore, StoreError, SystemClock};
use serde::{Deserialize, Serialize};

use crate::requester::Requester;

/// How a proposal left the pending list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// `"approved"`: a person approved it.
    Approved,
    /// `"denied"`: a person denied it.
    Denied,
    /// `"expired"`: its wait for a decision ran out.
    Expired,
    /// `"withdrawn"`: it stopped waiting before anyone decided (its client went away, or an
    /// approval given elsewhere served it).
    Withdrawn,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 4] = [
        Outcome::Approved,
        Outcome::Denied,
        Outcome::Expired,
        Outcome::Withdrawn,
    ];

    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Approved => "approved",
            Outcome::Denied => "denied",
            Outcome::Expired => "expired",
            Outcome::Withdrawn => "withdrawn",
        }
    }
}

impl core::fmt::Display for Outcome {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The record string of a stored [`HistoryEntry`].
pub const HISTORY_RECORD: &str = "aml-approval-outcome/1";

/// One decided proposal. Its JSON form (`to_value`, with `"record":
/// "aml-approval-outcome/1"`) is what [`ReceiptHistory`] stores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct HistoryEntry {
    /// Always [`HISTORY_RECORD`].
    pub record: String,
    /// How it left the pending list.
    pub outcome: Outcome,
    /// When (ms since the epoch).
    pub at_ms: i64,
    /// When it was asked (ms since the epoch).
    pub asked_at_ms: i64,
    /// The proposal's digest.
    pub proposal_sha256: Sha256Digest,
    /// The request's grant id.
    pub grant_id: String,
    /// The tool.
    pub tool: String,
    /// The effect.
    pub effect: String,
    /// The normalized resource.
    pub resource: String,
    /// The tool's purpose.
    pub purpose: String,
    /// Who asked.
    pub requester: Requester,
    /// The approver key that signed the decision (approved and denied only).
    pub decided_by: Option<String>,
    /// The approver's reason for a deny, if they gave one.
    pub reason: Option<String>,
}

impl HistoryEntry {
    /// The entry for `pending` (asked at `asked_at_ms`) leaving the list with `outcome` at
    /// `at_ms`.
    pub fn new(pending: &crate::PendingApproval, asked_at_ms: i64, outcome: Outcome, at_ms: i64) -> Self {
        let p = &pending.proposal;
        HistoryEntry {
            record: HISTORY_RECORD.to_owned(),
            outcome,
            at_ms,
            asked_at_ms,
            proposal_sha256: p.digest(),
            grant_id: pending.grant_id.clone(),
            tool: p.tool().to_owned(),
            effect: p.effect().as_str().to_owned(),
            resource: p.resource().to_owned(),
            purpose: p.purpose().to_owned(),
            requester: pending.requester.clone(),
            decided_by: None,
            reason: None,
        }
    }

    /// Decided by the approver key `key_id`, with the reason of a deny.
    pub fn decided_by(mut self, key_id: impl Into<String>, reason: Option<&str>) -> Self {
        self.decided_by = Some(key_id.into());
        self.reason = reason.map(str::to_owned);
        self
    }

    /// The entry as JSON.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// An entry from its JSON text; `None` if it is not one.
    pub fn from_json(text: &str) -> Option<Self> {
        let entry: HistoryEntry = serde_json::from_str(text).ok()?;
        (entry.record == HISTORY_RECORD).then_some(entry)
    }
}

/// Which entries to list: newest first, at most `limit`, each filter a case-insensitive
/// substring (of the tool name, of the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryQuery {
    /// Only tools whose name contains this.
    pub tool: Option<String>,
    /// Only callers that contain this (entries whose caller is not known never match).
    pub caller: Option<String>,
    /// Only entries that left the list before this (ms since the epoch), for paging.
    pub before_ms: Option<i64>,
    /// At most this many (1 to [`HistoryQuery::MAX_LIMIT`]).
    pub limit: usize,
}

impl Default for HistoryQuery {
    fn default() -> Self {
        HistoryQuery {
            tool: None,
            caller: None,
            before_ms: None,
            limit: 50,
        }
    }
}

impl HistoryQuery {
    /// The most entries one query returns.
    pub const MAX_LIMIT: usize = 500;

    /// The newest `limit` entries (clamped to 1..=[`Self::MAX_LIMIT`]).
    pub fn newest(limit: usize) -> Self {
        HistoryQuery {
            limit: limit.clamp(1, Self::MAX_LIMIT),
            ..HistoryQuery::default()
        }
    }

    /// Only tools whose name contains `tool` (ignoring case); an empty one filters nothing.
    pub fn tool(mut self, tool: &str) -> Self {
        self.tool = Some(tool.to_owned()).filter(|t| !t.is_empty());
        self
    }

    /// Only callers that contain `caller` (ignoring case); an empty one filters nothing.
    pub fn caller(mut self, caller: &str) -> Self {
        self.caller = Some(caller.to_owned()).filter(|c| !c.is_empty());
        self
    }

    /// Only entries before `ms`.
    pub fn before(mut self, ms: i64) -> Self {
        self.before_ms = Some(ms);
        self
    }

    /// Whether `entry` is one this query lists.
    pub fn matches(&self, entry: &HistoryEntry) -> bool {
        let contains = |text: &str, part: &str| text.to_lowercase().contains(&part.to_lowercase());
        self.tool.as_deref().is_none_or(|t| contains(&entry.tool, t))
            && self
                .caller
                .as_deref()
                .is_none_or(|c| entry.requester.caller().is_some_and(|caller| contains(caller, c)))
            && self.before_ms.is_none_or(|b| entry.at_ms < b)
    }
}

/// The history could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// The store failed.
    #[error("approval history: {0}")]
    Store(#[from] StoreError),
}

/// Where the page keeps decided proposals and reads them back.
///
/// ```
/// use std::sync::Mutex;
/// use aml_approval::{ApprovalHistory, HistoryEntry, HistoryError, HistoryQuery};
/// use aml_core::async_trait;
///
/// /// Every entry, in a vector (a test's history).
/// #[derive(Debug, Default)]
/// struct Kept(Mutex<Vec<HistoryEntry>>);
///
/// #[async_trait]
/// impl ApprovalHistory for Kept {
///     async fn record(&self, entry: &HistoryEntry) -> Result<(), HistoryError> {
///         self.0.lock().unwrap().push(entry.clone());
///         Ok(())
///     }
///     async fn search(&self, query: &HistoryQuery) -> Result<Vec<HistoryEntry>, HistoryError> {
///         let kept = self.0.lock().unwrap();
///         Ok(kept.iter().rev().filter(|e| query.matches(e)).take(query.limit).cloned().collect())
///     }
/// }
/// ```
#[async_trait]
pub trait ApprovalHistory: Send + Sync + core::fmt::Debug {
    /// Keeps one entry.
    async fn record(&self, entry: &HistoryEntry) -> Result<(), HistoryError>;
    /// The entries `query` lists, newest first.
    async fn search(&self, query: &HistoryQuery) -> Result<Vec<HistoryEntry>, HistoryError>;
}

/// The last entries, in memory (lost at restart): the page's history when the host gives
/// none.
#[derive(Debug)]
pub struct MemoryHistory {
    capacity: usize,
    entries: Mutex<VecDeque<HistoryEntry>>,
}

impl MemoryHistory {
    /// Keeps the last `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        MemoryHistory {
            capacity: capacity.max(1),
            entries: Mutex::default(),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, VecDeque<HistoryEntry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Default for MemoryHistory {
    /// The last 1,000 entries.
    fn default() -> Self {
        MemoryHistory::new(1000)
    }
}

#[async_trait]
impl ApprovalHistory for MemoryHistory {
    async fn record(&self, entry: &HistoryEntry) -> Result<(), HistoryError> {
        let mut entries = self.entries();
        if entries.len() == self.capacity {
            entries.pop_front();
        }
        entries.push_back(entry.clone());
        Ok(())
    }

    async fn search(&self, query: &HistoryQuery) -> Result<Vec<HistoryEntry>, HistoryError> {
        let entries = self.entries();
        Ok(entries
            .iter()
            .rev()
            .filter(|e| query.matches(e))
            .take(query.limit)
            .cloned()
            .collect())
    }
}

/// The history in a durable [`ReceiptStore`]: each entry is one record
/// (`aml-approval-outcome/1`) beside the receipts, so it survives restarts and is shared by
/// gates on one database.
///
/// A search reads the records of the last hour, then (if it found fewer than asked) of the
/// last day, week, and at most `window` (30 days by default): the store answers "records
/// since" only, so an old entry costs a read of everything stored since.
#[derive(Debug, Clone)]
pub struct ReceiptHistory {
    store: Arc<dyn ReceiptStore>,
    clock: Arc<dyn Clock>,
    window: Duration,
}

impl ReceiptHistory {
    /// Entries in `store`.
    pub fn new(store: Arc<dyn ReceiptStore>) -> Self {
        ReceiptHistory {
            store,
            clock: Arc::new(SystemClock),
            window: Duration::from_secs(30 * 86_400),
        }
    }

    /// Searches reach back at most `window`.
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Reads time from `clock` (to place the search windows).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

#[async_trait]
impl ApprovalHistory for ReceiptHistory {
    async fn record(&self, entry: &HistoryEntry) -> Result<(), HistoryError> {
        Ok(self.store.append_records(&[entry.to_value().to_string()]).await?)
    }

    async fn search(&self, query: &HistoryQuery) -> Result<Vec<HistoryEntry>, HistoryError> {
        let now = self.clock.now_ms();
        let hour = Duration::from_secs(3600);
        let mut reaches: Vec<Duration> = [hour, hour * 24, hour * 24 * 7]
            .into_iter()
            .filter(|r| *r < self.window)
            .collect();
        reaches.push(self.window);
        let mut found = Vec::new();
        for reach in reaches {
            let since = now.saturating_sub(i64::try_from(reach.as_millis()).unwrap_or(i64::MAX));
            let records = self.store.records_since(since).await?;
            found = records
                .iter()
                .rev()
                .filter(|r| r.record.contains(HISTORY_RECORD))
                .filter_map(|r| HistoryEntry::from_json(&r.record))
                .filter(|e| query.matches(e))
                .take(query.limit)
                .collect();
            if found.len() >= query.limit {
                break;
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_match_serde() {
        for o in Outcome::ALL {
            assert_eq!(serde_json::to_value(o).unwrap(), serde_json::json!(o.as_str()));
            assert_eq!(o.to_string(), o.as_str());
        }
    }
}

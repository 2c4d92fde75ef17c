//! The host event log that fixture hooks write, with the documented counters.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Value};

/// Counters the documented reports carry for each case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Approval hook calls.
    pub approval_requests: u32,
    /// One-use claim attempts.
    pub claim_attempts: u32,
    /// One-use claims that spent a grant.
    pub claims_consumed: u32,
    /// Tool callback entries.
    pub callback_count: u32,
    /// In-memory fixture markers written (host state a failing hook left behind).
    pub fixture_state_changes: u32,
}

impl Counters {
    /// The counters as report fields.
    pub fn to_value(self) -> Value {
        json!({
            "approval_requests": self.approval_requests,
            "claim_attempts": self.claim_attempts,
            "claims_consumed": self.claims_consumed,
            "callback_count": self.callback_count,
            "fixture_state_changes": self.fixture_state_changes,
        })
    }
}

#[derive(Debug, Default)]
struct Inner {
    events: Vec<String>,
    counters: Counters,
}

/// A shared, append-only log of host hook events. Clones share the same log.
///
/// ```
/// use aml_testkit::HostLog;
/// let log = HostLog::new();
/// log.event("Approval requested");
/// log.count(|c| c.approval_requests += 1);
/// assert_eq!(log.events_since(0), ["Approval requested"]);
/// assert_eq!(log.counters().approval_requests, 1);
/// ```
#[derive(Debug, Clone, Default)]
pub struct HostLog(Arc<Mutex<Inner>>);

impl HostLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one event string.
    pub fn event(&self, text: &str) {
        self.lock().events.push(text.to_owned());
    }

    /// Updates the counters.
    pub fn count(&self, update: impl FnOnce(&mut Counters)) {
        update(&mut self.lock().counters);
    }

    /// Records an in-memory fixture marker: an event and a state change.
    pub fn marker(&self, text: &str) {
        let mut inner = self.lock();
        inner.events.push(text.to_owned());
        inner.counters.fixture_state_changes += 1;
    }

    /// How many events have been recorded.
    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    /// Whether no event has been recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The events recorded from index `start` on.
    pub fn events_since(&self, start: usize) -> Vec<String> {
        self.lock().events.get(start..).unwrap_or_default().to_vec()
    }

    /// The counters now.
    pub fn counters(&self) -> Counters {
        self.lock().counters
    }
}

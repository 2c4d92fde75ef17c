//! Group commit: the writes of calls in flight at once share one transaction and one flush.
//!
//! Each durable store runs one writer (SQLite: a thread with its own connection; PostgreSQL: a
//! task that pipelines each batch on a pooled connection). Writes a caller waits for — a
//! claim, an intent, a flush — are answered when the transaction that carries them commits;
//! everything queued while one commit is in progress goes into the next one. Writes after
//! the answer (outcomes, receipt records) wait for nobody: they ride in the next commit, and
//! when no waited-for write comes within [`LAZY_COMMIT`], the writer commits them on its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aml_core::{ClaimError, ClaimStatus, GrantRef};
use tokio::sync::oneshot;

use crate::grant::StoreError;
use crate::journal::{IntentEntry, IntentOutcome, IntentRef, RecordedOutcome};

/// How long writes that nobody waits for may stay queued for a commit that carries a
/// waited-for write, before the writer commits them alone. It bounds how long after an
/// answer a crash can still lose the call's outcome and receipt (its intent then stays
/// unresolved).
pub(crate) const LAZY_COMMIT: Duration = Duration::from_millis(10);

/// The most writes one transaction carries; more wait for the next one.
pub(crate) const MAX_BATCH: usize = 4096;

/// Where a waited-for write's result goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// Spend a grant (and, with `with_intent`, record the dispatch intent under it).
#[derive(Debug)]
pub(crate) struct ClaimWrite {
    pub(crate) id: String,
    pub(crate) digest: String,
    pub(crate) with_intent: bool,
    /// Written into the row (PostgreSQL), so a retry recognises its own earlier success.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) token: String,
}

/// A write nobody waits for.
#[derive(Debug)]
pub(crate) enum Later {
    Outcome(IntentOutcome),
    Record(String),
}

/// One message to a writer. The writes of one message always commit together.
#[derive(Debug)]
pub(crate) enum Write {
    Claim(ClaimWrite, Reply<ClaimStatus>),
    Intent(IntentEntry, Reply<i64>),
    Later(Vec<Later>),
    /// Answered once everything queued before it is committed; with `report`, an error if
    /// some write nobody waited for was lost since the previous such flush.
    Flush {
        reply: Reply<()>,
        report: bool,
    },
}

impl Write {
    /// Whether a caller waits for this write's commit.
    pub(crate) fn waited_for(&self) -> bool {
        !matches!(self, Write::Later(_))
    }
}

/// How a store's writes were grouped: writes committed, and the transactions (so disk
/// flushes) that carried them, since the store was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Committed transactions.
    pub transactions: u64,
    /// Claims, intents, outcomes and records they carried.
    pub writes: u64,
}

/// The counts behind [`CommitStats`], kept by a writer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally(Arc<(AtomicU64, AtomicU64)>);

impl Tally {
    pub(crate) fn committed(&self, writes: u64) {
        self.0 .0.fetch_add(1, Ordering::Relaxed);
        self.0 .1.fetch_add(writes, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> CommitStats {
        CommitStats {
            transactions: self.0 .0.load(Ordering::Relaxed),
            writes: self.0 .1.load(Ordering::Relaxed),
        }
    }
}

/// Counts the writes nobody waited for that could not be stored, so the next flush says so.
#[derive(Debug, Clone, Default)]
pub(crate) struct Losses {
    lost: Arc<AtomicU64>,
    reported: Arc<AtomicU64>,
}

impl Losses {
    pub(crate) fn add(&self, backend: &'static str, count: u64, cause: &str) {
        if count > 0 {
            self.lost.fetch_add(count, Ordering::Relaxed);
            tracing::error!(target: "aml.state", backend, lost = count, cause,
                            "outcome or receipt writes could not be stored");
        }
    }

    /// The losses since the last call, as the flush's error.
    pub(crate) fn since_last_flush(&self, backend: &'static str) -> Result<(), StoreError> {
        let lost = self.lost.load(Ordering::Relaxed);
        let before = self.reported.swap(lost, Ordering::Relaxed);
        match lost - before {
            0 => Ok(()),
            n => Err(StoreError::Lost { backend, count: n }),
        }
    }
}

/// A store's end of its writer's queue: every durable store makes its writes through it,
/// whatever runs the writer.
#[derive(Clone)]
pub(crate) struct Queue {
    backend: &'static str,
    send: Arc<dyn Fn(Write) -> bool + Send + Sync>,
    tally: Tally,
}

impl core::fmt::Debug for Queue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Queue")
            .field("backend", &self.backend)
            .field("stats", &self.tally.stats())
            .finish()
    }
}

impl Queue {
    /// A queue whose writes `send` hands to the writer (false once it has stopped); the
    /// writer counts its commits in `tally`.
    pub(crate) fn new(
        backend: &'static str,
        send: impl Fn(Write) -> bool + Send + Sync + 'static,
        tally: Tally,
    ) -> Self {
        Queue {
            backend,
            send: Arc::new(send),
            tally,
        }
    }

    pub(crate) fn stats(&self) -> CommitStats {
        self.tally.stats()
    }

    /// Spends `grant` (recording the intent under it, with `with_intent`), once committed.
    pub(crate) async fn claim(
        &self,
        grant: &GrantRef,
        with_intent: bool,
        token: String,
    ) -> Result<ClaimStatus, ClaimError> {
        let Some(id) = grant.approval_id.clone() else {
            return Ok(ClaimStatus::NotIssued);
        };
        let claim = ClaimWrite {
            id,
            digest: grant.proposal_sha256.to_string(),
            with_intent,
            token,
        };
        self.answered(|reply| Write::Claim(claim, reply))
            .await
            .map_err(|e| ClaimError::with_source(e.to_string(), e))
    }

    /// Records an intent; its id, once committed.
    pub(crate) async fn intent(&self, entry: &IntentEntry) -> Result<i64, StoreError> {
        let entry = entry.clone();
        self.answered(|reply| Write::Intent(entry, reply)).await
    }

    /// Queues how `intent` ended, for the next commit.
    pub(crate) fn outcome(
        &self,
        intent: IntentRef,
        outcome: RecordedOutcome,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        self.later(vec![Later::Outcome(IntentOutcome {
            intent,
            outcome,
            detail: detail.map(str::to_owned),
        })])
    }

    /// Queues writes nobody waits for, for the next commit (all in the same one).
    pub(crate) fn later(&self, writes: Vec<Later>) -> Result<(), StoreError> {
        if (self.send)(Write::Later(writes)) {
            Ok(())
        } else {
            Err(stopped(self.backend))
        }
    }

    /// Waits until everything queued before is committed; with `report`, fails if a write
    /// nobody waited for was lost since the last reporting flush.
    pub(crate) async fn committed(&self, report: bool) -> Result<(), StoreError> {
        self.answered(|reply| Write::Flush { reply, report }).await
    }

    async fn answered<T>(&self, write: impl FnOnce(Reply<T>) -> Write) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        if !(self.send)(write(reply)) {
            return Err(stopped(self.backend));
        }
        answer.await.unwrap_or_else(|_| Err(stopped(self.backend)))
    }
}

fn stopped(backend: &'static str) -> StoreError {
    StoreError::database(
        backend,
        "write",
        std::io::Error::other("the store's writer has stopped"),
    )
}

/// A copy of a failure for each waiter of a batch (database errors are not `Clone`).
pub(crate) fn shared_failure(backend: &'static str, operation: &'static str, cause: &str) -> StoreError {
    StoreError::database(backend, operation, std::io::Error::other(cause.to_owned()))
}

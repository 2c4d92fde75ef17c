//! The embedded store: grants and the journal in one SQLite file (bundled SQLite, WAL,
//! `synchronous=FULL` — `NORMAL` can forget the last claim on power loss, which would
//! allow a replay). Safe across threads and across processes sharing the file.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::{async_trait, ClaimError, ClaimStatus, GrantRef, GrantStore, Sha256Digest};
use rusqlite::{params, Connection, OptionalExtension};

use crate::clock::{Clock, SystemClock};
use crate::grant::{classify, GrantIssuer, GrantLifetimes, StoreError};
use crate::journal::{
    DecisionJournal, DecisionRecord, IntentEntry, ReceiptJournal, RecordedOutcome, UnresolvedIntent,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS aml_grants (
    id TEXT PRIMARY KEY,
    digest TEXT NOT NULL,
    issued_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    consumed_at INTEGER
);
CREATE TABLE IF NOT EXISTS aml_journal (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    digest TEXT NOT NULL,
    grant_id TEXT,
    tool TEXT NOT NULL,
    intent_at INTEGER NOT NULL,
    outcome TEXT,
    detail TEXT,
    outcome_at INTEGER,
    reconciled_at INTEGER,
    reconcile_note TEXT
);
CREATE TABLE IF NOT EXISTS aml_decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    digest TEXT NOT NULL,
    grant_id TEXT NOT NULL,
    approver_key_id TEXT NOT NULL,
    decision TEXT NOT NULL,
    statement TEXT NOT NULL,
    recorded_at INTEGER NOT NULL
);";

fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Database(e.to_string())
}

/// Grants and journal in one SQLite database.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    clock: Arc<dyn Clock>,
    lifetimes: GrantLifetimes,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, Arc::new(SystemClock), GrantLifetimes::default())
    }

    /// Opens with an explicit clock and grant lifetimes.
    pub fn open_with(
        path: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        lifetimes: GrantLifetimes,
    ) -> Result<Self, StoreError> {
        let conn = Connection::open(path).map_err(db)?;
        // WAL lets readers and one writer share the file across processes; FULL syncs the
        // WAL on every commit, so a claim that returned is on disk.
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(db)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Database(format!("journal_mode is {mode}, not wal")));
        }
        conn.execute_batch("PRAGMA synchronous=FULL;").map_err(db)?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(db)?;
        conn.execute_batch(SCHEMA).map_err(db)?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            clock,
            lifetimes,
        })
    }

    /// Runs `f` on the connection, off the async executor when there is a tokio runtime.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = Arc::clone(&self.conn);
        let work = move || {
            let guard = conn
                .lock()
                .map_err(|_| StoreError::Database("connection lock poisoned".into()))?;
            f(&guard)
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle
                .spawn_blocking(work)
                .await
                .map_err(|e| StoreError::Database(format!("store task failed: {e}")))?,
            Err(_) => work(),
        }
    }

    /// Whether grant `id` has been consumed (for reconciliation after a claim error).
    pub async fn is_consumed(&self, id: &str) -> Result<Option<bool>, StoreError> {
        let id = id.to_owned();
        self.run(move |c| {
            c.query_row(
                "SELECT consumed_at IS NOT NULL FROM aml_grants WHERE id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)
        })
        .await
    }
}

#[async_trait]
impl GrantIssuer for SqliteStore {
    async fn issue_named(
        &self,
        id: &str,
        digest: Sha256Digest,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let ttl = i64::try_from(self.lifetimes.resolve(ttl)?.as_millis()).unwrap_or(i64::MAX);
        let now = self.clock.now_ms();
        let row = (id.to_owned(), digest.to_string());
        self.run(move |c| {
            let inserted = c
                .execute(
                    "INSERT INTO aml_grants (id, digest, issued_at, expires_at) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (id) DO NOTHING",
                    params![row.0, row.1, now, now.saturating_add(ttl)],
                )
                .map_err(db)?;
            if inserted == 0 {
                return Err(StoreError::Duplicate(row.0));
            }
            Ok(())
        })
        .await
    }
}

#[async_trait]
impl GrantStore for SqliteStore {
    async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        let Some(id) = grant.approval_id.clone() else {
            return Ok(ClaimStatus::NotIssued);
        };
        let digest = grant.proposal_sha256.to_string();
        let now = self.clock.now_ms();
        self.run(move |c| {
            // One atomic statement: SQLite serializes writers, so exactly one claimant of a
            // grant sees a changed row, in this process or any other.
            let changed = c
                .execute(
                    "UPDATE aml_grants SET consumed_at = ?3
                     WHERE id = ?1 AND digest = ?2 AND consumed_at IS NULL AND expires_at > ?3",
                    params![id, digest, now],
                )
                .map_err(db)?;
            if changed == 1 {
                return Ok(ClaimStatus::Claimed);
            }
            let row: Option<(bool, bool)> = c
                .query_row(
                    "SELECT consumed_at IS NOT NULL, expires_at <= ?3 FROM aml_grants WHERE id = ?1 AND digest = ?2",
                    params![id, digest, now],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(db)?;
            Ok(row.map_or(ClaimStatus::NotIssued, |(consumed, expired)| classify(consumed, expired)))
        })
        .await
        .map_err(|e| ClaimError::with_source("sqlite grant store failed", e))
    }
}

#[async_trait]
impl ReceiptJournal for SqliteStore {
    async fn intent(&self, entry: &IntentEntry) -> Result<i64, StoreError> {
        let (digest, grant, tool) = (
            entry.proposal_sha256.to_string(),
            entry.grant_id.clone(),
            entry.tool.clone(),
        );
        let now = self.clock.now_ms();
        self.run(move |c| {
            c.execute(
                "INSERT INTO aml_journal (digest, grant_id, tool, intent_at) VALUES (?1, ?2, ?3, ?4)",
                params![digest, grant, tool, now],
            )
            .map_err(db)?;
            Ok(c.last_insert_rowid())
        })
        .await
    }

    async fn outcome(
        &self,
        id: i64,
        outcome: RecordedOutcome,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        let detail = detail.map(str::to_owned);
        let now = self.clock.now_ms();
        self.run(move |c| {
            c.execute(
                "UPDATE aml_journal SET outcome = ?2, detail = ?3, outcome_at = ?4 WHERE id = ?1 AND outcome IS NULL",
                params![id, outcome.as_str(), detail, now],
            )
            .map(drop)
            .map_err(db)
        })
        .await
    }

    async fn unresolved(&self) -> Result<Vec<UnresolvedIntent>, StoreError> {
        self.run(|c| {
            let mut stmt = c
                .prepare(
                    "SELECT id, digest, grant_id, tool, intent_at FROM aml_journal
                     WHERE outcome IS NULL AND reconciled_at IS NULL ORDER BY id",
                )
                .map_err(db)?;
            let rows = stmt
                .query_map([], |r| {
                    Ok(UnresolvedIntent {
                        id: r.get(0)?,
                        proposal_sha256: r.get(1)?,
                        grant_id: r.get(2)?,
                        tool: r.get(3)?,
                        intent_at_ms: r.get(4)?,
                    })
                })
                .map_err(db)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(db)
        })
        .await
    }

    async fn reconcile(&self, id: i64, note: &str) -> Result<bool, StoreError> {
        let note = note.to_owned();
        let now = self.clock.now_ms();
        self.run(move |c| {
            c.execute(
                "UPDATE aml_journal SET reconciled_at = ?2, reconcile_note = ?3
                 WHERE id = ?1 AND outcome IS NULL AND reconciled_at IS NULL",
                params![id, now, note],
            )
            .map(|n| n == 1)
            .map_err(db)
        })
        .await
    }
}

#[async_trait]
impl DecisionJournal for SqliteStore {
    async fn record_decision(&self, record: &DecisionRecord) -> Result<(), StoreError> {
        let r = record.clone();
        let now = self.clock.now_ms();
        self.run(move |c| {
            c.execute(
                "INSERT INTO aml_decisions (digest, grant_id, approver_key_id, decision, statement, recorded_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![r.proposal_sha256, r.grant_id, r.approver_key_id, r.decision, r.statement_json, now],
            )
            .map(drop)
            .map_err(db)
        })
        .await
    }
}

impl SqliteStore {
    /// The decisions recorded for `digest`, oldest first: `(decision, statement JSON)`.
    pub async fn decisions_for(&self, digest: &str) -> Result<Vec<(String, String)>, StoreError> {
        let digest = digest.to_owned();
        self.run(move |c| {
            let mut stmt = c
                .prepare("SELECT decision, statement FROM aml_decisions WHERE digest = ?1 ORDER BY id")
                .map_err(db)?;
            let rows = stmt
                .query_map([digest], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(db)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(db)
        })
        .await
    }
}

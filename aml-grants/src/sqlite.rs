//! The embedded store: grants and the journal in one SQLite file (bundled SQLite, WAL,
//! `synchronous=FULL` — `NORMAL` can forget the last claim on power loss, which would
//! allow a replay). Safe across threads and across processes sharing the file.
//!
//! Expiry is judged by each process's own clock (the store's [`Clock`]): processes that
//! share a file should share a time source (NTP); PostgreSQL uses the server's clock.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::{async_trait, ClaimError, ClaimStatus, FrozenProposal, GrantRef, GrantStore, Sha256Digest};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use crate::clock::{Clock, SystemClock};
use crate::grant::{classify, GrantIssuer, GrantLifetimes, StoreError};
use crate::intent_claims::ClaimsWithIntent;
use crate::journal::{
    DecisionJournal, DecisionRecord, IntentEntry, ReceiptJournal, RecordedOutcome, UnresolvedIntent,
};
use crate::receipts::{ReceiptStore, StoredRecord};
use crate::shared::OpenGrants;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS aml_grants (
    id TEXT PRIMARY KEY,
    digest TEXT NOT NULL,
    issued_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    consumed_at INTEGER,
    tool TEXT
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
CREATE INDEX IF NOT EXISTS aml_journal_grant_id ON aml_journal (grant_id);
CREATE TABLE IF NOT EXISTS aml_decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    digest TEXT NOT NULL,
    grant_id TEXT NOT NULL,
    approver_key_id TEXT NOT NULL,
    decision TEXT NOT NULL,
    statement TEXT NOT NULL,
    recorded_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS aml_receipts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at INTEGER NOT NULL,
    record TEXT NOT NULL
);";

/// How long the first open of a file retries while other processes set it up.
const OPEN_RETRY: Duration = Duration::from_secs(10);

fn db(operation: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| StoreError::database("sqlite", operation, e)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Runs `f` again while another connection holds the lock SQLite needs and did not wait
/// for (switching to WAL takes an exclusive lock without consulting the busy handler),
/// for at most [`OPEN_RETRY`].
fn retry_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let start = std::time::Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match f() {
            Err(e) if is_busy(&e) && start.elapsed() < OPEN_RETRY => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            result => return result,
        }
    }
}

/// Grants and journal in one SQLite database.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    clock: Arc<dyn Clock>,
    lifetimes: GrantLifetimes,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`. Any number of processes may open
    /// one new file at once.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, Arc::new(SystemClock), GrantLifetimes::default())
    }

    /// Opens with an explicit clock and grant lifetimes.
    pub fn open_with(
        path: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        lifetimes: GrantLifetimes,
    ) -> Result<Self, StoreError> {
        let mut conn = Connection::open(path).map_err(db("open"))?;
        // Wait for other connections' locks from the first statement on.
        conn.busy_timeout(Duration::from_secs(30)).map_err(db("open"))?;
        // WAL lets readers and one writer share the file across processes; FULL syncs the
        // WAL on every commit, so a claim that returned is on disk.
        let mode: String =
            retry_busy(|| conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))).map_err(db("open"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            let cause = std::io::Error::other(format!("journal_mode is {mode}, not wal"));
            return Err(StoreError::database("sqlite", "open", cause));
        }
        conn.execute_batch("PRAGMA synchronous=FULL;")
            .map_err(db("open"))?;
        retry_busy(|| migrate(&mut conn)).map_err(db("schema setup"))?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            clock,
            lifetimes,
        })
    }

    /// Runs `f` on the connection, off the async executor when there is a tokio runtime.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = Arc::clone(&self.conn);
        let work = move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard)
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle
                .spawn_blocking(work)
                .await
                .map_err(|e| StoreError::database("sqlite", "task", e))?,
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
            .map_err(db("read"))
        })
        .await
    }

    async fn insert_grant(
        &self,
        id: &str,
        digest: Sha256Digest,
        tool: Option<&str>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let ttl = self.lifetimes.resolve_ms(ttl)?;
        let now = self.clock.now_ms();
        let row = (id.to_owned(), digest.to_string(), tool.map(str::to_owned));
        self.run(move |c| {
            let inserted = c
                .execute(
                    "INSERT INTO aml_grants (id, digest, issued_at, expires_at, tool) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (id) DO NOTHING",
                    params![row.0, row.1, now, now.saturating_add(ttl), row.2],
                )
                .map_err(db("issue"))?;
            if inserted == 0 {
                return Err(StoreError::Duplicate(row.0));
            }
            Ok(())
        })
        .await
    }

    async fn spend(&self, grant: &GrantRef, with_intent: bool) -> Result<ClaimStatus, ClaimError> {
        let Some(id) = grant.approval_id.clone() else {
            return Ok(ClaimStatus::NotIssued);
        };
        let digest = grant.proposal_sha256.to_string();
        let now = self.clock.now_ms();
        self.run(move |c| {
            // SQLite serializes writers: exactly one claimant of a grant sees a changed row,
            // in this process or any other; the intent commits with it or not at all.
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(db("claim"))?;
            let changed = tx
                .execute(
                    "UPDATE aml_grants SET consumed_at = ?3
                     WHERE id = ?1 AND digest = ?2 AND consumed_at IS NULL AND expires_at > ?3",
                    params![id, digest, now],
                )
                .map_err(db("claim"))?;
            let status = if changed == 1 {
                if with_intent {
                    tx.execute(
                        "INSERT INTO aml_journal (digest, grant_id, tool, intent_at)
                         SELECT digest, id, COALESCE(tool, ''), ?2 FROM aml_grants WHERE id = ?1",
                        params![id, now],
                    )
                    .map_err(db("claim"))?;
                }
                ClaimStatus::Claimed
            } else {
                let row: Option<(bool, bool)> = tx
                    .query_row(
                        "SELECT consumed_at IS NOT NULL, expires_at <= ?3 FROM aml_grants WHERE id = ?1 AND digest = ?2",
                        params![id, digest, now],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()
                    .map_err(db("claim"))?;
                row.map_or(ClaimStatus::NotIssued, |(consumed, expired)| classify(consumed, expired))
            };
            tx.commit().map_err(db("claim"))?;
            Ok(status)
        })
        .await
        .map_err(|e| ClaimError::with_source(e.to_string(), e))
    }
}

/// Creates the tables, and adds the columns later versions need, in one write transaction
/// so processes opening a new file at once do not race.
fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(SCHEMA)?;
    let has_tool: bool = tx.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('aml_grants') WHERE name = 'tool'",
        [],
        |r| r.get(0),
    )?;
    if !has_tool {
        tx.execute_batch("ALTER TABLE aml_grants ADD COLUMN tool TEXT;")?;
    }
    tx.commit()
}

#[async_trait]
impl GrantIssuer for SqliteStore {
    async fn issue_named(
        &self,
        id: &str,
        digest: Sha256Digest,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.insert_grant(id, digest, None, ttl).await
    }

    async fn issue_for(
        &self,
        id: &str,
        proposal: &FrozenProposal,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.insert_grant(id, proposal.digest(), Some(proposal.tool()), ttl)
            .await
    }
}

#[async_trait]
impl GrantStore for SqliteStore {
    async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        self.spend(grant, false).await
    }
}

#[async_trait]
impl ClaimsWithIntent for SqliteStore {
    async fn claim_with_intent(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        self.spend(grant, true).await
    }

    async fn outcome_for_grant(
        &self,
        entry: &IntentEntry,
        outcome: RecordedOutcome,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        let (digest, grant, tool) = (
            entry.proposal_sha256.to_string(),
            entry.grant_id.clone(),
            entry.tool.clone(),
        );
        let detail = detail.map(str::to_owned);
        let now = self.clock.now_ms();
        self.run(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(db("outcome"))?;
            let updated = tx
                .execute(
                    "UPDATE aml_journal SET outcome = ?2, detail = ?3, outcome_at = ?4, tool = ?5
                     WHERE grant_id = ?1 AND outcome IS NULL",
                    params![grant, outcome.as_str(), detail, now, tool],
                )
                .map_err(db("outcome"))?;
            if updated == 0 {
                tx.execute(
                    "INSERT INTO aml_journal (digest, grant_id, tool, intent_at, outcome, detail, outcome_at)
                     SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?4
                     WHERE NOT EXISTS (SELECT 1 FROM aml_journal WHERE grant_id = ?2)",
                    params![digest, grant, tool, now, outcome.as_str(), detail],
                )
                .map_err(db("outcome"))?;
            }
            tx.commit().map_err(db("outcome"))
        })
        .await
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
            .map_err(db("intent"))?;
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
            .map_err(db("outcome"))
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
                .map_err(db("read"))?;
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
                .map_err(db("read"))?;
            rows.collect::<Result<Vec<_>, _>>().map_err(db("read"))
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
            .map_err(db("reconcile"))
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
            .map_err(db("decision record"))
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
                .map_err(db("read"))?;
            let rows = stmt
                .query_map([digest], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(db("read"))?;
            rows.collect::<Result<Vec<_>, _>>().map_err(db("read"))
        })
        .await
    }
}

#[async_trait]
impl ReceiptStore for SqliteStore {
    async fn append_records(&self, records: &[String]) -> Result<(), StoreError> {
        let records = records.to_vec();
        let now = self.clock.now_ms();
        self.run(move |c| {
            let tx = c.transaction().map_err(db("receipt records"))?;
            for record in &records {
                tx.execute(
                    "INSERT INTO aml_receipts (recorded_at, record) VALUES (?1, ?2)",
                    params![now, record],
                )
                .map_err(db("receipt records"))?;
            }
            tx.commit().map_err(db("receipt records"))
        })
        .await
    }

    async fn records_since(&self, since_ms: i64) -> Result<Vec<StoredRecord>, StoreError> {
        self.run(move |c| {
            let mut stmt = c
                .prepare(
                    "SELECT id, recorded_at, record FROM aml_receipts WHERE recorded_at >= ?1 ORDER BY id",
                )
                .map_err(db("read"))?;
            let rows = stmt
                .query_map([since_ms], |r| {
                    Ok(StoredRecord {
                        id: r.get(0)?,
                        recorded_at_ms: r.get(1)?,
                        record: r.get(2)?,
                    })
                })
                .map_err(db("read"))?;
            rows.collect::<Result<Vec<_>, _>>().map_err(db("read"))
        })
        .await
    }
}

#[async_trait]
impl OpenGrants for SqliteStore {
    async fn open_grant(&self, digest: Sha256Digest) -> Result<Option<String>, StoreError> {
        let digest = digest.to_string();
        let now = self.clock.now_ms();
        self.run(move |c| {
            c.query_row(
                "SELECT id FROM aml_grants WHERE digest = ?1 AND consumed_at IS NULL AND expires_at > ?2
                 ORDER BY issued_at LIMIT 1",
                params![digest, now],
                |r| r.get(0),
            )
            .optional()
            .map_err(db("read"))
        })
        .await
    }
}

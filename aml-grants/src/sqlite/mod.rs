//! The embedded store: grants and the journal in one SQLite file (bundled SQLite, WAL,
//! `synchronous=FULL` — `NORMAL` can forget the last claim on power loss, which would
//! allow a replay). Safe across threads and across processes sharing the file.
//!
//! Writes on a call's path — claims, intents — and after it — outcomes, receipt records —
//! go to one writer thread per store, which commits everything queued at once in one
//! transaction (group commit, [`crate::group`]); reads and the rare writes (issuing a grant,
//! a decision, a reconciliation) use a second connection.
//!
//! Expiry is judged by each process's own clock (the store's [`Clock`]): processes that
//! share a file should share a time source (NTP); PostgreSQL uses the server's clock.

mod usage;
mod wal;
mod writer;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::{async_trait, ClaimError, ClaimStatus, FrozenProposal, GrantRef, GrantStore, Sha256Digest};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use crate::chain::{AuditLog, AuditRow, Link};
use crate::clock::{Clock, SystemClock};
use crate::grant::{GrantIssuer, GrantLifetimes, StoreError};
use crate::group::{CommitStats, Later, Queue};
use crate::intent_claims::ClaimsWithIntent;
use crate::journal::{
    DecisionJournal, DecisionRecord, IntentEntry, IntentRef, ReceiptJournal, RecordedOutcome,
    UnresolvedIntent,
};
use crate::receipts::{ReceiptStore, StoredRecord};
use crate::settle::{settled_writes, Settlement, SettlesCalls};
use crate::shared::OpenGrants;

/// Every commit on a call's path writes its pages to the WAL, and each page written costs
/// disk time before the sync returns: the journal and the receipts keep their ids without
/// `AUTOINCREMENT` (whose `sqlite_sequence` row would be one more page per commit; rows are
/// never deleted, so ids are never reused), and only granted intents are indexed by grant.
/// Files created before keep their tables as they are. `aml_wal_filler` is one row that an
/// open rewrites to write the WAL out (see `wal`).
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS aml_grants (
    id TEXT PRIMARY KEY,
    digest TEXT NOT NULL,
    issued_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    consumed_at INTEGER,
    tool TEXT,
    resource TEXT
);
CREATE TABLE IF NOT EXISTS aml_journal (
    id INTEGER PRIMARY KEY,
    digest TEXT NOT NULL,
    grant_id TEXT,
    tool TEXT NOT NULL,
    resource TEXT,
    intent_at INTEGER NOT NULL,
    outcome TEXT,
    detail TEXT,
    outcome_at INTEGER,
    reconciled_at INTEGER,
    reconcile_note TEXT
);
CREATE INDEX IF NOT EXISTS aml_journal_grant_id ON aml_journal (grant_id) WHERE grant_id IS NOT NULL;
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
    id INTEGER PRIMARY KEY,
    recorded_at INTEGER NOT NULL,
    record TEXT NOT NULL,
    seq INTEGER,
    prev TEXT,
    hash TEXT
);
CREATE TABLE IF NOT EXISTS aml_checkpoints (
    id INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL,
    checkpoint TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS aml_usage (
    caller TEXT NOT NULL,
    tool TEXT NOT NULL,
    at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS aml_usage_by_caller ON aml_usage (caller, tool, at);
CREATE TABLE IF NOT EXISTS aml_wal_filler (
    id INTEGER PRIMARY KEY,
    n INTEGER NOT NULL
);
INSERT OR IGNORE INTO aml_wal_filler (id, n) VALUES (0, 0);";

/// How long the first open of a file retries while other processes set it up.
const OPEN_RETRY: Duration = Duration::from_secs(10);

fn db(operation: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| StoreError::database("sqlite", operation, e)
}

/// An open's failure; SQLite's "unable to open database file" names no cause, so the
/// usual ones are named.
fn open_failed(e: rusqlite::Error) -> StoreError {
    if e.sqlite_error_code() != Some(ErrorCode::CannotOpen) {
        return StoreError::database("sqlite", "open", e);
    }
    let hint = "SQLite must be able to create and write the file and, beside it, the same name \
                with -wal and -shm: check that the directory exists and is writable and that \
                none of the three is a directory";
    let cause = std::io::Error::other(format!("{e} ({hint})"));
    StoreError::database("sqlite", "open", cause)
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
    /// Reads, and the writes off every call's path.
    conn: Arc<Mutex<Connection>>,
    writer: Queue,
    clock: Arc<dyn Clock>,
    lifetimes: GrantLifetimes,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, for a host that serves calls: the
    /// WAL is written out to the length at which SQLite checkpoints it, so that the commits
    /// on the calls' path rewrite blocks the file already has (ADR 021). Any number of
    /// processes may open one new file at once.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, Arc::new(SystemClock), GrantLifetimes::default())
    }

    /// [`open`](Self::open), without writing the WAL out: for a command that looks at a
    /// state (lists unresolved intents, exports records) or makes a rare write, so that
    /// looking changes the files as little as SQLite allows.
    pub fn open_for_inspection(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::opened(
            path.as_ref(),
            Arc::new(SystemClock),
            GrantLifetimes::default(),
            false,
        )
    }

    /// [`open`](Self::open) with an explicit clock and grant lifetimes.
    pub fn open_with(
        path: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        lifetimes: GrantLifetimes,
    ) -> Result<Self, StoreError> {
        Self::opened(path.as_ref(), clock, lifetimes, true)
    }

    fn opened(
        path: &Path,
        clock: Arc<dyn Clock>,
        lifetimes: GrantLifetimes,
        write_out: bool,
    ) -> Result<Self, StoreError> {
        let mut conn = connect(path)?;
        // WAL lets readers and one writer share the file across processes; FULL syncs the
        // WAL on every commit, so a claim that returned is on disk.
        let mode: String = retry_busy(|| conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)))
            .map_err(open_failed)?;
        if !mode.eq_ignore_ascii_case("wal") {
            let cause = std::io::Error::other(format!("journal_mode is {mode}, not wal"));
            return Err(StoreError::database("sqlite", "open", cause));
        }
        retry_busy(|| migrate(&mut conn)).map_err(db("schema setup"))?;
        if write_out {
            wal::write_out(&conn, path).map_err(db("write out the WAL"))?;
        }
        let writer = writer::start(connect(path)?, Arc::clone(&clock))?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            writer,
            clock,
            lifetimes,
        })
    }

    /// How this store's writes were grouped into transactions so far (writes per commit is
    /// the group commit's gain).
    pub fn commit_stats(&self) -> CommitStats {
        self.writer.stats()
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
        named: Option<(&str, &str)>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let ttl = self.lifetimes.resolve_ms(ttl)?;
        let now = self.clock.now_ms();
        let (tool, resource) = named.map_or((None, None), |(t, r)| (Some(t.to_owned()), Some(r.to_owned())));
        let row = (id.to_owned(), digest.to_string(), tool, resource);
        self.run(move |c| {
            let inserted = c
                .execute(
                    "INSERT INTO aml_grants (id, digest, issued_at, expires_at, tool, resource)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING",
                    params![row.0, row.1, now, now.saturating_add(ttl), row.2, row.3],
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
        self.writer.claim(grant, with_intent, String::new()).await
    }
}

/// A connection that waits for other connections' locks from its first statement on, and
/// syncs the WAL on every commit (`synchronous=FULL`), so a claim that returned is on disk.
fn connect(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(open_failed)?;
    conn.busy_timeout(Duration::from_secs(30)).map_err(open_failed)?;
    conn.execute_batch("PRAGMA synchronous=FULL;")
        .map_err(db("open"))?;
    Ok(conn)
}

/// Creates the tables, and adds the columns later versions need, in one write transaction
/// so processes opening a new file at once do not race.
fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(SCHEMA)?;
    for (table, column, kind) in [
        ("aml_grants", "tool", "TEXT"),
        ("aml_grants", "resource", "TEXT"),
        ("aml_journal", "resource", "TEXT"),
        // The audit chain (ADR 022): records stored before keep NULL, "unchained".
        ("aml_receipts", "seq", "INTEGER"),
        ("aml_receipts", "prev", "TEXT"),
        ("aml_receipts", "hash", "TEXT"),
    ] {
        let present: bool = tx.query_row(
            "SELECT count(*) > 0 FROM pragma_table_info(?1) WHERE name = ?2",
            [table, column],
            |r| r.get(0),
        )?;
        if !present {
            tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind};"))?;
        }
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
        let named = (proposal.tool(), proposal.resource());
        self.insert_grant(id, proposal.digest(), Some(named), ttl).await
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
        self.writer
            .outcome(IntentRef::Claimed(entry.clone()), outcome, detail)
    }
}

#[async_trait]
impl ReceiptJournal for SqliteStore {
    async fn intent(&self, entry: &IntentEntry) -> Result<i64, StoreError> {
        self.writer.intent(entry).await
    }

    async fn outcome(
        &self,
        id: i64,
        outcome: RecordedOutcome,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        self.writer.outcome(IntentRef::Id(id), outcome, detail)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.writer.committed(true).await
    }

    async fn unresolved(&self) -> Result<Vec<UnresolvedIntent>, StoreError> {
        self.writer.committed(false).await?;
        self.run(|c| {
            let mut stmt = c
                .prepare(
                    "SELECT id, digest, grant_id, tool, intent_at, resource FROM aml_journal
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
                        resource: r.get(5)?,
                    })
                })
                .map_err(db("read"))?;
            rows.collect::<Result<Vec<_>, _>>().map_err(db("read"))
        })
        .await
    }

    async fn reconcile(&self, id: i64, note: &str) -> Result<bool, StoreError> {
        // An outcome still queued resolves the intent first.
        self.writer.committed(false).await?;
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
        self.writer
            .later(records.iter().cloned().map(Later::Record).collect())
    }

    async fn flush_records(&self) -> Result<(), StoreError> {
        self.writer.committed(true).await
    }

    async fn records_since(&self, since_ms: i64) -> Result<Vec<StoredRecord>, StoreError> {
        self.writer.committed(false).await?;
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
impl SettlesCalls for SqliteStore {
    async fn settle(&self, settled: Vec<Settlement>) -> Result<(), StoreError> {
        self.writer.later(settled_writes(settled))
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

#[async_trait]
impl AuditLog for SqliteStore {
    async fn audit_rows(&self) -> Result<Vec<AuditRow>, StoreError> {
        self.writer.committed(false).await?;
        self.run(|c| {
            let mut stmt = c
                .prepare("SELECT id, recorded_at, record, seq, prev, hash FROM aml_receipts ORDER BY id")
                .map_err(db("read"))?;
            let rows = stmt
                .query_map([], |r| {
                    let link = match (r.get(3)?, r.get(4)?, r.get(5)?) {
                        (Some(seq), Some(prev), Some(hash)) => Some(Link { seq, prev, hash }),
                        // A link with a field taken out reads as a broken link.
                        (Some(seq), prev, hash) => Some(Link {
                            seq,
                            prev: prev.unwrap_or_default(),
                            hash: hash.unwrap_or_default(),
                        }),
                        (None, _, _) => None,
                    };
                    Ok(AuditRow {
                        id: r.get(0)?,
                        at_ms: r.get(1)?,
                        record: r.get(2)?,
                        link,
                    })
                })
                .map_err(db("read"))?;
            rows.collect::<Result<Vec<_>, _>>().map_err(db("read"))
        })
        .await
    }

    async fn chain_tail(&self) -> Result<Option<(i64, String)>, StoreError> {
        self.writer.committed(false).await?;
        self.run(|c| {
            c.query_row(
                "SELECT seq, hash FROM aml_receipts WHERE seq IS NOT NULL ORDER BY id DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db("read"))
        })
        .await
    }

    async fn add_checkpoint(&self, seq: i64, text: &str) -> Result<(), StoreError> {
        let text = text.to_owned();
        self.run(move |c| {
            c.execute(
                "INSERT INTO aml_checkpoints (seq, checkpoint) VALUES (?1, ?2)",
                params![seq, text],
            )
            .map(drop)
            .map_err(db("checkpoint"))
        })
        .await
    }

    async fn checkpoints(&self) -> Result<Vec<String>, StoreError> {
        self.run(|c| {
            let mut stmt = c
                .prepare("SELECT checkpoint FROM aml_checkpoints ORDER BY id")
                .map_err(db("read"))?;
            let rows = stmt.query_map([], |r| r.get(0)).map_err(db("read"))?;
            rows.collect::<Result<Vec<_>, _>>().map_err(db("read"))
        })
        .await
    }
}

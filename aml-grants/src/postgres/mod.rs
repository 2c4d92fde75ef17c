//! The multi-node store: grants and the journal in PostgreSQL, for hosts that run several
//! replicas. Time is the database server's (`now()`), so replicas agree on expiry.
//!
//! Connections come from a pool (deadpool) that replaces connections the server ended.
//! A claim or an issue that fails for a reason a retry can cure — the connection was
//! closed, or the server reported a serialization failure or deadlock (under
//! `REPEATABLE READ` or `SERIALIZABLE` isolation) — is retried on another connection, at
//! most [`ATTEMPTS`] times. Each claim and issue carries a random token written into the
//! row it changes, so a retry recognizes its own earlier success instead of reporting it as
//! someone else's.
//!
//! Claims, intents, outcomes and receipt records go through one writer per store, which
//! sends everything queued at once as one pipelined transaction (group commit,
//! [`crate::group`]).

mod writer;

use std::time::Duration;

use aml_core::{async_trait, ClaimError, ClaimStatus, FrozenProposal, GrantRef, GrantStore, Sha256Digest};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

use crate::chain::{AuditLog, AuditRow, Link};
use crate::grant::{new_grant_id, GrantIssuer, GrantLifetimes, StoreError};
use crate::group::{CommitStats, Later, Queue};
use crate::intent_claims::ClaimsWithIntent;
use crate::journal::{
    DecisionJournal, DecisionRecord, IntentEntry, IntentRef, ReceiptJournal, RecordedOutcome,
    UnresolvedIntent,
};
use crate::receipts::{ReceiptStore, StoredRecord};
use crate::settle::{settled_writes, Settlement, SettlesCalls};
use crate::shared::OpenGrants;

/// How many times an operation is tried when a retry can cure its failure.
const ATTEMPTS: usize = 4;
/// Connections in the pool.
const POOL_SIZE: usize = 16;
/// How long an operation waits for a connection, or for a new one to be made.
const POOL_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA: &str = "
BEGIN;
SELECT pg_advisory_xact_lock(7436101);
CREATE TABLE IF NOT EXISTS aml_grants (
    id TEXT PRIMARY KEY,
    digest TEXT NOT NULL,
    issued_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    consumed_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS aml_journal (
    id BIGSERIAL PRIMARY KEY,
    digest TEXT NOT NULL,
    grant_id TEXT,
    tool TEXT NOT NULL,
    intent_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    outcome TEXT,
    detail TEXT,
    outcome_at TIMESTAMPTZ,
    reconciled_at TIMESTAMPTZ,
    reconcile_note TEXT
);
CREATE TABLE IF NOT EXISTS aml_decisions (
    id BIGSERIAL PRIMARY KEY,
    digest TEXT NOT NULL,
    grant_id TEXT NOT NULL,
    approver_key_id TEXT NOT NULL,
    decision TEXT NOT NULL,
    statement TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS aml_receipts (
    id BIGSERIAL PRIMARY KEY,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    record TEXT NOT NULL
);
-- Columns and index added after the first release; checked first, so an up-to-date
-- database takes no table lock.
DO $$
DECLARE
    col TEXT;
BEGIN
    FOREACH col IN ARRAY ARRAY['tool', 'claim_token', 'issue_token', 'resource'] LOOP
        IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                       WHERE table_schema = current_schema() AND table_name = 'aml_grants'
                         AND column_name = col) THEN
            EXECUTE format('ALTER TABLE aml_grants ADD COLUMN %I TEXT', col);
        END IF;
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                   WHERE table_schema = current_schema() AND table_name = 'aml_journal'
                     AND column_name = 'resource') THEN
        ALTER TABLE aml_journal ADD COLUMN resource TEXT;
    END IF;
    -- The audit chain (ADR 022): records stored before keep NULL, unchained.
    FOREACH col IN ARRAY ARRAY['seq', 'prev', 'hash'] LOOP
        IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                       WHERE table_schema = current_schema() AND table_name = 'aml_receipts'
                         AND column_name = col) THEN
            EXECUTE format('ALTER TABLE aml_receipts ADD COLUMN %I %s', col,
                           CASE col WHEN 'seq' THEN 'BIGINT' ELSE 'TEXT' END);
        END IF;
    END LOOP;
    IF to_regclass('aml_journal_grant_id') IS NULL THEN
        CREATE INDEX aml_journal_grant_id ON aml_journal (grant_id);
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS aml_checkpoints (
    id BIGSERIAL PRIMARY KEY,
    seq BIGINT NOT NULL,
    checkpoint TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS aml_usage (
    caller TEXT NOT NULL,
    tool TEXT NOT NULL,
    at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS aml_usage_by_caller ON aml_usage (caller, tool, at);
-- Appends records as the chain's next links (docs/AUDIT.md: the same bytes as
-- aml_grants::link_input), in the caller's transaction. One chain per schema: the lock
-- serializes appenders until they commit, and the tail is read under it.
CREATE OR REPLACE FUNCTION aml_chain_append(records TEXT[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    at_ms BIGINT := (extract(epoch from now()) * 1000)::bigint;
    tail_seq BIGINT;
    tail_hash TEXT;
    prevs TEXT[] := '{}';
    hashes TEXT[] := '{}';
    r TEXT;
BEGIN
    PERFORM pg_advisory_xact_lock(7436102, hashtext(current_schema()));
    SELECT seq, hash INTO tail_seq, tail_hash FROM aml_receipts
        WHERE seq IS NOT NULL ORDER BY id DESC LIMIT 1;
    IF NOT FOUND THEN
        tail_seq := 0;
        tail_hash := repeat('0', 64);
    END IF;
    FOREACH r IN ARRAY records LOOP
        prevs := prevs || tail_hash;
        tail_hash := encode(sha256(convert_to(
            '{\"at\":' || at_ms || ',\"kind\":\"aml-audit-link/1\",\"prev\":\"' || tail_hash
            || '\",\"record\":' || to_json(r)::text || ',\"seq\":'
            || (tail_seq + cardinality(hashes) + 1) || '}', 'UTF8')), 'hex');
        hashes := hashes || tail_hash;
    END LOOP;
    -- One statement for the batch; recorded_at is now(), the time hashed.
    INSERT INTO aml_receipts (record, seq, prev, hash)
        SELECT u.r, tail_seq + u.n, u.p, u.h
        FROM unnest(records, prevs, hashes) WITH ORDINALITY AS u(r, p, h, n) ORDER BY u.n;
END $fn$;
COMMIT;";

/// Why one attempt failed.
enum Failure {
    Pool(PoolError),
    Db(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Db(e)
    }
}

impl Failure {
    /// Whether another attempt, on another connection, can succeed.
    fn retryable(&self) -> bool {
        match self {
            Failure::Pool(PoolError::Backend(e)) | Failure::Db(e) => {
                e.is_closed()
                    || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
                    || e.code().is_some_and(|c| {
                        *c == SqlState::T_R_SERIALIZATION_FAILURE
                            || *c == SqlState::T_R_DEADLOCK_DETECTED
                            || *c == SqlState::ADMIN_SHUTDOWN
                            || c.code().starts_with("08")
                    })
            }
            Failure::Pool(_) => false,
        }
    }

    fn into_store_error(self, operation: &'static str) -> StoreError {
        match self {
            Failure::Pool(e) => StoreError::database("postgres", operation, e),
            Failure::Db(e) => StoreError::database("postgres", operation, e),
        }
    }
}

/// Runs `$body` with a pooled `$client`, again on another connection while the failure is
/// [`Failure::retryable`]; at most [`ATTEMPTS`] times.
macro_rules! retrying {
    ($store:expr, $operation:literal, |$client:ident| $body:expr) => {{
        let mut attempt = 1;
        loop {
            let result: Result<_, Failure> = async {
                let $client = $store.pool.get().await.map_err(Failure::Pool)?;
                $body
            }
            .await;
            match result {
                Err(e) if e.retryable() && attempt < ATTEMPTS => attempt += 1,
                other => break other.map_err(|e| e.into_store_error($operation)),
            }
        }
    }};
}

/// Runs `$body` once with a pooled `$client` (for writes a retry could duplicate).
macro_rules! once {
    ($store:expr, $operation:literal, |$client:ident| $body:expr) => {{
        let result: Result<_, Failure> = async {
            let $client = $store.pool.get().await.map_err(Failure::Pool)?;
            $body
        }
        .await;
        result.map_err(|e| e.into_store_error($operation))
    }};
}

mod usage;

/// Grants and journal in PostgreSQL, over a pool of connections.
pub struct PostgresStore {
    pool: Pool,
    writer: Queue,
    lifetimes: GrantLifetimes,
}

impl core::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The pool's configuration holds the connection parameters: leave them out.
        f.debug_struct("PostgresStore")
            .field("pool", &self.pool.status())
            .field("lifetimes", &self.lifetimes)
            .finish()
    }
}

impl PostgresStore {
    /// Connects (e.g. `host=127.0.0.1 user=postgres dbname=test`) and creates the tables.
    /// Must run inside a tokio runtime (with the time driver): connections are driven by
    /// spawned tasks. Up to 16 connections; an operation waits at most 10 s for one.
    pub async fn connect(config: &str, lifetimes: GrantLifetimes) -> Result<Self, StoreError> {
        let pg: tokio_postgres::Config = config
            .parse()
            .map_err(|e| StoreError::database("postgres", "connect", e))?;
        let manager = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                // Drops connections whose socket the server closed before handing them out.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_TIMEOUT))
            .create_timeout(Some(POOL_TIMEOUT))
            .recycle_timeout(Some(POOL_TIMEOUT))
            .build()
            .map_err(|e| StoreError::database("postgres", "connect", e))?;
        let writer = writer::start(pool.clone());
        let store = PostgresStore {
            pool,
            writer,
            lifetimes,
        };
        retrying!(store, "schema setup", |client| Ok(client
            .batch_execute(SCHEMA)
            .await?))?;
        Ok(store)
    }

    /// How this store's writes were grouped into transactions so far (writes per commit is
    /// the group commit's gain).
    pub fn commit_stats(&self) -> CommitStats {
        self.writer.stats()
    }

    /// Whether grant `id` has been consumed (for reconciliation after a claim error).
    pub async fn is_consumed(&self, id: &str) -> Result<Option<bool>, StoreError> {
        retrying!(self, "read", |client| {
            let row = client
                .query_opt(
                    "SELECT consumed_at IS NOT NULL FROM aml_grants WHERE id = $1",
                    &[&id],
                )
                .await?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    async fn insert_grant(
        &self,
        id: &str,
        digest: Sha256Digest,
        named: Option<(&str, &str)>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let (tool, resource) = named.unzip();
        let ttl_ms = self.lifetimes.resolve_ms(ttl)?;
        let token = new_grant_id()?;
        let digest = digest.to_string();
        let ours = retrying!(self, "issue", |client| {
            let insert = client
                .prepare_cached(
                    "INSERT INTO aml_grants (id, digest, expires_at, tool, issue_token, resource)
                     VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond', $4, $5, $6)
                     ON CONFLICT (id) DO NOTHING RETURNING id",
                )
                .await?;
            if client
                .query_opt(&insert, &[&id, &digest, &ttl_ms, &tool, &token, &resource])
                .await?
                .is_some()
            {
                return Ok(true);
            }
            // Taken: by this issue's earlier attempt, or by anyone else.
            let row = client
                .query_opt(
                    "SELECT issue_token IS NOT DISTINCT FROM $2 FROM aml_grants WHERE id = $1",
                    &[&id, &token],
                )
                .await?;
            Ok(row.is_some_and(|r| r.get(0)))
        })?;
        if !ours {
            return Err(StoreError::Duplicate(id.to_owned()));
        }
        Ok(())
    }

    async fn spend(&self, grant: &GrantRef, with_intent: bool) -> Result<ClaimStatus, ClaimError> {
        let token = new_grant_id().map_err(|e| ClaimError::with_source(e.to_string(), e))?;
        self.writer.claim(grant, with_intent, token).await
    }
}

#[async_trait]
impl GrantIssuer for PostgresStore {
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
impl GrantStore for PostgresStore {
    async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        self.spend(grant, false).await
    }
}

#[async_trait]
impl ClaimsWithIntent for PostgresStore {
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
impl ReceiptJournal for PostgresStore {
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
        retrying!(self, "read", |client| {
            let rows = client
                .query(
                    "SELECT id, digest, grant_id, tool, (extract(epoch from intent_at) * 1000)::bigint,
                            resource
                     FROM aml_journal WHERE outcome IS NULL AND reconciled_at IS NULL ORDER BY id",
                    &[],
                )
                .await?;
            Ok(rows
                .into_iter()
                .map(|r| UnresolvedIntent {
                    id: r.get(0),
                    proposal_sha256: r.get(1),
                    grant_id: r.get(2),
                    tool: r.get(3),
                    intent_at_ms: r.get(4),
                    resource: r.get(5),
                })
                .collect())
        })
    }

    async fn reconcile(&self, id: i64, note: &str) -> Result<bool, StoreError> {
        // An outcome still queued resolves the intent first.
        self.writer.committed(false).await?;
        once!(self, "reconcile", |client| {
            let n = client
                .execute(
                    "UPDATE aml_journal SET reconciled_at = now(), reconcile_note = $2
                     WHERE id = $1 AND outcome IS NULL AND reconciled_at IS NULL",
                    &[&id, &note],
                )
                .await?;
            Ok(n == 1)
        })
    }
}

#[async_trait]
impl DecisionJournal for PostgresStore {
    async fn record_decision(&self, r: &DecisionRecord) -> Result<(), StoreError> {
        once!(self, "decision record", |client| {
            client
                .execute(
                    "INSERT INTO aml_decisions (digest, grant_id, approver_key_id, decision, statement)
                     VALUES ($1, $2, $3, $4, $5)",
                    &[
                        &r.proposal_sha256,
                        &r.grant_id,
                        &r.approver_key_id,
                        &r.decision,
                        &r.statement_json,
                    ],
                )
                .await?;
            Ok(())
        })
    }
}

impl PostgresStore {
    /// The decisions recorded for `digest`, oldest first: `(decision, statement JSON)`.
    pub async fn decisions_for(&self, digest: &str) -> Result<Vec<(String, String)>, StoreError> {
        retrying!(self, "read", |client| {
            let rows = client
                .query(
                    "SELECT decision, statement FROM aml_decisions WHERE digest = $1 ORDER BY id",
                    &[&digest],
                )
                .await?;
            Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }
}

#[async_trait]
impl ReceiptStore for PostgresStore {
    async fn append_records(&self, records: &[String]) -> Result<(), StoreError> {
        self.writer
            .later(records.iter().cloned().map(Later::Record).collect())
    }

    async fn flush_records(&self) -> Result<(), StoreError> {
        self.writer.committed(true).await
    }

    async fn records_since(&self, since_ms: i64) -> Result<Vec<StoredRecord>, StoreError> {
        self.writer.committed(false).await?;
        retrying!(self, "read", |client| {
            let rows = client
                .query(
                    "SELECT id, (extract(epoch from recorded_at) * 1000)::bigint, record FROM aml_receipts
                     WHERE recorded_at >= to_timestamp($1::bigint / 1000.0) ORDER BY id",
                    &[&since_ms],
                )
                .await?;
            Ok(rows
                .into_iter()
                .map(|r| StoredRecord {
                    id: r.get(0),
                    recorded_at_ms: r.get(1),
                    record: r.get(2),
                })
                .collect())
        })
    }
}

#[async_trait]
impl SettlesCalls for PostgresStore {
    async fn settle(&self, settled: Vec<Settlement>) -> Result<(), StoreError> {
        self.writer.later(settled_writes(settled))
    }
}

#[async_trait]
impl OpenGrants for PostgresStore {
    async fn open_grant(&self, digest: Sha256Digest) -> Result<Option<String>, StoreError> {
        let digest = digest.to_string();
        retrying!(self, "read", |client| {
            let row = client
                .query_opt(
                    "SELECT id FROM aml_grants WHERE digest = $1 AND consumed_at IS NULL AND expires_at > now()
                     ORDER BY issued_at LIMIT 1",
                    &[&digest],
                )
                .await?;
            Ok(row.map(|r| r.get(0)))
        })
    }
}

#[async_trait]
impl AuditLog for PostgresStore {
    async fn audit_rows(&self) -> Result<Vec<AuditRow>, StoreError> {
        self.writer.committed(false).await?;
        let rows = retrying!(self, "read", |client| {
            Ok(client
                .query(
                    // The time exactly as aml_chain_append hashed it.
                    "SELECT id, (extract(epoch from recorded_at) * 1000)::bigint, record, seq, prev, hash
                     FROM aml_receipts ORDER BY id",
                    &[],
                )
                .await?)
        })?;
        let read = |e| StoreError::database("postgres", "read", e);
        rows.iter()
            .map(|r| {
                let seq: Option<i64> = r.try_get(3).map_err(read)?;
                let prev: Option<String> = r.try_get(4).map_err(read)?;
                let hash: Option<String> = r.try_get(5).map_err(read)?;
                Ok(AuditRow {
                    id: r.try_get(0).map_err(read)?,
                    at_ms: r.try_get(1).map_err(read)?,
                    record: r.try_get(2).map_err(read)?,
                    link: seq.map(|seq| Link {
                        seq,
                        prev: prev.unwrap_or_default(),
                        hash: hash.unwrap_or_default(),
                    }),
                })
            })
            .collect()
    }

    async fn chain_tail(&self) -> Result<Option<(i64, String)>, StoreError> {
        self.writer.committed(false).await?;
        let row = retrying!(self, "read", |client| {
            Ok(client
                .query_opt(
                    "SELECT seq, hash FROM aml_receipts WHERE seq IS NOT NULL ORDER BY id DESC LIMIT 1",
                    &[],
                )
                .await?)
        })?;
        let read = |e| StoreError::database("postgres", "read", e);
        row.map(|r| Ok((r.try_get(0).map_err(read)?, r.try_get(1).map_err(read)?)))
            .transpose()
    }

    async fn add_checkpoint(&self, seq: i64, text: &str) -> Result<(), StoreError> {
        once!(self, "checkpoint", |client| {
            client
                .execute(
                    "INSERT INTO aml_checkpoints (seq, checkpoint) VALUES ($1, $2)",
                    &[&seq, &text],
                )
                .await?;
            Ok(())
        })
    }

    async fn checkpoints(&self) -> Result<Vec<String>, StoreError> {
        let rows = retrying!(self, "read", |client| {
            Ok(client
                .query("SELECT checkpoint FROM aml_checkpoints ORDER BY id", &[])
                .await?)
        })?;
        rows.iter()
            .map(|r| {
                r.try_get(0)
                    .map_err(|e| StoreError::database("postgres", "read", e))
            })
            .collect()
    }
}

//! The multi-node store: grants and the journal in PostgreSQL, for hosts that run several
//! replicas. Time is the database's (`now()`), so replicas agree on expiry.

use std::time::Duration;

use aml_core::{async_trait, ClaimError, ClaimStatus, GrantRef, GrantStore, Sha256Digest};
use tokio_postgres::{Client, NoTls};

use crate::grant::{classify, GrantIssuer, GrantLifetimes, StoreError};
use crate::journal::{
    DecisionJournal, DecisionRecord, IntentEntry, ReceiptJournal, RecordedOutcome, UnresolvedIntent,
};

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
COMMIT;";

fn db(e: tokio_postgres::Error) -> StoreError {
    StoreError::Database(e.to_string())
}

/// Grants and journal in PostgreSQL, over one connection.
#[derive(Debug)]
pub struct PostgresStore {
    client: Client,
    lifetimes: GrantLifetimes,
}

impl PostgresStore {
    /// Connects (e.g. `host=127.0.0.1 user=postgres dbname=test`) and creates the tables.
    /// Must run inside a tokio runtime: the connection is driven by a spawned task.
    pub async fn connect(config: &str, lifetimes: GrantLifetimes) -> Result<Self, StoreError> {
        let (client, connection) = tokio_postgres::connect(config, NoTls).await.map_err(db)?;
        tokio::spawn(async move {
            // Errors surface on the client's next query.
            let _ = connection.await;
        });
        client.batch_execute(SCHEMA).await.map_err(db)?;
        Ok(PostgresStore { client, lifetimes })
    }

    /// Whether grant `id` has been consumed (for reconciliation after a claim error).
    pub async fn is_consumed(&self, id: &str) -> Result<Option<bool>, StoreError> {
        let row = self
            .client
            .query_opt(
                "SELECT consumed_at IS NOT NULL FROM aml_grants WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(db)?;
        Ok(row.map(|r| r.get(0)))
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
        let ttl_ms = i64::try_from(self.lifetimes.resolve(ttl)?.as_millis()).unwrap_or(i64::MAX);
        let inserted = self
            .client
            .execute(
                "INSERT INTO aml_grants (id, digest, expires_at)
                 VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond')
                 ON CONFLICT (id) DO NOTHING",
                &[&id, &digest.to_string(), &ttl_ms],
            )
            .await
            .map_err(db)?;
        if inserted == 0 {
            return Err(StoreError::Duplicate(id.to_owned()));
        }
        Ok(())
    }
}

#[async_trait]
impl GrantStore for PostgresStore {
    async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        let Some(id) = &grant.approval_id else {
            return Ok(ClaimStatus::NotIssued);
        };
        let digest = grant.proposal_sha256.to_string();
        let fail = |e| ClaimError::with_source("postgres grant store failed", db(e));
        // One atomic statement: row locking lets exactly one claimant's UPDATE match.
        let claimed = self
            .client
            .query_opt(
                "UPDATE aml_grants SET consumed_at = now()
                 WHERE id = $1 AND digest = $2 AND consumed_at IS NULL AND expires_at > now()
                 RETURNING id",
                &[id, &digest],
            )
            .await
            .map_err(fail)?;
        if claimed.is_some() {
            return Ok(ClaimStatus::Claimed);
        }
        let row = self
            .client
            .query_opt(
                "SELECT consumed_at IS NOT NULL, expires_at <= now() FROM aml_grants WHERE id = $1 AND digest = $2",
                &[id, &digest],
            )
            .await
            .map_err(fail)?;
        Ok(row.map_or(ClaimStatus::NotIssued, |r| classify(r.get(0), r.get(1))))
    }
}

#[async_trait]
impl ReceiptJournal for PostgresStore {
    async fn intent(&self, entry: &IntentEntry) -> Result<i64, StoreError> {
        let row = self
            .client
            .query_one(
                "INSERT INTO aml_journal (digest, grant_id, tool) VALUES ($1, $2, $3) RETURNING id",
                &[&entry.proposal_sha256.to_string(), &entry.grant_id, &entry.tool],
            )
            .await
            .map_err(db)?;
        Ok(row.get(0))
    }

    async fn outcome(
        &self,
        id: i64,
        outcome: RecordedOutcome,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        self.client
            .execute(
                "UPDATE aml_journal SET outcome = $2, detail = $3, outcome_at = now() WHERE id = $1 AND outcome IS NULL",
                &[&id, &outcome.as_str(), &detail],
            )
            .await
            .map(drop)
            .map_err(db)
    }

    async fn unresolved(&self) -> Result<Vec<UnresolvedIntent>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT id, digest, grant_id, tool, (extract(epoch from intent_at) * 1000)::bigint
                 FROM aml_journal WHERE outcome IS NULL AND reconciled_at IS NULL ORDER BY id",
                &[],
            )
            .await
            .map_err(db)?;
        Ok(rows
            .into_iter()
            .map(|r| UnresolvedIntent {
                id: r.get(0),
                proposal_sha256: r.get(1),
                grant_id: r.get(2),
                tool: r.get(3),
                intent_at_ms: r.get(4),
            })
            .collect())
    }

    async fn reconcile(&self, id: i64, note: &str) -> Result<bool, StoreError> {
        self.client
            .execute(
                "UPDATE aml_journal SET reconciled_at = now(), reconcile_note = $2
                 WHERE id = $1 AND outcome IS NULL AND reconciled_at IS NULL",
                &[&id, &note],
            )
            .await
            .map(|n| n == 1)
            .map_err(db)
    }
}

#[async_trait]
impl DecisionJournal for PostgresStore {
    async fn record_decision(&self, r: &DecisionRecord) -> Result<(), StoreError> {
        self.client
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
            .await
            .map(drop)
            .map_err(db)
    }
}

impl PostgresStore {
    /// The decisions recorded for `digest`, oldest first: `(decision, statement JSON)`.
    pub async fn decisions_for(&self, digest: &str) -> Result<Vec<(String, String)>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT decision, statement FROM aml_decisions WHERE digest = $1 ORDER BY id",
                &[&digest],
            )
            .await
            .map_err(db)?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}

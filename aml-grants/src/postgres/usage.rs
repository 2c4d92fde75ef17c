//! Budgets on PostgreSQL (`context.usage`), shared by every replica on the database: each
//! dispatched call is a row of `aml_usage`, and the check that the usage is still what the
//! plan saw and the row's insert are one transaction under an advisory lock per caller and
//! tool, so replicas count one after another. Time is the server's.

use aml_core::{async_trait, Caller, Counted, Usage, UsageError, UsageLedger};

use super::{Failure, PostgresStore, ATTEMPTS};

/// The windows, as the server reads them.
/// Three index range counts: the minute's and the hour's read only their own rows.
const USAGE: &str = "SELECT
  (SELECT count(*) FROM aml_usage WHERE caller = $1 AND tool = $2 AND at > now() - interval '1 minute'),
  (SELECT count(*) FROM aml_usage WHERE caller = $1 AND tool = $2 AND at > now() - interval '1 hour'),
  (SELECT count(*) FROM aml_usage WHERE caller = $1 AND tool = $2 AND at > now() - interval '1 day')";

fn usage_of(row: &tokio_postgres::Row) -> Result<Usage, tokio_postgres::Error> {
    let count = |i| row.try_get::<_, i64>(i).map(|n| n.max(0) as u64);
    Ok(Usage {
        minute: count(0)?,
        hour: count(1)?,
        day: count(2)?,
    })
}

#[async_trait]
impl UsageLedger for PostgresStore {
    async fn usage(&self, caller: &Caller, tool: &str) -> Result<Usage, UsageError> {
        let caller = caller.id();
        retrying!(self, "read usage", |client| {
            let row = client.query_one(USAGE, &[&caller, &tool]).await?;
            Ok(usage_of(&row)?)
        })
        .map_err(|e| UsageError::with_source("the usage ledger failed", e))
    }

    async fn count_if(&self, caller: &Caller, tool: &str, seen: Usage) -> Result<Counted, UsageError> {
        let caller = caller.id();
        // Not retried: a commit whose answer was lost would count the call twice.
        once!(self, "count usage", |client| {
            let mut client = client;
            let tx = client.transaction().await?;
            // Every replica's count of this caller and tool waits here until the one before
            // it commits; the lock ends with the transaction.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(10) || $2, 7436102))",
                &[&caller, &tool],
            )
            .await?;
            let usage = usage_of(&tx.query_one(USAGE, &[&caller, &tool]).await?)?;
            if usage != seen {
                tx.rollback().await?;
                return Ok::<_, Failure>(Counted::Changed(usage));
            }
            tx.execute(
                "DELETE FROM aml_usage WHERE caller = $1 AND tool = $2 AND at <= now() - interval '1 day'",
                &[&caller, &tool],
            )
            .await?;
            tx.execute(
                "INSERT INTO aml_usage (caller, tool) VALUES ($1, $2)",
                &[&caller, &tool],
            )
            .await?;
            tx.commit().await?;
            Ok(Counted::Counted)
        })
        .map_err(|e| UsageError::with_source("the usage ledger failed", e))
    }
}

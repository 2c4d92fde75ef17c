//! Budgets on SQLite (`context.usage`): each dispatched call is a row of `aml_usage`; the
//! check that the usage is still what the plan saw and the row's insert are one
//! `BEGIN IMMEDIATE` transaction, so processes sharing the file count one after another.

use aml_core::{async_trait, Caller, Counted, Usage, UsageError, UsageLedger, USAGE_WINDOWS};
use rusqlite::{params, Connection, TransactionBehavior};

use super::{db, SqliteStore};
use crate::grant::StoreError;

/// `caller`'s calls of `tool` in each window at `now_ms`.
fn usage_at(conn: &Connection, caller: &str, tool: &str, now_ms: i64) -> rusqlite::Result<Usage> {
    let since = |window: std::time::Duration| now_ms.saturating_sub(window.as_millis() as i64);
    // Three index range counts: the minute's and the hour's read only their own rows.
    conn.query_row(
        "SELECT (SELECT count(*) FROM aml_usage WHERE caller = ?1 AND tool = ?2 AND at > ?3),
                (SELECT count(*) FROM aml_usage WHERE caller = ?1 AND tool = ?2 AND at > ?4),
                (SELECT count(*) FROM aml_usage WHERE caller = ?1 AND tool = ?2 AND at > ?5)",
        params![
            caller,
            tool,
            since(USAGE_WINDOWS[0]),
            since(USAGE_WINDOWS[1]),
            since(USAGE_WINDOWS[2])
        ],
        |r| {
            let count = |i| r.get::<_, i64>(i).map(|n| n.max(0) as u64);
            Ok(Usage {
                minute: count(0)?,
                hour: count(1)?,
                day: count(2)?,
            })
        },
    )
}

fn ledger_error(e: StoreError) -> UsageError {
    UsageError::with_source("the usage ledger failed", e)
}

#[async_trait]
impl UsageLedger for SqliteStore {
    async fn usage(&self, caller: &Caller, tool: &str) -> Result<Usage, UsageError> {
        let (caller, tool, now) = (caller.id().to_owned(), tool.to_owned(), self.clock.now_ms());
        self.run(move |c| usage_at(c, &caller, &tool, now).map_err(db("read usage")))
            .await
            .map_err(ledger_error)
    }

    async fn count_if(&self, caller: &Caller, tool: &str, seen: Usage) -> Result<Counted, UsageError> {
        let (caller, tool, now) = (caller.id().to_owned(), tool.to_owned(), self.clock.now_ms());
        self.run(move |c| {
            let count = |c: &mut Connection| -> rusqlite::Result<Counted> {
                let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let usage = usage_at(&tx, &caller, &tool, now)?;
                if usage != seen {
                    return Ok(Counted::Changed(usage));
                }
                let day = USAGE_WINDOWS[2].as_millis() as i64;
                // What left the longest window is never read again.
                tx.execute(
                    "DELETE FROM aml_usage WHERE caller = ?1 AND tool = ?2 AND at <= ?3",
                    params![caller, tool, now.saturating_sub(day)],
                )?;
                tx.execute(
                    "INSERT INTO aml_usage (caller, tool, at) VALUES (?1, ?2, ?3)",
                    params![caller, tool, now],
                )?;
                tx.commit()?;
                Ok(Counted::Counted)
            };
            count(c).map_err(db("count usage"))
        })
        .await
        .map_err(ledger_error)
    }
}

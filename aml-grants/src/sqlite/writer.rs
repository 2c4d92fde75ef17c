//! The SQLite store's writer: one thread with its own connection, one `BEGIN IMMEDIATE`
//! transaction (one WAL sync) per batch of writes (see [`crate::group`]).

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Instant;

use aml_core::ClaimStatus;
use rusqlite::{params, Connection, OptionalExtension, Statement};

use crate::chain::Appender;
use crate::clock::Clock;
use crate::grant::{cause_chain, classify, StoreError};
use crate::group::{
    shared_failure, ClaimWrite, Later, Losses, Queue, Reply, Tally, Write, LAZY_COMMIT, MAX_BATCH,
};
use crate::journal::{IntentOutcome, IntentRef};

const BACKEND: &str = "sqlite";

/// Starts the thread that writes through `conn`; it commits what is left and ends when the
/// last clone of the queue is dropped.
pub(crate) fn start(conn: Connection, clock: Arc<dyn Clock>) -> Result<Queue, StoreError> {
    let (queue, writes) = mpsc::channel::<Write>();
    let tally = Tally::default();
    let counts = tally.clone();
    std::thread::Builder::new()
        .name("aml-sqlite-writer".into())
        .spawn(move || run(conn, &*clock, &writes, &counts))
        .map_err(|e| StoreError::database(BACKEND, "open", e))?;
    // `Sender` is `Sync` (Rust 1.72+): the queue's clones share it.
    Ok(Queue::new(BACKEND, move |write| queue.send(write).is_ok(), tally))
}

fn run(conn: Connection, clock: &dyn Clock, writes: &Receiver<Write>, tally: &Tally) {
    let losses = Losses::default();
    let mut statements = match Statements::prepare(&conn) {
        Ok(statements) => statements,
        Err(e) => {
            // Every write is refused with the cause (the store was opened, so this is rare).
            let cause = cause_chain(&e);
            while let Some(batch) = next_batch(writes) {
                fail(batch.into_iter(), &cause, &losses);
            }
            return;
        }
    };
    while let Some(batch) = next_batch(writes) {
        commit(&conn, &mut statements, clock.now_ms(), batch, &losses, tally);
    }
}

/// Every statement the writer runs, prepared once for the connection's life (SQLite
/// prepares one again by itself when another connection changed the schema).
struct Statements<'c> {
    begin: Statement<'c>,
    commit: Statement<'c>,
    rollback: Statement<'c>,
    savepoint: Statement<'c>,
    release: Statement<'c>,
    rollback_to: Statement<'c>,
    claim: Statement<'c>,
    claim_intent: Statement<'c>,
    classify: Statement<'c>,
    intent: Statement<'c>,
    outcome_by_id: Statement<'c>,
    outcome_by_grant: Statement<'c>,
    outcome_whole: Statement<'c>,
    record: Statement<'c>,
    tail: Statement<'c>,
}

impl<'c> Statements<'c> {
    fn prepare(conn: &'c Connection) -> rusqlite::Result<Self> {
        Ok(Statements {
            begin: conn.prepare("BEGIN IMMEDIATE")?,
            commit: conn.prepare("COMMIT")?,
            rollback: conn.prepare("ROLLBACK")?,
            savepoint: conn.prepare("SAVEPOINT aml_claim")?,
            release: conn.prepare("RELEASE aml_claim")?,
            rollback_to: conn.prepare("ROLLBACK TO aml_claim")?,
            claim: conn.prepare(
                "UPDATE aml_grants SET consumed_at = ?3
                 WHERE id = ?1 AND digest = ?2 AND consumed_at IS NULL AND expires_at > ?3",
            )?,
            claim_intent: conn.prepare(
                "INSERT INTO aml_journal (digest, grant_id, tool, resource, intent_at)
                 SELECT digest, id, COALESCE(tool, ''), resource, ?2 FROM aml_grants WHERE id = ?1",
            )?,
            classify: conn.prepare(
                "SELECT consumed_at IS NOT NULL, expires_at <= ?3 FROM aml_grants WHERE id = ?1 AND digest = ?2",
            )?,
            intent: conn
                .prepare("INSERT INTO aml_journal (digest, grant_id, tool, intent_at, resource) VALUES (?1, ?2, ?3, ?4, ?5)")?,
            outcome_by_id: conn.prepare(
                "UPDATE aml_journal SET outcome = ?2, detail = ?3, outcome_at = ?4 WHERE id = ?1 AND outcome IS NULL",
            )?,
            outcome_by_grant: conn.prepare(
                "UPDATE aml_journal SET outcome = ?2, detail = ?3, outcome_at = ?4, tool = ?5, resource = ?6
                 WHERE grant_id = ?1 AND outcome IS NULL",
            )?,
            // A granted call whose claim wrote no intent (another store claimed it).
            outcome_whole: conn.prepare(
                "INSERT INTO aml_journal (digest, grant_id, tool, intent_at, outcome, detail, outcome_at, resource)
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?4, ?7
                 WHERE NOT EXISTS (SELECT 1 FROM aml_journal WHERE grant_id = ?2)",
            )?,
            record: conn.prepare(
                "INSERT INTO aml_receipts (recorded_at, record, seq, prev, hash) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?,
            // Read inside the write transaction, so processes sharing the file extend one
            // chain; the last link is the last row with one (ids only grow).
            tail: conn.prepare(
                "SELECT seq, hash FROM aml_receipts WHERE seq IS NOT NULL ORDER BY id DESC LIMIT 1",
            )?,
        })
    }
}

/// Waits for a write, then takes every write queued behind it. Writes nobody waits for wait
/// up to [`LAZY_COMMIT`] for one somebody waits for, to share its commit.
fn next_batch(writes: &Receiver<Write>) -> Option<Vec<Write>> {
    let first = writes.recv().ok()?;
    let mut batch = vec![first];
    if !batch[0].waited_for() {
        let deadline = Instant::now() + LAZY_COMMIT;
        while batch.len() < MAX_BATCH {
            match writes.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(write) => {
                    let waited_for = write.waited_for();
                    batch.push(write);
                    if waited_for {
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
    }
    while batch.len() < MAX_BATCH {
        match writes.try_recv() {
            Ok(write) => batch.push(write),
            Err(_) => break,
        }
    }
    Some(batch)
}

/// A write's result, sent once the transaction that carried it has committed.
enum Answer {
    Claim(Reply<ClaimStatus>, Result<ClaimStatus, StoreError>),
    Intent(Reply<i64>, Result<i64, StoreError>),
    /// `failed` of `count` writes failed (a statement error), the last for `cause`.
    Later {
        count: u64,
        failed: u64,
        cause: String,
    },
    Flush(Reply<()>, bool),
}

fn commit(
    conn: &Connection,
    st: &mut Statements<'_>,
    now: i64,
    batch: Vec<Write>,
    losses: &Losses,
    tally: &Tally,
) {
    let mut answers = Vec::with_capacity(batch.len());
    let mut writes = batch.into_iter();
    // The chain's tail, read once the transaction holds the write lock, when a record comes.
    let mut chain: Option<Appender> = None;
    let committed = (|| {
        st.begin.execute([])?;
        for write in writes.by_ref() {
            answers.push(apply(st, conn, now, write, &mut chain));
            if conn.is_autocommit() {
                // SQLite rolled the whole transaction back (disk full, I/O error).
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                    Some("the transaction was rolled back".into()),
                ));
            }
        }
        st.commit.execute([]).map(drop)
    })();
    match committed {
        Ok(()) => {
            tally.committed(answers.iter().map(Answer::writes).sum());
            for answer in answers {
                match answer {
                    Answer::Claim(reply, result) => drop(reply.send(result)),
                    Answer::Intent(reply, result) => drop(reply.send(result)),
                    Answer::Later { failed, cause, .. } => losses.add(BACKEND, failed, &cause),
                    Answer::Flush(reply, report) => {
                        let result = if report {
                            losses.since_last_flush(BACKEND)
                        } else {
                            Ok(())
                        };
                        drop(reply.send(result));
                    }
                }
            }
        }
        Err(e) => {
            if !conn.is_autocommit() {
                let _ = st.rollback.execute([]);
            }
            let cause = cause_chain(&e);
            let mut later_lost = 0;
            for answer in answers {
                match answer {
                    Answer::Claim(reply, _) => {
                        drop(reply.send(Err(shared_failure(BACKEND, "commit", &cause))))
                    }
                    Answer::Intent(reply, _) => {
                        drop(reply.send(Err(shared_failure(BACKEND, "commit", &cause))))
                    }
                    Answer::Flush(reply, _) => {
                        drop(reply.send(Err(shared_failure(BACKEND, "commit", &cause))))
                    }
                    Answer::Later { count, .. } => later_lost += count,
                }
            }
            losses.add(BACKEND, later_lost, &cause);
            fail(writes, &cause, losses);
        }
    }
}

/// Answers every write of `writes` with the failure `cause`.
fn fail(writes: impl Iterator<Item = Write>, cause: &str, losses: &Losses) {
    let error = || shared_failure(BACKEND, "commit", cause);
    for write in writes {
        match write {
            Write::Claim(_, reply) => drop(reply.send(Err(error()))),
            Write::Intent(_, reply) => drop(reply.send(Err(error()))),
            Write::Flush { reply, .. } => drop(reply.send(Err(error()))),
            Write::Later(later) => losses.add(BACKEND, later.len() as u64, cause),
        }
    }
}

impl Answer {
    /// How many writes it stands for.
    fn writes(&self) -> u64 {
        match self {
            Answer::Claim(..) | Answer::Intent(..) => 1,
            Answer::Later { count, .. } => *count,
            Answer::Flush(..) => 0,
        }
    }
}

fn apply(
    st: &mut Statements<'_>,
    conn: &Connection,
    now: i64,
    write: Write,
    chain: &mut Option<Appender>,
) -> Answer {
    let failed = |operation| move |e: rusqlite::Error| StoreError::database(BACKEND, operation, e);
    match write {
        Write::Claim(claim, reply) => Answer::Claim(reply, spend(st, now, &claim).map_err(failed("claim"))),
        Write::Intent(entry, reply) => {
            let inserted = st
                .intent
                .execute(params![
                    entry.proposal_sha256.to_string(),
                    entry.grant_id,
                    entry.tool,
                    now,
                    entry.resource
                ])
                .map(|_| conn.last_insert_rowid());
            Answer::Intent(reply, inserted.map_err(failed("intent")))
        }
        Write::Later(writes) => {
            let (mut failed, mut cause) = (0, String::new());
            for write in &writes {
                let done = match write {
                    Later::Outcome(outcome) => resolve(st, now, outcome),
                    Later::Record(record) => append(st, now, record, chain),
                };
                if let Err(e) = done {
                    failed += 1;
                    cause = cause_chain(&e);
                }
            }
            Answer::Later {
                count: writes.len() as u64,
                failed,
                cause,
            }
        }
        Write::Flush { reply, report } => Answer::Flush(reply, report),
    }
}

/// Stores `record` as the chain's next link, in the batch's transaction.
fn append(
    st: &mut Statements<'_>,
    now: i64,
    record: &str,
    chain: &mut Option<Appender>,
) -> rusqlite::Result<()> {
    let appender = match chain {
        Some(appender) => appender,
        None => {
            let tail = st
                .tail
                .query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
                .optional()?;
            chain.insert(Appender::after(tail))
        }
    };
    let link = appender.next(now, record);
    st.record
        .execute(params![now, record, link.seq, link.prev, link.hash])?;
    appender.commit(link);
    Ok(())
}

/// The one-use claim: exactly one claimant of a grant sees a changed row, in this process or
/// any other (SQLite serializes writers); the intent is written with it or not at all.
fn spend(st: &mut Statements<'_>, now: i64, claim: &ClaimWrite) -> rusqlite::Result<ClaimStatus> {
    st.savepoint.execute([])?;
    let status = claim_in(st, now, claim);
    match &status {
        Ok(_) => st.release.execute([])?,
        Err(_) => {
            let _ = st.rollback_to.execute([]).and_then(|_| st.release.execute([]));
            0
        }
    };
    status
}

fn claim_in(st: &mut Statements<'_>, now: i64, claim: &ClaimWrite) -> rusqlite::Result<ClaimStatus> {
    let changed = st.claim.execute(params![claim.id, claim.digest, now])?;
    if changed == 1 {
        if claim.with_intent {
            st.claim_intent.execute(params![claim.id, now])?;
        }
        return Ok(ClaimStatus::Claimed);
    }
    let row: Option<(bool, bool)> = st
        .classify
        .query_row(params![claim.id, claim.digest, now], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    Ok(row.map_or(ClaimStatus::NotIssued, |(consumed, expired)| {
        classify(consumed, expired)
    }))
}

fn resolve(st: &mut Statements<'_>, now: i64, resolved: &IntentOutcome) -> rusqlite::Result<()> {
    let (outcome, detail) = (resolved.outcome.as_str(), &resolved.detail);
    match &resolved.intent {
        IntentRef::Id(id) => st
            .outcome_by_id
            .execute(params![id, outcome, detail, now])
            .map(drop),
        IntentRef::Claimed(entry) => {
            let updated = st.outcome_by_grant.execute(params![
                entry.grant_id,
                outcome,
                detail,
                now,
                entry.tool,
                entry.resource
            ])?;
            if updated == 0 {
                st.outcome_whole.execute(params![
                    entry.proposal_sha256.to_string(),
                    entry.grant_id,
                    entry.tool,
                    now,
                    outcome,
                    detail,
                    entry.resource
                ])?;
            }
            Ok(())
        }
    }
}

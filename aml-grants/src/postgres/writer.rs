//! The PostgreSQL store's writer: each batch of writes (see [`crate::group`]) is one
//! transaction, sent as one pipeline on a pooled connection — `BEGIN`, a statement per kind
//! of write (the intents of the whole batch in one, its outcomes in one, its records in
//! one; a statement per claim), `COMMIT` — so it costs one round trip and one WAL flush.
//! Up to [`PIPELINES`] batches are in flight at once, on as many connections.
//!
//! Records are the audit chain's links (ADR 022), appended under a lock the server holds
//! until their batch commits: a batch with claims or intents never carries them (they go in
//! a batch of their own, one such batch in flight at a time), so no call waits for the chain.
//!
//! The transaction is `READ COMMITTED` whatever the server's default: a claim that waits for
//! a concurrent claim's row lock then sees the grant spent (and answers `AlreadyClaimed`),
//! instead of failing the whole batch with a serialization error.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use aml_core::ClaimStatus;
use deadpool_postgres::Pool;
use tokio::sync::{mpsc, Semaphore};
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;

use super::{Failure, ATTEMPTS};
use crate::grant::{cause_chain, classify, StoreError};
use crate::group::{
    shared_failure, ClaimWrite, Later, Losses, Queue, Reply, Tally, Write, LAZY_COMMIT, MAX_BATCH,
};
use crate::journal::{IntentEntry, IntentOutcome, IntentRef};

const BACKEND: &str = "postgres";

/// Batches in flight at once (each on its own pooled connection).
const PIPELINES: usize = 4;

const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Every intent of a batch, in order: their ids, in the same order.
const INTENTS: &str = "WITH input AS MATERIALIZED (
         SELECT nextval(pg_get_serial_sequence('aml_journal', 'id')) AS id, d, g, t, r, n
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS u(d, g, t, r, n)),
     inserted AS (INSERT INTO aml_journal (id, digest, grant_id, tool, resource)
                  SELECT id, d, g, t, r FROM input)
     SELECT id FROM input ORDER BY n";

/// One claim, classified in the same statement: (claimed, found, consumed, expired, ours).
/// The classification reads the statement's snapshot: a claimant that lost a race sees the
/// grant unspent there, which [`classify`] answers `AlreadyClaimed`; a retry of a claim whose
/// commit was lost sees its own token.
const CLAIM: &str = "WITH claimed AS (
         UPDATE aml_grants SET consumed_at = now(), claim_token = $3
         WHERE id = $1 AND digest = $2 AND consumed_at IS NULL AND expires_at > now()
         RETURNING id, digest, tool, resource),
     journaled AS (
         INSERT INTO aml_journal (digest, grant_id, tool, resource)
         SELECT digest, id, COALESCE(tool, ''), resource FROM claimed WHERE $4::bool RETURNING id)
     SELECT (SELECT count(*) FROM claimed) > 0, g.id IS NOT NULL, g.consumed_at IS NOT NULL,
            COALESCE(g.expires_at <= now(), false), g.claim_token IS NOT DISTINCT FROM $3
     FROM (SELECT 1) AS one LEFT JOIN aml_grants g ON g.id = $1 AND g.digest = $2";

const OUTCOMES_BY_ID: &str = "UPDATE aml_journal j SET outcome = u.o, detail = u.d, outcome_at = now()
     FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u(id, o, d)
     WHERE j.id = u.id AND j.outcome IS NULL";

/// Resolves the claim's intent, or, when there is none for this grant at all, writes a
/// complete record.
const OUTCOME_BY_GRANT: &str = "WITH resolved AS (
         UPDATE aml_journal SET outcome = $2, detail = $3, outcome_at = now(), tool = $5,
                                resource = $6
         WHERE grant_id = $1 AND outcome IS NULL RETURNING id)
     INSERT INTO aml_journal (digest, grant_id, tool, outcome, detail, outcome_at, resource)
     SELECT $4, $1, $5, $2, $3, now(), $6
     WHERE NOT EXISTS (SELECT 1 FROM aml_journal WHERE grant_id = $1)
       AND NOT EXISTS (SELECT 1 FROM resolved)";

/// The records, in order, as the audit chain's next links (the function the schema
/// creates; it takes the chain's lock until the batch commits).
const RECORDS: &str = "SELECT aml_chain_append($1::text[])";

/// Starts the task (on the current tokio runtime) that writes through `pool`; it commits
/// what is left and ends when the last clone of the queue is dropped.
pub(crate) fn start(pool: Pool) -> Queue {
    let (queue, writes) = mpsc::unbounded_channel();
    let tally = Tally::default();
    tokio::spawn(run(pool, writes, tally.clone()));
    Queue::new(BACKEND, move |write| queue.send(write).is_ok(), tally)
}

async fn run(pool: Pool, mut writes: mpsc::UnboundedReceiver<Write>, tally: Tally) {
    let losses = Losses::default();
    let slots = Arc::new(Semaphore::new(PIPELINES));
    // Held by the one batch in flight that carries records: the server holds the chain's
    // lock from its record statement until it commits, so a batch with claims or intents
    // must not carry records (they would wait for the lock and the hashing). Records wait
    // for nobody: they are held back and committed in a batch of their own, one at a time,
    // unless a flush takes everything at once (ADR 022).
    let chain = Arc::new(Semaphore::new(1));
    let mut held: Vec<Write> = Vec::new();
    loop {
        let mut batch = if held.is_empty() {
            match next_batch(&mut writes).await {
                Some(batch) => batch,
                None => break,
            }
        } else {
            // Held records go once the chain is free, or with the next write, whichever first.
            let next = tokio::select! {
                biased;
                free = Arc::clone(&chain).acquire_owned() => {
                    drop(free);
                    None
                }
                write = writes.recv() => write,
            };
            let mut batch = std::mem::take(&mut held);
            batch.extend(next);
            batch
        };
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        // What arrived while every connection was busy joins this batch.
        while batch.len() < MAX_BATCH {
            match writes.try_recv() {
                Ok(write) => batch.push(write),
                Err(_) => break,
            }
        }
        // A flush also waits for the batches before it (and so finds the chain free).
        let all = if batch.iter().any(|w| matches!(w, Write::Flush { .. })) {
            Arc::clone(&slots)
                .acquire_many_owned(PIPELINES as u32 - 1)
                .await
                .ok()
        } else {
            None
        };
        let mut chained = None;
        if all.is_some() {
            // Everything before the flush commits with it: no batch is in flight.
            if batch.iter().any(carries_records) {
                chained = Arc::clone(&chain).acquire_owned().await.ok();
            }
        } else if batch.iter().any(carries_records) {
            // Claims and intents never wait for the chain: records then go on their own.
            if !batch.iter().any(Write::waited_for) {
                chained = Arc::clone(&chain).try_acquire_owned().ok();
            }
            if chained.is_none() {
                let (records, rest): (Vec<Write>, Vec<Write>) = batch.into_iter().partition(carries_records);
                held = records;
                batch = rest;
            }
        }
        if batch.is_empty() {
            continue;
        }
        let (pool, losses, tally) = (pool.clone(), losses.clone(), tally.clone());
        tokio::spawn(async move {
            commit(&pool, batch, &losses, &tally).await;
            drop((slot, all, chained));
        });
    }
    let _ = slots.acquire_many(PIPELINES as u32).await;
}

/// Whether `write` stores a receipt record (and so appends to the audit chain).
fn carries_records(write: &Write) -> bool {
    matches!(write, Write::Later(later) if later.iter().any(|l| matches!(l, Later::Record(_))))
}

/// Waits for a write, then takes every write queued behind it; writes nobody waits for wait
/// up to [`LAZY_COMMIT`] for one somebody waits for.
async fn next_batch(writes: &mut mpsc::UnboundedReceiver<Write>) -> Option<Vec<Write>> {
    let first = writes.recv().await?;
    let mut batch = vec![first];
    if !batch[0].waited_for() {
        let deadline = tokio::time::Instant::now() + LAZY_COMMIT;
        while batch.len() < MAX_BATCH {
            match tokio::time::timeout_at(deadline, writes.recv()).await {
                Ok(Some(write)) => {
                    let waited_for = write.waited_for();
                    batch.push(write);
                    if waited_for {
                        break;
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
    Some(batch)
}

/// One write of a batch.
enum Item {
    Claim(ClaimWrite, Reply<ClaimStatus>),
    Intent(IntentEntry, Reply<i64>),
    Outcome(IntentOutcome),
    Record(String),
    Flush(Reply<()>, bool),
}

fn items(batch: Vec<Write>) -> Vec<Item> {
    let mut items = Vec::with_capacity(batch.len());
    for write in batch {
        match write {
            Write::Claim(claim, reply) => items.push(Item::Claim(claim, reply)),
            Write::Intent(entry, reply) => items.push(Item::Intent(entry, reply)),
            Write::Flush { reply, report } => items.push(Item::Flush(reply, report)),
            Write::Later(later) => items.extend(later.into_iter().map(|l| match l {
                Later::Outcome(outcome) => Item::Outcome(outcome),
                Later::Record(record) => Item::Record(record),
            })),
        }
    }
    items
}

/// A statement of the pipeline, and the items it writes.
enum Step {
    Claim(usize),
    Intents(Vec<usize>),
    OutcomesById(Vec<usize>),
    OutcomeByGrant(usize),
    Records(Vec<usize>),
}

impl Step {
    fn items(&self) -> Vec<usize> {
        match self {
            Step::Claim(i) | Step::OutcomeByGrant(i) => vec![*i],
            Step::Intents(v) | Step::OutcomesById(v) | Step::Records(v) => v.clone(),
        }
    }

    fn operation(&self) -> &'static str {
        match self {
            Step::Claim(_) => "claim",
            Step::Intents(_) => "intent",
            Step::OutcomesById(_) | Step::OutcomeByGrant(_) => "outcome",
            Step::Records(_) => "receipt records",
        }
    }

    fn sql(&self) -> &'static str {
        match self {
            Step::Claim(_) => CLAIM,
            Step::Intents(_) => INTENTS,
            Step::OutcomesById(_) => OUTCOMES_BY_ID,
            Step::OutcomeByGrant(_) => OUTCOME_BY_GRANT,
            Step::Records(_) => RECORDS,
        }
    }
}

/// A step's parameters, owned for as long as the pipeline runs.
enum Params {
    Claim(String, String, String, bool),
    Intents(Vec<String>, Vec<Option<String>>, Vec<String>, Vec<String>),
    OutcomesById(Vec<i64>, Vec<&'static str>, Vec<Option<String>>),
    OutcomeByGrant(
        Option<String>,
        &'static str,
        Option<String>,
        String,
        String,
        String,
    ),
    Records(Vec<String>),
}

impl Params {
    fn refs(&self) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
        match self {
            Params::Claim(id, digest, token, with_intent) => vec![id, digest, token, with_intent],
            Params::Intents(d, g, t, r) => vec![d, g, t, r],
            Params::OutcomesById(ids, outcomes, details) => vec![ids, outcomes, details],
            Params::OutcomeByGrant(grant, outcome, detail, digest, tool, resource) => {
                vec![grant, outcome, detail, digest, tool, resource]
            }
            Params::Records(records) => vec![records],
        }
    }
}

/// The pipeline's statements for the items still to write: a statement per claim and per
/// outcome by grant; one for every intent, one for every outcome by id, one for every record.
fn plan(items: &[Option<Item>]) -> Vec<(Step, Params)> {
    let mut steps = Vec::new();
    let (mut intents, mut intent_rows) = (vec![], (vec![], vec![], vec![], vec![]));
    let (mut by_id, mut by_id_rows) = (vec![], (vec![], vec![], vec![]));
    let (mut records, mut record_rows) = (vec![], vec![]);
    for (i, item) in items.iter().enumerate() {
        match item {
            Some(Item::Claim(c, _)) => steps.push((
                Step::Claim(i),
                Params::Claim(c.id.clone(), c.digest.clone(), c.token.clone(), c.with_intent),
            )),
            Some(Item::Intent(entry, _)) => {
                intents.push(i);
                intent_rows.0.push(entry.proposal_sha256.to_string());
                intent_rows.1.push(entry.grant_id.clone());
                intent_rows.2.push(entry.tool.clone());
                intent_rows.3.push(entry.resource.clone());
            }
            Some(Item::Outcome(o)) => match &o.intent {
                IntentRef::Id(id) => {
                    by_id.push(i);
                    by_id_rows.0.push(*id);
                    by_id_rows.1.push(o.outcome.as_str());
                    by_id_rows.2.push(o.detail.clone());
                }
                IntentRef::Claimed(entry) => steps.push((
                    Step::OutcomeByGrant(i),
                    Params::OutcomeByGrant(
                        entry.grant_id.clone(),
                        o.outcome.as_str(),
                        o.detail.clone(),
                        entry.proposal_sha256.to_string(),
                        entry.tool.clone(),
                        entry.resource.clone(),
                    ),
                )),
            },
            Some(Item::Record(record)) => {
                records.push(i);
                record_rows.push(record.clone());
            }
            Some(Item::Flush(..)) | None => {}
        }
    }
    if !intents.is_empty() {
        let (d, g, t, r) = intent_rows;
        steps.push((Step::Intents(intents), Params::Intents(d, g, t, r)));
    }
    if !by_id.is_empty() {
        let (ids, outcomes, details) = by_id_rows;
        steps.push((
            Step::OutcomesById(by_id),
            Params::OutcomesById(ids, outcomes, details),
        ));
    }
    if !records.is_empty() {
        steps.push((Step::Records(records), Params::Records(record_rows)));
    }
    steps
}

/// How one attempt at a batch went.
enum Attempt {
    /// Every step's rows, in step order.
    Committed(Vec<Vec<Row>>),
    /// Rolled back (nothing was written); `culprit` failed the transaction, unless a retry
    /// can cure it.
    RolledBack {
        culprit: Option<(usize, tokio_postgres::Error)>,
        retry: bool,
    },
    /// The connection failed mid-way: the transaction may or may not have committed.
    Uncertain(String),
    /// No connection.
    NoConnection(Failure),
}

async fn commit(pool: &Pool, batch: Vec<Write>, losses: &Losses, tally: &Tally) {
    let mut items: Vec<Option<Item>> = items(batch).into_iter().map(Some).collect();
    let all = |items: &[Option<Item>]| (0..items.len()).collect::<Vec<usize>>();
    for attempt in 1..=ATTEMPTS {
        let planned = plan(&items);
        if planned.is_empty() {
            // Only flushes: everything before them is committed.
            return answer(&[], vec![], &mut items, losses);
        }
        let last = attempt == ATTEMPTS;
        match run_attempt(pool, &planned).await {
            Attempt::Committed(rows) => {
                let steps: Vec<Step> = planned.into_iter().map(|(step, _)| step).collect();
                tally.committed(steps.iter().map(|s| s.items().len() as u64).sum());
                return answer(&steps, rows, &mut items, losses);
            }
            Attempt::RolledBack { culprit, retry } => match culprit {
                Some((step, e)) if !retry || last => {
                    let step = &planned[step].0;
                    let error = StoreError::database(BACKEND, step.operation(), e);
                    fail(&step.items(), &mut items, error, losses);
                }
                None if !retry || last => {
                    let error = shared_failure(BACKEND, "commit", "the transaction was rolled back");
                    return fail(&all(&items), &mut items, error, losses);
                }
                _ => {}
            },
            Attempt::Uncertain(cause) => {
                // A retry could write intents and records twice: they fail; claims
                // (tokens) and outcomes (idempotent) are tried again.
                let unsafe_to_retry: Vec<usize> = (0..items.len())
                    .filter(|i| last || matches!(items[*i], Some(Item::Intent(..) | Item::Record(_))))
                    .collect();
                let error = shared_failure(BACKEND, "commit", &cause);
                fail(&unsafe_to_retry, &mut items, error, losses);
            }
            Attempt::NoConnection(failure) => {
                if !failure.retryable() || last {
                    let error = failure.into_store_error("write");
                    return fail(&all(&items), &mut items, error, losses);
                }
            }
        }
    }
    let error = shared_failure(BACKEND, "commit", "the transaction failed every attempt");
    fail(&all(&items), &mut items, error, losses);
}

/// Answers the items at `which` with `error` (each waiter gets a copy; the first the error
/// itself), counting lost writes nobody waited for.
fn fail(which: &[usize], items: &mut [Option<Item>], error: StoreError, losses: &Losses) {
    let cause = error.to_string();
    let mut error = Some(error);
    let mut next = || {
        error
            .take()
            .unwrap_or_else(|| shared_failure(BACKEND, "commit", &cause))
    };
    let mut lost = 0;
    for i in which {
        match items[*i].take() {
            Some(Item::Claim(_, reply)) => drop(reply.send(Err(next()))),
            Some(Item::Intent(_, reply)) => drop(reply.send(Err(next()))),
            Some(Item::Flush(reply, _)) => drop(reply.send(Err(next()))),
            Some(Item::Outcome(_) | Item::Record(_)) => lost += 1,
            None => {}
        }
    }
    losses.add(BACKEND, lost, &cause);
}

/// Sends every item its result once the batch committed.
fn answer(steps: &[Step], rows: Vec<Vec<Row>>, items: &mut [Option<Item>], losses: &Losses) {
    for (step, rows) in steps.iter().zip(rows) {
        match step {
            Step::Claim(i) => {
                if let Some(Item::Claim(_, reply)) = items[*i].take() {
                    drop(reply.send(claim_status(&rows)));
                }
            }
            Step::Intents(which) => {
                for (i, row) in which.iter().zip(&rows) {
                    if let Some(Item::Intent(_, reply)) = items[*i].take() {
                        drop(
                            reply.send(
                                row.try_get(0)
                                    .map_err(|e| StoreError::database(BACKEND, "intent", e)),
                            ),
                        );
                    }
                }
            }
            Step::OutcomesById(which) | Step::Records(which) => {
                for i in which {
                    items[*i] = None;
                }
            }
            Step::OutcomeByGrant(i) => items[*i] = None,
        }
    }
    for item in items.iter_mut() {
        if let Some(Item::Flush(reply, report)) = item.take() {
            let result = if report {
                losses.since_last_flush(BACKEND)
            } else {
                Ok(())
            };
            drop(reply.send(result));
        }
    }
}

fn claim_status(rows: &[Row]) -> Result<ClaimStatus, StoreError> {
    let row = rows
        .first()
        .ok_or_else(|| shared_failure(BACKEND, "claim", "the claim returned no row"))?;
    let get = |i| {
        row.try_get::<_, bool>(i)
            .map_err(|e| StoreError::database(BACKEND, "claim", e))
    };
    Ok(match (get(0)?, get(1)?, get(4)?) {
        (true, _, _) => ClaimStatus::Claimed,
        (false, false, _) => ClaimStatus::NotIssued,
        // An earlier attempt of this claim committed before its answer was lost.
        (false, true, true) => ClaimStatus::Claimed,
        (false, true, false) => classify(get(2)?, get(3)?),
    })
}

type Pending<'a> = Pin<Box<dyn Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a>>;

/// Sends the whole transaction at once and reads how it went.
async fn run_attempt(pool: &Pool, planned: &[(Step, Params)]) -> Attempt {
    let client = match pool.get().await {
        Ok(client) => client,
        Err(e) => return Attempt::NoConnection(Failure::Pool(e)),
    };
    let mut statements = Vec::with_capacity(planned.len());
    for (i, (step, _)) in planned.iter().enumerate() {
        match client.prepare_cached(step.sql()).await {
            Ok(statement) => statements.push(statement),
            Err(e) if connection_lost(&e) => return Attempt::Uncertain(cause_chain(&e)),
            Err(e) => {
                let retry = retryable_code(&e);
                return Attempt::RolledBack {
                    culprit: Some((i, e)),
                    retry,
                };
            }
        }
    }
    let mut pipeline: Vec<Pending<'_>> = Vec::with_capacity(planned.len() + 2);
    pipeline.push(Box::pin(async {
        client.batch_execute(BEGIN).await.map(|()| vec![])
    }));
    for (statement, (_, params)) in statements.iter().zip(planned) {
        let client = &client;
        pipeline.push(Box::pin(
            async move { client.query(statement, &params.refs()).await },
        ));
    }
    pipeline.push(Box::pin(async {
        client.batch_execute("COMMIT").await.map(|()| vec![])
    }));
    let mut results = pipelined(pipeline).await;
    let commit = results.pop();
    let begin = results.remove(0);

    let every = std::iter::once(&begin).chain(&results).chain(commit.iter());
    if let Some(e) = every
        .filter_map(|r| r.as_ref().err())
        .find(|e| connection_lost(e))
    {
        return Attempt::Uncertain(cause_chain(e));
    }
    if let Err(e) = begin {
        return Attempt::RolledBack {
            culprit: None,
            retry: retryable_code(&e),
        };
    }
    // The first statement that failed aborted the transaction; the ones after it were
    // refused for that (`25P02`) and COMMIT rolled back.
    let aborted = |r: &Result<Vec<Row>, tokio_postgres::Error>| {
        r.as_ref()
            .is_err_and(|e| e.code() != Some(&SqlState::IN_FAILED_SQL_TRANSACTION))
    };
    if let Some(step) = results.iter().position(aborted) {
        if let Some(Err(e)) = results.into_iter().nth(step) {
            let retry = retryable_code(&e);
            return Attempt::RolledBack {
                culprit: Some((step, e)),
                retry,
            };
        }
        return Attempt::Uncertain("a statement failed".into());
    }
    match commit {
        Some(Ok(_)) if results.iter().all(Result::is_ok) => {
            Attempt::Committed(results.into_iter().map(Result::unwrap_or_default).collect())
        }
        Some(Ok(_)) => Attempt::RolledBack {
            culprit: None,
            retry: true,
        },
        Some(Err(e)) => Attempt::RolledBack {
            retry: retryable_code(&e),
            culprit: None,
        },
        None => Attempt::Uncertain("no answer to COMMIT".into()),
    }
}

/// Whether the connection failed (so whether the transaction committed is unknown).
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || e.code().is_none()
}

/// Whether the server refused the transaction for a reason another attempt can cure.
fn retryable_code(e: &tokio_postgres::Error) -> bool {
    e.code()
        .is_some_and(|c| *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

/// Polls each future once, in order — tokio-postgres sends a request when its future is
/// first polled, so the server receives them in this order — then waits for them all.
async fn pipelined<T>(mut futures: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> Vec<T> {
    let mut outputs: Vec<Option<T>> = std::future::poll_fn(|cx| {
        Poll::Ready(
            futures
                .iter_mut()
                .map(|f| match f.as_mut().poll(cx) {
                    Poll::Ready(output) => Some(output),
                    Poll::Pending => None,
                })
                .collect(),
        )
    })
    .await;
    for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
        if output.is_none() {
            *output = Some(future.await);
        }
    }
    outputs.into_iter().flatten().collect()
}

#![cfg(feature = "sqlite")]
//! The audit chain as each store writes it: records appended in batches (from several tasks
//! at once) read back as one unbroken chain whose hashes the verifier recomputes — on
//! PostgreSQL computed by the server, so this also checks that its bytes are the documented
//! ones — and a database from before the chain keeps its records as "unchained".
//! PostgreSQL runs in a schema of its own (`AML_POSTGRES_URL`; fails without a server).

use std::sync::Arc;

use aml_grants::{verify, AuditLog, ReceiptStore, SqliteStore};

/// Records whose text needs every kind of JSON escape, and text outside ASCII.
fn records(task: usize) -> Vec<String> {
    (0..25)
        .map(|i| {
            serde_json::json!({"record": "aml-call-record/1", "task": task, "i": i,
                               "note": "quote \" backslash \\ tab \t nl \n ctl \u{1} é 😀"})
            .to_string()
        })
        .collect()
}

async fn append_and_verify<S: ReceiptStore + AuditLog + 'static>(store: Arc<S>) {
    let tasks: Vec<_> = (0..4)
        .map(|task| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for chunk in records(task).chunks(5) {
                    store.append_records(chunk).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    store.flush_records().await.unwrap();
    let rows = store.audit_rows().await.unwrap();
    let intact = verify(&rows, &[], 1).unwrap_or_else(|f| panic!("{f:?}"));
    assert_eq!(intact.links, 100);
    assert_eq!(intact.unchained, 0);
    let tail = store.chain_tail().await.unwrap().unwrap();
    assert_eq!(Some(tail), intact.tail);
    assert_eq!(intact.tail.as_ref().map(|t| t.0), Some(100));
    store.add_checkpoint(100, "{\"seq\":100}").await.unwrap();
    assert_eq!(store.checkpoints().await.unwrap(), ["{\"seq\":100}"]);
}

fn temp(name: &str) -> std::path::PathBuf {
    aml_test_support::scratch_dir("chain", name).join("state.sqlite3")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_records_form_one_chain() {
    append_and_verify(Arc::new(SqliteStore::open(temp("batches")).unwrap())).await;
}

#[tokio::test]
async fn sqlite_records_from_before_the_chain_are_unchained() {
    let path = temp("upgrade");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE aml_receipts (id INTEGER PRIMARY KEY, recorded_at INTEGER NOT NULL, record TEXT NOT NULL);
             INSERT INTO aml_receipts (recorded_at, record) VALUES (1, '{\"old\":1}'), (2, '{\"old\":2}');",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    store.append_records(&records(0)).await.unwrap();
    store.flush_records().await.unwrap();
    let intact = verify(&store.audit_rows().await.unwrap(), &[], 1).unwrap();
    assert_eq!((intact.unchained, intact.links), (2, 25));
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_records_form_one_chain_hashed_by_the_server() {
    use aml_grants::{GrantLifetimes, PostgresStore};
    let url = std::env::var("AML_POSTGRES_URL").expect(
        "AML_POSTGRES_URL is not set: point it at a PostgreSQL server (scripts/test uses \
         host=127.0.0.1 port=5432 user=postgres dbname=test)",
    );
    let schema = format!("aml_chain_{}_{}", std::process::id(), nanos());
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url:?} is unreachable: {e}"));
    tokio::spawn(connection);
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let config = format!("{url} options='-c search_path={schema}'");
    let store = PostgresStore::connect(&config, GrantLifetimes::default())
        .await
        .unwrap();
    append_and_verify(Arc::new(store)).await;
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}

#[cfg(feature = "postgres")]
fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// What the chain adds to a SQLite commit of receipt records, measured (not a pass/fail
/// check; ADR 022 quotes it): `cargo test --release -p aml-grants --test it -- --ignored
/// --nocapture`. Transactions of 8 records of ~600 bytes each, as the writer makes them, with
/// the insert of before the chain and with the chain's (the tail read, a hash per record,
/// three more columns), interleaved, on the same file and connection settings.
#[test]
#[ignore = "a measurement; run it with --ignored --nocapture"]
fn measure_sqlite_append_cost() {
    use std::time::Instant;
    let path = temp("measure");
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
        .unwrap();
    let record =
        serde_json::json!({"record": "aml-call-record/1", "plan": {"x": "y".repeat(500)}}).to_string();
    let plain = |conn: &rusqlite::Connection| {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        for _ in 0..8 {
            conn.execute(
                "INSERT INTO aml_receipts (recorded_at, record) VALUES (1, ?1)",
                [&record],
            )
            .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    };
    let chained = |conn: &rusqlite::Connection| {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        let (mut seq, mut prev): (i64, String) = conn
            .query_row(
                "SELECT seq, hash FROM aml_receipts WHERE seq IS NOT NULL ORDER BY id DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap_or((0, aml_grants::GENESIS.to_owned()));
        for _ in 0..8 {
            seq += 1;
            let hash = aml_grants::link_hash(seq, &prev, 1, &record);
            conn.execute(
                "INSERT INTO aml_receipts (recorded_at, record, seq, prev, hash) VALUES (1, ?1, ?2, ?3, ?4)",
                rusqlite::params![record, seq, prev, hash],
            )
            .unwrap();
            prev = hash;
        }
        conn.execute_batch("COMMIT").unwrap();
    };
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for _ in 0..400 {
        let t = Instant::now();
        plain(&conn);
        before.push(t.elapsed());
        let t = Instant::now();
        chained(&conn);
        after.push(t.elapsed());
    }
    let hash_started = Instant::now();
    for seq in 0..10_000 {
        std::hint::black_box(aml_grants::link_hash(seq, aml_grants::GENESIS, 1, &record));
    }
    let per_hash = hash_started.elapsed() / 10_000;
    let median = |v: &mut Vec<std::time::Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    eprintln!(
        "sqlite commit of 8 records, median of 400: before the chain {:?}, with it {:?}; one link hash of a {}-byte record: {per_hash:?}",
        median(&mut before),
        median(&mut after),
        record.len()
    );
}

/// How long an intent waits for its commit on PostgreSQL while records keep arriving (the
/// chain's lock; ADR 022), measured: `cargo test --release -p aml-grants --all-features
/// --test it -- --ignored --nocapture measure_postgres`. Eight tasks, each: an intent
/// (timed), then 8 records queued, 200 times.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run it with --ignored --nocapture"]
async fn measure_postgres_intent_latency_under_records() {
    use aml_grants::{GrantLifetimes, IntentEntry, PostgresStore, ReceiptJournal};
    let url = std::env::var("AML_POSTGRES_URL").expect("AML_POSTGRES_URL is not set");
    let schema = format!("aml_measure_{}_{}", std::process::id(), nanos());
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let config = format!("{url} options='-c search_path={schema}'");
    let store = Arc::new(
        PostgresStore::connect(&config, GrantLifetimes::default())
            .await
            .unwrap(),
    );
    let record =
        serde_json::json!({"record": "aml-call-record/1", "plan": {"x": "y".repeat(500)}}).to_string();
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let (store, record) = (Arc::clone(&store), record.clone());
            tokio::spawn(async move {
                let mut waits = Vec::new();
                for i in 0..200 {
                    let entry = IntentEntry {
                        proposal_sha256: aml_core::Sha256Digest::of(format!("{task}-{i}").as_bytes()),
                        grant_id: None,
                        tool: "echo".into(),
                        resource: "notes".into(),
                    };
                    let started = std::time::Instant::now();
                    store.intent(&entry).await.unwrap();
                    waits.push(started.elapsed());
                    store.append_records(&vec![record.clone(); 8]).await.unwrap();
                }
                waits
            })
        })
        .collect();
    let mut waits = Vec::new();
    for task in tasks {
        waits.extend(task.await.unwrap());
    }
    store.flush_records().await.unwrap();
    let intact = verify(&store.audit_rows().await.unwrap(), &[], 1).unwrap();
    assert_eq!(intact.links, 8 * 200 * 8);
    waits.sort();
    let at = |q: f64| waits[((waits.len() - 1) as f64 * q) as usize];
    eprintln!(
        "postgres intent commit while records arrive: p50 {:?}, p90 {:?}, p99 {:?} ({} intents, {} commits)",
        at(0.5),
        at(0.9),
        at(0.99),
        waits.len(),
        store.commit_stats().transactions
    );
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}

//! One-use claims: latency per claim (criterion median) for SQLite with `synchronous=FULL`
//! and for PostgreSQL, alone and with the dispatch intent written in the same transaction
//! (`JournaledGrants`); claims per second is its inverse (one claimant at a time).
//! PostgreSQL's address comes from `AML_POSTGRES_URL`.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use aml_core::{GrantRef, GrantStore, Sha256Digest};
use std::sync::Arc;

use aml_grants::{GrantIssuer, GrantLifetimes, JournaledGrants, PostgresStore, SqliteStore};
use criterion::{criterion_group, criterion_main, Criterion};

async fn claims<S: GrantIssuer + ?Sized>(store: &S, claimer: &dyn GrantStore, n: u64) -> Duration {
    let digest = Sha256Digest::of(b"bench");
    let mut grants = Vec::new();
    for _ in 0..n {
        let id = store.issue(digest, None).await.expect("issue");
        grants.push(GrantRef {
            proposal_sha256: digest,
            approval_id: Some(id),
        });
    }
    let start = Instant::now();
    for g in &grants {
        assert_eq!(
            claimer.claim(g).await.expect("claim"),
            aml_core::ClaimStatus::Claimed
        );
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("aml-grants-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite = Arc::new(SqliteStore::open(dir.join("bench.db")).unwrap());
    let sqlite_intents = JournaledGrants::new(sqlite.clone());
    let url = std::env::var("AML_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".into());
    let postgres = Arc::new(
        rt.block_on(PostgresStore::connect(&url, GrantLifetimes::default()))
            .expect("PostgreSQL"),
    );
    let postgres_intents = JournaledGrants::new(postgres.clone());

    let mut group = c.benchmark_group("grant_claim");
    group.sample_size(20).measurement_time(Duration::from_secs(10));
    group.bench_function("sqlite_synchronous_full", |b| {
        b.iter_custom(|n| rt.block_on(claims(&*sqlite, &*sqlite, n)))
    });
    group.bench_function("sqlite_with_intent", |b| {
        b.iter_custom(|n| rt.block_on(claims(&*sqlite, &sqlite_intents, n)))
    });
    group.bench_function("postgres", |b| {
        b.iter_custom(|n| rt.block_on(claims(&*postgres, &*postgres, n)))
    });
    group.bench_function("postgres_with_intent", |b| {
        b.iter_custom(|n| rt.block_on(claims(&*postgres, &postgres_intents, n)))
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);

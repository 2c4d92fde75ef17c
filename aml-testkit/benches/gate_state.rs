//! What the gate's durable state costs a call, in one run beside its yardsticks: this disk's
//! `fdatasync` (timed on the filesystem of the state files), a bare forwarding process (C,
//! compiled here), and `aml-mcp-gate` with `--state memory`, a SQLite file and PostgreSQL.
//! For each: sequential `tools/call` p50/p99 (the paths interleaved call by call, so the
//! machine's noise falls on all alike) and the latency each adds over calling the server
//! directly; pipelined throughput (1,000 calls written at once, the answers read as they
//! come); and for the gate, throughput with 32 Streamable HTTP sessions calling at once. The
//! client is raw JSON-RPC on one thread; the server is the rmcp notice fixture. It ends with
//! the goals of issue 31, met or not, from these numbers.
//!
//! Needs the release gate (`cargo build --release -p aml-mcp-gate`) and PostgreSQL at
//! `AML_POSTGRES_URL` (as `scripts/test` sets it).
#![allow(missing_docs)]

mod support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use support::peer::{self, median, ListeningGate, Peer, Setup};
use support::summary::micros as us;

/// Sequential calls per path, interleaved.
const SEQUENTIAL: usize = 2000;
/// Calls written at once, and how many times each path is measured so.
const PIPELINED: usize = 1000;
const PIPELINED_RUNS: usize = 5;
/// HTTP sessions at once, calls each per run, runs.
const SESSIONS: usize = 32;
const SESSION_CALLS: usize = 50;
const HTTP_RUNS: usize = 3;

/// The disk's yardstick: `fdatasync(2)` of one rewritten 4 KiB block of a file beside the
/// state file, sampled between the calls so that it sees the same load they do.
struct Fdatasync {
    file: std::fs::File,
    samples: Vec<Duration>,
}

impl Fdatasync {
    fn beside(dir: &Path) -> Fdatasync {
        let file = std::fs::File::create(dir.join("fdatasync-probe")).unwrap();
        Fdatasync {
            file,
            samples: Vec::new(),
        }
    }

    fn sample(&mut self) {
        use std::io::Seek as _;
        self.file.seek(std::io::SeekFrom::Start(0)).unwrap();
        self.file.write_all(&[self.samples.len() as u8; 4096]).unwrap();
        let start = Instant::now();
        self.file.sync_data().unwrap();
        self.samples.push(start.elapsed());
    }
}

/// `--state` for the PostgreSQL database of `AML_POSTGRES_URL` (either form).
fn postgres_state() -> String {
    let url = std::env::var("AML_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".into());
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return url;
    }
    let field = |key: &str, default: &str| {
        url.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or(default)
            .to_owned()
    };
    format!(
        "postgres://{}@{}:{}/{}",
        field("user", "postgres"),
        field("host", "127.0.0.1"),
        field("port", "5432"),
        field("dbname", "test")
    )
}

/// Calls per second with [`SESSIONS`] HTTP sessions calling at once through a gate on
/// `state`: the median of [`HTTP_RUNS`] runs.
async fn http_throughput(setup: &Setup, state: &str) -> f64 {
    let gate = ListeningGate::start(setup, state, None).await;
    let rate = peer::http_throughput(&gate, SESSIONS, SESSION_CALLS, HTTP_RUNS).await;
    gate.stop().await;
    rate
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gate-state-{}", std::process::id()));
    let setup = Setup::new(dir.clone());
    let sqlite = dir.join("state.sqlite3").display().to_string();
    let postgres = postgres_state();
    let mut disk = Fdatasync::beside(&dir);

    let gate = support::gate_binary();
    let forwarder = support::build_forwarder(&dir);
    let serve = setup.serve();
    let audit = dir.join("audit.jsonl");
    let mut peers = rt.block_on(async {
        vec![
            Peer::start("direct", &setup.fixture, &serve, &audit).await,
            Peer::start(
                "bare forwarder (C)",
                &forwarder,
                &[setup.fixture.display().to_string(), serve[0].clone()],
                &audit,
            )
            .await,
            Peer::start("gate, memory", &gate, &setup.gate_args("memory", &[]), &audit).await,
            Peer::start("gate, SQLite", &gate, &setup.gate_args(&sqlite, &[]), &audit).await,
            Peer::start(
                "gate, PostgreSQL",
                &gate,
                &setup.gate_args(&postgres, &[]),
                &audit,
            )
            .await,
        ]
    });
    let pids: Vec<Option<u32>> = peers.iter().map(|p| p.child.id()).collect();

    let mut group = c.benchmark_group("gate_state_call");
    for peer in &mut peers {
        let name = peer.name.replace([' ', ',', '(', ')'], "_");
        group.bench_function(name, |b| b.iter(|| rt.block_on(peer.call())));
    }
    group.finish();

    // Sequential, interleaved call by call.
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); peers.len()];
    let cpu_before: Vec<Option<u64>> = pids.iter().map(|p| support::cpu_ns(*p)).collect();
    rt.block_on(async {
        for _ in 0..SEQUENTIAL {
            disk.sample();
            for (peer, samples) in peers.iter_mut().zip(&mut samples) {
                samples.push(peer.call().await);
            }
        }
    });
    let cpu_after: Vec<Option<u64>> = pids.iter().map(|p| support::cpu_ns(*p)).collect();
    let sequential: Vec<(Duration, Duration)> = samples.into_iter().map(support::percentiles).collect();
    let fsync = support::percentiles(disk.samples);

    // Pipelined, the paths taking turns.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
    rt.block_on(async {
        for _ in 0..PIPELINED_RUNS {
            for (peer, rates) in peers.iter_mut().zip(&mut rates) {
                let took = peer.pipelined(PIPELINED).await;
                rates.push(PIPELINED as f64 / took.as_secs_f64());
            }
        }
    });
    let pipelined: Vec<f64> = rates.into_iter().map(median).collect();
    let names: Vec<&str> = peers.iter().map(|p| p.name).collect();
    drop(peers);

    let http: Vec<(&str, f64)> = rt.block_on(async {
        let mut http = Vec::new();
        for (name, state) in [
            ("memory", "memory"),
            ("SQLite", sqlite.as_str()),
            ("PostgreSQL", postgres.as_str()),
        ] {
            http.push((name, http_throughput(&setup, state).await));
        }
        http
    });

    let (direct_p50, direct_p99) = sequential[0];
    println!("gate_state, one run (load average {}):", support::load_average());
    println!(
        "  fdatasync on the state's filesystem ({}), sampled between the sequential calls: p50 {:.1} µs, p99 {:.1} µs",
        dir.display(),
        us(fsync.0),
        us(fsync.1)
    );
    println!("  sequential over {SEQUENTIAL} calls each (interleaved), pipelined {PIPELINED} calls (median of {PIPELINED_RUNS}):");
    for (i, name) in names.iter().enumerate() {
        let (p50, p99) = sequential[i];
        let cpu = match (cpu_before[i], cpu_after[i]) {
            (Some(a), Some(b)) if i > 0 => format!(
                ", CPU per call {:.1} µs",
                (b - a) as f64 / SEQUENTIAL as f64 / 1e3
            ),
            _ => String::new(),
        };
        println!(
            "    {name:<20} p50 {:>7.1} µs p99 {:>7.1} µs; added p50 {:>6.1} µs p99 {:>7.1} µs; pipelined {:>7.0} calls/s{cpu}",
            us(p50),
            us(p99),
            us(p50.saturating_sub(direct_p50)),
            us(p99.saturating_sub(direct_p99)),
            pipelined[i]
        );
    }
    println!("  {SESSIONS} HTTP sessions at once, {SESSION_CALLS} calls each (median of {HTTP_RUNS}):");
    for (name, rate) in &http {
        println!("    gate, {name:<12} {rate:>7.0} calls/s");
    }

    let added = |i: usize| us(sequential[i].0.saturating_sub(direct_p50));
    let budget = added(1) + 1.5 * us(fsync.0);
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    println!("  goals (issue 31):");
    println!(
        "    SQLite sequential added p50 {:.1} µs <= forwarder added {:.1} + 1.5 x fdatasync {:.1} = {:.1} µs: {}",
        added(3),
        added(1),
        us(fsync.0),
        budget,
        verdict(added(3) <= budget)
    );
    for (i, share) in [(3, 0.5), (4, 0.4)] {
        println!(
            "    {} pipelined {:.0}/s >= {:.0}% of memory's {:.0}/s ({:.0}%): {}",
            names[i],
            pipelined[i],
            share * 100.0,
            pipelined[2],
            100.0 * pipelined[i] / pipelined[2],
            verdict(pipelined[i] >= share * pipelined[2])
        );
    }
    println!(
        "    {SESSIONS} HTTP sessions, SQLite {:.0}/s >= 50% of memory's {:.0}/s ({:.0}%): {}",
        http[1].1,
        http[0].1,
        100.0 * http[1].1 / http[0].1,
        verdict(http[1].1 >= 0.5 * http[0].1)
    );
    let mut rows: Vec<serde_json::Value> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            serde_json::json!({"name": name, "p50_us": us(sequential[i].0), "p99_us": us(sequential[i].1),
                "added_p50_us": us(sequential[i].0.saturating_sub(direct_p50)),
                "pipelined_calls_per_s": pipelined[i].round()})
        })
        .collect();
    rows.push(serde_json::json!({"name": "fdatasync (4 KiB, beside the state)", "p50_us": us(fsync.0), "p99_us": us(fsync.1)}));
    for (name, rate) in &http {
        rows.push(serde_json::json!({"name": format!("{SESSIONS} HTTP sessions, {name}"), "calls_per_s": rate.round()}));
    }
    let mut goals = vec![serde_json::json!({
        "goal": "SQLite sequential added p50 <= forwarder added + 1.5 x fdatasync p50",
        "measured": format!("{:.1} µs against {:.1} µs", added(3), budget), "met": added(3) <= budget})];
    for (i, share) in [(3, 0.5), (4, 0.4)] {
        goals.push(serde_json::json!({
            "goal": format!("{} pipelined >= {:.0}% of memory's", names[i], share * 100.0),
            "measured": format!("{:.0}%", 100.0 * pipelined[i] / pipelined[2]),
            "met": pipelined[i] >= share * pipelined[2]}));
    }
    goals.push(
        serde_json::json!({"goal": format!("{SESSIONS} HTTP sessions: SQLite >= 50% of memory's"),
        "measured": format!("{:.0}%", 100.0 * http[1].1 / http[0].1), "met": http[1].1 >= 0.5 * http[0].1}),
    );
    support::summary::write_summary("gate_state", rows, goals);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);

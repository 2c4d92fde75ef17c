//! Issue 32's goals in one run beside their yardstick. Stdio: one `tools/call` at a time from
//! a raw JSON-RPC client on one thread to the rmcp notice fixture, directly, through a bare
//! forwarding process (C, compiled here) and through `aml-mcp-gate --state memory`, the three
//! interleaved call by call; five repetitions, each with fresh processes, pooled (one
//! repetition's forwarder figure alone swings widely on this shared VM). It prints what the
//! gate and the forwarder add (p50, p99) and each process's CPU per call (all its threads).
//! HTTP: the gate's CPU per call for one session calling in turn, and throughput with 64
//! sessions calling at once, the gate free on every core against the gate held to one.
//!
//! Needs the release gate: `cargo build --release -p aml-mcp-gate`.
#![allow(missing_docs)]

mod support;

use std::path::PathBuf;
use std::time::Duration;

use support::peer::{self, ListeningGate, Peer, Session, Setup};
use support::summary::micros as us;

const REPETITIONS: usize = 5;
/// Calls per path and repetition, after [`WARM_UP`] calls each that are not counted.
const CALLS: usize = 2000;
const WARM_UP: usize = 200;
/// Sequential calls of one HTTP session whose CPU is counted.
const HTTP_CALLS: usize = 2000;
/// Sessions calling at once, calls each per run, runs (the median is kept).
const SESSIONS: usize = 64;
const SESSION_CALLS: usize = 50;
const HTTP_RUNS: usize = 3;

/// One repetition: fresh processes, warmed up, then [`CALLS`] interleaved calls each. The
/// samples of direct, forwarder and gate, and the forwarder's and gate's CPU time (ns).
async fn repetition(setup: &Setup, forwarder: &std::path::Path) -> ([Vec<Duration>; 3], [u64; 2]) {
    let audit = setup.dir.join("audit.jsonl");
    let serve = setup.serve();
    let mut through = vec![setup.fixture.display().to_string()];
    through.extend(serve.iter().cloned());
    let mut peers = [
        Peer::start("direct", &setup.fixture, &serve, &audit).await,
        Peer::start("bare forwarder (C)", forwarder, &through, &audit).await,
        Peer::start(
            "aml-mcp-gate",
            &support::gate_binary(),
            &setup.gate_args("memory", &[]),
            &audit,
        )
        .await,
    ];
    peer::interleaved(&mut peers, WARM_UP).await;
    let cpu = |peers: &[Peer; 3]| {
        [1, 2].map(|i| support::cpu_ns(peers[i].child.id()).expect("the process's CPU time (Linux /proc)"))
    };
    let before = cpu(&peers);
    let samples = peer::interleaved(&mut peers, CALLS).await;
    let after = cpu(&peers);
    (samples, [after[0] - before[0], after[1] - before[1]])
}

/// The gate's CPU per call (µs, all its threads) for one HTTP session calling in turn.
async fn http_cpu_per_call(setup: &Setup) -> f64 {
    let gate = ListeningGate::start(setup, "memory", None).await;
    let session = Session::open(&gate.url).await.calls(WARM_UP).await;
    let pid = gate.child.id();
    let before = support::cpu_ns(pid).expect("the gate's CPU time");
    drop(session.calls(HTTP_CALLS).await);
    let after = support::cpu_ns(pid).expect("the gate's CPU time");
    gate.stop().await;
    (after - before) as f64 / HTTP_CALLS as f64 / 1e3
}

/// Throughput with [`SESSIONS`] sessions, the gate on `cpus` (`None`: every core).
async fn sessions_throughput(setup: &Setup, cpus: Option<&str>) -> f64 {
    let gate = ListeningGate::start(setup, "memory", cpus).await;
    let rate = peer::http_throughput(&gate, SESSIONS, SESSION_CALLS, HTTP_RUNS).await;
    gate.stop().await;
    rate
}

fn main() {
    // `cargo bench` passes `--bench`; a test run of the bench targets only checks they build.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("relay-hop-{}", std::process::id()));
    let setup = Setup::new(dir.clone());
    let forwarder = support::build_forwarder(&dir);

    let mut pooled: [Vec<Duration>; 3] = Default::default();
    let mut cpu = [0u64; 2];
    println!("relay_hop (load average {}):", support::load_average());
    for rep in 1..=REPETITIONS {
        let (samples, used) = rt.block_on(repetition(&setup, &forwarder));
        let [d, f, g] = samples.clone().map(support::percentiles);
        println!(
            "  repetition {rep}: forwarder adds p50 {:.1} µs, gate {:.1} µs ({:.2}x); CPU per call {:.1} / {:.1} µs",
            us(f.0.saturating_sub(d.0)),
            us(g.0.saturating_sub(d.0)),
            us(g.0.saturating_sub(d.0)) / us(f.0.saturating_sub(d.0)).max(1e-3),
            used[0] as f64 / CALLS as f64 / 1e3,
            used[1] as f64 / CALLS as f64 / 1e3,
        );
        for (all, some) in pooled.iter_mut().zip(samples) {
            all.extend(some);
        }
        cpu[0] += used[0];
        cpu[1] += used[1];
    }
    let calls = (REPETITIONS * CALLS) as f64;
    let [d, f, g] = pooled.map(support::percentiles);
    let added = |(p50, p99): (Duration, Duration)| (us(p50.saturating_sub(d.0)), us(p99.saturating_sub(d.1)));
    let (f_add, g_add) = (added(f), added(g));
    let cpu_us = cpu.map(|ns| ns as f64 / calls / 1e3);
    let (http_cpu, free, one_core) = rt.block_on(async {
        let http_cpu = http_cpu_per_call(&setup).await;
        let free = sessions_throughput(&setup, None).await;
        let one_core = sessions_throughput(&setup, Some("0")).await;
        (http_cpu, free, one_core)
    });

    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    let ratio_p50 = g_add.0 / f_add.0.max(1e-3);
    let ratio_p99 = g_add.1 / f_add.1.max(1e-3);
    let ratio_cpu = cpu_us[1] / cpu_us[0].max(1e-3);
    let scaling = free / one_core;
    println!(
        "  pooled, {REPETITIONS} x {CALLS} calls each: direct p50 {:.1} µs p99 {:.1} µs",
        us(d.0),
        us(d.1)
    );
    println!(
        "    bare forwarder (C): added p50 {:.1} µs p99 {:.1} µs, CPU per call {:.1} µs",
        f_add.0, f_add.1, cpu_us[0]
    );
    println!(
        "    aml-mcp-gate:       added p50 {:.1} µs p99 {:.1} µs, CPU per call {:.1} µs",
        g_add.0, g_add.1, cpu_us[1]
    );
    println!("  HTTP, --state memory: CPU per call (one session) {http_cpu:.1} µs; {SESSIONS} sessions {free:.0} calls/s, held to one core {one_core:.0} calls/s");
    println!("  goals (issue 32):");
    println!(
        "    stdio added p50 {ratio_p50:.2}x the forwarder's <= 2x: {}",
        verdict(ratio_p50 <= 2.0)
    );
    println!(
        "    stdio added p99 {ratio_p99:.2}x the forwarder's <= 3x: {}",
        verdict(ratio_p99 <= 3.0)
    );
    println!(
        "    stdio CPU per call {ratio_cpu:.2}x the forwarder's <= 2x: {}",
        verdict(ratio_cpu <= 2.0)
    );
    println!(
        "    HTTP CPU per gated call {http_cpu:.1} µs <= 30 µs: {}",
        verdict(http_cpu <= 30.0)
    );
    println!(
        "    {SESSIONS} sessions, every core / one core {scaling:.2}x >= 1.7x: {}",
        verdict(scaling >= 1.7)
    );

    let rows = vec![
        serde_json::json!({"name": "direct", "p50_us": us(d.0), "p99_us": us(d.1)}),
        serde_json::json!({"name": "bare forwarder (C)", "p50_us": us(f.0), "p99_us": us(f.1),
            "added_p50_us": f_add.0, "added_p99_us": f_add.1, "cpu_per_call_us": cpu_us[0]}),
        serde_json::json!({"name": "aml-mcp-gate --state memory", "p50_us": us(g.0), "p99_us": us(g.1),
            "added_p50_us": g_add.0, "added_p99_us": g_add.1, "cpu_per_call_us": cpu_us[1]}),
        serde_json::json!({"name": "HTTP, one session", "cpu_per_call_us": http_cpu}),
        serde_json::json!({"name": format!("HTTP, {SESSIONS} sessions"), "calls_per_s": free.round()}),
        serde_json::json!({"name": format!("HTTP, {SESSIONS} sessions, gate held to one core"), "calls_per_s": one_core.round()}),
    ];
    let goals = vec![
        serde_json::json!({"goal": "stdio added p50 <= 2 x the forwarder's", "measured": format!("{ratio_p50:.2} x"), "met": ratio_p50 <= 2.0}),
        serde_json::json!({"goal": "stdio added p99 <= 3 x the forwarder's", "measured": format!("{ratio_p99:.2} x"), "met": ratio_p99 <= 3.0}),
        serde_json::json!({"goal": "stdio CPU per call <= 2 x the forwarder's", "measured": format!("{ratio_cpu:.2} x"), "met": ratio_cpu <= 2.0}),
        serde_json::json!({"goal": "HTTP CPU per gated call <= 30 µs", "measured": format!("{http_cpu:.1} µs"), "met": http_cpu <= 30.0}),
        serde_json::json!({"goal": format!("{SESSIONS} HTTP sessions: every core >= 1.7 x one core"), "measured": format!("{scaling:.2} x"), "met": scaling >= 1.7}),
    ];
    support::summary::write_summary("relay_hop", rows, goals);
    let _ = std::fs::remove_dir_all(&dir);
}

//! One unary `CallTool` on loopback: the same tool behind a service with no gate (it parses
//! the arguments and calls the tool directly) and behind the gated service as a host mounts it
//! (`into_route`), both on the same bare tonic server with the generated client (the
//! difference is the gate alone); the gated service on the generated tonic server without the
//! route (its answer's trailers go in a second write, see `src/frames.rs`); the ungated tool
//! answering with a plan and receipt of the gated answer's size (what the answer's size costs
//! without a gate); then the gated service as hosts run it (`serve`: health and reflection
//! beside it, and `ToolClient`, which also checks the plan and receipt), with and without a
//! JSON-lines receipt file. Then p50 and p99 of each over calls interleaved so that every
//! variant sees the same noise (`cargo bench -p aml-grpc --bench unary -- interleaved` runs
//! only those).
#![allow(missing_docs)]

mod common;

#[path = "../../aml-testkit/benches/support/summary.rs"]
mod summary;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aml_core::{JsonLinesSink, NoSink};
use aml_grpc::{serve, GatedToolService, ToolClient};
use common::{bare, bare_route, call_bare, gated, Ungated, ARGUMENTS};
use criterion::{criterion_group, criterion_main, Criterion};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let serve_gated = |service: GatedToolService| {
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            tokio::spawn(serve(listener, service, std::future::pending()));
            ToolClient::connect(format!("http://{address}")).await.unwrap()
        })
    };
    let receipts = std::env::temp_dir().join(format!("aml-grpc-bench-{}.jsonl", std::process::id()));
    let gate_only = serve_gated(gated(Arc::new(NoSink)));
    let with_file = serve_gated(gated(Arc::new(JsonLinesSink::append(&receipts).unwrap())));
    // The same bare tonic server and generated client for a service with and without the
    // gate, so that their difference is the gate alone.
    let plain = bare(&rt, Ungated { sized: false });
    let gated_bare = bare_route(&rt, gated(Arc::new(NoSink)).into_route());
    let gated_generated = bare(&rt, gated(Arc::new(NoSink)));
    let plain_sized = bare(&rt, Ungated { sized: true });
    let call_plain = || call_bare(&rt, &plain);
    let call_gated_bare = || call_bare(&rt, &gated_bare);
    let call_gated_generated = || call_bare(&rt, &gated_generated);
    let call_plain_sized = || call_bare(&rt, &plain_sized);
    let call = |client: &ToolClient| {
        rt.block_on(client.call_tool("fetch_record", ARGUMENTS, None))
            .map(drop)
            .unwrap()
    };
    let call_gate_only = || call(&gate_only);
    let call_with_file = || call(&with_file);

    let mut group = c.benchmark_group("grpc_unary");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("no_gate", |b| b.iter(call_plain));
    group.bench_function("gated_same_server", |b| b.iter(call_gated_bare));
    group.bench_function("gated_generated_server", |b| b.iter(call_gated_generated));
    group.bench_function("no_gate_gated_size_answer", |b| b.iter(call_plain_sized));
    group.bench_function("gated", |b| b.iter(call_gate_only));
    group.bench_function("gated_jsonl_sink", |b| b.iter(call_with_file));
    group.finish();

    let variants: [(&str, &dyn Fn()); 6] = [
        ("no gate", &call_plain),
        ("gated, same server", &call_gated_bare),
        ("gated, generated server", &call_gated_generated),
        ("no gate, gated-size answer", &call_plain_sized),
        ("gated, serve + ToolClient", &call_gate_only),
        ("and a JSON-lines sink", &call_with_file),
    ];
    let mut samples = vec![Vec::with_capacity(5000); variants.len()];
    for round in 0..5000 {
        // Each round starts with the next variant, so none always follows the same one.
        for k in 0..variants.len() {
            let i = (round + k) % variants.len();
            let start = Instant::now();
            (variants[i].1)();
            samples[i].push(start.elapsed());
        }
    }
    let percentiles: Vec<(Duration, Duration)> = samples
        .iter_mut()
        .map(|s| {
            s.sort();
            (s[2500], s[4950])
        })
        .collect();
    println!("grpc_unary over 5000 interleaved calls each:");
    for ((name, _), (p50, p99)) in variants.iter().zip(&percentiles) {
        let added = p50.saturating_sub(percentiles[0].0);
        println!("  {name:27} p50 {p50:>10.1?} p99 {p99:>10.1?}  p50 minus no gate {added:.1?}");
    }
    write_summary(
        &variants.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        &percentiles,
    );
    let _ = std::fs::remove_file(&receipts);
}

/// What this run measured, for `scripts/perf-table` (docs/PERFORMANCE.md):
/// `target/criterion/interleaved/grpc_unary.json`.
fn write_summary(names: &[&str], percentiles: &[(Duration, Duration)]) {
    let rows: Vec<serde_json::Value> = names
        .iter()
        .zip(percentiles)
        .map(|(name, (p50, p99))| {
            serde_json::json!({"name": name, "p50_us": summary::micros(*p50), "p99_us": summary::micros(*p99),
                "added_p50_us": summary::micros(p50.saturating_sub(percentiles[0].0))})
        })
        .collect();
    let gate_alone = summary::micros(percentiles[1].0.saturating_sub(percentiles[0].0));
    let goals = vec![
        serde_json::json!({"goal": format!("{} minus {} <= 10 µs (p50)", names[1], names[0]),
        "measured": format!("{gate_alone:.1} µs"), "met": gate_alone <= 10.0}),
    ];
    summary::write_summary("grpc_unary", rows, goals);
}

criterion_group!(benches, bench);
criterion_main!(benches);

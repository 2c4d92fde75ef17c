//! Latency of one MCP `tools/call` to the fixture server (child-process stdio): direct,
//! through a bare forwarding process (C, compiled here with the machine's `cc`: it copies
//! bytes both ways and does nothing else), through `aml-mcp-gate`, and through the in-process
//! `GatedClient`; p50 and p99 of each, measured in the same run, the gate's added latency
//! against the bare forwarder's, and the CPU per call of the forwarder and gate processes.
//!
//! Needs the release `aml-mcp-gate`: `cargo build --release -p aml-mcp-gate` first.
#![allow(missing_docs)]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aml_core::{Effect, Policy};
use aml_mcp::{GatedClient, McpGate, ResourceRule, ToolCatalog, ToolGate, ToolRegistration};
use criterion::{criterion_group, criterion_main, Criterion};
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::json;

type Client = RunningService<RoleClient, ()>;

async fn connect(program: &Path, args: &[String], audit: &Path) -> (Client, Option<u32>) {
    let mut command = tokio::process::Command::new(program);
    command.args(args).env("AML_NOTICE_AUDIT", audit);
    let transport = TokioChildProcess::new(command).expect("spawn");
    let pid = transport.id();
    (().serve(transport).await.expect("initialize"), pid)
}

fn params() -> CallToolRequestParams {
    let args = json!({"to": "team@example.test", "body": "Build passed."});
    CallToolRequestParams::new("send_notice").with_arguments(args.as_object().cloned().unwrap_or_default())
}

fn schema() -> serde_json::Value {
    json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
           "required": ["to", "body"], "additionalProperties": false})
}

fn policy() -> serde_json::Value {
    json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_notice", "effect": "send", "resource": "team@example.test", "requires_approval": false}]})
}

fn bench(c: &mut Criterion) {
    // One thread for the client, as a stdio MCP client is: no hand-off between threads in
    // the client adds its own wake-ups to every path.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("aml-mcp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("policy.json"), policy().to_string()).unwrap();
    std::fs::write(
        dir.join("tools.json"),
        json!({"tools": [{"name": "send_notice", "effect": "send",
        "purpose": "Send a local notice", "resource": {"argument": "to"}, "input_schema": schema()}]})
        .to_string(),
    )
    .unwrap();
    let fixture = PathBuf::from(env!("CARGO_BIN_EXE_aml-testkit"));
    let serve = vec!["serve-notice-fixture".to_owned()];
    let (direct, _) = rt.block_on(connect(&fixture, &serve, &dir.join("direct.jsonl")));
    let forwarder = support::build_forwarder(&dir);
    let (forwarded, forwarder_pid) = rt.block_on(connect(
        &forwarder,
        &[fixture.display().to_string(), serve[0].clone()],
        &dir.join("forwarded.jsonl"),
    ));
    let gate_args: Vec<String> = vec![
        "--policy".into(),
        dir.join("policy.json").display().to_string(),
        "--tools".into(),
        dir.join("tools.json").display().to_string(),
        "--receipts".into(),
        dir.join("receipts.jsonl").display().to_string(),
        // The relay's own cost; a durable state adds its writes (README, grant_claim rows).
        "--state".into(),
        "memory".into(),
        "--".into(),
        fixture.display().to_string(),
        serve[0].clone(),
    ];
    let (gated, gate_pid) = rt.block_on(connect(
        &support::gate_binary(),
        &gate_args,
        &dir.join("gated.jsonl"),
    ));

    let catalog = ToolCatalog::new()
        .with(
            ToolRegistration::new(
                "send_notice",
                Effect::Send,
                "Send a local notice",
                ResourceRule::Argument("to".into()),
                schema(),
            )
            .unwrap(),
        )
        .unwrap();
    let gated_client = GatedClient::new(
        direct.peer().clone(),
        McpGate::new(ToolGate::new(
            catalog,
            aml_core::ActionBoundary::builder(std::sync::Arc::new(Policy::from_value(&policy()))).build(),
        )),
    );
    let call = |client: &Client| {
        let result = rt.block_on(client.peer().call_tool(params())).unwrap();
        assert_ne!(result.is_error, Some(true));
    };

    let mut group = c.benchmark_group("mcp_call");
    group.bench_function("direct", |b| b.iter(|| call(&direct)));
    group.bench_function("through_bare_forwarder", |b| b.iter(|| call(&forwarded)));
    group.bench_function("through_aml_mcp_gate", |b| b.iter(|| call(&gated)));
    group.bench_function("through_gated_client", |b| {
        b.iter(|| {
            let verdict = rt.block_on(gated_client.call_tool(params()));
            assert_eq!(verdict.status(), aml_mcp::ResultStatus::Returned);
        })
    });
    group.finish();

    // Percentiles, the paths interleaved call by call so that the machine's noise falls on
    // all of them alike.
    const N: usize = 2000;
    let mut samples: [Vec<Duration>; 4] = Default::default();
    let cpu_before = [forwarder_pid, gate_pid].map(support::cpu_ns);
    for _ in 0..N {
        for (i, client) in [&direct, &forwarded, &gated].into_iter().enumerate() {
            let start = Instant::now();
            call(client);
            samples[i].push(start.elapsed());
        }
        let start = Instant::now();
        drop(rt.block_on(gated_client.call_tool(params())));
        samples[3].push(start.elapsed());
    }
    let cpu_after = [forwarder_pid, gate_pid].map(support::cpu_ns);
    let [d, f, g, c] = samples.map(support::percentiles);
    let added = |(p50, p99): (Duration, Duration)| (p50.saturating_sub(d.0), p99.saturating_sub(d.1));
    let (f_add, g_add, c_add) = (added(f), added(g), added(c));
    println!(
        "mcp_call over {N} calls each (interleaved): direct p50 {:?} p99 {:?}",
        d.0, d.1
    );
    println!(
        "  bare forwarder (C)  p50 {:?} p99 {:?}; added p50 {:?} p99 {:?}",
        f.0, f.1, f_add.0, f_add.1
    );
    println!(
        "  aml-mcp-gate        p50 {:?} p99 {:?}; added p50 {:?} p99 {:?}",
        g.0, g.1, g_add.0, g_add.1
    );
    println!(
        "  GatedClient         p50 {:?} p99 {:?}; added p50 {:?} p99 {:?}",
        c.0, c.1, c_add.0, c_add.1
    );
    println!(
        "  aml-mcp-gate added / bare forwarder added: p50 {:.2}x, p99 {:.2}x",
        g_add.0.as_secs_f64() / f_add.0.as_secs_f64().max(1e-9),
        g_add.1.as_secs_f64() / f_add.1.as_secs_f64().max(1e-9)
    );
    let ratio = g_add.0.as_secs_f64() / f_add.0.as_secs_f64().max(1e-9);
    let row = |name: &str, (p50, p99): (Duration, Duration), (a50, a99): (Duration, Duration)| {
        serde_json::json!({"name": name, "p50_us": support::summary::micros(p50), "p99_us": support::summary::micros(p99),
            "added_p50_us": support::summary::micros(a50), "added_p99_us": support::summary::micros(a99)})
    };
    let zero = (Duration::ZERO, Duration::ZERO);
    support::summary::write_summary(
        "mcp_call",
        vec![
            row("direct", d, zero),
            row("bare forwarder (C)", f, f_add),
            row("aml-mcp-gate --state memory", g, g_add),
            row("GatedClient", c, c_add),
        ],
        vec![
            serde_json::json!({"goal": "gate added p50 <= 2 x forwarder added p50",
            "measured": format!("{ratio:.2} x"), "met": ratio <= 2.0}),
        ],
    );
    // The processes' own CPU per call, whatever the machine's load did to their latency.
    if let ([Some(f0), Some(g0)], [Some(f1), Some(g1)]) = (cpu_before, cpu_after) {
        let per_call = |ns: u64| Duration::from_nanos(ns / N as u64);
        println!(
            "  CPU per call (the process's threads): bare forwarder {:?}, aml-mcp-gate {:?}",
            per_call(f1 - f0),
            per_call(g1 - g0)
        );
    }
    drop((direct, forwarded, gated));
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Latency of one MCP `tools/call` straight to the fixture server versus through
//! `aml-mcp-gate` (both over child-process stdio), with p50 and p99 of each.
//!
//! Needs the release `aml-mcp-gate`: `cargo build --release -p aml-mcp` first.
#![allow(missing_docs)]

use std::path::PathBuf;
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

fn gate_binary() -> PathBuf {
    // Needs the release build: `cargo build --release -p aml-mcp`.
    aml_testkit::mcp::gate_binary_path().expect("aml-mcp-gate (release)")
}

async fn connect(program: PathBuf, args: Vec<String>, audit: &std::path::Path) -> Client {
    let mut command = tokio::process::Command::new(program);
    command.args(args).env("AML_NOTICE_AUDIT", audit);
    ().serve(TokioChildProcess::new(command).expect("spawn"))
        .await
        .expect("initialize")
}

fn params() -> CallToolRequestParams {
    let args = json!({"to": "team@example.test", "body": "Build passed."});
    CallToolRequestParams::new("send_notice").with_arguments(args.as_object().cloned().unwrap_or_default())
}

fn percentiles(_rt: &tokio::runtime::Runtime, n: usize, mut call: impl FnMut()) -> (Duration, Duration) {
    let mut samples: Vec<Duration> = (0..n)
        .map(|_| {
            let start = Instant::now();
            call();
            start.elapsed()
        })
        .collect();
    samples.sort();
    (samples[n / 2], samples[n * 99 / 100])
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("aml-mcp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("policy.json"), json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_notice", "effect": "send", "resource": "team@example.test", "requires_approval": false}]}).to_string()).unwrap();
    std::fs::write(dir.join("tools.json"), json!({"tools": [{"name": "send_notice", "effect": "send",
        "purpose": "Send a local notice", "resource": {"argument": "to"},
        "input_schema": {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                         "required": ["to", "body"], "additionalProperties": false}}]}).to_string()).unwrap();
    let fixture = PathBuf::from(env!("CARGO_BIN_EXE_aml-testkit"));
    let direct = rt.block_on(connect(
        fixture.clone(),
        vec!["serve-notice-fixture".into()],
        &dir.join("direct.jsonl"),
    ));
    let gate_args = vec![
        "--policy".into(),
        dir.join("policy.json").display().to_string(),
        "--tools".into(),
        dir.join("tools.json").display().to_string(),
        "--receipts".into(),
        dir.join("receipts.jsonl").display().to_string(),
        "--".into(),
        fixture.display().to_string(),
        "serve-notice-fixture".into(),
    ];
    let gated = rt.block_on(connect(gate_binary(), gate_args, &dir.join("gated.jsonl")));

    let schema = json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                        "required": ["to", "body"], "additionalProperties": false});
    let catalog = ToolCatalog::new()
        .with(
            ToolRegistration::new(
                "send_notice",
                Effect::Send,
                "Send a local notice",
                ResourceRule::Argument("to".into()),
                schema,
            )
            .unwrap(),
        )
        .unwrap();
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_notice", "effect": "send", "resource": "team@example.test", "requires_approval": false}]}));
    let gated_client = GatedClient::new(
        direct.peer().clone(),
        McpGate::new(ToolGate::new(
            catalog,
            aml_core::ActionBoundary::builder(std::sync::Arc::new(policy)).build(),
        )),
    );

    let mut group = c.benchmark_group("mcp_call");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("direct", |b| {
        b.iter(|| rt.block_on(direct.peer().call_tool(params())).unwrap())
    });
    group.bench_function("through_gated_client", |b| {
        b.iter(|| {
            let verdict = rt.block_on(gated_client.call_tool(params()));
            assert_eq!(verdict.status(), aml_mcp::ResultStatus::Returned);
        })
    });
    group.bench_function("through_aml_mcp_gate", |b| {
        b.iter(|| rt.block_on(gated.peer().call_tool(params())).unwrap())
    });
    group.finish();

    let (d50, d99) = percentiles(&rt, 3000, || {
        rt.block_on(direct.peer().call_tool(params())).map(drop).unwrap()
    });
    let (c50, c99) = percentiles(&rt, 3000, || drop(rt.block_on(gated_client.call_tool(params()))));
    let (g50, g99) = percentiles(&rt, 3000, || {
        rt.block_on(gated.peer().call_tool(params())).map(drop).unwrap()
    });
    println!("mcp_call over 3000 calls each: direct p50 {d50:?} p99 {d99:?}");
    println!(
        "  GatedClient (in-process gate) p50 {c50:?} p99 {c99:?}; added p50 {:?} p99 {:?}",
        c50.saturating_sub(d50),
        c99.saturating_sub(d99)
    );
    println!(
        "  aml-mcp-gate (proxy process) p50 {g50:?} p99 {g99:?}; added p50 {:?} p99 {:?}",
        g50.saturating_sub(d50),
        g99.saturating_sub(d99)
    );
    drop((direct, gated));
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The gate's own cost per `tools/call`, without a transport: registry lookup, input
//! schema, capture, plan, dispatch to a forward that returns at once, verdict.
#![allow(missing_docs)]

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use aml_core::{Effect, Policy};
use aml_mcp::{McpGate, ResourceRule, ToolCatalog, ToolGate, ToolRegistration};
use criterion::{criterion_group, criterion_main, Criterion};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use serde_json::json;

fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the in-memory forward waited"),
    }
}

fn bench(c: &mut Criterion) {
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
    let gate = McpGate::new(ToolGate::new(
        catalog,
        aml_core::ActionBoundary::builder(std::sync::Arc::new(policy)).build(),
    ));
    let args = json!({"to": "team@example.test", "body": "Build passed."})
        .as_object()
        .cloned()
        .unwrap();
    c.bench_function("mcp/gate_logic_per_call", |b| {
        b.iter(|| {
            let params = CallToolRequestParams::new("send_notice").with_arguments(args.clone());
            let verdict = ready(gate.call(black_box(params), |_| async {
                Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
            }));
            black_box(verdict.into_call_result())
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);

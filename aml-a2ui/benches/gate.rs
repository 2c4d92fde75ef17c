//! One gated `callRendererFunction`: bytes in → parse → schema → plan → dispatch → bytes out.
#![allow(missing_docs)]

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use aml_a2ui::{FunctionGate, FunctionRegistry, HostCatalog, HostFunction};
use aml_core::{tool_fn, ActionBoundary, Effect, Policy, ResourceRule, ToolRegistration};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("an in-memory hook waited"),
    }
}

fn bench_gate(c: &mut Criterion) {
    let policy = Arc::new(Policy::from_value(
        &json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_message", "effect": "send", "resource": "team@example.test", "requires_approval": false}]}),
    ));
    let schema = json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                        "required": ["to", "body"], "additionalProperties": false});
    let tool = ToolRegistration::new(
        "send_message",
        Effect::Send,
        "Send a status update",
        ResourceRule::Argument("to".into()),
        schema,
    )
    .unwrap()
    .with_executor(Arc::new(tool_fn(|_| async { Ok(json!({"simulated": true})) })));
    let catalog = HostCatalog::new("https://example.test/catalog/action.json", "bench")
        .with_function(HostFunction::agent_callable("sendMessage", "Send", tool));
    let registry = Arc::new(FunctionRegistry::new().with_catalog(catalog));
    let gate = FunctionGate::new(registry, ActionBoundary::builder(policy).build()).unwrap();
    let mut n = 0u64;
    // The Candidate form (`call`) keeps this benchmark's name comparable with earlier runs.
    for (name, key) in [
        ("a2ui/gated_call_renderer_function", "call"),
        ("a2ui/gated_call_renderer_function_current", "@call"),
    ] {
        c.bench_function(name, |b| {
            b.iter(|| {
                n += 1;
                // Each call needs a fresh id: the gate never takes one up twice.
                let message = format!(
                    r#"{{"version":"v1.0","callRendererFunction":{{"functionCallId":"c{n}","callFunction":{{"{key}":"sendMessage","catalogId":"https://example.test/catalog/action.json","args":{{"to":"team@example.test","body":"Build passed."}}}}}}}}"#
                );
                let outcome = ready(gate.handle(black_box(message.as_bytes()))).unwrap();
                assert!(outcome.receipt.is_some());
                black_box(outcome.response.to_bytes())
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(std::time::Duration::from_secs(3));
    targets = bench_gate
}
criterion_main!(benches);

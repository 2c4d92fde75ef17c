//! Criterion benchmarks of planning and dispatch.
#![allow(missing_docs)]

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use aml_core::{
    approval_fn, plan, tool_fn, ActionBoundary, Approval, InMemoryGrantStore, Policy, ReceiptReason,
    Sha256Digest,
};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};

fn vectors() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/upstream-conformance/vectors.json"
    ))
    .expect("fixtures/upstream-conformance/vectors.json");
    aml_core::strict::parse_str(&text).expect("valid vectors")
}

fn vector(v: &Value, name: &str) -> Value {
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()["proposal"]
        .clone()
}

/// Polls a future that never waits (all hooks here are in memory) to completion.
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("an in-memory hook waited"),
    }
}

fn bench_plan(c: &mut Criterion) {
    let v = vectors();
    let policy = Policy::from_value(&v["policy"]);
    let approved = vector(&v, "approved_route");
    c.bench_function("plan/approved_route", |b| {
        b.iter(|| plan(black_box(&approved), &policy))
    });

    let mut rules: Vec<Value> = (0..999)
        .map(|i| {
            json!({"tool": "send_message", "effect": "send", "resource": format!("user{i}@example.test"),
                   "requires_approval": i % 2 == 0})
        })
        .collect();
    rules.push(v["policy"]["rules"][0].clone());
    let big = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": rules}));
    assert_eq!(big.rules().len(), 1000);
    c.bench_function("plan/1000_rules", |b| b.iter(|| plan(black_box(&approved), &big)));

    // 100 Cedar policies, all for the planned tool (the index by action cannot skip any),
    // each with a condition on the resource; one of them permits the call.
    let mut cedar: String = (0..99)
        .map(|i| {
            format!(
                "@id(\"p{i}\") permit(principal, action == Action::\"send_message\", resource)\n\
                 when {{ context.resource like \"user{i}@*\" && context.effect == \"send\" }};\n"
            )
        })
        .collect();
    cedar.push_str(
        "@id(\"team\") permit(principal, action == Action::\"send_message\", resource)\n\
         when { context.resource == \"team@example.test\" };\n",
    );
    let cedar = Policy::from_cedar(&cedar, None);
    assert!(cedar.error().is_none(), "{:?}", cedar.error());
    assert_eq!(
        plan(&approved, &cedar).plan().decision(),
        aml_core::Decision::Allow
    );
    c.bench_function("plan/100_cedar_policies_one_tool", |b| {
        b.iter(|| plan(black_box(&approved), &cedar))
    });
    // The same 100 spread over 100 tools: the planned tool's own policy is evaluated alone.
    let spread: String = (0..99)
        .map(|i| format!("permit(principal, action == Action::\"tool{i}\", resource) when {{ context.resource like \"docs/*\" }};\n"))
        .chain(std::iter::once(
            "permit(principal, action == Action::\"send_message\", resource == Resource::\"team@example.test\");\n".to_owned(),
        ))
        .collect();
    let spread = Policy::from_cedar(&spread, None);
    assert_eq!(
        plan(&approved, &spread).plan().decision(),
        aml_core::Decision::Allow
    );
    c.bench_function("plan/100_cedar_policies_100_tools", |b| {
        b.iter(|| plan(black_box(&approved), &spread))
    });

    let canonical = aml_core::FrozenProposal::from_value(&approved).unwrap();
    let bytes = canonical.canonical_json().as_bytes().to_vec();
    c.bench_function("sha256/approved_route_bytes", |b| {
        b.iter(|| Sha256Digest::of(black_box(&bytes)))
    });
    c.bench_function("canonicalize/approved_route", |b| {
        b.iter(|| aml_core::canonical::to_canonical_string(black_box(&approved)))
    });
}

fn bench_dispatch(c: &mut Criterion) {
    let v = vectors();
    let policy = Arc::new(Policy::from_value(&v["policy"]));

    let allow = ActionBoundary::builder(Arc::clone(&policy))
        .executor(tool_fn(|_| async { Ok(json!({"simulated": true})) }))
        .build();
    let read = vector(&v, "read_route");
    assert_eq!(
        ready(allow.run(&read)).receipt().reason(),
        ReceiptReason::HostDispatchReturned
    );
    c.bench_function("dispatch/allow_rule", |b| {
        b.iter(|| ready(allow.run(black_box(&read))))
    });
    // The same call with a tool that answers a scalar: what the boundary costs without the
    // tool's output object (with Cedar in the build, serde_json's maps are `IndexMap`s, which
    // cost more to build and drop than the `BTreeMap`s of a build without it).
    let scalar = ActionBoundary::builder(Arc::clone(&policy))
        .executor(tool_fn(|_| async { Ok(json!(true)) }))
        .build();
    c.bench_function("dispatch/allow_rule_scalar", |b| {
        b.iter(|| ready(scalar.run(black_box(&read))))
    });

    // Each approval names a fresh grant, so every iteration really claims one.
    let next_id = Arc::new(AtomicU64::new(0));
    let approved = ActionBoundary::builder(Arc::clone(&policy))
        .approval(approval_fn(move |req| {
            let id = next_id.fetch_add(1, Ordering::Relaxed);
            async move { Ok(Approval::approve(req.proposal().digest()).with_id(id.to_string())) }
        }))
        .grants(InMemoryGrantStore::new())
        .executor(tool_fn(|_| async { Ok(json!({"simulated": true})) }))
        .build();
    let send = vector(&v, "approved_route");
    assert_eq!(
        ready(approved.run(&send)).receipt().reason(),
        ReceiptReason::HostDispatchReturned
    );
    c.bench_function("dispatch/approval_and_claim", |b| {
        b.iter(|| ready(approved.run(black_box(&send))))
    });

    // A budget read and counted per call (the in-memory ledger: the boundary's own cost).
    // The budget is never reached, so every call is allowed.
    let budget = Policy::from_cedar(
        r#"permit(principal, action == Action::"fetch_record", resource) when { context.usage.minute < 1000000000 };"#,
        None,
    );
    let budgeted = ActionBoundary::builder(Arc::new(budget))
        .usage(Arc::new(aml_core::InMemoryUsage::new()))
        .executor(tool_fn(|_| async { Ok(json!({"simulated": true})) }))
        .build();
    assert_eq!(
        ready(budgeted.run(&read)).receipt().reason(),
        ReceiptReason::HostDispatchReturned
    );
    c.bench_function("dispatch/budgeted_allow", |b| {
        b.iter(|| ready(budgeted.run(black_box(&read))))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(std::time::Duration::from_secs(3));
    targets = bench_plan, bench_dispatch
}
criterion_main!(benches);

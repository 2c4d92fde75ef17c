//! Shadow mode through the gate: calls are decided, recorded as the policy would have had
//! them, and dispatched.

use std::sync::Arc;

use serde_json::json;

use crate::testing::{self, CountingTool};
use crate::{
    ActionBoundary, CallOutcome, Decision, Effect, MemorySink, PlanReason, Policy, ResourceRule,
    TokioRuntime, ToolCatalog, ToolGate, ToolRegistration,
};

fn shadow_gate(sink: &MemorySink, requires_approval: bool) -> ToolGate {
    let catalog = ToolCatalog::new()
        .with(
            ToolRegistration::new(
                testing::SEND_MESSAGE,
                Effect::Send,
                testing::SEND_MESSAGE_PURPOSE,
                ResourceRule::Argument("to".into()),
                json!({"type": "object"}),
            )
            .unwrap(),
        )
        .unwrap()
        .with(
            ToolRegistration::new(
                "unruled",
                Effect::Delete,
                "p",
                ResourceRule::Fixed("r".into()),
                json!({}),
            )
            .unwrap(),
        )
        .unwrap();
    let boundary = ActionBoundary::builder(testing::send_message_policy(requires_approval))
        .sink(sink.clone())
        .shadow()
        .build();
    ToolGate::new(catalog, boundary)
        .for_adapter("test")
        .with_runtime(TokioRuntime)
}

#[test]
fn shadow_mode_dispatches_what_the_policy_would_block_and_records_the_decision_beside_it() {
    let sink = MemorySink::new();
    let gate = shadow_gate(&sink, true);
    let counting = CountingTool::new();
    let asks = testing::call_blocking(
        &gate,
        &counting,
        testing::SEND_MESSAGE,
        testing::send_message_args(),
    );
    let denied = testing::call_blocking(
        &gate,
        &counting,
        testing::SEND_MESSAGE,
        json!({"to": "else@example.test", "body": "b"}),
    );
    let unregistered = testing::call_blocking(&gate, &counting, "nothing", json!({}));
    assert!(matches!(asks, CallOutcome::Dispatched(_)), "{asks:?}");
    assert!(matches!(denied, CallOutcome::Dispatched(_)), "{denied:?}");
    assert_eq!(
        unregistered.reason(),
        "invalid_or_unregistered_call",
        "refusals before planning stay"
    );
    assert_eq!(counting.entries(), 2);
    let records = sink.calls();
    let would: Vec<_> = records
        .iter()
        .map(|r| r.would_block.map(|w| (w.decision, w.reason)))
        .collect();
    assert_eq!(
        would,
        [
            Some((Decision::RequiresApproval, PlanReason::ExactRule)),
            Some((Decision::Deny, PlanReason::NoExactRule)),
            None
        ]
    );
    for record in &records[..2] {
        let plan = record.plan.as_ref().unwrap();
        assert_eq!(
            (plan.decision(), plan.reason()),
            (Decision::Allow, PlanReason::ShadowMode)
        );
        assert_eq!(
            record.receipt.as_ref().unwrap().reason().as_str(),
            "host_dispatch_returned"
        );
        assert!(record.to_value()["would_block"]["reason"].is_string());
    }
}

#[test]
fn shadow_mode_leaves_allowed_calls_as_they_are_and_lists_every_tool() {
    let sink = MemorySink::new();
    let gate = shadow_gate(&sink, false);
    let counting = CountingTool::new();
    let allowed = testing::call_blocking(
        &gate,
        &counting,
        testing::SEND_MESSAGE,
        testing::send_message_args(),
    );
    assert_eq!(allowed.plan().unwrap().reason(), PlanReason::ExactRule);
    assert!(sink.calls()[0].would_block.is_none());
    assert_eq!(gate.listing().len(), 2, "the unruled tool is offered too");
    let enforcing = ActionBoundary::builder(Arc::new(Policy::empty())).build();
    assert!(!enforcing.is_shadow());
}

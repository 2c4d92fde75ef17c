use std::time::Duration;

use serde_json::json;

use super::*;
use crate::testing::{self, CountingTool};
use crate::{approval_fn, ActionBoundary, Approval, Effect, MemorySink, ResourceRule, ToolRegistration};

fn registration() -> ToolRegistration {
    ToolRegistration::new(
        testing::SEND_MESSAGE,
        Effect::Send,
        testing::SEND_MESSAGE_PURPOSE,
        ResourceRule::Argument("to".into()),
        testing::send_message_schema(),
    )
    .unwrap()
}

fn gate(
    requires_approval: bool,
    sink: &MemorySink,
    approval: Option<Arc<dyn crate::ApprovalHook>>,
) -> ToolGate {
    let mut boundary =
        ActionBoundary::builder(testing::send_message_policy(requires_approval)).sink(sink.clone());
    if let Some(hook) = approval {
        boundary = boundary.approval_arc(hook);
    }
    ToolGate::new(ToolCatalog::new().with(registration()).unwrap(), boundary.build()).for_adapter("test")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

#[test]
fn refusals_before_planning_are_recorded_without_a_plan() {
    let sink = MemorySink::new();
    let gate = gate(false, &sink, None);
    let tool = CountingTool::new();
    let rt = rt();
    let unknown = rt.block_on(gate.call_value("delete_all", json!({}), Some(&tool), None));
    assert_eq!(
        unknown.status(),
        CallStatus::Refused(Refusal::InvalidOrUnregisteredCall)
    );
    let extra = json!({"to": testing::TEAM, "body": "b", "cc": "secret@example.test"});
    let outside = rt.block_on(gate.call_value(testing::SEND_MESSAGE, extra, Some(&tool), None));
    assert_eq!(outside.status(), CallStatus::Refused(Refusal::InvalidArguments));
    assert!(
        !outside.detail().unwrap().contains("secret"),
        "{:?}",
        outside.detail()
    );
    let not_object = rt.block_on(gate.call_value(testing::SEND_MESSAGE, json!([1]), Some(&tool), None));
    assert_eq!(
        not_object.status(),
        CallStatus::Refused(Refusal::InvalidArguments)
    );
    assert_eq!(tool.entries(), 0);
    let records = sink.calls();
    assert_eq!(records.len(), 3);
    for r in &records {
        assert_eq!(r.adapter, "test");
        assert!(r.plan.is_none() && r.receipt.is_none() && r.refusal.is_some());
    }
    assert_eq!(records[0].tool, "delete_all");
}

#[test]
fn a_per_call_executor_runs_the_frozen_arguments_once_and_only_a_digest_is_recorded() {
    let sink = MemorySink::new();
    let gate = gate(false, &sink, None);
    let tool = CountingTool::new();
    let done = rt().block_on(gate.call_value(
        testing::SEND_MESSAGE,
        testing::send_message_args(),
        Some(&tool),
        None,
    ));
    assert_eq!(done.status(), CallStatus::Dispatched);
    assert_eq!(tool.entries(), 1);
    let output = done.output().unwrap().clone();
    assert_eq!(output["arguments"], testing::send_message_args());
    let record = &sink.calls()[0];
    assert_eq!(
        record.receipt.as_ref().unwrap().proposal_sha256(),
        Some(testing::send_message_digest())
    );
    assert_eq!(record.result, Some(crate::ResultSummary::of_json(&output)));
    assert!(!record.to_value().to_string().contains("Build passed."));
}

#[test]
fn json_text_the_strict_parser_refuses_is_blocked_with_its_code() {
    let sink = MemorySink::new();
    let gate = gate(false, &sink, None);
    let tool = CountingTool::new();
    let text = br#"{"to": "team@example.test", "to": "x", "body": "b"}"#;
    let done = rt().block_on(gate.call_json(testing::SEND_MESSAGE, text, Some(&tool), None));
    assert_eq!(
        done.status(),
        CallStatus::Blocked(ReceiptReason::JsonDuplicateKey)
    );
    assert_eq!(tool.entries(), 0);
    assert_eq!(
        sink.calls()[0].receipt.as_ref().unwrap().reason(),
        ReceiptReason::JsonDuplicateKey
    );
}

#[test]
fn without_any_executor_the_call_blocks_before_approval() {
    let sink = MemorySink::new();
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let hook: Arc<dyn crate::ApprovalHook> = Arc::new(approval_fn(move |req| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move { Ok(Approval::approve(req.proposal().digest())) }
    }));
    let gate = gate(true, &sink, Some(hook));
    let done =
        rt().block_on(gate.call_value(testing::SEND_MESSAGE, testing::send_message_args(), None, None));
    assert_eq!(
        done.status(),
        CallStatus::Blocked(ReceiptReason::MissingHostDispatch)
    );
    assert_eq!(
        asked.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "approval was not asked"
    );
}

#[test]
fn a_registration_executor_wins_over_the_per_call_one() {
    let own = CountingTool::new();
    let catalog = ToolCatalog::new()
        .with(registration().with_executor(Arc::new(own.clone())))
        .unwrap();
    let boundary = ActionBoundary::builder(testing::send_message_policy(false)).build();
    let gate = ToolGate::new(catalog, boundary);
    let other = CountingTool::new();
    let done = rt().block_on(gate.call_value(
        testing::SEND_MESSAGE,
        testing::send_message_args(),
        Some(&other),
        None,
    ));
    assert_eq!(done.status(), CallStatus::Dispatched);
    assert_eq!((own.entries(), other.entries()), (1, 0));
}

#[test]
fn a_caller_that_gives_up_during_approval_is_recorded_blocked_and_the_tool_never_runs() {
    let sink = MemorySink::new();
    let never: Arc<dyn crate::ApprovalHook> = Arc::new(approval_fn(|_| std::future::pending()));
    let gate = gate(true, &sink, Some(never));
    let tool = CountingTool::new();
    let rt = rt();
    let call = gate.call_value(
        testing::SEND_MESSAGE,
        testing::send_message_args(),
        Some(&tool),
        None,
    );
    let gave_up = rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), call).await });
    assert!(gave_up.is_err());
    assert_eq!(tool.entries(), 0);
    let record = &sink.calls()[0];
    let receipt = record.receipt.as_ref().unwrap();
    assert_eq!(receipt.reason(), ReceiptReason::ApprovalError);
    assert_eq!(receipt.proposal_sha256(), Some(testing::send_message_digest()));
    assert!(record.detail.as_deref().unwrap().contains("went away"));
}

#[test]
fn a_caller_that_gives_up_while_the_tool_runs_is_recorded_unknown() {
    #[derive(Debug)]
    struct Slow(CountingTool);
    #[crate::async_trait]
    impl ToolExecutor for Slow {
        async fn execute(&self, call: crate::ToolCall) -> Result<Value, crate::ToolError> {
            let _ = self.0.execute(call).await;
            std::future::pending().await
        }
    }
    let sink = MemorySink::new();
    let gate = gate(false, &sink, None);
    let slow = Slow(CountingTool::new());
    let rt = rt();
    let call = gate.call_value(
        testing::SEND_MESSAGE,
        testing::send_message_args(),
        Some(&slow),
        None,
    );
    assert!(rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), call).await })
        .is_err());
    assert_eq!(slow.0.entries(), 1);
    let receipt = sink.calls()[0].receipt.clone().unwrap();
    assert_eq!(receipt.execution_status(), ExecutionStatus::Unknown);
}

#[test]
fn authorize_then_execute_claims_once_and_a_dropped_authorization_stays_spent() {
    let sink = MemorySink::new();
    let gate = gate(true, &sink, Some(Arc::new(testing::approve_all())));
    let tool = CountingTool::new();
    let rt = rt();
    let first = gate.prepare_value(testing::SEND_MESSAGE, testing::send_message_args());
    let GateAuthorization::Authorized(authorized) = rt.block_on(gate.authorize(first, None)) else {
        panic!("the first call is authorized")
    };
    drop(authorized);
    let again = rt.block_on(gate.call_value(
        testing::SEND_MESSAGE,
        testing::send_message_args(),
        Some(&tool),
        None,
    ));
    assert_eq!(
        again.status(),
        CallStatus::Blocked(ReceiptReason::ApprovalReusedOrExpired)
    );
    assert_eq!(tool.entries(), 0);
    let reasons: Vec<_> = sink
        .calls()
        .iter()
        .map(|r| r.receipt.clone().unwrap().reason())
        .collect();
    assert_eq!(
        reasons,
        [
            ReceiptReason::ApprovalConsumeError,
            ReceiptReason::ApprovalReusedOrExpired
        ]
    );
}

#[test]
fn a_call_that_ends_while_prepared_is_recorded_once_whether_or_not_it_is_run() {
    let sink = MemorySink::new();
    let gate = gate(false, &sink, None);
    let dropped = gate.prepare_value("delete_all", json!({}));
    assert_eq!(dropped.refusal(), Some(Refusal::InvalidOrUnregisteredCall));
    drop(dropped);
    let run = gate.prepare_json(testing::SEND_MESSAGE, b"{\"to\": 1e999}");
    let outcome = rt().block_on(gate.run(run, None, None));
    assert_eq!(
        outcome.status(),
        CallStatus::Blocked(ReceiptReason::NonFiniteNumber)
    );
    let records = sink.calls();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0].refusal, Some(Refusal::InvalidOrUnregisteredCall));
    assert_eq!(
        records[1].receipt.as_ref().unwrap().reason(),
        ReceiptReason::NonFiniteNumber
    );
}

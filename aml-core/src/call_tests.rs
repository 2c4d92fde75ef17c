use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::Notify;

use super::*;
use crate::testing::{self, CountingTool};
use crate::{
    approval_fn, ActionBoundary, Approval, Effect, ExecutionStatus, MemorySink, ReceiptReason, ResourceRule,
    TokioRuntime, ToolCatalog, ToolError, ToolRegistration,
};

fn registration() -> ToolRegistration {
    ToolRegistration::new(
        testing::SEND_MESSAGE,
        Effect::Send,
        testing::SEND_MESSAGE_PURPOSE,
        ResourceRule::Argument("to".into()),
        json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"},
               "n": {"type": "number"}}, "required": ["to", "body"], "additionalProperties": false}),
    )
    .unwrap()
}

fn gate_with(
    requires_approval: bool,
    sink: &MemorySink,
    approval: Option<Arc<dyn crate::ApprovalHook>>,
) -> ToolGate {
    let mut boundary =
        ActionBoundary::builder(testing::send_message_policy(requires_approval)).sink(sink.clone());
    if let Some(hook) = approval {
        boundary = boundary.approval_arc(hook);
    }
    ToolGate::new(ToolCatalog::new().with(registration()).unwrap(), boundary.build())
        .for_adapter("test")
        .with_runtime(TokioRuntime)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn args() -> Vec<u8> {
    testing::send_message_args().to_string().into_bytes()
}

fn tool(counting: &CountingTool) -> Arc<dyn ToolExecutor> {
    Arc::new(counting.clone())
}

/// A tool that signals when it is entered and returns only when released.
#[derive(Debug, Clone, Default)]
struct Gated {
    entered: Arc<Notify>,
    release: Arc<Notify>,
    entries: Arc<AtomicUsize>,
}

#[crate::async_trait]
impl ToolExecutor for Gated {
    async fn execute(&self, _call: crate::ToolCall) -> Result<Value, ToolError> {
        self.entries.fetch_add(1, Ordering::SeqCst);
        self.entered.notify_one();
        self.release.notified().await;
        Ok(json!({"done": true}))
    }
}

/// Waits (bounded) until the call that finishes on its own has written its record.
async fn first_record(sink: &MemorySink) {
    let wait = async {
        while sink.calls().is_empty() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), wait).await.unwrap();
}

#[test]
fn refusals_before_planning_are_recorded_without_a_plan_and_the_tool_is_never_entered() {
    let sink = MemorySink::new();
    let gate = gate_with(false, &sink, None);
    let counting = CountingTool::new();
    let rt = rt();
    let run = |request: CallRequest<'_>| rt.block_on(gate.call(request.executor(tool(&counting))));
    let unknown = run(CallRequest::bytes("delete_all", b"{}"));
    let outside = run(CallRequest::bytes(
        testing::SEND_MESSAGE,
        br#"{"to": "team@example.test", "body": "b", "cc": "secret@example.test"}"#,
    ));
    let not_object = run(CallRequest::value(testing::SEND_MESSAGE, json!([1])));
    let reasons: Vec<_> = [&unknown, &outside, &not_object].map(CallOutcome::reason).into();
    assert_eq!(
        reasons,
        [
            "invalid_or_unregistered_call",
            "invalid_arguments",
            "invalid_arguments"
        ]
    );
    assert!(unknown.not_run() && unknown.plan().is_none());
    assert!(
        !outside.detail().unwrap().contains("secret"),
        "{:?}",
        outside.detail()
    );
    assert_eq!(counting.entries(), 0);
    let records = sink.calls();
    assert_eq!(records.len(), 3);
    assert!(records
        .iter()
        .all(|r| r.adapter == "test" && r.plan.is_none() && r.receipt.is_none() && r.refusal.is_some()));
}

#[test]
fn integers_beyond_2_53_and_inexact_numbers_are_refused_from_bytes_and_never_reach_the_tool() {
    let sink = MemorySink::new();
    let gate = gate_with(false, &sink, None);
    let counting = CountingTool::new();
    let rt = rt();
    let with_n = |n: &str| format!(r#"{{"to": "team@example.test", "body": "b", "n": {n}}}"#);
    for n in [
        "9007199254740993",
        "-9007199254740993",
        "0.1000000000000000055511",
        "123456789012345678901",
    ] {
        let text = with_n(n);
        let request = CallRequest::bytes(testing::SEND_MESSAGE, text.as_bytes()).executor(tool(&counting));
        let outcome = rt.block_on(gate.call(request));
        assert_eq!(
            (outcome.status(), outcome.reason()),
            ("refused", "inexact_number"),
            "{n}"
        );
        assert!(
            !outcome.detail().unwrap().contains(n),
            "the record names no argument value"
        );
    }
    // A value parsed by the wire's library: its large integer is still refused.
    let value = json!({"to": testing::TEAM, "body": "b", "n": 9_007_199_254_740_993_u64});
    let outcome =
        rt.block_on(gate.call(CallRequest::value(testing::SEND_MESSAGE, value).executor(tool(&counting))));
    assert_eq!(outcome.reason(), "inexact_number");
    assert_eq!(counting.entries(), 0);
    // 2^53 itself, and a number a double renders as written, pass.
    for n in ["9007199254740992", "1e23", "-0.5"] {
        let text = with_n(n);
        let request = CallRequest::bytes(testing::SEND_MESSAGE, text.as_bytes()).executor(tool(&counting));
        assert_eq!(rt.block_on(gate.call(request)).status(), "dispatched", "{n}");
    }
    assert_eq!(counting.entries(), 3);
    let refused = sink
        .calls()
        .iter()
        .filter(|r| r.refusal == Some(Refusal::InexactNumber))
        .count();
    assert_eq!(refused, 5);
}

#[test]
fn text_the_strict_parser_refuses_is_blocked_with_its_code_and_1e400_is_non_finite() {
    let sink = MemorySink::new();
    let gate = gate_with(false, &sink, None);
    let counting = CountingTool::new();
    let rt = rt();
    let duplicate = br#"{"to": "team@example.test", "to": "x", "body": "b"}"#;
    let huge = br#"{"to": "team@example.test", "body": "b", "n": 1e400}"#;
    let reasons: Vec<_> = [&duplicate[..], &huge[..]]
        .iter()
        .map(|text| {
            let request = CallRequest::bytes(testing::SEND_MESSAGE, text).executor(tool(&counting));
            let outcome = rt.block_on(gate.call(request));
            assert_eq!(outcome.status(), "blocked");
            outcome.reason()
        })
        .collect();
    assert_eq!(
        reasons,
        ["AML_JSON_DUPLICATE_KEY", "AML_CANONICAL_JSON_NON_FINITE_NUMBER"]
    );
    assert_eq!(counting.entries(), 0);
    assert_eq!(sink.calls().len(), 2);
}

#[test]
fn the_frozen_arguments_run_once_and_only_their_digest_is_recorded() {
    let sink = MemorySink::new();
    let gate = gate_with(false, &sink, None);
    let counting = CountingTool::new();
    let text = args();
    let done =
        rt().block_on(gate.call(CallRequest::bytes(testing::SEND_MESSAGE, &text).executor(tool(&counting))));
    let CallOutcome::Dispatched(done) = done else {
        panic!("dispatched: {done:?}")
    };
    assert_eq!(counting.entries(), 1);
    assert_eq!(done.output()["arguments"], testing::send_message_args());
    let record = &sink.calls()[0];
    assert_eq!(
        done.receipt().proposal_sha256(),
        Some(testing::send_message_digest())
    );
    assert_eq!(record.result, Some(done.output_summary()));
    assert!(!record.to_value().to_string().contains("Build passed."));
}

#[test]
fn a_registration_that_names_its_server_has_it_named_in_every_record_of_its_calls() {
    let sink = MemorySink::new();
    let catalog = ToolCatalog::new()
        .with(registration().with_server("mail"))
        .unwrap();
    let boundary = ActionBoundary::builder(testing::send_message_policy(false))
        .sink(sink.clone())
        .build();
    let gate = ToolGate::new(catalog, boundary).with_runtime(TokioRuntime);
    let counting = CountingTool::new();
    let text = args();
    let rt = rt();
    let done =
        rt.block_on(gate.call(CallRequest::bytes(testing::SEND_MESSAGE, &text).executor(tool(&counting))));
    assert_eq!(done.status(), "dispatched");
    let refused = rt.block_on(gate.call(CallRequest::bytes(testing::SEND_MESSAGE, b"{}")));
    assert_eq!(refused.status(), "refused");
    let unknown = rt.block_on(gate.call(CallRequest::bytes("no_such_tool", &text)));
    assert_eq!(unknown.status(), "refused");
    let servers: Vec<_> = sink.calls().iter().map(|r| r.server.clone()).collect();
    assert_eq!(servers, [Some("mail".into()), Some("mail".into()), None]);
    assert_eq!(sink.calls()[0].to_value()["server"], "mail");
    assert!(
        sink.calls()[2].to_value().get("server").is_none(),
        "no server, no member"
    );
}

#[test]
fn executors_are_chosen_registration_then_request_then_boundary_and_none_blocks_before_approval() {
    let own = CountingTool::new();
    let catalog = ToolCatalog::new()
        .with(registration().with_executor(Arc::new(own.clone())))
        .unwrap();
    let boundary = ActionBoundary::builder(testing::send_message_policy(false)).build();
    let other = CountingTool::new();
    let rt = rt();
    let text = args();
    let gate = ToolGate::new(catalog, boundary);
    let done =
        rt.block_on(gate.call(CallRequest::bytes(testing::SEND_MESSAGE, &text).executor(tool(&other))));
    assert_eq!(done.status(), "dispatched");
    assert_eq!((own.entries(), other.entries()), (1, 0));

    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let hook: Arc<dyn crate::ApprovalHook> = Arc::new(approval_fn(move |req| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move { Ok(Approval::approve(req.proposal().digest())) }
    }));
    let gate = gate_with(true, &MemorySink::new(), Some(hook));
    let none = rt.block_on(gate.call(CallRequest::bytes(testing::SEND_MESSAGE, &text)));
    assert_eq!(none.reason(), "missing_host_dispatch");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "approval was not asked");
}

#[test]
fn a_caller_gone_during_approval_is_blocked_and_recorded_once_and_the_tool_never_runs() {
    let sink = MemorySink::new();
    let never: Arc<dyn crate::ApprovalHook> = Arc::new(approval_fn(|_| std::future::pending()));
    let gate = gate_with(true, &sink, Some(never));
    let counting = CountingTool::new();
    let (gone, left) = tokio::sync::oneshot::channel::<()>();
    let text = args();
    let request = CallRequest::bytes(testing::SEND_MESSAGE, &text)
        .executor(tool(&counting))
        .caller_gone(async move {
            let _ = left.await;
        });
    let call = gate.call(request);
    drop(gone);
    let outcome = rt().block_on(call);
    let CallOutcome::Blocked(blocked) = &outcome else {
        panic!("blocked: {outcome:?}")
    };
    assert_eq!(blocked.reason(), ReceiptReason::ApprovalError);
    assert!(blocked.caller_gone() && !blocked.deadline_passed());
    assert_eq!(counting.entries(), 0);
    let records = sink.calls();
    assert_eq!(records.len(), 1);
    assert!(records[0].detail.as_deref().unwrap().contains("went away"));
}

#[test]
fn a_deadline_during_approval_blocks_with_nothing_claimed() {
    let sink = MemorySink::new();
    let told = Arc::new(std::sync::Mutex::new(None));
    let seen = Arc::clone(&told);
    let never: Arc<dyn crate::ApprovalHook> = Arc::new(approval_fn(move |request| {
        // The hook is told the caller's deadline (to count down to it).
        *seen.lock().unwrap() = Some(request.deadline());
        std::future::pending()
    }));
    let gate = gate_with(true, &sink, Some(never));
    let counting = CountingTool::new();
    let rt = rt();
    let text = args();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let outcome = rt.block_on(async {
        let request = CallRequest::bytes(testing::SEND_MESSAGE, &text)
            .executor(tool(&counting))
            .deadline(deadline);
        gate.call(request).await
    });
    let CallOutcome::Blocked(blocked) = &outcome else {
        panic!("blocked: {outcome:?}")
    };
    assert!(blocked.deadline_passed());
    assert_eq!(blocked.reason(), ReceiptReason::ApprovalError);
    assert_eq!((counting.entries(), sink.calls().len()), (0, 1));
    let told = told.lock().unwrap().expect("the hook was asked");
    assert_eq!(told, Some(deadline));
}

#[test]
fn a_deadline_during_the_tool_answers_unknown_and_the_tool_finishes_and_is_recorded_once() {
    let sink = MemorySink::new();
    let gate = gate_with(false, &sink, None);
    let gated = Gated::default();
    let rt = rt();
    let text = args();
    let outcome = rt.block_on(async {
        let at = tokio::time::Instant::now().into_std() + Duration::from_secs(5);
        let request = CallRequest::bytes(testing::SEND_MESSAGE, &text)
            .executor(Arc::new(gated.clone()))
            .deadline(at);
        gate.call(request).await
    });
    let CallOutcome::Unknown(unknown) = &outcome else {
        panic!("unknown: {outcome:?}")
    };
    assert!(unknown.still_running() && unknown.receipt().is_none());
    assert_eq!(outcome.reason(), crate::DISPATCH_IN_PROGRESS);
    assert!(sink.calls().is_empty(), "the record waits for the tool");
    rt.block_on(async {
        gated.release.notify_one();
        first_record(&sink).await;
    });
    let records = sink.calls();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].receipt.as_ref().unwrap().execution_status(),
        ExecutionStatus::Dispatched
    );
    assert_eq!(gated.entries.load(Ordering::SeqCst), 1);
}

#[test]
fn a_call_dropped_after_the_claim_finishes_on_the_runtime_and_is_recorded_once() {
    let sink = MemorySink::new();
    let gate = gate_with(true, &sink, Some(Arc::new(testing::approve_all())));
    let gated = Gated::default();
    let rt = rt();
    let text = args();
    rt.block_on(async {
        let call =
            gate.call(CallRequest::bytes(testing::SEND_MESSAGE, &text).executor(Arc::new(gated.clone())));
        let mut call = Box::pin(call);
        tokio::select! {
            _ = &mut call => panic!("the tool waits for release"),
            () = gated.entered.notified() => {}
        }
        drop(call);
        assert!(sink.calls().is_empty(), "not recorded while the tool runs");
        gated.release.notify_one();
        first_record(&sink).await;
    });
    let records = sink.calls();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].receipt.as_ref().unwrap().reason(),
        ReceiptReason::HostDispatchReturned
    );
}

#[test]
fn a_call_dropped_before_the_claim_is_recorded_blocked_and_without_a_runtime_a_deadline_is_a_host_error() {
    let sink = MemorySink::new();
    let never: Arc<dyn crate::ApprovalHook> = Arc::new(approval_fn(|_| std::future::pending()));
    let gate = gate_with(true, &sink, Some(never));
    let counting = CountingTool::new();
    let rt = rt();
    let text = args();
    let call = gate.call(CallRequest::bytes(testing::SEND_MESSAGE, &text).executor(tool(&counting)));
    let gave_up = rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), call).await });
    assert!(gave_up.is_err());
    let record = &sink.calls()[0];
    assert_eq!(
        record.receipt.as_ref().unwrap().reason(),
        ReceiptReason::ApprovalError
    );
    assert!(record.detail.as_deref().unwrap().contains("went away"));

    let bare = ToolGate::new(
        ToolCatalog::new().with(registration()).unwrap(),
        gate.boundary().clone(),
    );
    let at = Instant::now() + Duration::from_secs(30);
    let outcome = rt.block_on(bare.call(CallRequest::bytes(testing::SEND_MESSAGE, &text).deadline(at)));
    assert_eq!(outcome.status(), "host_error");
    assert_eq!(counting.entries(), 0);
    assert_eq!(sink.calls().len(), 2);
}

#[test]
fn a_deadline_passed_on_arrival_is_refused_before_planning() {
    let sink = MemorySink::new();
    let gate = gate_with(false, &sink, None);
    let rt = rt();
    let text = args();
    let outcome = rt.block_on(async {
        let at = tokio::time::Instant::now().into_std();
        gate.call(CallRequest::bytes(testing::SEND_MESSAGE, &text).deadline(at))
            .await
    });
    assert_eq!(outcome.reason(), "deadline_passed");
    assert_eq!(sink.calls()[0].refusal, Some(Refusal::DeadlinePassed));
}

#[test]
fn a_panicking_tool_is_unknown_with_its_receipt() {
    let sink = MemorySink::new();
    let gate = gate_with(false, &sink, None);
    let text = args();
    let panics: Arc<dyn ToolExecutor> = Arc::new(crate::tool_fn(|_| async { panic!("tool exploded") }));
    let outcome = rt().block_on(gate.call(CallRequest::bytes(testing::SEND_MESSAGE, &text).executor(panics)));
    let CallOutcome::Unknown(unknown) = &outcome else {
        panic!("unknown: {outcome:?}")
    };
    assert!(!unknown.still_running());
    assert_eq!(outcome.reason(), "host_dispatch_error");
    assert!(unknown.detail().unwrap().contains("tool exploded"));
    assert_eq!(sink.calls().len(), 1);
}

#[test]
fn a_call_id_is_taken_up_once_through_the_grant_store() {
    let sink = MemorySink::new();
    let gate = gate_with(false, &sink, None);
    let counting = CountingTool::new();
    let rt = rt();
    let text = args();
    let call = |id| {
        let request = CallRequest::bytes(testing::SEND_MESSAGE, &text)
            .executor(tool(&counting))
            .call_id(id);
        rt.block_on(gate.call(request))
    };
    assert_eq!(call("c1").status(), "dispatched");
    let again = call("c1");
    assert_eq!((again.status(), again.reason()), ("refused", "duplicate_call"));
    assert_eq!(call("c2").status(), "dispatched");
    assert_eq!(counting.entries(), 2);
    let refusals: Vec<_> = sink.calls().iter().map(|r| r.refusal).collect();
    assert_eq!(refusals, [None, Some(Refusal::DuplicateCall), None]);
    // Another adapter's id of the same text is another grant.
    assert_ne!(call_id_grant("a2ui", "c1"), call_id_grant("other", "c1"));
}

#[test]
fn the_listing_is_what_a_policy_rule_can_allow() {
    let unlisted = ToolRegistration::new(
        "delete_all",
        Effect::Delete,
        "Delete everything",
        ResourceRule::Fixed("all".into()),
        json!({"type": "object"}),
    )
    .unwrap();
    let catalog = ToolCatalog::new()
        .with(registration())
        .unwrap()
        .with(unlisted)
        .unwrap();
    let boundary = ActionBoundary::builder(testing::send_message_policy(true)).build();
    let gate = ToolGate::new(catalog, boundary);
    assert_eq!(gate.catalog().len(), 2);
    let names: Vec<_> = gate.listing().iter().map(|t| t.name().to_owned()).collect();
    assert_eq!(names, [testing::SEND_MESSAGE]);
}

#[test]
fn the_relays_prepared_calls_still_run_and_record_once() {
    let sink = MemorySink::new();
    let gate = gate_with(false, &sink, None);
    let counting = CountingTool::new();
    let prepared = gate.prepare_value(testing::SEND_MESSAGE, testing::send_message_args());
    let outcome = rt().block_on(gate.run(prepared, Some(&counting), None, None));
    assert_eq!(outcome.status(), crate::gate::CallStatus::Dispatched);
    let dropped = gate.prepare_value("delete_all", json!({}));
    drop(dropped);
    assert_eq!(counting.entries(), 1);
    assert_eq!(sink.calls().len(), 2);
}

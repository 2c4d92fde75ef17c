//! Budgets and callers through the gate: Cedar reads `context.usage` and the principal, the
//! usage is counted atomically with its check, and racing calls at a budget's edge over-run
//! it by none.

use std::sync::Arc;

use serde_json::json;

use crate::testing::{CountingTool, LockstepUsage};
use crate::{
    approval_fn, async_trait, ActionBoundary, Approval, CallOutcome, CallRequest, Caller, Counted, Effect,
    InMemoryUsage, MemorySink, Policy, Record, ResourceRule, TokioRuntime, ToolCatalog, ToolGate,
    ToolRegistration, Usage, UsageError, UsageLedger,
};

/// Twenty sends an hour without asking, then ask: two permits (an `@approval` permit that
/// applies always asks, so the second says when it applies).
const TWENTY_AN_HOUR: &str = r#"
@id("send-under-budget")
permit(principal, action == Action::"send", resource) when { context.usage.hour < 20 };
@id("send-over-budget")
@approval("required")
permit(principal, action == Action::"send", resource) when { context.usage.hour >= 20 };
@id("alice-reads")
permit(principal == Caller::"alice", action == Action::"read", resource);
"#;

fn catalog() -> ToolCatalog {
    let tool = |name: &str, effect| {
        ToolRegistration::new(name, effect, "p", ResourceRule::Argument("to".into()), json!({})).unwrap()
    };
    ToolCatalog::new()
        .with(tool("send", Effect::Send))
        .unwrap()
        .with(tool("read", Effect::Read))
        .unwrap()
}

fn gate(ledger: Option<Arc<dyn UsageLedger>>, approve: bool, sink: &MemorySink) -> ToolGate {
    let mut boundary = ActionBoundary::builder(Arc::new(Policy::from_cedar(TWENTY_AN_HOUR, None)))
        .sink(sink.clone())
        .executor(CountingTool::new());
    if let Some(ledger) = ledger {
        boundary = boundary.usage(ledger);
    }
    if approve {
        boundary = boundary.approval(approval_fn(|req| async move {
            Ok(Approval::approve(req.proposal().digest()))
        }));
    }
    ToolGate::new(catalog(), boundary.build())
        .for_adapter("test")
        .with_runtime(TokioRuntime)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

fn send(gate: &ToolGate, n: usize) -> impl std::future::Future<Output = CallOutcome> + Send + 'static {
    let arguments = json!({"to": "team", "n": n});
    gate.call(CallRequest::value("send", arguments).executor(Arc::new(CountingTool::new())))
}

fn status(outcome: &CallOutcome) -> (String, String) {
    (outcome.status().to_owned(), outcome.reason().to_owned())
}

#[test]
fn the_twenty_first_send_within_an_hour_asks_for_approval() {
    let sink = MemorySink::new();
    let ledger: Arc<dyn UsageLedger> = Arc::new(InMemoryUsage::new());
    let rt = runtime();
    let unapproved = gate(Some(Arc::clone(&ledger)), false, &sink);
    for n in 0..20 {
        let outcome = rt.block_on(send(&unapproved, n));
        assert_eq!(
            status(&outcome),
            ("dispatched".into(), "host_dispatch_returned".into()),
            "send {n}"
        );
    }
    let twenty_first = rt.block_on(send(&unapproved, 20));
    assert_eq!(
        status(&twenty_first),
        ("blocked".into(), "approval_unavailable".into())
    );
    // With a person to ask, it runs once approved, and counts.
    let approved = gate(Some(Arc::clone(&ledger)), true, &sink);
    let asked = rt.block_on(send(&approved, 21));
    assert_eq!(
        status(&asked),
        ("dispatched".into(), "host_dispatch_returned".into())
    );
    assert_eq!(
        asked.plan().unwrap().decision(),
        crate::Decision::RequiresApproval
    );
    let usage = rt.block_on(ledger.usage(&Caller::local(), "send")).unwrap();
    assert_eq!(
        usage,
        Usage {
            minute: 21,
            hour: 21,
            day: 21
        }
    );
    // The records say what each plan was decided on.
    let calls: Vec<_> = sink
        .records()
        .into_iter()
        .filter_map(|r| match r {
            Record::Call(call) => Some(call),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 22);
    assert_eq!(calls[0].usage, Some(Usage::default()));
    assert_eq!(calls[0].policies, ["send-under-budget"]);
    assert_eq!(calls[20].usage.map(|u| u.hour), Some(20));
    assert_eq!(calls[20].policies, ["send-over-budget"]);
    assert_eq!(calls[0].caller, None, "local is not named");
}

#[test]
fn sixty_four_calls_racing_at_the_edge_of_a_budget_over_run_it_by_none() {
    let rt = runtime();
    let memory: Arc<dyn UsageLedger> = Arc::new(InMemoryUsage::new());
    rt.block_on(async {
        for _ in 0..19 {
            let seen = memory.usage(&Caller::local(), "send").await.unwrap();
            let counted = memory.count_if(&Caller::local(), "send", seen).await.unwrap();
            assert_eq!(counted, Counted::Counted);
        }
    });
    // Every racing call reads the usage before any is counted.
    let sink = MemorySink::new();
    let gate = gate(
        Some(Arc::new(LockstepUsage::new(Arc::clone(&memory), 64))),
        false,
        &sink,
    );
    let outcomes = rt.block_on(async {
        let calls: Vec<_> = (0..64).map(|n| tokio::spawn(send(&gate, n))).collect();
        let mut outcomes = Vec::new();
        for call in calls {
            outcomes.push(call.await.unwrap());
        }
        outcomes
    });
    let dispatched = outcomes.iter().filter(|o| o.status() == "dispatched").count();
    let asked = outcomes
        .iter()
        .filter(|o| o.reason() == "approval_unavailable")
        .count();
    assert_eq!((dispatched, asked), (1, 63), "one send was left under the budget");
    let usage = rt.block_on(memory.usage(&Caller::local(), "send")).unwrap();
    assert_eq!(usage.hour, 20, "the budget was over-run by none");
}

#[test]
fn the_principal_is_the_caller() {
    let sink = MemorySink::new();
    let gate = gate(Some(Arc::new(InMemoryUsage::new())), false, &sink);
    let rt = runtime();
    let read = |caller: Caller| {
        rt.block_on(
            gate.call(
                CallRequest::value("read", json!({"to": "notes"}))
                    .caller(caller)
                    .executor(Arc::new(CountingTool::new())),
            ),
        )
    };
    let alice = read(Caller::new("alice").unwrap());
    assert_eq!(
        status(&alice),
        ("dispatched".into(), "host_dispatch_returned".into())
    );
    let mallory = read(Caller::new("mallory").unwrap());
    assert_eq!(status(&mallory), ("blocked".into(), "no_permit".into()));
    assert_eq!(
        status(&read(Caller::local())),
        ("blocked".into(), "no_permit".into())
    );
    let callers: Vec<_> = sink
        .records()
        .into_iter()
        .filter_map(|r| match r {
            Record::Call(call) => Some(call.caller),
            _ => None,
        })
        .collect();
    assert_eq!(
        callers,
        [Some("alice".to_owned()), Some("mallory".to_owned()), None]
    );
}

/// A ledger that cannot be read or written.
#[derive(Debug)]
struct Broken;

#[async_trait]
impl UsageLedger for Broken {
    async fn usage(&self, _: &Caller, _: &str) -> Result<Usage, UsageError> {
        Err(UsageError::new("database is locked"))
    }
    async fn count_if(&self, _: &Caller, _: &str, _: Usage) -> Result<Counted, UsageError> {
        Err(UsageError::new("database is locked"))
    }
}

/// Reads fine, never counts.
#[derive(Debug)]
struct CannotCount;

#[async_trait]
impl UsageLedger for CannotCount {
    async fn usage(&self, _: &Caller, _: &str) -> Result<Usage, UsageError> {
        Ok(Usage::default())
    }
    async fn count_if(&self, _: &Caller, _: &str, _: Usage) -> Result<Counted, UsageError> {
        Err(UsageError::new("disk full"))
    }
}

#[test]
fn a_ledger_that_fails_or_is_missing_denies_and_nothing_runs() {
    let rt = runtime();
    let tool = CountingTool::new();
    let cases: [(Option<Arc<dyn UsageLedger>>, &str); 3] = [
        (
            Some(Arc::new(Broken)),
            "usage could not be read: database is locked",
        ),
        (Some(Arc::new(CannotCount)), "could not be counted: disk full"),
        (None, ""),
    ];
    for (ledger, detail) in cases {
        let sink = MemorySink::new();
        let gate = gate(ledger, true, &sink);
        let outcome = rt.block_on(
            gate.call(CallRequest::value("send", json!({"to": "team"})).executor(Arc::new(tool.clone()))),
        );
        assert_eq!(
            status(&outcome),
            ("blocked".into(), "policy_error".into()),
            "{detail}"
        );
        assert!(
            outcome.detail().unwrap_or_default().contains(detail),
            "{:?}",
            outcome.detail()
        );
    }
    assert_eq!(tool.entries(), 0);
}

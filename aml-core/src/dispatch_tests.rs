use super::*;
use crate::hooks::{async_trait, Approval, ApprovalError, ClaimError, ToolError};
use crate::{approval_fn, tool_fn, ExecutionStatus, LivePolicy, Policy, Sha256Digest};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};

fn proposal(tool: &str, effect: &str, resource: &str) -> Value {
    json!({"protocol": "aml-proposed-action/1", "tool": tool, "effect": effect, "resource": resource,
           "purpose": "p", "arguments": {"to": resource, "n": 1}})
}

fn policy() -> LivePolicy {
    LivePolicy::new(Policy::from_value(
        &json!({"protocol": "aml-action-policy/1", "rules": [
            {"tool": "send", "effect": "send", "resource": "team", "requires_approval": true},
            {"tool": "read", "effect": "read", "resource": "rec", "requires_approval": false}
        ]}),
    ))
}

fn counting_tool(count: Arc<AtomicUsize>) -> impl ToolExecutor {
    tool_fn(move |call| {
        let count = Arc::clone(&count);
        async move {
            count.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"args": call.arguments()}))
        }
    })
}

fn approve() -> impl ApprovalHook {
    approval_fn(|req| async move { Ok(Approval::approve(req.proposal().digest())) })
}

fn run(boundary: &ActionBoundary, p: Value) -> DispatchOutcome {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(boundary.run(&p))
}

#[derive(Debug)]
struct FailingStore;
#[async_trait]
impl GrantStore for FailingStore {
    async fn claim(&self, _: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        Err(ClaimError::new("store down"))
    }
}

#[derive(Debug)]
struct ExpiredStore;
#[async_trait]
impl GrantStore for ExpiredStore {
    async fn claim(&self, _: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        Ok(ClaimStatus::Expired)
    }
}

#[test]
fn allow_skips_approval_and_claim() {
    let calls = Arc::new(AtomicUsize::new(0));
    let asked = Arc::new(AtomicUsize::new(0));
    let asked2 = Arc::clone(&asked);
    let b = ActionBoundary::builder(policy())
        .approval(approval_fn(move |req| {
            asked2.fetch_add(1, Ordering::SeqCst);
            async move { Ok(Approval::approve(req.proposal().digest())) }
        }))
        .grants(FailingStore)
        .executor(counting_tool(Arc::clone(&calls)))
        .build();
    let out = run(&b, proposal("read", "read", "rec"));
    assert_eq!(out.receipt().reason(), ReceiptReason::HostDispatchReturned);
    assert_eq!(out.plan().decision(), Decision::Allow);
    assert_eq!(
        (calls.load(Ordering::SeqCst), asked.load(Ordering::SeqCst)),
        (1, 0)
    );
    assert_eq!(out.output().unwrap()["args"], json!({"to": "rec", "n": 1}));
}

#[test]
fn every_receipt_reason_of_the_state_machine_is_reachable() {
    let calls = Arc::new(AtomicUsize::new(0));
    let with = |b: ActionBoundaryBuilder| b.executor(counting_tool(Arc::clone(&calls)));
    let send = || proposal("send", "send", "team");
    let cases: Vec<(ActionBoundary, Value, ReceiptReason)> = vec![
        (
            with(ActionBoundary::builder(policy())).build(),
            proposal("send", "send", "x"),
            ReceiptReason::NoExactRule,
        ),
        (
            with(ActionBoundary::builder(policy())).build(),
            proposal("", "send", "x"),
            ReceiptReason::InvalidProposal,
        ),
        (
            ActionBoundary::builder(policy()).approval(approve()).build(),
            send(),
            ReceiptReason::MissingHostDispatch,
        ),
        (
            with(ActionBoundary::builder(policy())).build(),
            send(),
            ReceiptReason::ApprovalUnavailable,
        ),
        (
            with(
                ActionBoundary::builder(policy())
                    .approval(approval_fn(|_| async { Err(ApprovalError::new("down")) })),
            )
            .build(),
            send(),
            ReceiptReason::ApprovalError,
        ),
        (
            with(
                ActionBoundary::builder(policy()).approval(approval_fn(|req| async move {
                    Ok(Approval::decline(req.proposal().digest()))
                })),
            )
            .build(),
            send(),
            ReceiptReason::ApprovalMissingOrMismatched,
        ),
        (
            with(ActionBoundary::builder(policy()).approval(approval_fn(|_| async {
                Ok(Approval::approve(Sha256Digest::of(b"other")))
            })))
            .build(),
            send(),
            ReceiptReason::ApprovalMissingOrMismatched,
        ),
        (
            with(
                ActionBoundary::builder(policy())
                    .approval(approve())
                    .grants(FailingStore),
            )
            .build(),
            send(),
            ReceiptReason::ApprovalConsumeError,
        ),
        (
            with(
                ActionBoundary::builder(policy())
                    .approval(approve())
                    .grants(ExpiredStore),
            )
            .build(),
            send(),
            ReceiptReason::ApprovalReusedOrExpired,
        ),
        (
            with(ActionBoundary::builder(policy()).approval(approve())).build(),
            send(),
            ReceiptReason::HostDispatchReturned,
        ),
        (
            ActionBoundary::builder(policy())
                .approval(approve())
                .executor(tool_fn(|_| async { Err(ToolError::new("smtp timeout")) }))
                .build(),
            send(),
            ReceiptReason::HostDispatchError,
        ),
        (
            ActionBoundary::builder(policy())
                .approval(approve())
                .executor(tool_fn(|_| async {
                    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
                    Err(ToolError::not_entered("no connection", refused))
                }))
                .build(),
            send(),
            ReceiptReason::HostDispatchNotEntered,
        ),
    ];
    for (boundary, p, expected) in cases {
        let out = run(&boundary, p);
        assert_eq!(out.receipt().reason(), expected);
        assert_eq!(out.receipt().execution_status(), expected.execution_status());
        assert_eq!(out.receipt().proposal_sha256(), out.plan().proposal_sha256());
        assert_eq!(out.receipt().policy_decision(), out.plan().decision());
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the returning case entered the counting tool"
    );
}

#[test]
fn policy_change_during_approval_blocks_before_the_claim() {
    let live = policy();
    let live2 = live.clone();
    let claims = Arc::new(AtomicUsize::new(0));
    #[derive(Debug)]
    struct Counting(Arc<AtomicUsize>);
    #[async_trait]
    impl GrantStore for Counting {
        async fn claim(&self, _: &GrantRef) -> Result<ClaimStatus, ClaimError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(ClaimStatus::Claimed)
        }
    }
    let b = ActionBoundary::builder(live)
        .approval(approval_fn(move |req| {
            live2.revoke("send", crate::Effect::Send, "team");
            async move { Ok(Approval::approve(req.proposal().digest())) }
        }))
        .grants(Counting(Arc::clone(&claims)))
        .executor(tool_fn(|_| async { Ok(json!(null)) }))
        .build();
    let out = run(&b, proposal("send", "send", "team"));
    assert_eq!(out.receipt().reason(), ReceiptReason::PolicyChanged);
    assert_eq!(claims.load(Ordering::SeqCst), 0);
}

/// A host reload that lands between the one-use claim and the dispatch (here: inside the
/// claim) is caught by the re-check after the claim; the grant stays spent, the tool unrun.
#[test]
fn a_revocation_between_claim_and_dispatch_blocks_with_policy_changed() {
    #[derive(Debug)]
    struct RevokingStore(LivePolicy);
    #[async_trait]
    impl GrantStore for RevokingStore {
        async fn claim(&self, _: &GrantRef) -> Result<ClaimStatus, ClaimError> {
            self.0.replace(Policy::empty());
            Ok(ClaimStatus::Claimed)
        }
    }
    let live = policy();
    let entered = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&entered);
    let b = ActionBoundary::builder(live.clone())
        .approval(approval_fn(|req| async move {
            Ok(Approval::approve(req.proposal().digest()))
        }))
        .grants(RevokingStore(live))
        .executor(tool_fn(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!(null)) }
        }))
        .build();
    let out = run(&b, proposal("send", "send", "team"));
    assert_eq!(out.receipt().reason(), ReceiptReason::PolicyChanged);
    assert_eq!(out.receipt().execution_status(), ExecutionStatus::Blocked);
    assert_eq!(entered.load(Ordering::SeqCst), 0);
}

/// A reload that failed (the host put [`Policy::invalid`] in force) while a call waited for
/// approval ends that call at the re-check: it never runs.
#[test]
fn a_failed_reload_during_approval_blocks_the_waiting_call() {
    let live = policy();
    let live2 = live.clone();
    let b = ActionBoundary::builder(live)
        .approval(approval_fn(move |req| {
            live2.replace(Policy::invalid("policy.json: not a JSON document"));
            async move { Ok(Approval::approve(req.proposal().digest())) }
        }))
        .executor(tool_fn(|_| async { panic!("the tool must not run") }))
        .build();
    let out = run(&b, proposal("send", "send", "team"));
    assert_eq!(out.receipt().execution_status(), ExecutionStatus::Blocked);
    assert_eq!(out.receipt().reason(), ReceiptReason::PolicyChanged);
}

#[test]
fn policy_turning_approval_into_allow_is_also_a_change() {
    let live = policy();
    let live2 = live.clone();
    let b = ActionBoundary::builder(live)
        .approval(approval_fn(move |req| {
            live2.replace(Policy::from_value(
                &json!({"protocol": "aml-action-policy/1", "rules": [
                {"tool": "send", "effect": "send", "resource": "team", "requires_approval": false}]}),
            ));
            async move { Ok(Approval::approve(req.proposal().digest())) }
        }))
        .executor(tool_fn(|_| async { Ok(json!(null)) }))
        .build();
    assert_eq!(
        run(&b, proposal("send", "send", "team")).receipt().reason(),
        ReceiptReason::PolicyChanged
    );
}

#[test]
fn panicking_hooks_fail_closed() {
    let approval_panics = ActionBoundary::builder(policy())
        .approval(approval_fn(|_| async { panic!("approval exploded") }))
        .executor(tool_fn(|_| async { Ok(json!(1)) }))
        .build();
    let out = run(&approval_panics, proposal("send", "send", "team"));
    assert_eq!(out.receipt().reason(), ReceiptReason::ApprovalError);
    assert_eq!(out.detail(), Some("panicked: approval exploded"));

    #[derive(Debug)]
    struct PanickingStore;
    #[async_trait]
    impl GrantStore for PanickingStore {
        async fn claim(&self, _: &GrantRef) -> Result<ClaimStatus, ClaimError> {
            panic!("store exploded")
        }
    }
    let store_panics = ActionBoundary::builder(policy())
        .approval(approve())
        .grants(PanickingStore)
        .executor(tool_fn(|_| async { Ok(json!(1)) }))
        .build();
    assert_eq!(
        run(&store_panics, proposal("send", "send", "team"))
            .receipt()
            .reason(),
        ReceiptReason::ApprovalConsumeError
    );

    let tool_panics = ActionBoundary::builder(policy())
        .executor(tool_fn(|_| async { panic!("tool exploded") }))
        .build();
    let out = run(&tool_panics, proposal("read", "read", "rec"));
    assert_eq!(out.receipt().execution_status(), ExecutionStatus::Unknown);
    assert_eq!(out.receipt().reason(), ReceiptReason::HostDispatchError);
    assert!(out.output().is_none());
}

#[test]
fn replayable_approvals_must_be_chosen_explicitly() {
    let calls = Arc::new(AtomicUsize::new(0));
    let one_use = ActionBoundary::builder(policy())
        .approval(approve())
        .executor(counting_tool(Arc::clone(&calls)))
        .build();
    let p = proposal("send", "send", "team");
    assert_eq!(
        run(&one_use, p.clone()).receipt().reason(),
        ReceiptReason::HostDispatchReturned
    );
    assert_eq!(
        run(&one_use, p.clone()).receipt().reason(),
        ReceiptReason::ApprovalReusedOrExpired
    );
    let replayable = ActionBoundary::builder(policy())
        .approval(approve())
        .replayable_approvals()
        .executor(counting_tool(Arc::clone(&calls)))
        .build();
    assert_eq!(
        run(&replayable, p.clone()).receipt().reason(),
        ReceiptReason::HostDispatchReturned
    );
    assert_eq!(
        run(&replayable, p).receipt().reason(),
        ReceiptReason::HostDispatchReturned
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn a_tool_not_entered_blocks_and_its_grant_stays_spent() {
    let entered = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&entered);
    let b = ActionBoundary::builder(policy())
        .approval(approval_fn(|req| async move {
            Ok(Approval::approve(req.proposal().digest()).with_id("g1"))
        }))
        .executor(tool_fn(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            async {
                let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
                Err(ToolError::not_entered("the server is not reachable", refused))
            }
        }))
        .build();
    let p = proposal("send", "send", "team");
    let first = run(&b, p.clone());
    assert_eq!(first.receipt().reason(), ReceiptReason::HostDispatchNotEntered);
    assert_eq!(first.receipt().execution_status(), ExecutionStatus::Blocked);
    let detail = first.detail().unwrap_or_default();
    assert!(
        detail.contains("not reachable") && detail.contains("refused"),
        "{detail}"
    );
    // The same approval again: the grant was spent by the first call.
    let again = run(&b, p);
    assert_eq!(again.receipt().reason(), ReceiptReason::ApprovalReusedOrExpired);
    assert_eq!(entered.load(Ordering::SeqCst), 1);
}

#[test]
fn named_grants_are_one_use_per_approval_id() {
    let counter = Arc::new(AtomicUsize::new(0));
    let c2 = Arc::clone(&counter);
    let b = ActionBoundary::builder(policy())
        .approval(approval_fn(move |req| {
            let n = c2.fetch_add(1, Ordering::SeqCst);
            // Two distinct grants, then the first one again.
            let id = ["g1", "g2", "g1"][n.min(2)];
            async move { Ok(Approval::approve(req.proposal().digest()).with_id(id)) }
        }))
        .executor(tool_fn(|call| async move {
            Ok(json!(call.grant().and_then(|g| g.grant().approval_id.clone())))
        }))
        .build();
    let p = proposal("send", "send", "team");
    assert_eq!(run(&b, p.clone()).output(), Some(&json!("g1")));
    assert_eq!(run(&b, p.clone()).output(), Some(&json!("g2")));
    assert_eq!(
        run(&b, p).receipt().reason(),
        ReceiptReason::ApprovalReusedOrExpired
    );
}

#[test]
fn the_tool_receives_the_hashed_bytes_not_the_callers_value() {
    let b = ActionBoundary::builder(policy())
        .executor(tool_fn(|call| async move {
            Ok(json!({"json": call.proposal().arguments_json(), "value": call.arguments()}))
        }))
        .build();
    let mut p = proposal("read", "read", "rec");
    p["arguments"] = json!({"z": 1e21, "a": -0.0, "10": "x", "9": "y"});
    let planned = b.plan(&p);
    p["arguments"]["z"] = json!("mutated after planning");
    let out = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(b.dispatch(planned));
    assert_eq!(
        out.output().unwrap()["json"],
        r#"{"9":"y","10":"x","a":0,"z":1e+21}"#
    );
    assert_eq!(out.output().unwrap()["value"]["z"], json!(1e21));
}

#[test]
fn a_deadline_stops_waiting_for_approval_and_claims_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    // Timers are created inside the runtime.
    let _context = rt.enter();
    let calls = Arc::new(AtomicUsize::new(0));
    let slow = ActionBoundary::builder(policy())
        .approval(approval_fn(|req| async move {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            Ok(Approval::approve(req.proposal().digest()))
        }))
        .executor(counting_tool(Arc::clone(&calls)))
        .build();
    let at = std::time::Instant::now() + std::time::Duration::from_millis(20);
    let deadline = crate::Deadline::new(at, tokio::time::sleep_until(at.into()));
    let planned = slow.plan(&proposal("send", "send", "team"));
    let out = rt.block_on(slow.dispatch_until(planned, Some(deadline)));
    assert_eq!(out.receipt().reason(), ReceiptReason::ApprovalError);
    assert!(out.deadline_passed());
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // An approval in time dispatches as usual.
    let quick = ActionBoundary::builder(policy())
        .approval(approve())
        .executor(counting_tool(Arc::clone(&calls)))
        .build();
    let at = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let deadline = crate::Deadline::new(at, tokio::time::sleep_until(at.into()));
    let out =
        rt.block_on(quick.dispatch_until(quick.plan(&proposal("send", "send", "team")), Some(deadline)));
    assert_eq!(out.receipt().reason(), ReceiptReason::HostDispatchReturned);
    assert!(!out.deadline_passed());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

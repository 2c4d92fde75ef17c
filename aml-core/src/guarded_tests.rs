use super::*;
use crate::{approval_fn, tool_fn, Approval, LivePolicy, Policy};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

fn policy() -> LivePolicy {
    LivePolicy::new(Policy::from_value(
        &json!({"protocol": "aml-action-policy/1", "rules": [
            {"tool": "send_message", "effect": "send", "resource": "team@example.test", "requires_approval": true}
        ]}),
    ))
}

fn to_mapper(mapped: Arc<AtomicUsize>) -> impl ResourceMapper {
    move |s: &ArgumentSnapshot| {
        mapped.fetch_add(1, Ordering::SeqCst);
        s.str("to")
            .map(str::to_owned)
            .ok_or_else(|| MapperError::new("missing to"))
    }
}

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn tool(mapped: Arc<AtomicUsize>) -> GuardedTool {
    GuardedTool::builder("send_message", Effect::Send, "Send a status update", policy())
        .resource_for(to_mapper(mapped))
        .approval(approval_fn(|req| async move {
            Ok(Approval::approve(req.proposal().digest()))
        }))
        .executor(tool_fn(
            |call| async move { Ok(Value::Object(call.into_arguments())) },
        ))
        .build()
        .unwrap()
}

#[test]
fn seed_digest_is_reproduced() {
    let out =
        block_on(tool(Arc::default()).call(&json!({"to": "team@example.test", "body": "Build passed."})))
            .unwrap();
    assert_eq!(
        out.plan().proposal_sha256().unwrap().to_string(),
        "f416748534da5982a029d03d6db48adf00b4138e0785d38857f0b1734923776c"
    );
}

#[test]
fn non_finite_arguments_block_before_the_mapper_runs() {
    #[derive(serde::Serialize)]
    struct Args {
        to: &'static str,
        amount: f64,
    }
    let mapped = Arc::new(AtomicUsize::new(0));
    let out = block_on(tool(Arc::clone(&mapped)).call(&Args {
        to: "team@example.test",
        amount: f64::NAN,
    }))
    .unwrap();
    assert_eq!(out.receipt().reason(), ReceiptReason::NonFiniteNumber);
    assert_eq!(
        out.receipt().to_value()["reason"],
        "AML_CANONICAL_JSON_NON_FINITE_NUMBER"
    );
    assert_eq!(out.receipt().proposal_sha256(), None);
    assert_eq!(out.receipt().policy_decision(), crate::Decision::Deny);
    assert_eq!(mapped.load(Ordering::SeqCst), 0);
}

#[test]
fn agent_json_text_is_parsed_strictly() {
    let t = tool(Arc::default());
    let dup = block_on(t.call_json(r#"{"to":"team@example.test","to":"other@example.test"}"#)).unwrap();
    assert_eq!(dup.receipt().reason(), ReceiptReason::JsonDuplicateKey);
    let ok = block_on(t.call_json(r#"{"to":"team@example.test","body":"hi"}"#)).unwrap();
    assert_eq!(ok.receipt().reason(), ReceiptReason::HostDispatchReturned);
}

#[test]
fn non_object_arguments_are_an_invalid_proposal() {
    let mapped = Arc::new(AtomicUsize::new(0));
    let out = block_on(tool(Arc::clone(&mapped)).call(&["team@example.test"])).unwrap();
    assert_eq!(out.receipt().reason(), ReceiptReason::InvalidProposal);
    assert_eq!(mapped.load(Ordering::SeqCst), 0);
}

#[test]
fn mapper_failures_are_host_errors_not_receipts() {
    let err = block_on(tool(Arc::default()).call(&json!({"body": "no destination"}))).unwrap_err();
    assert!(matches!(err, GuardedToolError::Mapper(_)));
    assert_eq!(err.to_string(), "missing to");

    let panicking = GuardedTool::builder("send_message", Effect::Send, "p", policy())
        .resource_for(|_: &ArgumentSnapshot| -> Result<String, MapperError> { panic!("mapper exploded") })
        .build()
        .unwrap();
    let err = block_on(panicking.call(&json!({}))).unwrap_err();
    assert!(matches!(err, GuardedToolError::MapperPanicked(ref m) if m.contains("mapper exploded")));
}

#[test]
fn caller_changes_after_the_call_never_reach_the_tool() {
    let caller_args = Arc::new(Mutex::new(
        json!({"to": "team@example.test", "body": "Build passed."}),
    ));
    let during = Arc::clone(&caller_args);
    let t = GuardedTool::builder("send_message", Effect::Send, "Send a status update", policy())
        .resource_for(to_mapper(Arc::default()))
        .approval(approval_fn(move |req| {
            during.lock().unwrap()["to"] = json!("other@example.test");
            async move { Ok(Approval::approve(req.proposal().digest())) }
        }))
        .executor(tool_fn(|call| async move { Ok(call.arguments()["to"].clone()) }))
        .build()
        .unwrap();
    let pending = t.call(&*caller_args.lock().unwrap());
    let out = block_on(pending).unwrap();
    assert_eq!(caller_args.lock().unwrap()["to"], "other@example.test");
    assert_eq!(out.output(), Some(&json!("team@example.test")));
}

#[test]
fn unusable_configuration_is_refused_at_build() {
    let no_mapper = GuardedTool::builder("t", Effect::Read, "p", policy()).build();
    assert_eq!(no_mapper.unwrap_err(), ConfigError::MissingResourceMapper);
    let blank = GuardedTool::builder(" ", Effect::Read, "p", policy())
        .resource_for(to_mapper(Arc::default()))
        .build();
    assert!(matches!(blank.unwrap_err(), ConfigError::Invalid(_)));
    let long = GuardedTool::builder("t", Effect::Read, "p".repeat(257), policy())
        .resource_for(to_mapper(Arc::default()))
        .build();
    assert!(matches!(long.unwrap_err(), ConfigError::Invalid(_)));
}

#[test]
fn a_mapped_resource_that_breaks_the_proposal_rules_blocks() {
    let t = tool(Arc::default());
    let out = block_on(t.call(&json!({"to": "   "}))).unwrap();
    assert_eq!(out.receipt().reason(), ReceiptReason::InvalidProposal);
    assert_eq!(out.plan().proposal_sha256(), None);
}

//! The reference's public black-box contract: `aml-action-challenge-case/1` in,
//! `aml-action-boundary-result/1` out (see `fixtures/upstream-conformance/SOURCE.md`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use aml_core::{
    approval_fn, tool_fn, ActionBoundary, Approval, ApprovalError, LivePolicy, Policy, Sha256Digest,
    ToolError,
};
use serde_json::{json, Value};

/// The case protocol.
pub const CASE_PROTOCOL: &str = "aml-action-challenge-case/1";
/// The result protocol.
pub const RESULT_PROTOCOL: &str = "aml-action-boundary-result/1";

/// A case file that is not a valid `aml-action-challenge-case/1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCase(pub String);

impl core::fmt::Display for InvalidCase {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "invalid challenge case: {}", self.0)
    }
}

impl std::error::Error for InvalidCase {}

#[derive(Debug, Clone)]
enum ApprovalMode {
    Matching,
    Fixed(Sha256Digest),
    Missing,
    Throw,
}

#[derive(Debug, Clone)]
struct HostFixture {
    approval: ApprovalMode,
    mutate_body: Option<String>,
    remove_rules: bool,
    tool_throws: bool,
}

fn invalid(msg: impl Into<String>) -> InvalidCase {
    InvalidCase(msg.into())
}

fn parse_host(host: &Value) -> Result<HostFixture, InvalidCase> {
    let obj = host
        .as_object()
        .ok_or_else(|| invalid("host must be an object"))?;
    const KNOWN: &[&str] = &[
        "approval",
        "approval_digest_sha256",
        "mutate_proposal_body",
        "remove_policy_rule",
        "tool",
    ];
    if let Some(unknown) = obj.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(invalid(format!("unknown host field {unknown:?}")));
    }
    let approval = match obj.get("approval").and_then(Value::as_str) {
        Some("matching") => ApprovalMode::Matching,
        Some("missing") => ApprovalMode::Missing,
        Some("throw") => ApprovalMode::Throw,
        Some("fixed") => {
            let digest = obj
                .get("approval_digest_sha256")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("approval \"fixed\" needs approval_digest_sha256"))?;
            ApprovalMode::Fixed(
                digest
                    .parse()
                    .map_err(|e| invalid(format!("approval_digest_sha256: {e}")))?,
            )
        }
        other => {
            return Err(invalid(format!(
                "host.approval must be matching|fixed|missing|throw, got {other:?}"
            )))
        }
    };
    let mutate_body = match obj.get("mutate_proposal_body") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(invalid("mutate_proposal_body must be a string")),
    };
    let remove_rules = match obj.get("remove_policy_rule") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("remove_policy_rule must be a boolean")),
    };
    let tool_throws = match obj.get("tool").and_then(Value::as_str) {
        Some("return") => false,
        Some("throw") => true,
        other => return Err(invalid(format!("host.tool must be return|throw, got {other:?}"))),
    };
    Ok(HostFixture {
        approval,
        mutate_body,
        remove_rules,
        tool_throws,
    })
}

/// Runs one case document and returns the result document.
pub async fn run_case(case: &Value) -> Result<Value, InvalidCase> {
    let obj = case
        .as_object()
        .ok_or_else(|| invalid("a case must be a JSON object"))?;
    if obj.get("protocol") != Some(&json!(CASE_PROTOCOL)) {
        return Err(invalid(format!("protocol must be {CASE_PROTOCOL}")));
    }
    for key in obj.keys() {
        if !["protocol", "case_id", "proposal", "policy", "host"].contains(&key.as_str()) {
            return Err(invalid(format!("unknown field {key:?}")));
        }
    }
    if !obj.get("case_id").is_some_and(Value::is_string) {
        return Err(invalid("case_id must be a string"));
    }
    let proposal = obj
        .get("proposal")
        .ok_or_else(|| invalid("proposal is missing"))?;
    let policy = obj.get("policy").ok_or_else(|| invalid("policy is missing"))?;
    let host = parse_host(obj.get("host").ok_or_else(|| invalid("host is missing"))?)?;

    let live = LivePolicy::new(Policy::from_value(policy));
    let caller_proposal = Arc::new(Mutex::new(proposal.clone()));
    let tool_calls = Arc::new(AtomicU32::new(0));
    let executed = Arc::new(Mutex::new(Value::Null));

    let mut builder = {
        let (calls, executed, throws) = (Arc::clone(&tool_calls), Arc::clone(&executed), host.tool_throws);
        ActionBoundary::builder(live.clone()).executor(tool_fn(move |call| {
            calls.fetch_add(1, Ordering::SeqCst);
            *executed.lock().unwrap_or_else(|p| p.into_inner()) = call.proposal().to_value();
            async move {
                if throws {
                    Err(ToolError::new("simulated tool failure after entry"))
                } else {
                    Ok(json!({"simulated": true}))
                }
            }
        }))
    };
    if !matches!(host.approval, ApprovalMode::Missing) {
        let (host, live, caller) = (host.clone(), live.clone(), Arc::clone(&caller_proposal));
        builder = builder.approval(approval_fn(move |req| {
            if let Some(body) = &host.mutate_body {
                caller.lock().unwrap_or_else(|p| p.into_inner())["arguments"]["body"] = json!(body);
                // The callback's own copy: changing it cannot reach the frozen proposal.
                let mut copy = req.proposal().to_value();
                copy["arguments"]["body"] = json!(body);
            }
            if host.remove_rules {
                live.replace(Policy::empty());
            }
            let answer = match host.approval {
                ApprovalMode::Fixed(d) => Ok(Approval::approve(d)),
                ApprovalMode::Throw => Err(ApprovalError::new("simulated approval failure")),
                _ => Ok(Approval::approve(req.proposal().digest())),
            };
            async move { answer }
        }));
    }
    let boundary = builder.build();
    let planned = boundary.plan(&caller_proposal.lock().unwrap_or_else(|p| p.into_inner()));
    let plan = planned.plan().to_value();
    let outcome = boundary.dispatch(planned).await;
    let executed = executed.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(json!({
        "protocol": RESULT_PROTOCOL,
        "plan": plan,
        "receipt": outcome.receipt().to_value(),
        "tool_calls": tool_calls.load(Ordering::SeqCst),
        "executed_proposal": executed,
    }))
}

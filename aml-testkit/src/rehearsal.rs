//! The 17 documented guarded-tool cases (`aml-guarded-tool-rehearsal/2`), played through
//! any [`Harness`].
//!
//! Host configuration, as documented: tool `send_message`, effect `send`, purpose
//! `Send a status update`, resource = `arguments.to`, one exact rule for
//! `team@example.test`.

use std::sync::Arc;

use aml_core::{Effect, ExecutionStatus, GuardedTool, LivePolicy, Policy, Rule, Sha256Digest};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::caller_args::{CallerArguments, MessageArgs};
use crate::fixtures::{
    ApprovalBehavior, ClaimBehavior, DestinationMapper, FailingMapper, FixtureApproval, FixtureClaims,
    FixtureTool, RuleRef,
};
use crate::harness::{Attempt, Harness, HarnessError};
use crate::log::HostLog;

/// The report protocol.
pub const REHEARSAL_PROTOCOL: &str = "aml-guarded-tool-rehearsal/2";
/// Tool of the documented host.
pub const TOOL: &str = "send_message";
/// Purpose of the documented host.
pub const PURPOSE: &str = "Send a status update";
/// The destination the host rule names.
pub const TEAM: &str = "team@example.test";
/// A destination outside the rule.
pub const OTHER: &str = "other@example.test";
/// The documented message body.
pub const BODY: &str = "Build passed.";

/// What the `mapper_mutated` attempt says in place of a runtime error.
pub const STATICALLY_RULED_OUT: &str = "Statically ruled out: the resource mapper receives \
    &ArgumentSnapshot, so a mapper that mutates its snapshot does not compile (E0596; \
    compile_fail doctest in aml-core/src/guarded.rs). No runtime attempt exists to report.";

/// Titles and texts of one documented case.
#[derive(Debug, Clone, Deserialize)]
pub struct CaseText {
    /// Case id.
    pub id: String,
    /// Title.
    pub title: String,
    /// What changes in this case.
    pub change: String,
    /// What the host should do.
    pub host_move: String,
}

#[derive(Deserialize)]
struct Catalogue {
    cases: Vec<CaseText>,
}

/// The documented cases' texts, in order (data from seed `000_…`; see `cases/`).
pub fn case_texts() -> Vec<CaseText> {
    let catalogue: Catalogue = serde_json::from_str(include_str!("../cases/guarded-tool.json"))
        .unwrap_or(Catalogue { cases: Vec::new() });
    catalogue.cases
}

/// The host for one case: a live policy, fixture hooks and the caller's arguments.
struct Host {
    log: HostLog,
    args: CallerArguments,
    tool: Option<Arc<GuardedTool>>,
    attempts: usize,
}

fn rule_ref(policy: &LivePolicy) -> RuleRef {
    RuleRef {
        policy: policy.clone(),
        tool: TOOL.to_owned(),
        effect: Effect::Send,
        resource: TEAM.to_owned(),
    }
}

fn host(id: &str) -> Host {
    let log = HostLog::new();
    let allow = id == "host_allow";
    let policy = LivePolicy::new(
        Policy::from_rules([Rule {
            tool: TOOL.to_owned(),
            effect: Effect::Send,
            resource: TEAM.to_owned(),
            requires_approval: !allow,
            caller: None,
        }])
        .unwrap_or_else(|_| Policy::empty()),
    );
    let mut args = MessageArgs::new(TEAM, BODY);
    match id {
        "changed_destination" => args.to = OTHER.to_owned(),
        "invalid_arguments" => args.priority = Some(f64::INFINITY),
        _ => {}
    }
    let args = CallerArguments::new(args);
    let approval = match id {
        "approval_unavailable" => None,
        "approval_declined" => Some(ApprovalBehavior::Declined),
        "approval_hook_error" => Some(ApprovalBehavior::FailAfterWrite),
        "approval_mismatch" => Some(ApprovalBehavior::Fixed(Sha256Digest::of(
            b"an approval for other bytes",
        ))),
        "policy_revoked" => Some(ApprovalBehavior::RevokeRule(rule_ref(&policy))),
        "arguments_mutated" => Some(ApprovalBehavior::MutateCaller(args.clone(), OTHER.to_owned())),
        _ => Some(ApprovalBehavior::Matching),
    };
    let claims = match id {
        "claim_revoked" => ClaimBehavior::RevokeAfterClaim(rule_ref(&policy)),
        "claim_hook_unknown" => ClaimBehavior::FailAfterConsume,
        _ => ClaimBehavior::OneUse,
    };
    let tool = match id {
        "callback_unknown" | "unknown_then_replay" => FixtureTool::failing_after_write(log.clone()),
        _ => FixtureTool::returning(log.clone()),
    };
    let mut builder = GuardedTool::builder(TOOL, Effect::Send, PURPOSE, policy.clone())
        .grants(FixtureClaims::new(log.clone(), claims))
        .executor(tool);
    builder = if id == "mapper_write_error" {
        builder.resource_for(FailingMapper::new(log.clone()))
    } else {
        builder.resource_for(DestinationMapper)
    };
    if let Some(behavior) = approval {
        builder = builder.approval(FixtureApproval::new(log.clone(), behavior));
    }
    Host {
        tool: (id != "mapper_mutated")
            .then(|| builder.build().ok().map(Arc::new))
            .flatten(),
        log,
        args,
        attempts: if matches!(id, "approval_reused" | "unknown_then_replay") {
            2
        } else {
            1
        },
    }
}

fn attempt_json(attempt: Attempt, events: Vec<String>) -> Value {
    match attempt {
        Attempt::HostError(message) => json!({"adapter_error": message, "host_hook_events": events}),
        Attempt::WireRefused(message) => json!({"wire_refused": message, "host_hook_events": events}),
        Attempt::Completed { receipt, result, .. } => {
            let mut obj = Map::new();
            obj.insert("policy_decision".into(), json!(receipt.policy_decision()));
            obj.insert("proposal_sha256".into(), json!(receipt.proposal_sha256()));
            obj.insert("execution_status".into(), json!(receipt.execution_status()));
            obj.insert("reason".into(), json!(receipt.reason()));
            obj.insert("host_hook_events".into(), json!(events));
            if receipt.execution_status() == ExecutionStatus::Dispatched {
                obj.insert("result".into(), result.unwrap_or(Value::Null));
            }
            Value::Object(obj)
        }
    }
}

/// Plays one documented case through `harness` and returns its report entry.
pub async fn run_case(text: &CaseText, harness: &dyn Harness) -> Result<Value, HarnessError> {
    let host = host(&text.id);
    let destination = host.args.with(|a| a.to.clone());
    let mut attempts = Vec::new();
    match &host.tool {
        None if text.id == "mapper_mutated" => {
            attempts.push(json!({"statically_ruled_out": STATICALLY_RULED_OUT, "host_hook_events": []}));
        }
        None => {
            return Err(HarnessError(format!(
                "case {}: host configuration did not build",
                text.id
            )))
        }
        Some(tool) => {
            for _ in 0..host.attempts {
                let start = host.log.len();
                let attempt = harness.call(Arc::clone(tool), &host.args).await?;
                attempts.push(attempt_json(attempt, host.log.events_since(start)));
            }
        }
    }
    let mut case = json!({
        "id": text.id, "title": text.title, "change": text.change, "host_move": text.host_move,
        "destination": destination, "attempts": attempts,
    });
    if text.id == "arguments_mutated" {
        case["caller_destination_after_approval"] = json!(host.args.with(|a| a.to.clone()));
    }
    if let (Value::Object(case), Value::Object(counters)) = (&mut case, host.log.counters().to_value()) {
        case.extend(counters);
    }
    Ok(case)
}

/// Plays all 17 cases through `harness` and returns the report.
pub async fn rehearse(harness: &dyn Harness) -> Result<Value, HarnessError> {
    let mut cases = Vec::new();
    for text in case_texts() {
        cases.push(run_case(&text, harness).await?);
    }
    Ok(json!({
        "protocol": REHEARSAL_PROTOCOL,
        "provenance": format!("aml-testkit {} (Rust), {} adapter", env!("CARGO_PKG_VERSION"), harness.adapter()),
        "scope": "Fixture hooks only: no message was sent, no person approved anything, no provider was called.",
        "cases": cases,
    }))
}

//! The dispatch state machine, in the exact order of the protocol (DESIGN.md §4).

use std::sync::Arc;

use serde_json::Value;

use crate::hooks::{
    ApprovalHook, ApprovalRequest, ClaimStatus, ClaimedGrant, GrantRef, GrantStore, InMemoryGrantStore,
    ToolCall, ToolExecutor,
};
use crate::plan::{plan_frozen, Plan, Planned};
use crate::proposal::FrozenProposal;
use crate::reason::{blocking_reason, ReceiptReason};
use crate::receipt::Receipt;
use crate::unwind::guarded;
use crate::Deadline;
use crate::{Decision, PolicySource};

/// The boundary: host policy plus the host's hooks.
///
/// ```
/// use std::sync::Arc;
/// use aml_core::{tool_fn, ActionBoundary, ExecutionStatus, Policy, ReceiptReason};
/// use serde_json::json;
///
/// # tokio_test_block(async {
/// let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
///     {"tool": "fetch_record", "effect": "read", "resource": "record:42", "requires_approval": false}
/// ]}));
/// let boundary = ActionBoundary::builder(Arc::new(policy))
///     .executor(tool_fn(|call| async move { Ok(json!({"id": call.arguments()["id"]})) }))
///     .build();
/// let outcome = boundary.run(&json!({
///     "protocol": "aml-proposed-action/1", "tool": "fetch_record", "effect": "read",
///     "resource": "record:42", "purpose": "Inspect record", "arguments": {"id": 42}
/// })).await;
/// assert_eq!(outcome.receipt().execution_status(), ExecutionStatus::Dispatched);
/// assert_eq!(outcome.receipt().reason(), ReceiptReason::HostDispatchReturned);
/// assert_eq!(outcome.output(), Some(&json!({"id": 42})));
/// # });
/// # fn tokio_test_block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ActionBoundary {
    policy: Arc<dyn PolicySource>,
    approval: Option<Arc<dyn ApprovalHook>>,
    grants: Option<Arc<dyn GrantStore>>,
    executor: Option<Arc<dyn ToolExecutor>>,
}

/// Builds an [`ActionBoundary`]. The grant store defaults to a fresh
/// [`InMemoryGrantStore`]; [`replayable_approvals`](Self::replayable_approvals) opts out.
#[derive(Debug)]
pub struct ActionBoundaryBuilder {
    boundary: ActionBoundary,
}

impl ActionBoundaryBuilder {
    /// The hook that asks for approvals. Without one, approval-required rules block with
    /// `approval_unavailable`.
    pub fn approval(mut self, hook: impl ApprovalHook + 'static) -> Self {
        self.boundary.approval = Some(Arc::new(hook));
        self
    }
    /// Like [`approval`](Self::approval), for a shared hook.
    pub fn approval_arc(mut self, hook: Arc<dyn ApprovalHook>) -> Self {
        self.boundary.approval = Some(hook);
        self
    }
    /// The one-use grant store.
    pub fn grants(mut self, store: impl GrantStore + 'static) -> Self {
        self.boundary.grants = Some(Arc::new(store));
        self
    }
    /// Like [`grants`](Self::grants), for a shared store.
    pub fn grants_arc(mut self, store: Arc<dyn GrantStore>) -> Self {
        self.boundary.grants = Some(store);
        self
    }
    /// Runs without a grant store: an approval can then be replayed. Explicit on purpose.
    pub fn replayable_approvals(mut self) -> Self {
        self.boundary.grants = None;
        self
    }
    /// The tool. Without one, every call blocks with `missing_host_dispatch`.
    pub fn executor(mut self, tool: impl ToolExecutor + 'static) -> Self {
        self.boundary.executor = Some(Arc::new(tool));
        self
    }
    /// Like [`executor`](Self::executor), for a shared tool.
    pub fn executor_arc(mut self, tool: Arc<dyn ToolExecutor>) -> Self {
        self.boundary.executor = Some(tool);
        self
    }
    /// The boundary.
    pub fn build(self) -> ActionBoundary {
        self.boundary
    }
}

/// What one dispatch did: the plan, the receipt, and the tool's output when it returned.
#[derive(Debug, Clone)]
pub struct DispatchOutcome {
    plan: Plan,
    receipt: Receipt,
    output: Option<Value>,
    detail: Option<String>,
    deadline_passed: bool,
}

impl DispatchOutcome {
    /// The plan computed before any hook ran.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    /// The receipt.
    pub fn receipt(&self) -> &Receipt {
        &self.receipt
    }
    /// The tool's result, when the receipt is `dispatched`.
    pub fn output(&self) -> Option<&Value> {
        self.output.as_ref()
    }
    /// Takes the tool's result.
    pub fn into_output(self) -> Option<Value> {
        self.output
    }
    /// For the host's log: the hook or tool error behind a block or an `unknown`.
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }
    /// Whether the call was blocked because the caller's [`Deadline`] passed.
    pub fn deadline_passed(&self) -> bool {
        self.deadline_passed
    }

    pub(crate) fn ended(plan: Plan, reason: ReceiptReason, detail: Option<String>) -> Self {
        let receipt = Receipt::new(plan.proposal_sha256(), plan.decision(), reason);
        DispatchOutcome {
            plan,
            receipt,
            output: None,
            detail,
            deadline_passed: false,
        }
    }
}

impl ActionBoundary {
    /// Starts a builder over a host-owned policy source.
    pub fn builder(policy: impl PolicySource + 'static) -> ActionBoundaryBuilder {
        ActionBoundaryBuilder {
            boundary: ActionBoundary {
                policy: Arc::new(policy),
                approval: None,
                grants: Some(Arc::new(InMemoryGrantStore::new())),
                executor: None,
            },
        }
    }

    /// The policy source.
    pub fn policy(&self) -> &Arc<dyn PolicySource> {
        &self.policy
    }

    /// Validates, freezes and plans a proposal object against the current policy.
    pub fn plan(&self, proposal: &Value) -> Planned {
        crate::plan::plan(proposal, &self.policy.current())
    }

    /// Plans an already frozen proposal against the current policy.
    pub fn plan_frozen(&self, proposal: FrozenProposal) -> Planned {
        plan_frozen(proposal, &self.policy.current())
    }

    /// Plans and dispatches a proposal object.
    pub async fn run(&self, proposal: &Value) -> DispatchOutcome {
        self.dispatch(self.plan(proposal)).await
    }

    /// Carries a plan through approval, the one-use claim and the tool, in protocol order.
    pub async fn dispatch(&self, planned: Planned) -> DispatchOutcome {
        self.dispatch_until(planned, None).await
    }

    /// Like [`dispatch`](Self::dispatch), waiting for approval only until `deadline`.
    pub async fn dispatch_until(&self, planned: Planned, mut deadline: Option<Deadline>) -> DispatchOutcome {
        let Planned { plan, proposal, .. } = planned;
        let proposal = match (blocking_reason(plan.reason()), proposal) {
            (None, Some(p)) => p,
            (Some(reason), _) => return DispatchOutcome::ended(plan, reason, None),
            (None, None) => return DispatchOutcome::ended(plan, ReceiptReason::InvalidProposal, None),
        };
        let Some(executor) = &self.executor else {
            return DispatchOutcome::ended(plan, ReceiptReason::MissingHostDispatch, None);
        };
        let grant = match plan.decision() {
            Decision::Allow => None,
            Decision::RequiresApproval => match self.authorize(&plan, &proposal, deadline.as_mut()).await {
                Ok(grant) => grant,
                Err(Stop::Blocked(reason, detail)) => return DispatchOutcome::ended(plan, reason, detail),
                Err(Stop::DeadlinePassed(detail)) => {
                    let mut outcome =
                        DispatchOutcome::ended(plan, ReceiptReason::ApprovalError, Some(detail.into()));
                    outcome.deadline_passed = true;
                    return outcome;
                }
            },
            // Every deny carries a blocking reason, handled above; stay closed regardless.
            _ => return DispatchOutcome::ended(plan, ReceiptReason::NoExactRule, None),
        };
        let call = ToolCall {
            arguments: proposal.arguments(),
            proposal,
            grant,
        };
        match guarded(|| executor.execute(call)).await {
            Ok(Ok(output)) => DispatchOutcome {
                receipt: Receipt::new(
                    plan.proposal_sha256(),
                    plan.decision(),
                    ReceiptReason::HostDispatchReturned,
                ),
                plan,
                output: Some(output),
                detail: None,
                deadline_passed: false,
            },
            Ok(Err(e)) => DispatchOutcome::ended(plan, ReceiptReason::HostDispatchError, Some(e.to_string())),
            Err(panic) => DispatchOutcome::ended(plan, ReceiptReason::HostDispatchError, Some(panic)),
        }
    }

    /// Approval, policy re-check, one-use claim, policy re-check.
    async fn authorize(
        &self,
        plan: &Plan,
        proposal: &FrozenProposal,
        deadline: Option<&mut Deadline>,
    ) -> Result<Option<ClaimedGrant>, Stop> {
        let hook = self
            .approval
            .as_ref()
            .ok_or(Stop::Blocked(ReceiptReason::ApprovalUnavailable, None))?;
        let request = ApprovalRequest {
            proposal: proposal.clone(),
            plan: plan.clone(),
        };
        let pending = guarded(|| hook.request_approval(request));
        let answer = match deadline {
            Some(deadline) => {
                let answer = deadline.bound(pending).await.ok_or(Stop::DeadlinePassed(
                    "the deadline passed while approval was pending",
                ))?;
                // An approval that arrives after the deadline claims nothing.
                if deadline.passed() {
                    return Err(Stop::DeadlinePassed(
                        "the deadline passed before the one-use claim",
                    ));
                }
                answer
            }
            None => pending.await,
        };
        let approval = match answer {
            Ok(Ok(approval)) => approval,
            Ok(Err(e)) => return Err(Stop::Blocked(ReceiptReason::ApprovalError, Some(e.to_string()))),
            Err(panic) => return Err(Stop::Blocked(ReceiptReason::ApprovalError, Some(panic))),
        };
        if !approval.approved || approval.proposal_sha256 != proposal.digest() {
            return Err(Stop::Blocked(ReceiptReason::ApprovalMissingOrMismatched, None));
        }
        self.recheck(plan, proposal)?;
        let Some(store) = &self.grants else {
            return Ok(None);
        };
        let grant = GrantRef {
            proposal_sha256: proposal.digest(),
            approval_id: approval.approval_id,
        };
        let claimed = match guarded(|| store.claim(&grant)).await {
            Ok(Ok(ClaimStatus::Claimed)) => ClaimedGrant::new(grant),
            Ok(Ok(_)) => return Err(Stop::Blocked(ReceiptReason::ApprovalReusedOrExpired, None)),
            Ok(Err(e)) => {
                return Err(Stop::Blocked(
                    ReceiptReason::ApprovalConsumeError,
                    Some(e.to_string()),
                ))
            }
            Err(panic) => return Err(Stop::Blocked(ReceiptReason::ApprovalConsumeError, Some(panic))),
        };
        // The grant stays spent if the policy changed meanwhile.
        self.recheck(plan, proposal)?;
        Ok(Some(claimed))
    }

    fn recheck(&self, plan: &Plan, proposal: &FrozenProposal) -> Result<(), Stop> {
        let now = self
            .policy
            .current()
            .decide(proposal.tool(), proposal.effect(), proposal.resource());
        if now == (plan.decision(), plan.reason()) {
            Ok(())
        } else {
            Err(Stop::Blocked(
                ReceiptReason::PolicyChanged,
                Some(format!("policy now says {}/{}", now.0, now.1)),
            ))
        }
    }
}

/// Why authorization stopped.
enum Stop {
    Blocked(ReceiptReason, Option<String>),
    DeadlinePassed(&'static str),
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;

//! The dispatch state machine, in the exact order of the protocol (docs/PROTOCOL.md, "Dispatch order and receipt reasons").

use std::sync::Arc;

use serde_json::Value;

use crate::deadline::{Interrupted, Watch};
use crate::hooks::{
    ApprovalHook, ApprovalRequest, ClaimStatus, ClaimedGrant, GrantRef, GrantStore, InMemoryGrantStore,
    ToolCall, ToolExecutor,
};
use crate::plan::{plan_frozen, Plan, Planned, WouldBlock};
use crate::proposal::FrozenProposal;
use crate::reason::{blocking_reason, ReceiptReason};
use crate::receipt::Receipt;
use crate::record::{NoSink, ReceiptSink, ResultSummary};
use crate::unwind::{guarded, with_causes};
use crate::usage::{CallFacts, Counted, Facts, UsageLedger};
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
    sink: Arc<dyn ReceiptSink>,
    shadow: bool,
    usage: Option<Arc<dyn UsageLedger>>,
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
    /// Where the front doors on this boundary ([`crate::GuardedTool`], `ToolGate`)
    /// send one [`crate::CallRecord`] per call. Without one, records are dropped.
    pub fn sink(mut self, sink: impl ReceiptSink + 'static) -> Self {
        self.boundary.sink = Arc::new(sink);
        self
    }
    /// Like [`sink`](Self::sink), for a shared sink.
    pub fn sink_arc(mut self, sink: Arc<dyn ReceiptSink>) -> Self {
        self.boundary.sink = sink;
        self
    }
    /// Shadow mode, for rolling a policy out: every call is decided as usual, and one the
    /// policy would block or send for approval is dispatched anyway, without approval, under
    /// a plan with reason `shadow_mode`; its [`DispatchOutcome::would_block`] and call record
    /// (`would_block`) say what the policy decided. Calls the proposal rules refuse
    /// (`invalid_proposal`, `proposal_too_large`) are still blocked. Nothing is enforced:
    /// a host that turns this on should say so loudly.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use aml_core::{tool_fn, ActionBoundary, Decision, ExecutionStatus, Policy, PlanReason};
    /// let boundary = ActionBoundary::builder(Arc::new(Policy::empty()))
    ///     .executor(tool_fn(|_| async { Ok(serde_json::json!("ran")) }))
    ///     .shadow()
    ///     .build();
    /// let proposal = serde_json::json!({"protocol": "aml-proposed-action/1", "tool": "t",
    ///     "effect": "read", "resource": "r", "purpose": "p", "arguments": {}});
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// let outcome = rt.block_on(boundary.run(&proposal));
    /// assert_eq!(outcome.receipt().execution_status(), ExecutionStatus::Dispatched);
    /// assert_eq!(outcome.plan().reason(), PlanReason::ShadowMode);
    /// let would = outcome.would_block().unwrap();
    /// assert_eq!((would.decision, would.reason), (Decision::Deny, PlanReason::NoExactRule));
    /// ```
    pub fn shadow(mut self) -> Self {
        self.boundary.shadow = true;
        self
    }
    /// Where each caller's dispatched calls are counted, for policies that read
    /// `context.usage` (budgets, docs/POLICY.md). Without one, such a policy fails to
    /// evaluate and denies (`policy_error`).
    pub fn usage(mut self, ledger: Arc<dyn UsageLedger>) -> Self {
        self.boundary.usage = Some(ledger);
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
    /// The output's digest and size, computed once for whoever asks first (the call record,
    /// an adapter's verdict).
    output_summary: std::sync::OnceLock<ResultSummary>,
    detail: Option<String>,
    deadline_passed: bool,
    caller_gone: bool,
    would_block: Option<WouldBlock>,
    /// Who called and the usage the final plan was decided on, and the plan's determining
    /// policies when the boundary planned again on the usage; `None` for a `local` call
    /// planned once (most calls: one word to move).
    decided: Option<Box<Decided>>,
}

/// What a plan made by the boundary was decided on.
#[derive(Debug, Clone)]
struct Decided {
    facts: CallFacts,
    replanned: Option<Vec<String>>,
}

impl DispatchOutcome {
    /// The caller and usage the plan was decided on.
    pub fn facts(&self) -> &CallFacts {
        self.decided.as_ref().map_or(Facts::plain(), |d| &d.facts)
    }
    /// The determining Cedar policies of a plan made again with the caller's usage.
    pub(crate) fn replanned_policies(&self) -> Option<&[String]> {
        self.decided.as_ref()?.replanned.as_deref()
    }
    fn decided_on(mut self, facts: Facts, replanned: Option<Vec<String>>) -> Self {
        self.decided = (!facts.is_plain() || replanned.is_some()).then(|| {
            Box::new(Decided {
                facts: facts.into_inner(),
                replanned,
            })
        });
        self
    }
    /// In shadow mode, what the policy decided for a call it let through.
    pub fn would_block(&self) -> Option<&WouldBlock> {
        self.would_block.as_ref()
    }
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
    /// The digest and size of [`output`](Self::output) as compact JSON
    /// ([`ResultSummary::of_json`]), computed on the first call only.
    pub fn output_summary(&self) -> Option<ResultSummary> {
        let output = self.output.as_ref()?;
        Some(*self.output_summary.get_or_init(|| ResultSummary::of_json(output)))
    }
    /// For the host's log: the hook or tool error behind a block or an `unknown`.
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }
    /// Whether the call was blocked because the caller's [`Deadline`] passed.
    pub fn deadline_passed(&self) -> bool {
        self.deadline_passed
    }
    /// Whether the call was blocked because the caller went away before the claim.
    pub fn caller_gone(&self) -> bool {
        self.caller_gone
    }

    pub(crate) fn ended(plan: Plan, reason: ReceiptReason, detail: Option<String>) -> Self {
        let receipt = Receipt::new(plan.proposal_sha256(), plan.decision(), reason);
        DispatchOutcome {
            plan,
            receipt,
            output: None,
            output_summary: std::sync::OnceLock::new(),
            detail,
            deadline_passed: false,
            caller_gone: false,
            would_block: None,
            decided: None,
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
                sink: Arc::new(NoSink),
                shadow: false,
                usage: None,
            },
        }
    }

    /// The policy source.
    pub fn policy(&self) -> &Arc<dyn PolicySource> {
        &self.policy
    }

    /// Whether the boundary runs in shadow mode ([`ActionBoundaryBuilder::shadow`]).
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// In shadow mode, a planned call the policy would block or send for approval goes on
    /// under a `shadow_mode` plan; what the policy decided comes back beside it.
    fn shadowed(&self, mut planned: Planned) -> (Planned, Option<WouldBlock>) {
        let decision = planned.plan.decision();
        match (&planned.proposal, self.shadow && decision != Decision::Allow) {
            (Some(proposal), true) if planned.refusal.is_none() => {
                let would = WouldBlock {
                    decision,
                    reason: planned.plan.reason(),
                };
                planned.plan = Plan::shadowing(proposal.digest());
                (planned, Some(would))
            }
            _ => (planned, None),
        }
    }

    /// The one-use grant store (`None`: `replayable_approvals`).
    #[cfg(feature = "catalog")]
    pub(crate) fn grants(&self) -> Option<&Arc<dyn GrantStore>> {
        self.grants.as_ref()
    }

    /// The host's own tool, if it registered one.
    pub fn executor(&self) -> Option<&Arc<dyn ToolExecutor>> {
        self.executor.as_ref()
    }

    /// Where the front doors built on this boundary send their records.
    pub fn sink(&self) -> &Arc<dyn ReceiptSink> {
        &self.sink
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

    /// Carries a plan through approval, the one-use claim and the host's tool, in protocol
    /// order. A tool call with a deadline or a caller-gone signal goes through
    /// `ToolGate::call` (feature `catalog`, ADR 019).
    pub async fn dispatch(&self, planned: Planned) -> DispatchOutcome {
        self.dispatch_until(planned, None).await
    }

    /// Like [`dispatch`](Self::dispatch), waiting for approval only until `deadline`.
    pub(crate) async fn dispatch_until(
        &self,
        planned: Planned,
        deadline: Option<Deadline>,
    ) -> DispatchOutcome {
        let executor = self.executor.clone();
        self.dispatch_to(
            planned,
            executor.as_deref(),
            Watch::until(deadline),
            &Progress::default(),
        )
        .await
    }

    pub(crate) async fn dispatch_to(
        &self,
        planned: Planned,
        executor: Option<&dyn ToolExecutor>,
        watch: Watch,
        progress: &Progress,
    ) -> DispatchOutcome {
        let Some(executor) = executor else {
            let (plan, reason) = match blocked_by_plan(planned) {
                Ok((plan, _)) => (plan, ReceiptReason::MissingHostDispatch),
                Err(blocked) => blocked,
            };
            return DispatchOutcome::ended(plan, reason, None);
        };
        match self.authorize_tracked(planned, watch, progress).await {
            Authorization::Authorized(call) => call.execute_tracked(executor, progress).await,
            Authorization::Ended(outcome) => outcome,
        }
    }

    pub(crate) async fn authorize_tracked(
        &self,
        planned: Planned,
        watch: Watch,
        progress: &Progress,
    ) -> Authorization {
        match self.authorize_at_once(planned) {
            Ok(decided) => decided,
            // Boxed: only approval and usage wait on hooks, so a call that waits on none
            // carries (and copies at every await above it) none of their state.
            Err(planned) => Box::pin(self.authorize_waiting(planned, watch, progress)).await,
        }
    }

    /// Decides a call that waits on no hook: no usage to read or count, and a plan that
    /// allows or blocks it (shadow mode allows). Else gives the plan back.
    fn authorize_at_once(&self, mut planned: Planned) -> Result<Authorization, Planned> {
        let approval = planned.plan.decision() == Decision::RequiresApproval && !self.shadow;
        let counted = self.usage.is_some() && planned.facts.get().usage.is_some();
        if approval || counted || self.usage_ledger_for(&planned).is_some() {
            return Err(planned);
        }
        let facts = std::mem::take(&mut planned.facts);
        let (shadowed, would_block) = self.shadowed(planned);
        let ended = |plan, reason| {
            let outcome = DispatchOutcome::ended(plan, reason, None);
            Ok(Authorization::Ended(outcome.decided_on(facts.clone(), None)))
        };
        let (plan, proposal) = match blocked_by_plan(shadowed) {
            Ok((plan, proposal)) if plan.decision() == Decision::Allow => (plan, proposal),
            // Every deny carries a blocking reason; stay closed regardless.
            Ok((plan, _)) => return ended(plan, ReceiptReason::NoExactRule),
            Err((plan, reason)) => return ended(plan, reason),
        };
        Ok(Authorization::Authorized(Authorized {
            plan,
            proposal,
            grant: None,
            would_block,
            facts,
            replanned: None,
        }))
    }

    async fn authorize_waiting(
        &self,
        mut planned: Planned,
        mut watch: Watch,
        progress: &Progress,
    ) -> Authorization {
        let mut replanned = None;
        for _ in 0..MAX_USAGE_ROUNDS {
            if let Some(ledger) = self.usage_ledger_for(&planned) {
                if let Some(proposal) = planned.proposal.take() {
                    // Boxed: a call without a budget carries none of this in its future.
                    let again = Box::pin(self.plan_with_usage(ledger, proposal, planned.facts.into_inner()));
                    planned = match again.await {
                        Ok(again) => again,
                        Err(outcome) => return Authorization::Ended(*outcome),
                    };
                    replanned = Some(planned.policies.clone());
                }
            }
            let facts = std::mem::take(&mut planned.facts);
            let policies = std::mem::take(&mut planned.policies);
            let ended = |outcome: DispatchOutcome| {
                Authorization::Ended(outcome.decided_on(facts.clone(), replanned.clone()))
            };
            let (shadowed, would_block) = self.shadowed(planned);
            let (plan, proposal) = match blocked_by_plan(shadowed) {
                Ok(parts) => parts,
                Err((plan, reason)) => return ended(DispatchOutcome::ended(plan, reason, None)),
            };
            let grant = match plan.decision() {
                Decision::Allow => None,
                Decision::RequiresApproval => {
                    // Boxed: an allowed call's future carries none of the approval's state.
                    let approval =
                        Box::pin(self.approve_and_claim(&plan, &proposal, facts.get(), &mut watch, progress));
                    match approval.await {
                        Ok(grant) => grant,
                        Err(Stop::Blocked(reason, detail)) => {
                            return ended(DispatchOutcome::ended(plan, reason, detail))
                        }
                        Err(Stop::Interrupted(why, detail)) => {
                            tracing::debug!(target: "aml.dispatch", ?why, "the call was cut short before the claim");
                            let mut outcome = DispatchOutcome::ended(
                                plan,
                                ReceiptReason::ApprovalError,
                                Some(detail.into()),
                            );
                            outcome.deadline_passed = why == Interrupted::DeadlinePassed;
                            outcome.caller_gone = why == Interrupted::CallerGone;
                            return ended(outcome);
                        }
                    }
                }
                // Every deny carries a blocking reason, handled above; stay closed regardless.
                _ => return ended(DispatchOutcome::ended(plan, ReceiptReason::NoExactRule, None)),
            };
            let counted = if self.usage.is_some() && facts.get().usage.is_some() {
                Box::pin(self.count_usage(&plan, &proposal, facts.get(), grant.is_some())).await
            } else {
                Ok(None)
            };
            let counted = match counted {
                Ok(counted) => counted,
                Err(Recount::Replan) => {
                    // Nothing was claimed: decide again on the usage now.
                    planned = Planned {
                        plan,
                        proposal: Some(proposal),
                        refusal: None,
                        policies,
                        facts,
                    };
                    continue;
                }
                Err(Recount::Blocked(reason, detail)) => {
                    return ended(DispatchOutcome::ended(plan, reason, Some(detail)))
                }
            };
            // The record says the usage the call was counted on.
            let facts = match counted {
                Some(usage) => Facts::new(facts.into_inner().with_usage(usage)),
                None => facts,
            };
            return Authorization::Authorized(Authorized {
                plan,
                proposal,
                grant,
                would_block,
                facts,
                replanned,
            });
        }
        let plan = planned.plan;
        let detail = "the caller's usage kept changing while the call was decided".to_owned();
        Authorization::Ended(
            DispatchOutcome::ended(plan, ReceiptReason::PolicyError, Some(detail))
                .decided_on(planned.facts, replanned),
        )
    }

    /// The ledger to read usage from, when the policy reads it and the plan is the policy's.
    fn usage_ledger_for(&self, planned: &Planned) -> Option<&Arc<dyn UsageLedger>> {
        let ledger = self.usage.as_ref()?;
        let decidable = planned.proposal.is_some() && planned.refusal.is_none();
        (decidable && self.policy.current().reads_usage()).then_some(ledger)
    }

    /// Plans again with the caller's usage of the tool now; a ledger that fails denies.
    async fn plan_with_usage(
        &self,
        ledger: &Arc<dyn UsageLedger>,
        proposal: FrozenProposal,
        mut facts: CallFacts,
    ) -> Result<Planned, Box<DispatchOutcome>> {
        let read = guarded(|| ledger.usage(&facts.caller, proposal.tool())).await;
        let usage = match read {
            Ok(Ok(usage)) => usage,
            Ok(Err(e)) => return Err(self.usage_unreadable(proposal, facts, with_causes(&e))),
            Err(panic) => return Err(self.usage_unreadable(proposal, facts, panic)),
        };
        facts.usage = Some(usage);
        tracing::debug!(target: "aml.dispatch", ?usage, "usage read");
        Ok(crate::plan::plan_frozen_for(
            proposal,
            &self.policy.current(),
            facts,
        ))
    }

    /// A ledger that cannot say the usage denies the call (`policy_error`): fail closed.
    fn usage_unreadable(
        &self,
        proposal: FrozenProposal,
        facts: CallFacts,
        why: String,
    ) -> Box<DispatchOutcome> {
        let denied = crate::plan::denied_for(proposal, crate::PlanReason::PolicyError, facts);
        let detail = format!("the caller's usage could not be read: {why}");
        Box::new(
            DispatchOutcome::ended(denied.plan, ReceiptReason::PolicyError, Some(detail))
                .decided_on(denied.facts, Some(Vec::new())),
        )
    }

    /// Counts the call in the usage ledger, if its usage is still what the plan was decided
    /// on (one atomic step in the ledger). If it changed, the policy decides again: the same
    /// decision counts on the new usage; another, for a call that claimed nothing, plans the
    /// call again; for a claimed call (approved), only a deny stops it (the grant stays spent).
    async fn count_usage(
        &self,
        plan: &Plan,
        proposal: &FrozenProposal,
        facts: &CallFacts,
        claimed: bool,
    ) -> Result<Option<crate::Usage>, Recount> {
        let (Some(ledger), Some(mut seen)) = (&self.usage, facts.usage) else {
            return Ok(None);
        };
        for _ in 0..MAX_USAGE_ROUNDS {
            let counted = guarded(|| ledger.count_if(&facts.caller, proposal.tool(), seen)).await;
            let now = match counted {
                Ok(Ok(Counted::Counted)) => return Ok(Some(seen)),
                Ok(Ok(Counted::Changed(now))) => now,
                Ok(Err(e)) => {
                    let detail = format!("the call could not be counted: {}", with_causes(&e));
                    return Err(Recount::Blocked(ReceiptReason::PolicyError, detail));
                }
                Err(panic) => {
                    let detail = format!("the call could not be counted: {panic}");
                    return Err(Recount::Blocked(ReceiptReason::PolicyError, detail));
                }
            };
            let again = facts.clone().with_usage(now);
            let decided = self.policy.current().evaluate_for(proposal, &again);
            let same = (decided.decision, decided.reason) == (plan.decision(), plan.reason());
            tracing::debug!(target: "aml.dispatch", ?now, same, "usage changed before the call was counted");
            if self.shadow || same || (claimed && decided.decision != Decision::Deny) {
                seen = now;
                continue;
            }
            if !claimed {
                return Err(Recount::Replan);
            }
            return Err(Recount::Blocked(
                ReceiptReason::PolicyChanged,
                format!(
                    "with the caller's usage now ({}/{}/{} in the last minute/hour/day) the policy says {}/{}",
                    now.minute, now.hour, now.day, decided.decision, decided.reason
                ),
            ));
        }
        Err(Recount::Blocked(
            ReceiptReason::PolicyError,
            "the caller's usage kept changing while the call was counted".to_owned(),
        ))
    }

    /// Approval, policy re-check, one-use claim, policy re-check.
    async fn approve_and_claim(
        &self,
        plan: &Plan,
        proposal: &FrozenProposal,
        facts: &CallFacts,
        watch: &mut Watch,
        progress: &Progress,
    ) -> Result<Option<ClaimedGrant>, Stop> {
        let hook = self
            .approval
            .as_ref()
            .ok_or(Stop::Blocked(ReceiptReason::ApprovalUnavailable, None))?;
        let request = ApprovalRequest {
            proposal: proposal.clone(),
            plan: plan.clone(),
            facts: facts.clone(),
            deadline: watch.deadline.as_ref().map(crate::Deadline::at),
        };
        progress.set(Stage::Approval);
        tracing::debug!(target: "aml.dispatch", "approval requested");
        let pending = guarded(|| hook.request_approval(request));
        let answer = watch.bound(pending).await.map_err(|why| {
            let detail = match why {
                Interrupted::DeadlinePassed => "the deadline passed while approval was pending",
                Interrupted::CallerGone => "the caller went away while approval was pending",
            };
            Stop::Interrupted(why, detail)
        })?;
        // An approval that arrives after the deadline, or after the caller left, claims nothing.
        if let Some(why) = watch.interrupted() {
            let detail = match why {
                Interrupted::DeadlinePassed => "the deadline passed before the one-use claim",
                Interrupted::CallerGone => "the caller went away before the one-use claim",
            };
            return Err(Stop::Interrupted(why, detail));
        }
        let approval = match answer {
            Ok(Ok(approval)) => approval,
            Ok(Err(e)) => return Err(Stop::Blocked(ReceiptReason::ApprovalError, Some(with_causes(&e)))),
            Err(panic) => return Err(Stop::Blocked(ReceiptReason::ApprovalError, Some(panic))),
        };
        let matches = approval.approved && approval.proposal_sha256 == proposal.digest();
        tracing::debug!(target: "aml.dispatch", approved = approval.approved, matches, "approval answered");
        if !matches {
            return Err(Stop::Blocked(ReceiptReason::ApprovalMissingOrMismatched, None));
        }
        self.recheck(plan, proposal, facts, "after approval")?;
        let Some(store) = &self.grants else {
            return Ok(None);
        };
        let grant = GrantRef {
            proposal_sha256: proposal.digest(),
            approval_id: approval.approval_id,
        };
        progress.set(Stage::Claim);
        let claim = guarded(|| store.claim(&grant)).await;
        tracing::debug!(target: "aml.dispatch", claim = ?claim, "one-use claim");
        let claimed = match claim {
            Ok(Ok(ClaimStatus::Claimed)) => ClaimedGrant::new(grant),
            Ok(Ok(_)) => return Err(Stop::Blocked(ReceiptReason::ApprovalReusedOrExpired, None)),
            Ok(Err(e)) => {
                return Err(Stop::Blocked(
                    ReceiptReason::ApprovalConsumeError,
                    Some(with_causes(&e)),
                ))
            }
            Err(panic) => return Err(Stop::Blocked(ReceiptReason::ApprovalConsumeError, Some(panic))),
        };
        progress.set(Stage::Claimed);
        // The grant stays spent if the policy changed meanwhile.
        self.recheck(plan, proposal, facts, "after the claim")?;
        Ok(Some(claimed))
    }

    /// Decides again on the plan's facts: a re-check sees policy changes; usage that changed
    /// meanwhile is [`count_usage`](Self::count_usage)'s.
    fn recheck(
        &self,
        plan: &Plan,
        proposal: &FrozenProposal,
        facts: &CallFacts,
        when: &'static str,
    ) -> Result<(), Stop> {
        let decided = self.policy.current().evaluate_for(proposal, facts);
        let now = (decided.decision, decided.reason);
        let unchanged = now == (plan.decision(), plan.reason());
        tracing::debug!(target: "aml.dispatch", when, unchanged, "policy re-checked");
        if unchanged {
            Ok(())
        } else {
            Err(Stop::Blocked(
                ReceiptReason::PolicyChanged,
                Some(format!("policy now says {}/{}", now.0, now.1)),
            ))
        }
    }
}

/// What [`ActionBoundary::authorize`] ended with.
#[derive(Debug)]
pub(crate) enum Authorization {
    /// Approved (where the rule requires it), claimed, re-checked: ready to run once.
    Authorized(Authorized),
    /// Blocked before the tool: the outcome says why.
    Ended(DispatchOutcome),
}

/// A call that passed every check and spent its one-use grant. Not `Clone`: it runs once.
#[derive(Debug)]
pub(crate) struct Authorized {
    plan: Plan,
    proposal: FrozenProposal,
    grant: Option<ClaimedGrant>,
    would_block: Option<WouldBlock>,
    facts: Facts,
    replanned: Option<Vec<String>>,
}

impl Authorized {
    /// The plan.
    #[cfg(feature = "catalog")]
    pub(crate) fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Enters the tool once with the frozen arguments. `Err` or a panic after entry is
    /// `unknown`, never retried.
    pub(crate) async fn execute_tracked(
        self,
        executor: &dyn ToolExecutor,
        progress: &Progress,
    ) -> DispatchOutcome {
        let Authorized {
            plan,
            proposal,
            grant,
            would_block,
            facts,
            replanned,
        } = self;
        let call = ToolCall {
            arguments: std::sync::OnceLock::new(),
            proposal,
            grant,
        };
        progress.set(Stage::Tool);
        tracing::debug!(target: "aml.dispatch", "tool entered");
        let mut outcome = match guarded(|| executor.execute(call)).await {
            Ok(Ok(output)) => DispatchOutcome {
                receipt: Receipt::new(
                    plan.proposal_sha256(),
                    plan.decision(),
                    ReceiptReason::HostDispatchReturned,
                ),
                plan,
                output: Some(output),
                output_summary: std::sync::OnceLock::new(),
                detail: None,
                deadline_passed: false,
                caller_gone: false,
                would_block: None,
                decided: None,
            },
            Ok(Err(e)) => {
                let reason = match e.entered() {
                    true => ReceiptReason::HostDispatchError,
                    false => ReceiptReason::HostDispatchNotEntered,
                };
                DispatchOutcome::ended(plan, reason, Some(with_causes(&e)))
            }
            Err(panic) => DispatchOutcome::ended(plan, ReceiptReason::HostDispatchError, Some(panic)),
        };
        outcome.would_block = would_block;
        outcome.decided_on(facts, replanned)
    }
}

/// The plan's own blocking reason, or the plan and proposal to go on with.
fn blocked_by_plan(planned: Planned) -> Result<(Plan, FrozenProposal), (Plan, ReceiptReason)> {
    let Planned { plan, proposal, .. } = planned;
    match (blocking_reason(plan.reason()), proposal) {
        (None, Some(p)) => Ok((plan, p)),
        (Some(reason), _) => Err((plan, reason)),
        (None, None) => Err((plan, ReceiptReason::InvalidProposal)),
    }
}

/// How far a call got, for the record of a call whose caller went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stage {
    Planned = 0,
    Approval = 1,
    Claim = 2,
    Claimed = 3,
    Tool = 4,
}

/// A shared cell holding the [`Stage`] a call has reached.
#[derive(Debug, Default)]
pub(crate) struct Progress(std::sync::atomic::AtomicU8);

impl Progress {
    fn set(&self, stage: Stage) {
        self.0.store(stage as u8, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn stage(&self) -> Stage {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            1 => Stage::Approval,
            2 => Stage::Claim,
            3 => Stage::Claimed,
            4 => Stage::Tool,
            _ => Stage::Planned,
        }
    }
}

/// How many times a call may be decided again because other calls changed its caller's
/// usage meanwhile (each time, another call was counted first).
const MAX_USAGE_ROUNDS: usize = 256;

/// Why counting the call's usage did not let it go on.
enum Recount {
    /// It claimed nothing and its decision changed: plan it again.
    Replan,
    /// Blocked, with why.
    Blocked(ReceiptReason, String),
}

/// Why authorization stopped.
enum Stop {
    Blocked(ReceiptReason, Option<String>),
    Interrupted(Interrupted, &'static str),
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;

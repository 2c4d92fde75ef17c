//! Fixture hooks that record host events with the documented strings.
//!
//! Each hook writes to a shared [`HostLog`]. They stand in for a real host's approval
//! channel, grant store, tool and mapper; they prove the boundary's order, not a person's
//! consent.

use std::collections::HashSet;
use std::sync::Mutex;

use aml_core::{
    async_trait, Approval, ApprovalError, ApprovalHook, ApprovalRequest, ArgumentSnapshot, ClaimError,
    ClaimStatus, Effect, GrantRef, GrantStore, LivePolicy, MapperError, ResourceMapper, Sha256Digest,
    ToolCall, ToolError, ToolExecutor,
};
use serde_json::{json, Value};

use crate::caller_args::CallerArguments;
use crate::log::HostLog;

/// The exact host rule a revoking fixture removes.
#[derive(Debug, Clone)]
pub struct RuleRef {
    /// The live policy to change.
    pub policy: LivePolicy,
    /// Tool of the rule.
    pub tool: String,
    /// Effect of the rule.
    pub effect: Effect,
    /// Resource of the rule.
    pub resource: String,
}

impl RuleRef {
    fn revoke(&self) {
        self.policy.revoke(&self.tool, self.effect, &self.resource);
    }
}

/// How an approval fixture answers.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ApprovalBehavior {
    /// Approves the exact digest: "Matching digest returned".
    Matching,
    /// Approves a fixed (stale) digest: "Different digest returned" unless it happens to match.
    Fixed(Sha256Digest),
    /// Refuses: "Fixture approval declined".
    Declined,
    /// Writes a marker, then fails: "In-memory approval fixture marker written", "Approval hook threw".
    FailAfterWrite,
    /// Revokes the host rule while pending, then approves: "Host rule revoked".
    RevokeRule(RuleRef),
    /// Changes the caller's `to` while pending, then approves:
    /// "Caller arguments changed after snapshot".
    MutateCaller(CallerArguments, String),
    /// Runs the caller's own change while pending, then approves:
    /// "Caller arguments changed after snapshot".
    CallerChange(CallerChange),
}

/// A change the caller makes to its own copy of the request while approval is pending.
#[derive(Clone)]
pub struct CallerChange(pub std::sync::Arc<dyn Fn() + Send + Sync>);

impl core::fmt::Debug for CallerChange {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CallerChange")
    }
}

/// An approval hook fixture.
#[derive(Debug)]
pub struct FixtureApproval {
    log: HostLog,
    behavior: ApprovalBehavior,
}

impl FixtureApproval {
    /// A fixture with `behavior`, logging to `log`.
    pub fn new(log: HostLog, behavior: ApprovalBehavior) -> Self {
        FixtureApproval { log, behavior }
    }
}

#[async_trait]
impl ApprovalHook for FixtureApproval {
    async fn request_approval(&self, request: ApprovalRequest) -> Result<Approval, ApprovalError> {
        self.log.event("Approval requested");
        self.log.count(|c| c.approval_requests += 1);
        let digest = request.proposal().digest();
        match &self.behavior {
            ApprovalBehavior::Declined => {
                self.log.event("Fixture approval declined");
                return Ok(Approval::decline(digest));
            }
            ApprovalBehavior::FailAfterWrite => {
                self.log.marker("In-memory approval fixture marker written");
                self.log.event("Approval hook threw");
                return Err(ApprovalError::new("simulated_approval_error"));
            }
            ApprovalBehavior::Fixed(fixed) if *fixed != digest => {
                self.log.event("Different digest returned");
                return Ok(Approval::approve(*fixed));
            }
            ApprovalBehavior::RevokeRule(rule) => {
                rule.revoke();
                self.log.event("Host rule revoked");
            }
            ApprovalBehavior::MutateCaller(args, to) => {
                args.update(|a| a.to = to.clone());
                self.log.event("Caller arguments changed after snapshot");
            }
            ApprovalBehavior::CallerChange(change) => {
                (change.0)();
                self.log.event("Caller arguments changed after snapshot");
            }
            ApprovalBehavior::Matching | ApprovalBehavior::Fixed(_) => {}
        }
        self.log.event("Matching digest returned");
        Ok(Approval::approve(digest))
    }
}

/// How a claim fixture behaves after its atomic one-use check.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ClaimBehavior {
    /// A one-use store: "One-use claim consumed" once, then "One-use claim refused".
    OneUse,
    /// Spends the grant, then fails: "Claim hook threw after consumption".
    FailAfterConsume,
    /// Spends the grant, then revokes the host rule: "Host rule revoked after claim".
    RevokeAfterClaim(RuleRef),
}

/// A one-use grant store fixture.
#[derive(Debug)]
pub struct FixtureClaims {
    log: HostLog,
    behavior: ClaimBehavior,
    spent: Mutex<HashSet<GrantRef>>,
}

impl FixtureClaims {
    /// A fixture with `behavior`, logging to `log`.
    pub fn new(log: HostLog, behavior: ClaimBehavior) -> Self {
        FixtureClaims {
            log,
            behavior,
            spent: Mutex::default(),
        }
    }
}

#[async_trait]
impl GrantStore for FixtureClaims {
    async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        self.log.count(|c| c.claim_attempts += 1);
        let fresh = self
            .spent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(grant.clone());
        if !fresh {
            self.log.event("One-use claim refused");
            return Ok(ClaimStatus::AlreadyClaimed);
        }
        self.log.event("One-use claim consumed");
        self.log.count(|c| c.claims_consumed += 1);
        match &self.behavior {
            ClaimBehavior::OneUse => Ok(ClaimStatus::Claimed),
            ClaimBehavior::FailAfterConsume => {
                self.log.event("Claim hook threw after consumption");
                Err(ClaimError::new("simulated_claim_error"))
            }
            ClaimBehavior::RevokeAfterClaim(rule) => {
                rule.revoke();
                self.log.event("Host rule revoked after claim");
                Ok(ClaimStatus::Claimed)
            }
        }
    }

    /// A wire's one-use call id (A2UI's `functionCallId`) is no grant: the documented host
    /// events and counters are the grants', so call ids are kept once, silently.
    async fn claim_call_id(&self, id: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        let fresh = self
            .spent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone());
        Ok(if fresh {
            ClaimStatus::Claimed
        } else {
            ClaimStatus::AlreadyClaimed
        })
    }
}

/// The simulated `send_message` tool.
#[derive(Debug)]
pub struct FixtureTool {
    log: HostLog,
    fail_after_write: bool,
}

impl FixtureTool {
    /// Returns `{"simulated": true, "would_send_to": <to>}`: "Fixture callback returned".
    pub fn returning(log: HostLog) -> Self {
        FixtureTool {
            log,
            fail_after_write: false,
        }
    }
    /// Writes a marker, then fails: "In-memory fixture marker written", "Fixture callback threw".
    pub fn failing_after_write(log: HostLog) -> Self {
        FixtureTool {
            log,
            fail_after_write: true,
        }
    }
}

#[async_trait]
impl ToolExecutor for FixtureTool {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
        self.log.event("Fixture callback entered");
        self.log.count(|c| c.callback_count += 1);
        if self.fail_after_write {
            self.log.marker("In-memory fixture marker written");
            self.log.event("Fixture callback threw");
            return Err(ToolError::new("simulated_callback_error"));
        }
        self.log.event("Fixture callback returned");
        Ok(json!({"simulated": true, "would_send_to": call.arguments().get("to")}))
    }
}

/// The documented mapper: the resource is `arguments.to`.
#[derive(Debug)]
pub struct DestinationMapper;

impl ResourceMapper for DestinationMapper {
    fn resource_for(&self, snapshot: &ArgumentSnapshot) -> Result<String, MapperError> {
        snapshot
            .str("to")
            .map(str::to_owned)
            .ok_or_else(|| MapperError::new("arguments.to must be a string"))
    }
}

/// A mapper that writes a host marker, then fails: "In-memory mapper fixture marker
/// written", "Host mapper threw".
#[derive(Debug)]
pub struct FailingMapper {
    log: HostLog,
}

impl FailingMapper {
    /// Logs to `log`.
    pub fn new(log: HostLog) -> Self {
        FailingMapper { log }
    }
}

impl ResourceMapper for FailingMapper {
    fn resource_for(&self, _: &ArgumentSnapshot) -> Result<String, MapperError> {
        self.log.marker("In-memory mapper fixture marker written");
        self.log.event("Host mapper threw");
        Err(MapperError::new("simulated_mapper_error"))
    }
}

/// A tool that records the arguments it receives and returns `{"simulated": true, "to": <to>}`
/// (or fails after entry), for the A2UI and MCP reports' `observed_arguments`.
#[derive(Debug, Clone, Default)]
pub struct ObservingTool {
    observed: std::sync::Arc<Mutex<Vec<Value>>>,
    fails: bool,
}

impl ObservingTool {
    /// A tool that returns.
    pub fn returning() -> Self {
        Self::default()
    }
    /// A tool that fails after entry.
    pub fn failing() -> Self {
        ObservingTool {
            fails: true,
            ..Self::default()
        }
    }
    /// Every argument object received, in order.
    pub fn observed(&self) -> Vec<Value> {
        self.observed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[async_trait]
impl ToolExecutor for ObservingTool {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
        let args = call.arguments().clone();
        let to = args.get("to").cloned().unwrap_or(Value::Null);
        self.observed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Value::Object(args));
        if self.fails {
            return Err(ToolError::new("simulated_callback_error"));
        }
        Ok(json!({"simulated": true, "to": to}))
    }
}

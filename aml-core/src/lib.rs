#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod canonical;
pub mod capture;
mod deadline;
mod digest;
mod dispatch;
pub mod guarded;
mod hooks;
mod plan;
pub mod policy;
pub mod proposal;
mod reason;
mod receipt;
pub mod strict;
mod unwind;
mod wire;

pub use deadline::Deadline;
pub use digest::{HexDigest, InvalidDigest, Sha256Digest};
pub use dispatch::{ActionBoundary, ActionBoundaryBuilder, DispatchOutcome};
pub use guarded::{
    ArgumentSnapshot, ConfigError, GuardedTool, GuardedToolBuilder, GuardedToolError, MapperError,
    ResourceMapper,
};
pub use hooks::{
    approval_fn, async_trait, tool_fn, Approval, ApprovalError, ApprovalFn, ApprovalHook, ApprovalRequest,
    ClaimError, ClaimStatus, ClaimedGrant, GrantRef, GrantStore, InMemoryGrantStore, ToolCall, ToolError,
    ToolExecutor, ToolFn,
};
pub use plan::{plan, plan_frozen, Plan, Planned, PLAN_PROTOCOL};
pub use policy::{LivePolicy, Policy, PolicyError, PolicySource, Rule};
pub use proposal::{FrozenProposal, ProposalParts, ProposalRefusal};
pub use reason::{JsonErrorCode, PlanReason, ReceiptReason};
pub use receipt::{Receipt, RECEIPT_PROTOCOL};
pub use wire::{Decision, Effect, ExecutionStatus, UnknownWireValue};

/// The workspace README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadme;

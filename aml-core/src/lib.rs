#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

#[cfg(feature = "catalog")]
mod call;
pub mod canonical;
pub mod capture;
#[cfg(feature = "catalog")]
pub mod catalog;
#[cfg(feature = "cedar")]
mod cedar;
#[cfg(feature = "cedar")]
mod cedar_prefilter;
mod deadline;
mod digest;
mod dispatch;
mod front;
#[cfg(feature = "catalog")]
mod gate;
pub mod guarded;
mod hooks;
mod jsonl_sink;
mod object_only;
mod outcome;
mod plan;
pub mod policy;
pub mod proposal;
mod reason;
mod receipt;
mod record;
#[cfg(feature = "catalog")]
mod resource;
mod runtime;
pub mod strict;
#[cfg(feature = "testing")]
pub mod testing;
mod unwind;
mod usage;
mod wire;

#[cfg(feature = "catalog")]
pub use call::{Arguments, CallRequest};
#[cfg(feature = "catalog")]
pub use catalog::{
    CatalogError, ResourceKind, ResourceMapping, ResourceRule, SchemaViolation, ToolCatalog, ToolRegistration,
};
pub use deadline::{CallerGone, Deadline};
pub use digest::{HexDigest, InvalidDigest, Sha256Digest};
pub use dispatch::{ActionBoundary, ActionBoundaryBuilder, DispatchOutcome};
#[cfg(feature = "catalog")]
#[doc(hidden)]
pub use gate::{CallStatus, GateOutcome, PreparedCall};
#[cfg(feature = "catalog")]
pub use gate::{LiveCatalog, ToolGate};
pub use guarded::{
    ArgumentSnapshot, ConfigError, GuardedTool, GuardedToolBuilder, GuardedToolError, MapperError,
    ResourceMapper,
};
pub use hooks::{
    approval_fn, async_trait, tool_fn, Approval, ApprovalError, ApprovalFn, ApprovalHook, ApprovalRequest,
    ClaimError, ClaimStatus, ClaimedGrant, GrantRef, GrantStore, InMemoryGrantStore, ToolCall, ToolError,
    ToolExecutor, ToolFn, UsageError,
};
pub use jsonl_sink::JsonLinesSink;
pub use object_only::ObjectOnly;
pub use outcome::{Blocked, CallOutcome, Dispatched, HostError, Refused, Unknown, DISPATCH_IN_PROGRESS};
pub use plan::{plan, plan_frozen, plan_frozen_for, Plan, Planned, WouldBlock, PLAN_PROTOCOL};
pub use policy::{LivePolicy, Policy, PolicyDecision, PolicyError, PolicySource, Rule};
pub use proposal::{FrozenProposal, ProposalParts, ProposalRefusal, MULTI_RESOURCE_PROTOCOL};
pub use reason::{JsonErrorCode, PlanReason, ReceiptReason, Refusal};
pub use receipt::{Receipt, RECEIPT_PROTOCOL};
pub use record::{
    sink_fn, ApprovalRecord, CallClock, CallRecord, MemorySink, NoSink, ReceiptSink, Record, ResultSummary,
    SinkFn, APPROVAL_RECORD_PROTOCOL, CALL_RECORD_PROTOCOL,
};
#[cfg(feature = "tokio")]
pub use runtime::TokioRuntime;
pub use runtime::{BoxedFuture, CallRuntime};
pub use usage::{
    CallFacts, Caller, ClientInfo, Counted, InMemoryUsage, Usage, UsageLedger, MAX_CALLER_BYTES,
    USAGE_WINDOWS,
};
pub use wire::{Decision, Effect, ExecutionStatus, UnknownWireValue};

/// The workspace README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadme;

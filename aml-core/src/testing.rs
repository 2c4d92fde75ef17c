//! Fixture hooks for the tests of crates built on the core (feature `testing`): the
//! documented `send_message` tool, its policy, arguments and digest, a tool that counts its
//! entries, and approval hooks that approve. They stand in for a host; they prove the
//! boundary's order, not anyone's consent.
//!
//! ```
//! use aml_core::testing::{self, CountingTool};
//! use aml_core::ReceiptReason;
//!
//! let tool = CountingTool::new();
//! let guarded = testing::send_message(testing::send_message_policy(true))
//!     .approval(testing::approve_all())
//!     .executor(tool.clone())
//!     .build()
//!     .unwrap();
//! let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! let first = rt.block_on(guarded.call(&testing::send_message_args())).unwrap();
//! assert_eq!(first.receipt().proposal_sha256(), Some(testing::send_message_digest()));
//! let replay = rt.block_on(guarded.call(&testing::send_message_args())).unwrap();
//! assert_eq!(replay.receipt().reason(), ReceiptReason::ApprovalReusedOrExpired);
//! assert_eq!(tool.entries(), 1);
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::{
    approval_fn, async_trait, Approval, ApprovalError, ApprovalHook, ApprovalRequest, ArgumentSnapshot,
    Effect, GuardedTool, GuardedToolBuilder, MapperError, Policy, PolicySource, Sha256Digest, ToolCall,
    ToolError, ToolExecutor,
};

/// The documented tool's name.
pub const SEND_MESSAGE: &str = "send_message";
/// The documented tool's purpose.
pub const SEND_MESSAGE_PURPOSE: &str = "Send a status update";
/// The resource the documented policy allows.
pub const TEAM: &str = "team@example.test";

/// A policy with one rule: `send_message`, `send`, [`TEAM`].
pub fn send_message_policy(requires_approval: bool) -> Arc<Policy> {
    Arc::new(Policy::from_value(
        &json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": SEND_MESSAGE, "effect": "send", "resource": TEAM, "requires_approval": requires_approval}]}),
    ))
}

/// The documented arguments: `{"to": TEAM, "body": "Build passed."}`.
pub fn send_message_args() -> Value {
    json!({"to": TEAM, "body": "Build passed."})
}

/// The input schema adapters enforce for `send_message`: `to` and `body` strings, an
/// optional number `priority`, nothing else.
pub fn send_message_schema() -> Value {
    json!({"type": "object",
           "properties": {"to": {"type": "string"}, "body": {"type": "string"}, "priority": {"type": "number"}},
           "required": ["to", "body"], "additionalProperties": false})
}

/// The digest of the documented call: [`send_message_args`] to [`TEAM`].
pub fn send_message_digest() -> Sha256Digest {
    let arguments = send_message_args().as_object().cloned().unwrap_or_default();
    crate::FrozenProposal::freeze(crate::ProposalParts {
        tool: SEND_MESSAGE,
        effect: Effect::Send,
        resource: TEAM,
        purpose: SEND_MESSAGE_PURPOSE,
        arguments: &arguments,
    })
    .map(|frozen| frozen.digest())
    .expect("the documented proposal is valid")
}

/// The documented tool: `send_message`, effect `send`, the documented purpose, resource =
/// the `to` argument. Add hooks and build.
pub fn send_message(policy: impl PolicySource + 'static) -> GuardedToolBuilder {
    GuardedTool::builder(SEND_MESSAGE, Effect::Send, SEND_MESSAGE_PURPOSE, policy).resource_for(
        |args: &ArgumentSnapshot| {
            args.str("to")
                .map(str::to_owned)
                .ok_or_else(|| MapperError::new("missing `to`"))
        },
    )
}

/// An approval hook that approves every exact digest it is asked about.
pub fn approve_all() -> impl ApprovalHook {
    approval_fn(|req| async move { Ok(Approval::approve(req.proposal().digest())) })
}

/// An approval hook that approves every digest and names grant `id` (for grant stores that
/// issue named grants).
pub fn approve_with_grant(id: impl Into<String>) -> impl ApprovalHook {
    let id: String = id.into();
    approval_fn(move |req: ApprovalRequest| {
        let id = id.clone();
        async move { Ok::<_, ApprovalError>(Approval::approve(req.proposal().digest()).with_id(id)) }
    })
}

/// A tool that counts its entries and answers `{"sent": true, "arguments": …}`, or fails
/// after entry when built with [`failing`](Self::failing). Clones share the count.
#[derive(Debug, Clone, Default)]
pub struct CountingTool {
    entries: Arc<AtomicUsize>,
    fail: bool,
}

impl CountingTool {
    /// A tool that returns.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tool that fails after entry (its outcome is `unknown`).
    pub fn failing() -> Self {
        CountingTool {
            entries: Arc::default(),
            fail: true,
        }
    }

    /// How many times it was entered.
    pub fn entries(&self) -> usize {
        self.entries.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl ToolExecutor for CountingTool {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
        self.entries.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Err(ToolError::new("the fixture tool failed after entry"));
        }
        Ok(json!({"sent": true, "arguments": call.arguments()}))
    }
}

/// Runs one call of `name` through `gate`, with `tool` as the request's executor, to its
/// outcome on a fresh current-thread runtime (timers on, so deadlines work).
#[cfg(all(feature = "catalog", feature = "tokio"))]
pub fn call_blocking(
    gate: &crate::ToolGate,
    tool: &CountingTool,
    name: &str,
    arguments: Value,
) -> crate::CallOutcome {
    let executor: Arc<dyn ToolExecutor> = Arc::new(tool.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(gate.call(crate::CallRequest::value(name, arguments).executor(executor)))
}

/// A usage ledger that holds every [`usage`](crate::UsageLedger::usage) read until `parties`
/// reads are in (then passes the rest through): racing calls all plan on one usage, so only
/// the atomic [`count_if`](crate::UsageLedger::count_if) can keep a budget. Clones share the
/// gate, so two replicas' ledgers can wait for each other's calls (feature `tokio`).
///
/// ```
/// use std::sync::Arc;
/// use aml_core::{testing::LockstepUsage, Caller, InMemoryUsage, UsageLedger};
/// let ledger = LockstepUsage::new(Arc::new(InMemoryUsage::new()), 2);
/// let other = ledger.sharing(Arc::new(InMemoryUsage::new()));
/// let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
/// let me = Caller::local();
/// // Neither read returns until both are in.
/// let (a, b) = rt.block_on(async { tokio::join!(ledger.usage(&me, "t"), other.usage(&me, "t")) });
/// assert_eq!(a.unwrap(), b.unwrap());
/// ```
#[cfg(feature = "tokio")]
#[derive(Debug, Clone)]
pub struct LockstepUsage {
    inner: Arc<dyn crate::UsageLedger>,
    gate: Arc<(tokio::sync::Barrier, AtomicUsize)>,
    parties: usize,
}

#[cfg(feature = "tokio")]
impl LockstepUsage {
    /// Holds the first `parties` reads of `inner` until all of them are in.
    pub fn new(inner: Arc<dyn crate::UsageLedger>, parties: usize) -> Self {
        LockstepUsage {
            inner,
            gate: Arc::new((tokio::sync::Barrier::new(parties), AtomicUsize::new(0))),
            parties,
        }
    }

    /// Another ledger (a replica's) whose reads count toward this one's `parties`.
    pub fn sharing(&self, inner: Arc<dyn crate::UsageLedger>) -> Self {
        LockstepUsage {
            inner,
            gate: Arc::clone(&self.gate),
            parties: self.parties,
        }
    }
}

#[cfg(feature = "tokio")]
#[async_trait]
impl crate::UsageLedger for LockstepUsage {
    async fn usage(&self, caller: &crate::Caller, tool: &str) -> Result<crate::Usage, crate::UsageError> {
        let usage = self.inner.usage(caller, tool).await;
        if self.gate.1.fetch_add(1, Ordering::SeqCst) < self.parties {
            self.gate.0.wait().await;
        }
        usage
    }

    async fn count_if(
        &self,
        caller: &crate::Caller,
        tool: &str,
        seen: crate::Usage,
    ) -> Result<crate::Counted, crate::UsageError> {
        self.inner.count_if(caller, tool, seen).await
    }
}

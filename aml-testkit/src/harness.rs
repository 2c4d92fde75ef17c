//! The harness trait each adapter implements so the documented cases run through its wire
//! path, and the harness for the core (direct) path.

use std::sync::Arc;

use aml_core::{async_trait, GuardedTool, Plan, Receipt};
use serde_json::Value;

use crate::caller_args::CallerArguments;

/// What one call through an adapter ended with.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Attempt {
    /// The boundary produced a plan and a receipt (and the tool's result if dispatched).
    Completed {
        /// The plan.
        plan: Plan,
        /// The receipt.
        receipt: Receipt,
        /// The tool's result, when dispatched.
        result: Option<Value>,
    },
    /// A host error (a failing resource mapper): no plan, no receipt.
    HostError(String),
    /// The agent's side of the wire could not carry the arguments at all (JSON-RPC has no
    /// non-finite numbers): no request was sent, no hook ran.
    WireRefused(String),
}

/// The adapter could not carry the call at all (not built, transport down, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessError(pub String);

impl core::fmt::Display for HarnessError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HarnessError {}

/// Carries a guarded-tool call through one adapter's real wire path.
///
/// The host side (`tool`, with the fixture hooks) is given; the harness plays the agent's
/// side: it reads `args` once when the call starts, sends it over its wire, and turns what
/// comes back into an [`Attempt`]. A custom adapter implements this to run every documented
/// case.
///
/// ```
/// use std::sync::Arc;
/// use aml_core::{async_trait, GuardedTool};
/// use aml_testkit::{Attempt, CallerArguments, CoreHarness, Harness, HarnessError};
///
/// /// An adapter that forwards to the direct path after a (pretend) wire hop.
/// #[derive(Debug)]
/// struct Loopback;
///
/// #[async_trait]
/// impl Harness for Loopback {
///     fn adapter(&self) -> &str {
///         "loopback"
///     }
///     async fn call(&self, tool: Arc<GuardedTool>, args: &CallerArguments) -> Result<Attempt, HarnessError> {
///         CoreHarness.call(tool, args).await
///     }
/// }
/// ```
#[async_trait]
pub trait Harness: Send + Sync + core::fmt::Debug {
    /// The adapter's column name (`core`, `mcp`, `a2ui`, `grpc`, …).
    fn adapter(&self) -> &str;

    /// Plays one call.
    async fn call(&self, tool: Arc<GuardedTool>, args: &CallerArguments) -> Result<Attempt, HarnessError>;
}

/// The direct path: the guarded tool called in-process.
#[derive(Debug, Clone, Copy)]
pub struct CoreHarness;

#[async_trait]
impl Harness for CoreHarness {
    fn adapter(&self) -> &str {
        "core"
    }

    async fn call(&self, tool: Arc<GuardedTool>, args: &CallerArguments) -> Result<Attempt, HarnessError> {
        // The call captures the arguments before this lock is released; the pending
        // future does not borrow them, so later changes by the caller cannot reach it.
        let pending = args.with(|a| tool.call(a));
        match pending.await {
            Ok(outcome) => Ok(Attempt::Completed {
                plan: outcome.plan().clone(),
                receipt: outcome.receipt().clone(),
                result: outcome.into_output(),
            }),
            Err(host) => Ok(Attempt::HostError(host.to_string())),
        }
    }
}

/// An adapter that does not exist yet: every call fails, so its column fails honestly.
#[derive(Debug, Clone)]
pub struct UnavailableHarness {
    adapter: String,
    why: String,
}

impl UnavailableHarness {
    /// An unavailable adapter and the reason.
    pub fn new(adapter: &str, why: &str) -> Self {
        UnavailableHarness {
            adapter: adapter.to_owned(),
            why: why.to_owned(),
        }
    }
}

#[async_trait]
impl Harness for UnavailableHarness {
    fn adapter(&self) -> &str {
        &self.adapter
    }

    async fn call(&self, _: Arc<GuardedTool>, _: &CallerArguments) -> Result<Attempt, HarnessError> {
        Err(HarnessError(self.why.clone()))
    }
}

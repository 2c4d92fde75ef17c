//! Host hooks: around the forward of each gated call, and after each call ends.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aml_core::{GateOutcome, ToolExecutor};

use super::TransportTrace;

/// Wraps the executor that forwards one gated `tools/call` to the server, for a host that
/// must do something around the forward: journal an intent before it and the outcome after
/// (`aml-mcp-gate --state` wraps it with `aml_grants::JournaledGrants::executor`), or count.
/// The wrapper decides whether and when the forward runs; the boundary still enters it at
/// most once.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use aml_core::{async_trait, ToolCall, ToolError, ToolExecutor};
/// use aml_mcp::relay::ForwardWrapper;
///
/// /// Counts the calls that reach the server.
/// #[derive(Debug, Default)]
/// struct Counting(Arc<AtomicUsize>);
///
/// #[derive(Debug)]
/// struct Counted(Arc<dyn ToolExecutor>, Arc<AtomicUsize>);
///
/// #[async_trait]
/// impl ToolExecutor for Counted {
///     async fn execute(&self, call: ToolCall) -> Result<serde_json::Value, ToolError> {
///         self.1.fetch_add(1, Ordering::SeqCst);
///         self.0.execute(call).await
///     }
/// }
///
/// impl ForwardWrapper for Counting {
///     fn wrap(&self, forward: Arc<dyn ToolExecutor>) -> Arc<dyn ToolExecutor> {
///         Arc::new(Counted(forward, Arc::clone(&self.0)))
///     }
/// }
/// ```
pub trait ForwardWrapper: Send + Sync + core::fmt::Debug {
    /// The executor to enter instead of `forward`.
    fn wrap(&self, forward: Arc<dyn ToolExecutor>) -> Arc<dyn ToolExecutor>;
}

/// One `tools/call` as the relay ended it, for a [`CallObserver`].
#[derive(Debug)]
#[non_exhaustive]
pub struct ObservedCall<'a> {
    /// The tool the client named (`""` when it named none).
    pub tool: &'a str,
    /// The client's `params._meta`, as the raw JSON text it sent (protocol metadata such as
    /// a W3C `traceparent`), if any.
    pub meta: Option<&'a str>,
    /// The W3C trace headers the client's transport carried with the call (an HTTP POST's),
    /// if any.
    pub trace: Option<&'a TransportTrace>,
    /// What the gate did.
    pub outcome: &'a GateOutcome,
    /// When the relay started the call.
    pub started: SystemTime,
    /// How long it took, until the gate's outcome.
    pub elapsed: Duration,
}

/// Told of each `tools/call` the relay ends, planned or refused, once the gate has decided
/// it (a call abandoned mid-way, by a closing session, is not told). For a host that traces
/// calls: `aml-mcp-gate --otlp-endpoint` makes one span of each. It runs on the call's task:
/// keep it short and never block.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use aml_core::CallStatus;
/// use aml_mcp::relay::{CallObserver, ObservedCall};
///
/// /// Counts the calls that reached the server and returned.
/// #[derive(Debug, Default)]
/// struct Dispatched(AtomicUsize);
///
/// impl CallObserver for Dispatched {
///     fn call_ended(&self, call: &ObservedCall<'_>) {
///         if matches!(call.outcome.status(), CallStatus::Dispatched) {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
/// ```
pub trait CallObserver: Send + Sync + core::fmt::Debug {
    /// One call ended.
    fn call_ended(&self, call: &ObservedCall<'_>);
}

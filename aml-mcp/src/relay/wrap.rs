//! A host hook around the forward of each gated call.

use std::sync::Arc;

use aml_core::ToolExecutor;

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

//! Host hooks: around the forward of each gated call, and after each call ends.

use std::sync::{Arc, Mutex};
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
    /// The trace context sent to the server beside the forwarded call (what
    /// [`CallObserver::forward_trace`] gave for it), if any.
    pub forwarded: Option<&'a TransportTrace>,
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

    /// The W3C trace context to send to the server with this call, asked just before the
    /// relay forwards it when the server's transport carries one beside the message (the
    /// relay and the transport share [`OutboundTraces`]: `aml-mcp-http`'s upstream sends it
    /// as the POST's `traceparent` and `tracestate` headers). The message itself is never
    /// changed. The call's [`ObservedCall::forwarded`] is what this gave. `None`, the
    /// default, sends none.
    fn forward_trace(&self, call: &ForwardedCall<'_>) -> Option<TransportTrace> {
        let _ = call;
        None
    }
}

/// A gated `tools/call` about to be forwarded, for [`CallObserver::forward_trace`].
#[derive(Debug)]
#[non_exhaustive]
pub struct ForwardedCall<'a> {
    /// The tool the client named.
    pub tool: &'a str,
    /// The client's `params._meta`, as the raw JSON text it sent, if any.
    pub meta: Option<&'a str>,
    /// The W3C trace headers the client's transport carried with the call, if any.
    pub trace: Option<&'a TransportTrace>,
}

/// Trace context for requests the relay sends to the server, kept beside them by the
/// request's JSON-RPC id (the relay numbers its own requests to the server) for a transport
/// that carries it outside the message: the relay puts it in just before sending the request,
/// the transport takes it out when it sends that request. Clones share one table; give the
/// same one to [`RelayTools::with_outbound_traces`](super::RelayTools::with_outbound_traces)
/// and to the transport.
///
/// ```
/// use aml_mcp::relay::OutboundTraces;
///
/// let traces = OutboundTraces::default();
/// // A transport, sending request 7 to the server:
/// assert!(traces.take(7).is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct OutboundTraces(Arc<Mutex<Vec<(u64, TransportTrace)>>>);

// A list, not a map: it holds one entry per forward in flight, taken within moments.
impl OutboundTraces {
    /// The trace context to send with the relay's request `id`, taken out of the table.
    pub fn take(&self, id: u64) -> Option<TransportTrace> {
        let mut table = self.table();
        let at = table.iter().position(|(i, _)| *i == id)?;
        Some(table.swap_remove(at).1)
    }

    pub(crate) fn put(&self, id: u64, trace: TransportTrace) {
        self.table().push((id, trace));
    }

    /// Drops what a transport did not take (the request was never sent, or the transport
    /// takes none), once the request has ended.
    pub(crate) fn forget(&self, id: u64) {
        drop(self.take(id));
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Vec<(u64, TransportTrace)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

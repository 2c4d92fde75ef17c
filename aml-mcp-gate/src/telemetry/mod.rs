//! `--metrics ADDR`: Prometheus metrics, `/healthz` and `/readyz` for operators (and, with
//! the `otel` feature, `--otlp-endpoint URL`: one OpenTelemetry span per call, `traces`).
//!
//! Everything is measured from outside the relay and the stores: the receipt sink sees one
//! record per call (tool, decision, status, reason, digest, total time), and timing
//! decorators wrap the forward to the server, the intent write and one-use claims of the
//! state, and the approval hook (`observe`).

mod health;
mod metrics;
mod observe;
#[cfg(feature = "otel")]
mod otlp;
#[cfg(feature = "otel")]
mod traces;

use std::sync::Arc;

pub(crate) use health::{Health, UpstreamProbe};
pub(crate) use metrics::Metrics;
pub(crate) use observe::{Observed, TimedApproval, TimedForward, TimedGrants};
#[cfg(feature = "otel")]
pub(crate) use traces::{traces_url, Traces};

/// What the gate measures, shared by every session.
#[derive(Debug)]
pub(crate) struct Telemetry {
    pub(crate) metrics: Arc<Metrics>,
    unmatched: observe::Unmatched,
}

impl Telemetry {
    /// Metrics for a gate in front of `server` (a label: its URL or program name).
    pub(crate) fn new(server: &str) -> Telemetry {
        Telemetry {
            metrics: Arc::new(Metrics::new(server)),
            unmatched: observe::Unmatched::default(),
        }
    }
}

/// The tool names of a tools file (`{"tools": [{"name": …}, …]}`), for labels.
pub(crate) fn tool_names(tools: Option<&str>) -> Vec<String> {
    let Some(value) = tools.and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok()) else {
        return Vec::new();
    };
    value["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The server's label: a URL without its user information, or the program's name.
pub(crate) fn server_label(name: &str) -> String {
    match (name.find("://"), name.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}{}", &name[..scheme + 3], &name[at + 1..]),
        _ => name.to_owned(),
    }
}

/// The tracer of `--otlp-endpoint`, if asked for (without the `otel` feature the flag is
/// refused before this).
#[cfg(feature = "otel")]
pub(crate) fn start_traces(url: Option<&str>, server: &str) -> Result<Option<Arc<Traces>>, String> {
    let Some(url) = url else { return Ok(None) };
    let traces = Traces::start(url, server_label(server), tokio::runtime::Handle::current())?;
    tracing::info!("otlp: one span per call to {url}");
    Ok(Some(Arc::new(traces)))
}

#[cfg(not(feature = "otel"))]
pub(crate) fn start_traces(_: Option<&str>, _: &str) -> Result<Option<Arc<NoTraces>>, String> {
    Ok(None)
}

/// What stands for the tracer in a build without the `otel` feature.
#[cfg(not(feature = "otel"))]
#[derive(Debug)]
pub(crate) struct NoTraces;

#[cfg(not(feature = "otel"))]
impl aml_mcp::relay::CallObserver for NoTraces {
    fn call_ended(&self, _: &aml_mcp::relay::ObservedCall<'_>) {}
}

/// Exports the spans still queued before the gate exits (bounded).
#[cfg(feature = "otel")]
pub(crate) async fn stop_traces(traces: Option<Arc<Traces>>) {
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
}

#[cfg(not(feature = "otel"))]
pub(crate) async fn stop_traces(_: Option<Arc<NoTraces>>) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_come_from_the_tools_file_and_never_show_credentials() {
        let names = tool_names(Some(r#"{"tools": [{"name": "echo"}, {"name": "get-sum"}]}"#));
        assert_eq!(names, ["echo", "get-sum"]);
        assert!(tool_names(Some("not json")).is_empty());
        assert_eq!(
            server_label("http://u:secret@127.0.0.1:3001/mcp"),
            "http://127.0.0.1:3001/mcp"
        );
        assert_eq!(server_label("npx"), "npx");
    }
}

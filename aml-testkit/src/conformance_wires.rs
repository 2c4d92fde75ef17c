//! The conformance probes over each built-in adapter's wire: the core in process, MCP (an
//! rmcp client and the rmcp tool server), A2UI messages, gRPC and HTTP on loopback.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use aml_a2ui::{FunctionGate, FunctionRegistry, HostCatalog, HostFunction};
use aml_core::{async_trait, CallRequest, ExecutionStatus, Receipt, TokioRuntime};
use aml_grpc::{serve, GatedToolService, ServerLimits, ToolClient};
use aml_http_example::{HttpToolClient, HttpToolServer};
use aml_mcp::GuardedToolServer;
use rmcp::model::CallToolRequestParams;
use serde_json::Value;

use crate::conformance::{ConformanceHarness, ConformanceHost, Observed, Probe};
use crate::grpc::GrpcHarness;
use crate::harness::{CoreHarness, HarnessError};
use crate::http::HttpHarness;
use crate::mcp::McpHarness;

fn err(e: impl core::fmt::Display) -> HarnessError {
    HarnessError(e.to_string())
}

fn answer(status: &str, reason: &str) -> Observed {
    Observed::Answer {
        status: status.to_owned(),
        reason: reason.to_owned(),
    }
}

/// A receipt's status word and reason.
fn of_receipt(receipt: &Receipt) -> Observed {
    let status = match receipt.execution_status() {
        ExecutionStatus::Dispatched => "dispatched",
        ExecutionStatus::Unknown => "unknown",
        _ => "blocked",
    };
    answer(status, receipt.reason().as_str())
}

/// Runs `call` until it answers, or until the probe's caller leaves (the call is dropped:
/// its connection or stream closes).
async fn unless_left<F>(host: &ConformanceHost, probe: &Probe, call: F) -> Result<Observed, HarnessError>
where
    F: Future<Output = Result<Observed, HarnessError>>,
{
    tokio::select! {
        observed = call => observed,
        () = host.leave_signal(probe) => Ok(Observed::Left),
    }
}

#[async_trait]
impl ConformanceHarness for CoreHarness {
    fn adapter(&self) -> &str {
        "core"
    }

    async fn probe(&self, host: &ConformanceHost, probe: &Probe) -> Result<Observed, HarnessError> {
        let gate = host.gate().with_runtime(TokioRuntime);
        let mut request = CallRequest::bytes(probe.tool, probe.arguments.as_bytes());
        if let Some(deadline) = probe.deadline {
            request = request.deadline(Instant::now() + deadline);
        }
        let call = gate.call(request);
        unless_left(host, probe, async move {
            let outcome = call.await;
            Ok(answer(outcome.status(), outcome.reason()))
        })
        .await
    }

    async fn list(&self, host: &ConformanceHost) -> Result<Option<Vec<String>>, HarnessError> {
        Ok(Some(
            host.gate()
                .listing()
                .iter()
                .map(|t| t.name().to_owned())
                .collect(),
        ))
    }
}

/// A gRPC server on loopback over the host's gate, and a client of it.
async fn grpc_client(
    host: &ConformanceHost,
) -> Result<(ToolClient, tokio::sync::oneshot::Sender<()>), HarnessError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(err)?;
    let address = listener.local_addr().map_err(err)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = GatedToolService::new(host.gate()).with_limits(ServerLimits {
        max_request_bytes: 4 << 20,
        ..ServerLimits::default()
    });
    tokio::spawn(serve(listener, service, async {
        let _ = stopped.await;
    }));
    let client = ToolClient::connect(format!("http://{address}"))
        .await
        .map_err(err)?;
    Ok((client, stop))
}

#[async_trait]
impl ConformanceHarness for GrpcHarness {
    fn adapter(&self) -> &str {
        "grpc"
    }

    async fn probe(&self, host: &ConformanceHost, probe: &Probe) -> Result<Observed, HarnessError> {
        let (client, _stop) = grpc_client(host).await?;
        unless_left(host, probe, async {
            Ok(
                match client
                    .call_tool(probe.tool, &probe.arguments, probe.deadline)
                    .await
                {
                    Ok(done) => of_receipt(&done.receipt),
                    Err(failed) => {
                        let report = failed.report().ok_or_else(|| err(failed.status()))?;
                        let status = match (&report.receipt, report.reason.as_str()) {
                            (Some(receipt), _) => return Ok(of_receipt(receipt)),
                            (None, "host_error") => "host_error",
                            (None, "dispatch_in_progress") => "unknown",
                            (None, _) => "refused",
                        };
                        answer(status, &report.reason)
                    }
                },
            )
        })
        .await
    }

    async fn list(&self, host: &ConformanceHost) -> Result<Option<Vec<String>>, HarnessError> {
        let (client, _stop) = grpc_client(host).await?;
        let tools = client.list_tools().await.map_err(err)?;
        Ok(Some(tools.into_iter().map(|t| t.name).collect()))
    }
}

/// An HTTP tool server on loopback over the host's gate, and a client of it.
async fn http_client(
    host: &ConformanceHost,
    probe: Option<&Probe>,
) -> Result<(HttpToolClient, tokio::sync::oneshot::Sender<()>), HarnessError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(err)?;
    let address = listener.local_addr().map_err(err)?;
    let mut limits = aml_http_example::ServerLimits::default();
    limits.max_body_bytes = 4 << 20;
    if let Some(deadline) = probe.and_then(|p| p.deadline) {
        limits.call_timeout = deadline;
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = HttpToolServer::new(host.gate()).with_limits(limits);
    tokio::spawn(aml_http_example::serve(listener, server, async {
        let _ = stopped.await;
    }));
    Ok((HttpToolClient::new(address), stop))
}

#[async_trait]
impl ConformanceHarness for HttpHarness {
    fn adapter(&self) -> &str {
        "http"
    }

    async fn probe(&self, host: &ConformanceHost, probe: &Probe) -> Result<Observed, HarnessError> {
        let (client, _stop) = http_client(host, Some(probe)).await?;
        unless_left(host, probe, async {
            let reply = client
                .call(probe.tool, probe.arguments.clone())
                .await
                .map_err(err)?
                .reply;
            Ok(answer(reply.status.as_str(), &reply.reason))
        })
        .await
    }

    async fn list(&self, host: &ConformanceHost) -> Result<Option<Vec<String>>, HarnessError> {
        let (client, _stop) = http_client(host, None).await?;
        client.list_tools().await.map(Some).map_err(err)
    }
}

/// The A2UI catalog of the host: one agent-callable function per registered tool.
fn function_gate(host: &ConformanceHost, probe: Option<&Probe>) -> Result<FunctionGate, HarnessError> {
    let gate = host.gate();
    let functions = gate.catalog().tools().cloned().collect::<Vec<_>>();
    let catalog = functions.into_iter().fold(
        HostCatalog::new(crate::a2ui::CATALOG_ID, "conformance"),
        |catalog, tool| {
            let name = tool.name().to_owned();
            catalog.with_function(HostFunction::agent_callable(&name, "conformance", tool))
        },
    );
    let registry = Arc::new(FunctionRegistry::new().with_catalog(catalog));
    let limits = aml_a2ui::GateLimits {
        max_message_bytes: 4 << 20,
        ..Default::default()
    };
    let mut functions = FunctionGate::new(registry, gate.boundary().clone())
        .map_err(err)?
        .with_limits(limits);
    if let Some(deadline) = probe.and_then(|p| p.deadline) {
        functions = functions.with_call_timeout(deadline);
    }
    Ok(functions)
}

#[async_trait]
impl ConformanceHarness for crate::a2ui::A2uiHarness {
    fn adapter(&self) -> &str {
        "a2ui"
    }

    async fn probe(&self, host: &ConformanceHost, probe: &Probe) -> Result<Observed, HarnessError> {
        let gate = function_gate(host, Some(probe))?;
        let message = format!(
            r#"{{"version":"v1.0","callRendererFunction":{{"functionCallId":"c1","callFunction":{{"@call":{},"catalogId":{},"args":{}}}}}}}"#,
            Value::from(probe.tool),
            Value::from(crate::a2ui::CATALOG_ID),
            probe.arguments
        );
        unless_left(host, probe, async {
            let outcome = gate.handle(message.as_bytes()).await.map_err(err)?;
            Ok(match (&outcome.refusal, &outcome.receipt, &outcome.host_error) {
                (Some(refusal), _, _) => answer("refused", refusal.reason.refusal().as_str()),
                (None, Some(receipt), _) => of_receipt(receipt),
                (None, None, Some(_)) => answer("host_error", "host_error"),
                // Taken up, no receipt yet: the tool was still running at the deadline.
                (None, None, None) => answer("unknown", aml_core::DISPATCH_IN_PROGRESS),
            })
        })
        .await
    }

    async fn list(&self, _host: &ConformanceHost) -> Result<Option<Vec<String>>, HarnessError> {
        // A2UI lists no tools on its wire: the host's catalog is the renderer's.
        Ok(None)
    }
}

#[async_trait]
impl ConformanceHarness for McpHarness {
    fn adapter(&self) -> &str {
        "mcp"
    }

    async fn probe(&self, host: &ConformanceHost, probe: &Probe) -> Result<Observed, HarnessError> {
        // An MCP client library holds the arguments as a JSON object: what it can send.
        let arguments = match aml_core::strict::parse_str(&probe.arguments) {
            Ok(Value::Object(arguments)) => arguments,
            Ok(_) | Err(_) if probe.unparsed_only => {
                return Ok(Observed::WireRefused(
                    "an MCP client holds arguments as a parsed JSON object; it cannot send this text".into(),
                ))
            }
            Ok(other) => return Err(err(format!("arguments are not an object: {other}"))),
            Err(e) => return Err(err(e)),
        };
        let mut server = GuardedToolServer::new("aml-testkit-conformance", host.gate());
        if let Some(deadline) = probe.deadline {
            server = server.with_call_timeout(deadline);
        }
        let client = crate::mcp::connect(server).await?;
        let peer = client.peer().clone();
        let observed = unless_left(host, probe, async {
            let params = CallToolRequestParams::new(probe.tool).with_arguments(arguments);
            let result = peer.call_tool(params).await.map_err(err)?;
            let verdict = crate::mcp::verdict_of(&result)?;
            if let Some(refusal) = verdict["rejection"].as_str() {
                return Ok(answer("refused", refusal));
            }
            if verdict["host_error"].is_string() {
                return Ok(answer("host_error", "host_error"));
            }
            match serde_json::from_value::<Receipt>(verdict["receipt"].clone()) {
                Ok(receipt) => Ok(of_receipt(&receipt)),
                Err(_) if verdict["mcp_result_status"] == "unknown" => {
                    Ok(answer("unknown", aml_core::DISPATCH_IN_PROGRESS))
                }
                Err(e) => Err(err(e)),
            }
        })
        .await;
        // Closing the session is how an MCP caller leaves: the server cancels its requests.
        let _ = client.cancel().await;
        observed
    }

    async fn list(&self, host: &ConformanceHost) -> Result<Option<Vec<String>>, HarnessError> {
        let server = GuardedToolServer::new("aml-testkit-conformance", host.gate());
        let client = crate::mcp::connect(server).await?;
        let tools = client.peer().list_all_tools().await.map_err(err)?;
        let _ = client.cancel().await;
        Ok(Some(tools.into_iter().map(|t| t.name.to_string()).collect()))
    }
}

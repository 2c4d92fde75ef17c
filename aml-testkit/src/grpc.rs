//! The gRPC adapter under test: the harness that carries the 17 guarded-tool cases through
//! a real tonic server and client on loopback.

use std::sync::Arc;

use aml_core::{async_trait, GuardedTool, ToolCatalog, ToolGate};
use aml_grpc::{serve, CallError, GatedToolService, ServiceReason, StatusReport, ToolClient};

use crate::caller_args::CallerArguments;
use crate::harness::{Attempt, Harness, HarnessError};

fn err(e: impl core::fmt::Display) -> HarnessError {
    HarnessError(e.to_string())
}

/// Each call starts `aml.v1.ToolService` on `127.0.0.1:0` over a gate built from the host's
/// tool (its registration with the `send_message` input schema, and its boundary: policy,
/// hooks, sink), and calls it with the agent's argument text from a tonic client.
#[derive(Debug, Default)]
pub struct GrpcHarness;

#[async_trait]
impl Harness for GrpcHarness {
    fn adapter(&self) -> &str {
        "grpc"
    }

    async fn call(&self, tool: Arc<GuardedTool>, args: &CallerArguments) -> Result<Attempt, HarnessError> {
        // The agent's argument text, written once from the arguments as they are now.
        let arguments_json = args.with(|a| a.agent_json());
        let registration = tool
            .registration(crate::a2ui::send_message_schema())
            .map_err(err)?;
        let catalog = ToolCatalog::new().with(registration).map_err(err)?;
        let gate = ToolGate::new(catalog, tool.boundary().clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(err)?;
        let address = listener.local_addr().map_err(err)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, GatedToolService::new(gate), async {
            let _ = stopped.await;
        }));
        let client = ToolClient::connect(format!("http://{address}"))
            .await
            .map_err(err)?;
        let outcome = client.call_tool(tool.tool(), &arguments_json, None).await;
        let _ = stop.send(());
        let _ = server.await;
        match outcome {
            Ok(done) => Ok(Attempt::Completed {
                plan: done.plan,
                receipt: done.receipt,
                result: Some(done.result),
            }),
            Err(refused) => attempt_of(refused),
        }
    }
}

fn attempt_of(refused: CallError) -> Result<Attempt, HarnessError> {
    match refused.report() {
        Some(report) if report.reason == ServiceReason::HostError.as_str() => {
            // A mapper's error displays as the mapper's own message.
            Ok(Attempt::HostError(report.detail.clone().unwrap_or_default()))
        }
        Some(StatusReport {
            plan: Some(plan),
            receipt: Some(receipt),
            ..
        }) => Ok(Attempt::Completed {
            plan: plan.clone(),
            receipt: receipt.clone(),
            result: None,
        }),
        _ => Err(err(format!(
            "the call failed without a receipt: {}",
            refused.status()
        ))),
    }
}

//! The example HTTP/JSON adapter (`aml-http-example`) under test: the harness that carries
//! the 17 guarded-tool cases as `POST /tools/{name}` requests to a real server on loopback.
//! It is the harness a custom adapter writes for itself (see `docs/CUSTOM_ADAPTER.md`); it
//! lives here so the `rehearse` table can show the example's column.

use std::sync::Arc;

use aml_core::{async_trait, GuardedTool, ToolCatalog, ToolGate};
use aml_http_example::{serve, CallReply, HttpToolClient, HttpToolServer, ReplyStatus};

use crate::caller_args::CallerArguments;
use crate::harness::{Attempt, Harness, HarnessError};

fn err(e: impl core::fmt::Display) -> HarnessError {
    HarnessError(e.to_string())
}

/// Each call starts an [`HttpToolServer`] on `127.0.0.1:0` over a gate built from the host's
/// tool (its registration with the `send_message` input schema, and its boundary: policy,
/// hooks, sink), and posts the agent's argument text to it with hyper's client.
#[derive(Debug, Default)]
pub struct HttpHarness;

#[async_trait]
impl Harness for HttpHarness {
    fn adapter(&self) -> &str {
        "http"
    }

    async fn call(&self, tool: Arc<GuardedTool>, args: &CallerArguments) -> Result<Attempt, HarnessError> {
        // The agent's argument text, written once from the arguments as they are now.
        let arguments_json = args.with(|a| a.agent_json());
        let registration = tool
            .registration(aml_core::testing::send_message_schema())
            .map_err(err)?;
        let gate = ToolGate::new(
            ToolCatalog::new().with(registration).map_err(err)?,
            tool.boundary().clone(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(err)?;
        let address = listener.local_addr().map_err(err)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, HttpToolServer::new(gate), async {
            let _ = stopped.await;
        }));
        let answer = HttpToolClient::new(address)
            .call(tool.tool(), arguments_json)
            .await;
        let _ = stop.send(());
        let _ = server.await;
        attempt_of(answer.map_err(err)?.reply)
    }
}

/// The attempt a reply reports: the boundary's plan and receipt (and result), or a host
/// error; a refusal before planning cannot be one of the documented attempts.
pub fn attempt_of(reply: CallReply) -> Result<Attempt, HarnessError> {
    match (reply.status, reply.plan, reply.receipt) {
        (ReplyStatus::HostError, _, _) => Ok(Attempt::HostError(reply.detail.unwrap_or_default())),
        (_, Some(plan), Some(receipt)) => Ok(Attempt::Completed {
            plan,
            receipt,
            result: reply.result,
        }),
        (status, _, _) => Err(err(format!(
            "the server answered {status} ({}) without a receipt: {}",
            reply.reason,
            reply.detail.unwrap_or_default()
        ))),
    }
}

//! A typed client: outcomes instead of bare statuses.

use std::time::Duration;

use aml_core::{Plan, Receipt};
use serde_json::Value;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::convert::{plan_from_message, receipt_from_message};
use crate::pb;
use crate::pb::tool_service_client::ToolServiceClient;
use crate::status::{report_of, StatusReport};

/// A dispatched call.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatched {
    /// The tool's result.
    pub result: Value,
    /// The plan.
    pub plan: Plan,
    /// The receipt (`dispatched`).
    pub receipt: Receipt,
}

/// A call that did not dispatch (or whose outcome is unknown), with what the server said.
#[derive(Debug, Clone)]
pub struct NotDispatched {
    /// The status: its code tells the client what to do (never retry `UNKNOWN`).
    pub status: Status,
    /// The plan and receipt from the status's `ErrorInfo`, when the server attached them.
    pub report: Option<StatusReport>,
}

impl NotDispatched {
    /// The status code.
    pub fn code(&self) -> Code {
        self.status.code()
    }
}

/// A client of `aml.v1.ToolService`.
#[derive(Debug, Clone)]
pub struct ToolClient {
    inner: ToolServiceClient<Channel>,
}

impl ToolClient {
    /// Connects to `endpoint` (e.g. `http://127.0.0.1:50051`).
    pub async fn connect(endpoint: String) -> Result<Self, tonic::transport::Error> {
        Ok(ToolClient {
            inner: ToolServiceClient::connect(endpoint).await?,
        })
    }

    /// Wraps a channel.
    pub fn new(channel: Channel) -> Self {
        ToolClient {
            inner: ToolServiceClient::new(channel),
        }
    }

    /// The host's tools.
    pub async fn list_tools(&self) -> Result<Vec<pb::ToolDescription>, Status> {
        Ok(self
            .inner
            .clone()
            .list_tools(pb::ListToolsRequest {})
            .await?
            .into_inner()
            .tools)
    }

    /// Calls `tool` with `arguments_json`, optionally with a deadline.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments_json: &str,
        timeout: Option<Duration>,
    ) -> Result<Dispatched, NotDispatched> {
        let mut request = tonic::Request::new(pb::CallToolRequest {
            tool: tool.to_owned(),
            arguments_json: arguments_json.to_owned(),
        });
        if let Some(t) = timeout {
            request.set_timeout(t);
        }
        let response = self
            .inner
            .clone()
            .call_tool(request)
            .await
            .map_err(|status| NotDispatched {
                report: report_of(&status),
                status,
            })?;
        let message = response.into_inner();
        let malformed = |what: &str| NotDispatched {
            status: Status::internal(format!("the server sent {what}")),
            report: None,
        };
        let plan = message.plan.as_ref().ok_or_else(|| malformed("no plan"))?;
        let receipt = message.receipt.as_ref().ok_or_else(|| malformed("no receipt"))?;
        Ok(Dispatched {
            result: serde_json::from_str(&message.result_json)
                .map_err(|_| malformed("a result that is not JSON"))?,
            plan: plan_from_message(plan).map_err(|_| malformed("an invalid plan"))?,
            receipt: receipt_from_message(receipt).map_err(|_| malformed("an invalid receipt"))?,
        })
    }
}

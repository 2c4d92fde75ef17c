//! A typed client: a dispatched result, or an error that says whether the tool ran.

use std::time::Duration;

use aml_core::{Plan, Receipt};
use serde_json::Value;
use tonic::codegen::{Body, Bytes, StdError};
use tonic::transport::Channel;
use tonic::Status;

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

/// A call that did not return a result.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The server says the tool was not entered: refused before planning, blocked by the
    /// boundary, or stopped before the one-use claim. Safe to correct and call again.
    #[error("the tool was not run: {status}")]
    NotRun {
        /// The status.
        status: Status,
        /// What its `ErrorInfo` says (the reason, and the plan and receipt when made).
        report: StatusReport,
    },
    /// The tool may have run: it was entered and failed (`unknown`), it was still running
    /// at the deadline, or no answer from this service arrived (the client's own deadline,
    /// a cancellation, a lost connection). Never retry automatically.
    #[error("the tool's outcome is unknown: {status}")]
    OutcomeUnknown {
        /// The status.
        status: Status,
        /// What its `ErrorInfo` says, when the service sent one.
        report: Option<StatusReport>,
    },
}

impl CallError {
    /// Sorts a status: `NotRun` only when this service's `ErrorInfo` says so.
    pub fn from_status(status: Status) -> Self {
        match report_of(&status) {
            Some(report) if report.not_run() => CallError::NotRun { status, report },
            report => CallError::OutcomeUnknown { status, report },
        }
    }

    /// The status.
    pub fn status(&self) -> &Status {
        match self {
            CallError::NotRun { status, .. } | CallError::OutcomeUnknown { status, .. } => status,
        }
    }

    /// The status code.
    pub fn code(&self) -> tonic::Code {
        self.status().code()
    }

    /// What the status's `ErrorInfo` says, when the service sent one.
    pub fn report(&self) -> Option<&StatusReport> {
        match self {
            CallError::NotRun { report, .. } => Some(report),
            CallError::OutcomeUnknown { report, .. } => report.as_ref(),
        }
    }
}

/// A client of `aml.v1.ToolService` over any tonic transport (a [`Channel`], or a tower
/// stack of the host's own).
#[derive(Debug, Clone)]
pub struct ToolClient<T = Channel> {
    inner: ToolServiceClient<T>,
}

impl ToolClient<Channel> {
    /// Connects to `endpoint` (e.g. `http://127.0.0.1:50051`).
    pub async fn connect(endpoint: String) -> Result<Self, tonic::transport::Error> {
        Ok(ToolClient {
            inner: ToolServiceClient::connect(endpoint).await?,
        })
    }
}

impl<T> ToolClient<T>
where
    T: tonic::client::GrpcService<tonic::body::Body> + Clone,
    T::Error: Into<StdError>,
    T::ResponseBody: Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    /// Wraps a transport.
    pub fn new(transport: T) -> Self {
        ToolClient {
            inner: ToolServiceClient::new(transport),
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
    ) -> Result<Dispatched, CallError> {
        let mut request = tonic::Request::new(pb::CallToolRequest::new(tool, arguments_json));
        if let Some(t) = timeout {
            request.set_timeout(t);
        }
        let response = self
            .inner
            .clone()
            .call_tool(request)
            .await
            .map_err(CallError::from_status)?;
        // The server answered OK, so the tool ran; a reply we cannot read leaves its result
        // unknown to us.
        let malformed = |what: &str| CallError::OutcomeUnknown {
            status: Status::internal(format!("the server sent {what}")),
            report: None,
        };
        let message = response.into_inner();
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

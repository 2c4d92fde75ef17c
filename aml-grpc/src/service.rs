//! The gated tool service: the host's [`ToolGate`] as `aml.v1.ToolService`.

use aml_core::{CallOutcome, CallRequest, Refusal, TokioRuntime, ToolGate};
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use crate::convert::{plan_message, receipt_message};
use crate::pb;
use crate::route::ToolServiceRoute;
use crate::server::ServerLimits;
use crate::status::{refusal_status, service_status, status_for, ServiceReason};
use crate::timeout::{answer_by, parse_grpc_timeout};

/// The adapter name in call records and spans.
pub const ADAPTER: &str = "grpc";

/// `aml.v1.ToolService` over the host's [`ToolGate`]: its catalog (names, effects, input
/// schemas), policy, hooks and receipt sink.
///
/// Every call gets exactly one call record in the gate's sink, refusals included.
/// Until the one-use claim, a caller that cancels, disconnects or passes its deadline ends
/// the call as blocked and the tool is never entered; from the claim on, the dispatch
/// completes (on a task of its own if tonic drops the handler) and its receipt is recorded.
/// See ADR 006.
#[derive(Debug, Clone)]
pub struct GatedToolService {
    gate: ToolGate,
    limits: ServerLimits,
}

impl GatedToolService {
    /// Serves `gate` (renamed to adapter `grpc` in records, on tokio's clock and tasks)
    /// with [`ServerLimits::default`].
    pub fn new(gate: ToolGate) -> Self {
        GatedToolService {
            gate: gate.for_adapter(ADAPTER).with_runtime(TokioRuntime),
            limits: ServerLimits::default(),
        }
    }

    /// Sets the limits.
    pub fn with_limits(mut self, limits: ServerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The gate.
    pub fn gate(&self) -> &ToolGate {
        &self.gate
    }

    /// The limits.
    pub fn limits(&self) -> ServerLimits {
        self.limits
    }

    /// The tonic service, with the request size check in front, for a host's own server.
    pub fn into_route(self) -> ToolServiceRoute {
        ToolServiceRoute::new(self)
    }

    async fn call(&self, request: Request<pb::CallToolRequest>) -> Result<pb::CallToolResponse, Status> {
        let arrived = Instant::now();
        let (metadata, _, message) = request.into_parts();
        let tool = match String::from_utf8(message.tool) {
            Ok(tool) => tool,
            Err(e) => {
                let tool = String::from_utf8_lossy(e.as_bytes()).into_owned();
                let detail = "the tool name is not UTF-8";
                self.refuse(&tool, Refusal::InvalidOrUnregisteredCall, detail.to_owned());
                return Err(refusal_status(Refusal::InvalidOrUnregisteredCall, detail));
            }
        };
        let budget = match metadata
            .get("grpc-timeout")
            .map(|v| parse_grpc_timeout(v.as_bytes()))
        {
            Some(Ok(budget)) => Some(budget),
            None => self.limits.default_timeout,
            Some(Err(invalid)) => {
                let detail = invalid.to_string();
                let reason = ServiceReason::InvalidTimeout;
                self.refuse(&tool, Refusal::MalformedRequest, format!("{reason}: {detail}"));
                return Err(service_status(
                    reason,
                    "the grpc-timeout header is malformed; nothing was planned",
                    &detail,
                    None,
                ));
            }
        };
        // The service answers a little before the caller's deadline, so the answer arrives.
        let mut call = CallRequest::bytes(&tool, &message.arguments_json);
        if let Some(due) = budget.and_then(|budget| answer_by(arrived, budget)) {
            call = call.deadline(due.into_std());
        }
        // If the caller goes away, tonic drops this future: before the claim nothing runs;
        // from the claim on, the gate finishes the call on its own (ADR 019).
        match self.gate.call(call).await {
            CallOutcome::Dispatched(done) => Ok(pb::CallToolResponse {
                result_json: done.output().to_string(),
                plan: Some(plan_message(done.plan())),
                receipt: Some(receipt_message(done.receipt())),
            }),
            other => Err(status_for(&other)),
        }
    }

    /// Records a call the service could not make a request of.
    fn refuse(&self, tool: &str, refusal: Refusal, detail: String) {
        tracing::info!(target: "aml.grpc", tool, reason = refusal.as_str(), "call refused before the gate");
        self.gate.refuse_request(tool, refusal, detail);
    }
}

#[tonic::async_trait]
impl pb::tool_service_server::ToolService for GatedToolService {
    async fn list_tools(
        &self,
        _request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let tools = self
            .gate
            .listing()
            .iter()
            .map(|tool| pb::ToolDescription {
                name: tool.name().to_owned(),
                description: tool.description().to_owned(),
                effect: tool.effect().as_str().to_owned(),
                input_schema_json: tool.input_schema().to_string(),
            })
            .collect();
        Ok(Response::new(pb::ListToolsResponse { tools }))
    }

    async fn call_tool(
        &self,
        request: Request<pb::CallToolRequest>,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        self.call(request).await.map(Response::new)
    }
}

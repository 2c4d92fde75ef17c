//! The gated tool service: the host's [`ToolGate`] as `aml.v1.ToolService`.

use aml_core::{CallClock, CallRecord, CallStatus, Deadline, GateAuthorization, Record, Refusal, ToolGate};
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use crate::convert::{plan_message, receipt_message};
use crate::finish::FinishOnDrop;
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
    /// Serves `gate` (renamed to adapter `grpc` in records) with [`ServerLimits::default`].
    pub fn new(gate: ToolGate) -> Self {
        GatedToolService {
            gate: gate.for_adapter(ADAPTER),
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
        let clock = CallClock::start();
        let (metadata, _, message) = request.into_parts();
        let tool = match String::from_utf8(message.tool) {
            Ok(tool) => tool,
            Err(e) => {
                let tool = String::from_utf8_lossy(e.as_bytes()).into_owned();
                let detail = "the tool name is not UTF-8";
                self.record_refusal(&tool, &clock, Err(Refusal::InvalidOrUnregisteredCall), detail);
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
                self.record_refusal(&tool, &clock, Ok(ServiceReason::InvalidTimeout), &detail);
                return Err(service_status(
                    ServiceReason::InvalidTimeout,
                    "the grpc-timeout header is malformed; nothing was planned",
                    &detail,
                    None,
                ));
            }
        };
        let due = budget.and_then(|budget| answer_by(arrived, budget));
        if due.is_some_and(|due| Instant::now() >= due) {
            let detail = "the deadline had passed when the request arrived";
            self.record_refusal(&tool, &clock, Ok(ServiceReason::DeadlineExceeded), detail);
            return Err(service_status(
                ServiceReason::DeadlineExceeded,
                "the deadline passed before planning; nothing was planned",
                detail,
                None,
            ));
        }
        // Lookup, schema, strict parse and plan happen now; the gate records every outcome.
        let prepared = self.gate.prepare_json(&tool, &message.arguments_json);
        let deadline = due.map(|due| Deadline::new(due.into_std(), tokio::time::sleep_until(due)));
        // Approval and the claim run in this handler: if the caller goes away, tonic drops
        // this future and nothing is claimed or entered (the gate records it as blocked).
        let authorized = match self.gate.authorize(prepared, deadline).await {
            GateAuthorization::Authorized(authorized) => authorized,
            GateAuthorization::Ended(outcome) => return Err(status_for(&outcome)),
            _ => return Err(Status::internal("the gate ended a call in an unknown way")),
        };
        // From the claim on, the dispatch completes even when the caller is gone: it runs on
        // this task, and if tonic drops the handler, on a task of its own.
        let plan = due.map(|_| authorized.plan().clone());
        let mut running = FinishOnDrop::new(authorized.execute(None));
        let outcome = match due {
            Some(due) => match tokio::time::timeout_at(due, &mut running).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    return Err(service_status(
                        ServiceReason::DispatchInProgress,
                        "the deadline passed while the tool was running; its receipt is in the host's record: do not retry automatically",
                        "the tool was entered and had not returned by the deadline",
                        plan.as_ref(),
                    ))
                }
            },
            None => running.await,
        };
        if outcome.status() != CallStatus::Dispatched {
            return Err(status_for(&outcome));
        }
        Ok(pb::CallToolResponse {
            result_json: outcome
                .output()
                .map(serde_json::Value::to_string)
                .unwrap_or_else(|| "null".to_owned()),
            plan: outcome.plan().map(plan_message),
            receipt: outcome.receipt().map(receipt_message),
        })
    }

    /// Records a call the service ended before the gate saw it: a core refusal, or a
    /// [`ServiceReason`] at the head of the detail.
    fn record_refusal(
        &self,
        tool: &str,
        clock: &CallClock,
        why: Result<ServiceReason, Refusal>,
        detail: &str,
    ) {
        let mut record = CallRecord::new(ADAPTER, tool, clock);
        let reason = match why {
            Ok(reason) => {
                record.refusal = reason.refusal();
                record.detail = Some(format!("{reason}: {detail}"));
                reason.as_str()
            }
            Err(refusal) => {
                record.refusal = Some(refusal);
                record.detail = Some(detail.to_owned());
                refusal.as_str()
            }
        };
        tracing::info!(target: "aml.grpc", tool, reason, "call refused before the gate");
        self.gate.boundary().sink().record(&Record::Call(record));
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
            .catalog()
            .tools()
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

//! The gated tool service: host tools behind the boundary, as `aml.v1.ToolService`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aml_core::{Deadline, ExecutionStatus, GuardedTool, GuardedToolError};
use serde_json::Value;
use tonic::{Code, Request, Response, Status};

use crate::convert::{plan_message, receipt_message};
use crate::pb;
use crate::status::{outcome_status, status};

struct HostedTool {
    tool: Arc<GuardedTool>,
    description: String,
    effect: String,
    input_schema: Value,
    validator: jsonschema::Validator,
}

/// A tool registration the service cannot use.
#[derive(Debug, thiserror::Error)]
#[error("tool {tool}: invalid input schema: {detail}")]
pub struct SchemaError {
    tool: String,
    detail: String,
}

/// How much earlier than the caller's deadline the boundary stops waiting for approval
/// (a fifth of the caller's budget, at most this much), so its answer still arrives in time.
const DEADLINE_MARGIN: Duration = Duration::from_millis(100);

/// Receives every boundary outcome, for the host's receipt log.
pub type OutcomeSink = Arc<dyn Fn(&aml_core::DispatchOutcome) + Send + Sync>;

/// `aml.v1.ToolService` over the host's guarded tools.
#[derive(Default)]
pub struct GatedToolService {
    tools: BTreeMap<String, HostedTool>,
    sink: Option<OutcomeSink>,
}

impl core::fmt::Debug for GatedToolService {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GatedToolService")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl GatedToolService {
    /// A service with no tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reports every boundary outcome (plan and receipt) to `sink`, including those of
    /// calls whose client went away.
    pub fn with_outcome_sink(mut self, sink: OutcomeSink) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Exposes `tool` under `name`, with the input schema the host enforces before planning.
    pub fn with_tool(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        tool: Arc<GuardedTool>,
    ) -> Result<Self, SchemaError> {
        let name = name.into();
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&input_schema)
            .map_err(|e| SchemaError {
                tool: name.clone(),
                detail: e.to_string(),
            })?;
        let effect = tool.effect().as_str().to_owned();
        self.tools.insert(
            name,
            HostedTool {
                tool,
                description: description.into(),
                effect,
                input_schema,
                validator,
            },
        );
        Ok(self)
    }

    async fn call(&self, request: Request<pb::CallToolRequest>) -> Result<pb::CallToolResponse, Status> {
        let arrived = Instant::now();
        let timeout = grpc_timeout(request.metadata());
        if timeout == Some(Duration::ZERO) {
            return Err(refusal(
                Code::DeadlineExceeded,
                "deadline_exceeded",
                "the request arrived after its deadline",
            ));
        }
        let request = request.into_inner();
        let hosted = self.tools.get(&request.tool).ok_or_else(|| {
            refusal(
                Code::InvalidArgument,
                "invalid_or_unregistered_call",
                "no such tool",
            )
        })?;
        // Arguments the strict parser refuses skip the schema: the boundary blocks them
        // with their canonical code.
        if let Ok(args) = aml_core::strict::parse_str(&request.arguments_json) {
            if !hosted.validator.is_valid(&args) {
                return Err(refusal(
                    Code::InvalidArgument,
                    "invalid_arguments",
                    "the arguments are outside the tool's input schema",
                ));
            }
        }
        let deadline = match timeout {
            Some(limit) => {
                // Stop waiting a little before the caller does, so our answer still reaches it.
                let at = arrived + limit - (limit / 5).min(DEADLINE_MARGIN);
                if Instant::now() >= at {
                    return Err(refusal(
                        Code::DeadlineExceeded,
                        "deadline_exceeded",
                        "the deadline passed before planning",
                    ));
                }
                Some(Deadline::new(at, tokio::time::sleep_until(at.into())))
            }
            None => None,
        };
        // The dispatch runs in its own task: if the transport drops this handler (client gone,
        // tonic's own timeout), a call that already started still finishes with its receipt.
        let tool = Arc::clone(&hosted.tool);
        let sink = self.sink.clone();
        let arguments = request.arguments_json;
        let task = tokio::spawn(async move {
            let outcome = match deadline {
                Some(deadline) => tool.call_json_until(arguments.as_bytes(), deadline).await,
                None => tool.call_json(arguments.as_bytes()).await,
            };
            if let (Some(sink), Ok(outcome)) = (&sink, &outcome) {
                sink(outcome);
            }
            outcome
        });
        let pending = task.await.map_err(|e| {
            status(
                Code::Unknown,
                format!("the dispatch task failed: {e}"),
                "host_dispatch_error",
                HashMap::new(),
            )
        })?;
        let outcome = pending.map_err(|e| {
            let detail = match e {
                GuardedToolError::Mapper(e) => e.to_string(),
                other => other.to_string(),
            };
            status(
                Code::Internal,
                "the host failed before planning this call".to_owned(),
                "host_error",
                HashMap::from([("detail".to_owned(), detail)]),
            )
        })?;
        if outcome.receipt().execution_status() != ExecutionStatus::Dispatched {
            return Err(outcome_status(&outcome));
        }
        Ok(pb::CallToolResponse {
            result_json: outcome
                .output()
                .map(Value::to_string)
                .unwrap_or_else(|| "null".to_owned()),
            plan: Some(plan_message(outcome.plan())),
            receipt: Some(receipt_message(outcome.receipt())),
        })
    }
}

fn refusal(code: Code, reason: &str, message: &str) -> Status {
    status(code, message.to_owned(), reason, HashMap::new())
}

/// The `grpc-timeout` header: `<digits><unit>`, unit one of H M S m u n.
fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let text = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[tonic::async_trait]
impl pb::tool_service_server::ToolService for GatedToolService {
    async fn list_tools(
        &self,
        _request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let tools = self
            .tools
            .iter()
            .map(|(name, hosted)| pb::ToolDescription {
                name: name.clone(),
                description: hosted.description.clone(),
                effect: hosted.effect.clone(),
                input_schema_json: hosted.input_schema.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_units_parse() {
        let mut m = tonic::metadata::MetadataMap::new();
        for (text, expected) in [
            ("5S", Some(Duration::from_secs(5))),
            ("250m", Some(Duration::from_millis(250))),
            ("1H", Some(Duration::from_secs(3600))),
            ("7n", Some(Duration::from_nanos(7))),
            ("x", None),
            ("10Q", None),
        ] {
            m.insert("grpc-timeout", text.parse().unwrap());
            assert_eq!(grpc_timeout(&m), expected, "{text}");
        }
    }
}

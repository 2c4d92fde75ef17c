//! An MCP server whose tools are the host's own guarded tools: each `tools/call` is
//! schema-checked and then run through its [`GuardedTool`] (plan, approval, claim,
//! frozen-bytes dispatch). Answers carry the plan and receipt under `_meta`.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use aml_core::{ExecutionStatus, GuardedTool, GuardedToolError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject,
    ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{MaybeSendFuture, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{json, Value};

use crate::gate::{Rejection, VERDICT_META_KEY};
use crate::registry::RegistryError;

struct HostedTool {
    tool: Arc<GuardedTool>,
    description: String,
    input_schema: Arc<JsonObject>,
    validator: jsonschema::Validator,
}

/// An MCP server exposing host tools behind the boundary.
///
/// The verdict under `_meta["aml.action-boundary/verdict"]` is
/// `{rejection, plan, receipt, mcp_result_status, result, host_error}`; blocked, refused
/// and uncertain calls are `isError` results that say why.
#[derive(Default)]
pub struct GuardedToolServer {
    name: String,
    tools: BTreeMap<String, HostedTool>,
}

impl core::fmt::Debug for GuardedToolServer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GuardedToolServer")
            .field("name", &self.name)
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl GuardedToolServer {
    /// A server with no tools, announcing itself as `name`.
    pub fn new(name: impl Into<String>) -> Self {
        GuardedToolServer {
            name: name.into(),
            tools: BTreeMap::new(),
        }
    }

    /// Exposes `tool` as the MCP tool `name` with `input_schema` (which must be an object
    /// schema; the host enforces it before planning).
    pub fn with_tool(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        tool: Arc<GuardedTool>,
    ) -> Result<Self, RegistryError> {
        let name = name.into();
        let schema_error = |detail: String| RegistryError::Schema {
            tool: name.clone(),
            detail,
        };
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&input_schema)
            .map_err(|e| schema_error(e.to_string()))?;
        let Value::Object(object) = input_schema else {
            return Err(schema_error("an MCP input schema must be a JSON object".into()));
        };
        self.tools.insert(
            name,
            HostedTool {
                tool,
                description: description.into(),
                input_schema: Arc::new(object),
                validator,
            },
        );
        Ok(self)
    }

    async fn run(&self, request: CallToolRequestParams) -> CallToolResult {
        let Some(hosted) = self.tools.get(request.name.as_ref()) else {
            return refused(Rejection::InvalidOrUnregisteredCall);
        };
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        if !hosted.validator.is_valid(&arguments) {
            return refused(Rejection::InvalidArguments);
        }
        let outcome = match hosted.tool.call(&arguments).await {
            Ok(outcome) => outcome,
            Err(error) => {
                let detail = match error {
                    GuardedToolError::Mapper(e) => e.to_string(),
                    other => other.to_string(),
                };
                let verdict = json!({"rejection": null, "plan": null, "receipt": null,
                                     "mcp_result_status": "not_called", "host_error": detail});
                return with_verdict(
                    text_error("AML gate could not prepare this call (host error)."),
                    verdict,
                );
            }
        };
        let status = outcome.receipt().execution_status();
        let verdict = json!({
            "rejection": null,
            "plan": outcome.plan().to_value(),
            "receipt": outcome.receipt().to_value(),
            "mcp_result_status": if status == ExecutionStatus::Dispatched { "returned" } else { "not_called" },
            "result": outcome.output(),
            "host_error": null,
        });
        let answer = match (status, outcome.output()) {
            (ExecutionStatus::Dispatched, Some(output)) => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(output.to_string())]);
                r.structured_content = Some(output.clone());
                r
            }
            (ExecutionStatus::Unknown, _) => {
                text_error("Tool outcome is uncertain; do not retry automatically (host_dispatch_error).")
            }
            _ => text_error(&format!(
                "AML boundary blocked this call: {}",
                outcome.receipt().reason()
            )),
        };
        with_verdict(answer, verdict)
    }
}

fn text_error(text: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn refused(rejection: Rejection) -> CallToolResult {
    let verdict = json!({"rejection": rejection.as_str(), "plan": null, "receipt": null,
                         "mcp_result_status": "not_called", "host_error": null});
    with_verdict(
        text_error(&format!("AML gate refused the call: {}", rejection.as_str())),
        verdict,
    )
}

fn with_verdict(mut result: CallToolResult, verdict: Value) -> CallToolResult {
    let mut meta = JsonObject::new();
    meta.insert(VERDICT_META_KEY.to_owned(), verdict);
    result.meta = Some(MetaObject(meta));
    result
}

impl ServerHandler for GuardedToolServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(self.name.clone(), env!("CARGO_PKG_VERSION")))
    }

    fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListToolsResult, McpError>> + MaybeSendFuture + '_ {
        let tools = self
            .tools
            .iter()
            .map(|(name, hosted)| {
                Tool::new(
                    name.clone(),
                    hosted.description.clone(),
                    Arc::clone(&hosted.input_schema),
                )
            })
            .collect();
        std::future::ready(Ok(ListToolsResult::with_all_items(tools)))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        Ok(CallToolResponse::Complete(self.run(request).await))
    }
}

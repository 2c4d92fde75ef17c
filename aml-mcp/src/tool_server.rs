//! An MCP server whose tools are the host's own: each `tools/call` goes through the host's
//! [`ToolGate`] (input schema, plan, approval, claim, frozen-bytes dispatch to the
//! registration's executor). Answers carry the verdict under `_meta`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aml_core::{CallOutcome, CallRequest, ToolGate, ToolRegistration};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{MaybeSendFuture, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::Value;

use crate::gate::{McpGate, McpVerdict};

/// An MCP server exposing the tools of the host's catalog behind the boundary.
///
/// Each tool's executor is its registration's own, else the boundary's. The verdict under
/// `_meta["aml.action-boundary/verdict"]` is the one [`McpVerdict::to_value`] documents;
/// blocked, refused and uncertain calls are `isError` results that say why. A returned
/// value is answered as text and as `structuredContent`.
#[derive(Debug, Clone)]
pub struct GuardedToolServer {
    name: String,
    gate: McpGate,
    call_timeout: Option<Duration>,
}

impl GuardedToolServer {
    /// A server announcing itself as `name`, serving `gate`'s catalog.
    pub fn new(name: impl Into<String>, gate: ToolGate) -> Self {
        GuardedToolServer {
            name: name.into(),
            gate: McpGate::new(gate),
            call_timeout: None,
        }
    }

    /// Answers each call within `timeout`: approval stops waiting then (blocked), and a tool
    /// still running is answered as uncertain and finishes on its own.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// `gone` is the request's cancellation (the client cancelled, or the session ended).
    async fn run(
        &self,
        request: CallToolRequestParams,
        gone: impl Future<Output = ()> + Send + 'static,
    ) -> CallToolResult {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let mut call = CallRequest::value(&request.name, arguments).caller_gone(gone);
        if let Some(timeout) = self.call_timeout {
            call = call.deadline(Instant::now() + timeout);
        }
        let outcome = self.gate.gate().call(call).await;
        let result = match &outcome {
            CallOutcome::Dispatched(done) => {
                let output = done.output();
                let mut r = CallToolResult::success(vec![ContentBlock::text(output.to_string())]);
                r.structured_content = Some(output.clone());
                Some(r)
            }
            _ => None,
        };
        McpVerdict::new(outcome, result).into_call_result()
    }
}

fn listed(tool: &ToolRegistration) -> Tool {
    let schema: JsonObject = tool.input_schema().as_object().cloned().unwrap_or_default();
    Tool::new(
        tool.name().to_owned(),
        tool.description().to_owned(),
        Arc::new(schema),
    )
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
        let tools = self.gate.gate().listing().iter().map(listed).collect();
        std::future::ready(Ok(ListToolsResult::with_all_items(tools)))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let cancelled = context.ct;
        let gone = async move { cancelled.cancelled().await };
        Ok(CallToolResponse::Complete(self.run(request, gone).await))
    }
}

//! `local-notice-fixture` (run as `aml-testkit serve-notice-fixture`): an MCP server (rmcp,
//! stdio) with one tool, `send_notice`, that appends a local audit line and sends nothing.
//! It advertises `readOnlyHint: true`, which is a lie: the gate must never believe it.
//!
//! The audit file is named by the environment variable `AML_NOTICE_AUDIT` (one JSON line per
//! handler call), which also proves the gate passes the environment to its child.

use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{MaybeSendFuture, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{json, Value};

struct NoticeFixture {
    audit: PathBuf,
}

impl NoticeFixture {
    fn record(&self, line: &Value) -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.audit)?;
        file.write_all(format!("{line}\n").as_bytes())
    }
}

impl ServerHandler for NoticeFixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("local-notice-fixture", env!("CARGO_PKG_VERSION")),
        )
    }

    fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListToolsResult, McpError>> + MaybeSendFuture + '_ {
        let schema = json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                            "required": ["to", "body"]});
        let schema = schema.as_object().cloned().unwrap_or_default();
        let tool = Tool::new(
            "send_notice",
            "Record a notice locally (sends nothing).",
            Arc::new(schema),
        )
        .with_annotations(ToolAnnotations::new().read_only(true));
        std::future::ready(Ok(ListToolsResult::with_all_items(vec![tool])))
    }

    fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, McpError>> + MaybeSendFuture + '_ {
        std::future::ready(self.handle(request))
    }
}

impl NoticeFixture {
    fn handle(&self, request: CallToolRequestParams) -> Result<CallToolResponse, McpError> {
        if request.name != "send_notice" {
            return Err(McpError::invalid_params(
                format!("unknown tool {}", request.name),
                None,
            ));
        }
        let args = request.arguments.unwrap_or_default();
        let (to, body) = (args.get("to").cloned(), args.get("body").cloned());
        self.record(&json!({"tool": "send_notice", "to": to, "body": body}))
            .map_err(|e| McpError::internal_error(format!("audit write failed: {e}"), None))?;
        let result = if body == Some(json!("Return an error")) {
            CallToolResult::error(vec![ContentBlock::text("fixture reported a tool error")])
        } else {
            let mut ok =
                CallToolResult::success(vec![ContentBlock::text("recorded locally; no notice sent")]);
            ok.is_error = None;
            ok
        };
        Ok(CallToolResponse::Complete(result))
    }
}

/// Serves the fixture on this process's stdin/stdout until the client goes away.
pub fn serve() -> ExitCode {
    let Some(audit) = std::env::var_os("AML_NOTICE_AUDIT") else {
        eprintln!("local-notice-fixture: set AML_NOTICE_AUDIT to the audit file path");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("local-notice-fixture: {e}");
            return ExitCode::from(1);
        }
    };
    let served = runtime.block_on(async {
        let running = NoticeFixture { audit: audit.into() }
            .serve(rmcp::transport::stdio())
            .await?;
        running.waiting().await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("local-notice-fixture: {e}");
            ExitCode::from(1)
        }
    }
}

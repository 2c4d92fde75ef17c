//! The upstream half of `aml-mcp-gate`: an rmcp server handler that forwards `tools/list`
//! and `tools/call` to an MCP server running as a child process. Wrapped in a
//! [`crate::GatedServer`], every forwarded call has passed the boundary.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceError};

/// Forwards tool requests to an upstream server.
#[derive(Debug, Clone)]
pub struct Upstream {
    peer: Peer<RoleClient>,
    instructions: Option<String>,
}

impl Upstream {
    /// Forwards to `peer`, passing on its instructions to clients.
    pub fn new(peer: Peer<RoleClient>) -> Self {
        let instructions = peer.peer_info().and_then(|info| info.instructions.clone());
        Upstream { peer, instructions }
    }
}

fn upstream_error(e: ServiceError) -> McpError {
    McpError::internal_error(format!("upstream server: {e}"), None)
}

impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("aml-mcp-gate", env!("CARGO_PKG_VERSION")));
        if let Some(instructions) = &self.instructions {
            info = info.with_instructions(instructions.clone());
        }
        info
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.peer.list_tools(request).await.map_err(upstream_error)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.peer.call_tool_once(request).await.map_err(upstream_error)
    }
}

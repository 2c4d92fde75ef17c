//! The client-side gate: every `call_tool` passes the boundary before anything reaches
//! the server.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::{Peer, RoleClient};
use rmcp::ServiceError;

use crate::gate::{ForwardError, McpGate, McpVerdict};

/// An rmcp client peer behind the gate.
///
/// A transport failure or a timeout after the request was sent is `unknown` (the server
/// may have acted) and is never retried.
#[derive(Debug, Clone)]
pub struct GatedClient {
    peer: Peer<RoleClient>,
    gate: McpGate,
    timeout: Option<Duration>,
}

impl GatedClient {
    /// Gates `peer` with `gate`.
    pub fn new(peer: Peer<RoleClient>, gate: McpGate) -> Self {
        GatedClient {
            peer,
            gate,
            timeout: None,
        }
    }

    /// Gives each forwarded call at most `timeout` before its outcome is `unknown`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The server's tools, as it advertises them. Annotations such as `readOnlyHint` are
    /// the server's claims; they never change a decision.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, ServiceError> {
        self.peer.list_all_tools().await
    }

    /// Calls a tool through the gate.
    pub async fn call_tool(&self, params: CallToolRequestParams) -> McpVerdict {
        let timeout = self.timeout;
        let peer = self.peer.clone();
        self.gate
            .call(params, move |params| {
                let peer = peer.clone();
                async move {
                    let sent = peer.call_tool(params);
                    let result = match timeout {
                        Some(limit) => tokio::time::timeout(limit, sent)
                            .await
                            .map_err(|_| ForwardError::Timeout(limit))?,
                        None => sent.await,
                    };
                    result.map_err(ForwardError::Transport)
                }
            })
            .await
    }
}

//! The MCP relay engine over channels, as `aml-mcp`'s own session tests drive it: a client
//! side the target writes to, and a server side the target plays.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use aml_core::{ActionBoundary, Policy};
use aml_mcp::relay::{
    frame::LineFramer, run, Connection, Inbound, Peer, RelayConfig, RelayEnd, RelayTools, Upstream,
};
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

/// The longest message either side may send: small, so fuzzing reaches the oversized path.
pub const MAX_MESSAGE: usize = 512;
/// The relay's limit on a forwarded request; the paused clock passes it at once.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// Longer than every limit of the relay: after this, whatever will be answered has been.
pub const SETTLE: Duration = Duration::from_secs(120);

/// The two ends of a running relay.
#[derive(Debug)]
pub struct Ends {
    /// Messages from the client to the relay.
    pub to_relay: mpsc::Sender<Inbound>,
    /// Messages from the relay to the client.
    pub from_relay: mpsc::Receiver<Bytes>,
    /// Messages from the server to the relay.
    pub server_in: mpsc::Sender<Inbound>,
    /// Messages from the relay to the server.
    pub server_out: mpsc::Receiver<Bytes>,
    /// Keeps the server "running" (dropping it would say it exited).
    pub exit: oneshot::Sender<String>,
    /// The engine.
    pub relay: tokio::task::JoinHandle<RelayEnd>,
}

/// The relay's tools: one tool, `send`, allowed to `team`. Built once: compiling the input
/// schema for every input would dominate the run.
pub fn tools() -> RelayTools {
    static TOOLS: OnceLock<RelayTools> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let catalog = r#"{"tools": [{"name": "send", "effect": "send", "purpose": "Send a note",
                "resource": {"argument": "to"}, "input_schema": {"type": "object", "required": ["to"]}}]}"#;
            let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
                {"tool": "send", "effect": "send", "resource": "team", "requires_approval": false}]}));
            let boundary = ActionBoundary::builder(Arc::new(policy)).build();
            RelayTools::from_json(catalog, boundary).expect("the catalog loads")
        })
        .clone()
}

/// Starts the engine (inside a runtime) with [`tools`].
pub fn start() -> Ends {
    let tools = tools();
    let config = RelayConfig::default()
        .with_upstream_timeout(UPSTREAM_TIMEOUT)
        .with_handshake_timeout(UPSTREAM_TIMEOUT)
        .with_max_message_bytes(MAX_MESSAGE);
    let (client, Peer { to_relay, from_relay }) = Connection::in_memory(1024);
    let (upstream, Peer { to_relay: server_in, from_relay: server_out }, exit) =
        Upstream::in_memory(1024);
    let relay = tokio::spawn(run(
        tools,
        config,
        client,
        upstream,
        Vec::new(),
    ));
    Ends {
        to_relay,
        from_relay,
        server_in,
        server_out,
        exit,
        relay,
    }
}

/// The input as the stdio transport frames it: lines, blank ones skipped, long ones
/// reported as oversized.
pub fn frames(data: &[u8]) -> Vec<Inbound> {
    let mut framer = LineFramer::new(MAX_MESSAGE);
    framer.buffer().extend_from_slice(data);
    framer.buffer().extend_from_slice(b"\n");
    std::iter::from_fn(|| framer.next_frame()).collect()
}

/// A well-behaved server's answer to one of the relay's requests.
pub fn server_answer(request: &Value) -> Option<Bytes> {
    let id = request.get("id")?;
    let result = match request.get("method")?.as_str()? {
        "tools/list" => json!({"tools": [{"name": "send", "inputSchema": {"type": "object"}}]}),
        "tools/call" => json!({"content": [{"type": "text", "text": "ok"}]}),
        "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {},
                               "serverInfo": {"name": "fuzz", "version": "0"}}),
        _ => json!({}),
    };
    Some(Bytes::from(
        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
    ))
}

/// Everything the relay has sent to one side so far.
pub fn drain(rx: &mut mpsc::Receiver<Bytes>) -> Vec<Bytes> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

/// `line` with every `@ID` in it replaced by `id` (a fuzzed server message that names the
/// relay's request).
pub fn with_id(line: &[u8], id: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.windows(3).position(|w| w == b"@ID") {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(id);
        rest = &rest[at + 3..];
    }
    out.extend_from_slice(rest);
    out
}

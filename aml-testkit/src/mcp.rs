//! The MCP adapter under test: the 6 documented `aml-connected-mcp-pilot/1` cases against
//! a real rmcp server fixture in a child process, and the harness that carries the 17
//! guarded-tool cases over MCP.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aml_core::{
    async_trait, ActionBoundary, Effect, FrozenProposal, GuardedTool, LivePolicy, Plan, Policy,
    ProposalParts, Receipt, Rule, ToolGate,
};
use aml_mcp::{
    GatedClient, GuardedToolServer, McpGate, McpVerdict, ResourceRule, ToolCatalog, ToolRegistration,
    VERDICT_META_KEY,
};
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::caller_args::CallerArguments;
use crate::fixtures::{ApprovalBehavior, FixtureApproval};
use crate::harness::{Attempt, Harness, HarnessError};
use crate::log::HostLog;

/// The report protocol.
pub const MCP_PROTOCOL: &str = "aml-connected-mcp-pilot/1";
/// The fixture server's tool.
pub const NOTICE_TOOL: &str = "send_notice";
/// This host's purpose for `send_notice` (the seed's host did not publish its own, so its
/// digests differ from ours; every other field is compared).
pub const NOTICE_PURPOSE: &str = "Send a local notice";
const TEAM: &str = "team@example.test";
const OUTSIDE: &str = "outside@example.test";
const BODY: &str = "Build passed.";

fn err(e: impl core::fmt::Display) -> HarnessError {
    HarnessError(e.to_string())
}

/// Serves `server` over an in-memory stream and connects an rmcp client to it; the server
/// ends with the client's session.
pub(crate) async fn connect(
    server: GuardedToolServer,
) -> Result<RunningService<RoleClient, ()>, HarnessError> {
    let (server_end, client_end) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_end).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(client_end).await.map_err(err)
}

/// The gate's verdict a result carries under `_meta`.
pub(crate) fn verdict_of(result: &CallToolResult) -> Result<Value, HarnessError> {
    result
        .meta
        .as_ref()
        .and_then(|m| m.0.get(VERDICT_META_KEY))
        .cloned()
        .ok_or_else(|| err("the result carries no verdict"))
}

/// The `aml-testkit` executable that serves the fixture (`serve-notice-fixture`):
/// `$AML_TESTKIT_BIN`, else this executable if it is `aml-testkit`, else the one beside it
/// (or one directory up, for test binaries in `deps/`).
pub fn fixture_server_path() -> Result<PathBuf, HarnessError> {
    if let Some(path) = std::env::var_os("AML_TESTKIT_BIN") {
        return Ok(path.into());
    }
    let exe = std::env::current_exe().map_err(err)?;
    if exe.file_stem().is_some_and(|n| n == "aml-testkit") {
        return Ok(exe);
    }
    let dir = exe
        .parent()
        .ok_or_else(|| err("the executable has no directory"))?;
    [dir.join("aml-testkit"), dir.join("../aml-testkit")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            err("aml-testkit not found; build it (cargo build -p aml-testkit) or set AML_TESTKIT_BIN")
        })
}

/// The `aml-mcp-gate` binary of the same build as the running test (`target/<profile>/`),
/// for tests that put the gate between a client and a server.
pub fn gate_binary_path() -> Result<PathBuf, HarnessError> {
    let exe = std::env::current_exe().map_err(err)?;
    let dir = exe
        .parent()
        .ok_or_else(|| err("the executable has no directory"))?;
    [dir.join("aml-mcp-gate"), dir.join("../aml-mcp-gate")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            err("aml-mcp-gate is not built: run `cargo test --workspace`, or `cargo build -p aml-mcp-gate` before `cargo test -p aml-testkit`")
        })
}

fn notice_schema() -> Value {
    json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
           "required": ["to", "body"], "additionalProperties": false})
}

fn object(v: Value) -> JsonObject {
    v.as_object().cloned().unwrap_or_default()
}

/// A running fixture server with its own audit file.
struct FixtureServer {
    client: rmcp::service::RunningService<rmcp::RoleClient, ()>,
    audit: PathBuf,
    _dir: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

static NEXT_DIR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl FixtureServer {
    async fn start(server: &Path) -> Result<Self, HarnessError> {
        let n = NEXT_DIR.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("aml-notice-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(err)?;
        let audit = dir.join("audit.jsonl");
        let mut command = tokio::process::Command::new(server);
        command
            .arg("serve-notice-fixture")
            .env("AML_NOTICE_AUDIT", &audit);
        let transport = TokioChildProcess::new(command).map_err(err)?;
        let client = ().serve(transport).await.map_err(err)?;
        Ok(FixtureServer {
            client,
            audit,
            _dir: TempDir(dir),
        })
    }

    fn audit_lines(&self) -> Vec<Value> {
        read_audit(&self.audit)
    }
}

fn read_audit(path: &Path) -> Vec<Value> {
    read_json_lines(path).unwrap_or_default()
}

/// The JSON objects of a JSON-lines file (an audit or receipt log); a file that does not
/// exist yet holds none.
pub fn read_json_lines(path: &Path) -> Result<Vec<Value>, HarnessError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(err(format!("{path:?}: {e}"))),
    };
    text.lines()
        .map(|l| serde_json::from_str(l).map_err(|e| err(format!("{path:?}: {e}"))))
        .collect()
}

/// The digest this host computes for the approved `send_notice` call.
pub fn approved_digest() -> Result<aml_core::Sha256Digest, HarnessError> {
    let args = object(json!({"to": TEAM, "body": BODY}));
    FrozenProposal::freeze(ProposalParts {
        tool: NOTICE_TOOL,
        effect: Effect::Send,
        resource: TEAM,
        purpose: NOTICE_PURPOSE,
        arguments: &args,
    })
    .map(|p| p.digest())
    .map_err(err)
}

#[derive(Deserialize)]
struct CaseText {
    id: String,
    title: String,
}

#[derive(Deserialize)]
struct Catalogue {
    cases: Vec<CaseText>,
}

fn proposed(id: &str) -> (String, Value) {
    match id {
        "outside" => (NOTICE_TOOL.into(), json!({"to": OUTSIDE, "body": BODY})),
        "changed_body" => (NOTICE_TOOL.into(), json!({"to": TEAM, "body": "Changed body"})),
        "extra_recipient" => (
            NOTICE_TOOL.into(),
            json!({"to": TEAM, "body": BODY, "cc": [OUTSIDE]}),
        ),
        "wrong_tool" => ("delete_records".into(), json!({"to": TEAM, "body": BODY})),
        "tool_error" => (NOTICE_TOOL.into(), json!({"to": TEAM, "body": "Return an error"})),
        _ => (NOTICE_TOOL.into(), json!({"to": TEAM, "body": BODY})),
    }
}

async fn run_case(text: &CaseText, server: &Path) -> Result<Value, HarnessError> {
    let server = FixtureServer::start(server).await?;
    let catalog = ToolCatalog::new()
        .with(
            ToolRegistration::new(
                NOTICE_TOOL,
                Effect::Send,
                NOTICE_PURPOSE,
                ResourceRule::Argument("to".into()),
                notice_schema(),
            )
            .map_err(err)?,
        )
        .map_err(err)?;
    let policy = LivePolicy::new(
        Policy::from_rules([Rule {
            tool: NOTICE_TOOL.into(),
            effect: Effect::Send,
            resource: TEAM.into(),
            requires_approval: true,
            caller: None,
        }])
        .map_err(err)?,
    );
    let behavior = if text.id == "changed_body" {
        ApprovalBehavior::Fixed(approved_digest()?)
    } else {
        ApprovalBehavior::Matching
    };
    let boundary = ActionBoundary::builder(policy)
        .approval(FixtureApproval::new(HostLog::new(), behavior))
        .build();
    let gate = McpGate::new(ToolGate::new(catalog, boundary));
    let client = GatedClient::new(server.client.peer().clone(), gate);
    let (name, arguments) = proposed(&text.id);
    let verdict = client
        .call_tool(CallToolRequestParams::new(name.clone()).with_arguments(object(arguments.clone())))
        .await;
    let audit = server.audit_lines();
    let _ = server.client.cancel().await;
    Ok(json!({
        "id": text.id, "title": text.title,
        "proposed_call": {"name": name, "arguments": arguments},
        "server_handler_calls": audit.len(), "server_audit": audit,
        "verdict": report_verdict(&verdict),
    }))
}

/// The verdict in the documented report's form: the `_meta` verdict without the result's
/// digest, with the result itself when the server returned one (minus `resultType`,
/// protocol bookkeeping).
fn report_verdict(verdict: &McpVerdict) -> Value {
    let mut v = verdict.to_value();
    if let Some(object) = v.as_object_mut() {
        object.remove("result_digest");
    }
    if let Some(result) = verdict.result() {
        let mut result = serde_json::to_value(result).unwrap_or(Value::Null);
        if let Some(object) = result.as_object_mut() {
            object.remove("resultType");
        }
        v["result"] = result;
    }
    v
}

/// What happens without the gate: the same outside call goes straight to the server.
async fn unsafe_comparison(server: &Path) -> Result<(Value, bool), HarnessError> {
    let server = FixtureServer::start(server).await?;
    let tools = server.client.peer().list_all_tools().await.map_err(err)?;
    let read_only_hint = tools
        .iter()
        .find(|t| t.name == NOTICE_TOOL)
        .and_then(|t| t.annotations.as_ref())
        .and_then(|a| a.read_only_hint)
        .unwrap_or(false);
    let (name, arguments) = proposed("outside");
    server
        .client
        .peer()
        .call_tool(CallToolRequestParams::new(name.clone()).with_arguments(object(arguments.clone())))
        .await
        .map_err(err)?;
    let audit = server.audit_lines();
    let _ = server.client.cancel().await;
    Ok((
        json!({"proposed_call": {"name": name, "arguments": arguments},
               "server_handler_calls": audit.len(), "server_audit": audit}),
        read_only_hint,
    ))
}

/// Plays the 6 documented MCP cases and the unsafe comparison against the fixture server
/// found by [`fixture_server_path`]; returns the report.
pub async fn report() -> Result<Value, HarnessError> {
    report_with(&fixture_server_path()?).await
}

/// Like [`report`], with the `aml-testkit` executable at `server`.
pub async fn report_with(server: &Path) -> Result<Value, HarnessError> {
    let texts = serde_json::from_str::<Catalogue>(include_str!("../cases/mcp.json")).map_err(err)?;
    let (comparison, read_only_hint) = unsafe_comparison(server).await?;
    let mut cases = Vec::new();
    for text in &texts.cases {
        cases.push(run_case(text, server).await?);
    }
    Ok(json!({
        "protocol": MCP_PROTOCOL,
        "provenance": format!("aml-testkit {} (Rust): aml-mcp GatedClient over rmcp, server in a child process", env!("CARGO_PKG_VERSION")),
        "sdk": "rmcp 3.11 client + rmcp 3.11 server",
        "server": "local-notice-fixture",
        "transport": "stdio child process",
        "advertised_read_only_hint": read_only_hint,
        "unsafe_comparison": comparison,
        "cases": cases,
        "limits": "The fixture server only appends a temporary local audit line. No notice is sent, no person approves anything; digests come from this host's own purpose text.",
    }))
}

/// Carries guarded-tool calls over MCP: the host's tool is served by an rmcp
/// [`GuardedToolServer`] and called by an rmcp client, over an in-process byte pipe with the
/// same newline-delimited JSON-RPC framing as stdio (the fixture hooks must share this
/// process's memory, so the server cannot be a child process here).
#[derive(Debug, Default)]
pub struct McpHarness;

#[async_trait]
impl Harness for McpHarness {
    fn adapter(&self) -> &str {
        "mcp"
    }

    async fn call(&self, tool: Arc<GuardedTool>, args: &CallerArguments) -> Result<Attempt, HarnessError> {
        // What the agent's MCP SDK can put on the wire, read once now.
        let arguments = match args.with(aml_core::capture::capture) {
            Ok(Value::Object(map)) => map,
            Ok(other) => return Err(err(format!("arguments are not an object: {other}"))),
            Err(e) => {
                return Ok(Attempt::WireRefused(format!(
                    "an MCP client cannot encode these arguments as JSON ({}); no request was sent",
                    e.code()
                )))
            }
        };
        let registration = tool
            .registration(crate::a2ui::send_message_schema())
            .map_err(err)?
            .with_description("Send a status update");
        let catalog = ToolCatalog::new().with(registration).map_err(err)?;
        let server = GuardedToolServer::new(
            "aml-testkit-host",
            ToolGate::new(catalog, tool.boundary().clone()),
        );
        let client = connect(server).await?;
        let result = client
            .peer()
            .call_tool(CallToolRequestParams::new("send_message").with_arguments(arguments))
            .await
            .map_err(err)?;
        let _ = client.cancel().await;
        let verdict = verdict_of(&result)?;
        if let Some(host_error) = verdict["host_error"].as_str() {
            return Ok(Attempt::HostError(host_error.to_owned()));
        }
        let plan: Plan = serde_json::from_value(verdict["plan"].clone()).map_err(err)?;
        let receipt: Receipt = serde_json::from_value(verdict["receipt"].clone()).map_err(err)?;
        let result = result.structured_content;
        Ok(Attempt::Completed {
            plan,
            receipt,
            result,
        })
    }
}

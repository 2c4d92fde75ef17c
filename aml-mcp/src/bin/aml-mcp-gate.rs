//! `aml-mcp-gate`: an MCP server on stdin/stdout that starts the real server as a child
//! process, forwards `tools/list`, and gates every `tools/call` with the host's policy.

use std::process::ExitCode;
use std::sync::Arc;

use aml_core::{
    ActionBoundary, ActionBoundaryBuilder, ApprovalRecord, JsonLinesSink, LivePolicy, Policy, ReceiptSink,
    Record,
};
use aml_mcp::proxy::Upstream;
use aml_mcp::{GatedServer, McpGate, ToolCatalog, ToolGate};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;

const USAGE: &str = "\
usage: aml-mcp-gate --policy POLICY.json [--tools TOOLS.json] [--receipts FILE]
                    [--approve web|tty] [--approver-key KEY.json] [--approval-timeout SECONDS]
                    [--approval-port PORT] -- SERVER_COMMAND [ARGS...]

  --policy            aml-action-policy/1 document; a malformed policy is refused at start
  --tools             the tools the agent may call: {\"tools\": [{name, effect, purpose,
                      resource: {\"argument\": NAME} | {\"fixed\": RESOURCE}, input_schema}]};
                      without it every tools/call is refused (invalid_or_unregistered_call)
  --receipts          append one JSON line per gated call to FILE (default: stderr)
  --approve web       serve an approval page on 127.0.0.1 and print its URL (with its
                      secret token) to stderr; each approval-required call waits there
  --approve tty       ask on the controlling terminal (/dev/tty), never on stdin/stdout
  --approver-key      the approver's key file (aml-approval keygen); without it a key
                      for this run only is generated
  --approval-timeout  how long a call waits for a decision before it is blocked
                      (approval_error); default 300
  --approval-port     the approval page's port (default: any free port)

Without --approve, approval-required rules block with approval_unavailable. Approvals are
signed (Ed25519) and each issues a one-use grant. Nothing is ever written to stdout but
MCP messages.";

struct Options {
    policy: String,
    tools: Option<String>,
    receipts: Option<String>,
    approve: Option<String>,
    approver_key: Option<String>,
    approval_timeout: Option<String>,
    approval_port: Option<String>,
    command: Vec<String>,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let split = args
        .iter()
        .position(|a| a == "--")
        .ok_or("missing `--` before the server command")?;
    let (flags, command) = (&args[..split], &args[split + 1..]);
    if command.is_empty() {
        return Err("missing the server command after `--`".into());
    }
    let (mut policy, mut tools, mut receipts) = (None, None, None);
    let (mut approve, mut approver_key, mut approval_timeout, mut approval_port) = (None, None, None, None);
    let mut it = flags.iter();
    while let Some(flag) = it.next() {
        let slot = match flag.as_str() {
            "--policy" => &mut policy,
            "--tools" => &mut tools,
            "--receipts" => &mut receipts,
            "--approve" => &mut approve,
            "--approver-key" => &mut approver_key,
            "--approval-timeout" => &mut approval_timeout,
            "--approval-port" => &mut approval_port,
            other => return Err(format!("unknown option {other:?}")),
        };
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        if slot.replace(value.clone()).is_some() {
            return Err(format!("{flag} given twice"));
        }
    }
    if approve.as_deref().is_some_and(|a| a != "web" && a != "tty") {
        return Err("--approve takes web or tty".into());
    }
    Ok(Options {
        policy: policy.ok_or("--policy is required")?,
        tools,
        receipts,
        approve,
        approver_key,
        approval_timeout,
        approval_port,
        command: command.to_vec(),
    })
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))
}

async fn run(options: Options) -> Result<(), String> {
    let policy_doc = aml_core::strict::parse_str(&read(&options.policy)?)
        .map_err(|e| format!("{}: {e}", options.policy))?;
    let policy = Policy::try_from_value(&policy_doc).map_err(|e| format!("{}: {e}", options.policy))?;
    let catalog = match &options.tools {
        Some(path) => ToolCatalog::from_json(&read(path)?).map_err(|e| format!("{path}: {e}"))?,
        None => ToolCatalog::new(),
    };
    // One JSON line per record (calls and approval decisions), never on stdout.
    let sink: Arc<JsonLinesSink> = Arc::new(
        match options.receipts.as_deref() {
            Some(path) => JsonLinesSink::append(path),
            None => JsonLinesSink::stderr(),
        }
        .map_err(|e| format!("cannot open the receipt log: {e}"))?,
    );

    let mut command = tokio::process::Command::new(&options.command[0]);
    command.args(&options.command[1..]);
    let transport =
        TokioChildProcess::new(command).map_err(|e| format!("cannot start {:?}: {e}", options.command[0]))?;
    let upstream = ()
        .serve(transport)
        .await
        .map_err(|e| format!("upstream server did not initialize: {e}"))?;

    let mut boundary = ActionBoundary::builder(LivePolicy::new(policy)).sink_arc(sink.clone());
    if let Some(channel) = options.approve.as_deref() {
        boundary = with_approvals(boundary, channel, &options, &sink).await?;
    }
    let gate = McpGate::new(ToolGate::new(catalog, boundary.build()));
    let server = GatedServer::new(Upstream::new(upstream.peer().clone()), gate);
    let running = server
        .serve(mcp_stdio())
        .await
        .map_err(|e| format!("client did not initialize: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| format!("server task failed: {e}"))?;
    drop(upstream);
    if !sink.flush(std::time::Duration::from_secs(5)) {
        eprintln!("aml-mcp-gate: the receipt log could not be flushed");
    }
    Ok(())
}

/// The MCP channel on stdin/stdout. When both are pipes (as MCP clients start servers), they
/// are read and written through the event loop; tokio's own stdio goes through a thread pool,
/// which costs a thread hand-off per message.
fn mcp_stdio() -> (
    Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
) {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;
    let pipes = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd)
        .and_then(|input| {
            let output = std::io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .and_then(pipe::Sender::from_owned_fd)?;
            Ok((input, output))
        });
    match pipes {
        Ok((input, output)) => (Box::new(input), Box::new(output)),
        Err(_) => {
            let (input, output) = rmcp::transport::stdio();
            (Box::new(input), Box::new(output))
        }
    }
}

/// Signed human approval: a decision channel, the approver's keyring, and a one-use grant
/// store that issues the grant each signed approval names.
async fn with_approvals(
    boundary: ActionBoundaryBuilder,
    channel: &str,
    options: &Options,
    sink: &Arc<JsonLinesSink>,
) -> Result<ActionBoundaryBuilder, String> {
    use aml_approval::{
        ApproverKey, DecisionChannel, Keyring, SignedApprovalHook, StatementDecision, TtyApprovals,
        WebApprovals,
    };
    use aml_grants::MemoryGrants;

    let key = match &options.approver_key {
        Some(path) => ApproverKey::from_json(&read(path)?).map_err(|e| format!("{path}: {e}"))?,
        None => ApproverKey::generate("aml-mcp-gate-session").map_err(|e| e.to_string())?,
    };
    let keyring = Keyring::new()
        .with_key(key.key_id(), &key.public_key_hex())
        .map_err(|e| e.to_string())?;
    let timeout = match &options.approval_timeout {
        Some(secs) => secs
            .parse()
            .map_err(|_| format!("--approval-timeout needs whole seconds, got {secs:?}"))?,
        None => 300,
    };
    let channel: Arc<dyn DecisionChannel> = if channel == "web" {
        let port = match &options.approval_port {
            Some(p) => p
                .parse()
                .map_err(|_| format!("--approval-port needs a port number, got {p:?}"))?,
            None => 0,
        };
        // Every signed decision is journaled beside the receipts.
        let decisions = Arc::clone(sink);
        let page = WebApprovals::builder(key)
            .port(port)
            .on_decision(move |signed| {
                let statement = signed.statement();
                decisions.record(&Record::Approval(ApprovalRecord::new(
                    statement.proposal_sha256(),
                    statement.decision() == StatementDecision::Approve,
                    Some(statement.grant_id().to_owned()),
                    signed.to_value(),
                )));
            })
            .start()
            .await
            .map_err(|e| format!("approval page: {e}"))?;
        eprintln!("aml-mcp-gate: approve or deny pending calls at {}", page.url());
        Arc::new(page)
    } else {
        Arc::new(TtyApprovals::new(key))
    };
    let grants = Arc::new(MemoryGrants::default());
    let hook = SignedApprovalHook::new(keyring, channel, grants.clone())
        .with_timeout(std::time::Duration::from_secs(timeout));
    Ok(boundary.approval(hook).grants_arc(grants))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if matches!(args.first().map(String::as_str), Some("--help" | "-h")) {
        eprintln!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let options = match parse_args(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("aml-mcp-gate: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("aml-mcp-gate: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aml-mcp-gate: {e}");
            ExitCode::from(1)
        }
    }
}

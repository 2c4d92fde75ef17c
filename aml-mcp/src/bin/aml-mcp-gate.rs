//! `aml-mcp-gate`: an MCP server on stdin/stdout that starts the real server as a child
//! process, forwards `tools/list`, and gates every `tools/call` with the host's policy.

use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use aml_core::{LivePolicy, Policy};
use aml_mcp::proxy::Upstream;
use aml_mcp::{GatedServer, McpGate, ToolRegistry, Verdict, VerdictSink};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::json;

const USAGE: &str = "\
usage: aml-mcp-gate --policy POLICY.json [--tools TOOLS.json] [--receipts FILE] -- SERVER_COMMAND [ARGS...]

  --policy    aml-action-policy/1 document; a malformed policy is refused at start
  --tools     the tools the agent may call: {\"tools\": [{name, effect, purpose,
              resource: {\"argument\": NAME} | {\"fixed\": RESOURCE}, input_schema}]};
              without it every tools/call is refused (invalid_or_unregistered_call)
  --receipts  append one JSON line per gated call to FILE (default: stderr)

Approval-required rules block with approval_unavailable: this gate has no approval
channel yet. Nothing is ever written to stdout but MCP messages.";

struct Options {
    policy: String,
    tools: Option<String>,
    receipts: Option<String>,
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
    let mut it = flags.iter();
    while let Some(flag) = it.next() {
        let slot = match flag.as_str() {
            "--policy" => &mut policy,
            "--tools" => &mut tools,
            "--receipts" => &mut receipts,
            other => return Err(format!("unknown option {other:?}")),
        };
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        if slot.replace(value.clone()).is_some() {
            return Err(format!("{flag} given twice"));
        }
    }
    Ok(Options {
        policy: policy.ok_or("--policy is required")?,
        tools,
        receipts,
        command: command.to_vec(),
    })
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))
}

fn receipt_sink(path: Option<&str>) -> Result<VerdictSink, String> {
    let out: Box<dyn Write + Send> = match path {
        Some(p) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| format!("cannot open {p}: {e}"))?,
        ),
        None => Box::new(std::io::stderr()),
    };
    let out = Mutex::new(out);
    Ok(Arc::new(move |tool: &str, verdict: &Verdict| {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let line = json!({
            "time_ms": millis as u64, "tool": tool, "verdict": verdict.to_value(),
            "detail": verdict.detail, "host_error": verdict.host_error,
        });
        // One write per record: formatting straight into the file would issue a write
        // call per token.
        let record = format!("{line}\n");
        let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
        // A receipt log that cannot be written is reported on stderr, never on stdout.
        if out
            .write_all(record.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            eprintln!("aml-mcp-gate: cannot write receipt log: {line}");
        }
    }))
}

async fn run(options: Options) -> Result<(), String> {
    let policy_doc = aml_core::strict::parse_str(&read(&options.policy)?)
        .map_err(|e| format!("{}: {e}", options.policy))?;
    let policy = Policy::try_from_value(&policy_doc).map_err(|e| format!("{}: {e}", options.policy))?;
    let registry = match &options.tools {
        Some(path) => ToolRegistry::from_json(&read(path)?).map_err(|e| format!("{path}: {e}"))?,
        None => ToolRegistry::new(),
    };
    let sink = receipt_sink(options.receipts.as_deref())?;

    let mut command = tokio::process::Command::new(&options.command[0]);
    command.args(&options.command[1..]);
    let transport =
        TokioChildProcess::new(command).map_err(|e| format!("cannot start {:?}: {e}", options.command[0]))?;
    let upstream = ()
        .serve(transport)
        .await
        .map_err(|e| format!("upstream server did not initialize: {e}"))?;

    let gate = McpGate::new(registry, LivePolicy::new(policy));
    let server = GatedServer::new(Upstream::new(upstream.peer().clone()), gate).with_sink(sink);
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("client did not initialize: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| format!("server task failed: {e}"))?;
    drop(upstream);
    Ok(())
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

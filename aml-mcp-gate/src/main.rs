//! `aml-mcp-gate`: an MCP server on stdin/stdout that starts the real server as a child
//! process, relays everything between them faithfully, and gates every `tools/call` with the
//! host's policy (the engine is `aml_mcp::relay`).

mod approvals;
mod listen;
mod reload;
mod upstream;

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use aml_core::{ActionBoundary, JsonLinesSink, LivePolicy, Policy};
use aml_mcp::relay::{self, stdio, DeferredSink, RelayConfig, RelayEnd, RelayTools, ServerRequestPolicy};
use clap::{CommandFactory, Parser, ValueEnum};

use approvals::Channel;

const AFTER_HELP: &str = "\
Without --tools every tools/call is refused (invalid_or_unregistered_call); without
--approve, rules that require approval block with approval_unavailable. tools/list shows only
the tools in --tools that the policy can allow, with the input schema the host enforces.
Everything else (resources, prompts, completion, logging, tasks, notifications, _meta) is
relayed unchanged. Receipts never hold tool output, only its SHA-256 and size. Nothing is
ever written to stdout but MCP messages.

Example (in an MCP client's configuration, instead of the server command):
  aml-mcp-gate --policy examples/policy.json --tools examples/tools.json \\
    -- npx -y @modelcontextprotocol/server-filesystem@2026.8.31 examples/files

Exit status:
  0  the client closed the session (calls still in flight got their receipts first)
  1  runtime failure: the server could not start, did not complete the MCP handshake (it
     sent initialize back, or did not answer within --handshake-timeout), or exited while
     the session ran
  2  bad usage, or an unreadable or invalid --policy, --tools or --approver-key file

Reload: the gate re-reads --policy and --tools when either file changes and on SIGHUP
(kill -HUP PID; the PID is in the first log line). A file that does not load blocks every
call with invalid_policy, and the log says why, until a valid one is in place.

Logging: RUST_LOG (default warn,aml_mcp_gate=info; e.g. RUST_LOG=aml_mcp=debug) for
diagnostics on stderr.";

/// A faithful MCP gateway: relays all of MCP between a client (stdio) and a server it starts,
/// and gates every tools/call with the host's policy, approval and one-use grants
#[derive(Debug, Parser)]
#[command(name = "aml-mcp-gate", version, after_help = AFTER_HELP)]
struct Cli {
    /// The aml-action-policy/1 document; a malformed policy is refused at start
    #[arg(long, value_name = "POLICY.json")]
    policy: PathBuf,
    /// The tools the agent may call: {"tools": [{name, effect, purpose, description?,
    /// resource: {"argument": NAME} | {"fixed": RESOURCE}, input_schema}]}
    #[arg(long, value_name = "TOOLS.json")]
    tools: Option<PathBuf>,
    /// Append one JSON line per gated call and approval decision to FILE (default: stderr)
    #[arg(long, value_name = "FILE")]
    receipts: Option<PathBuf>,
    /// Where a person approves calls whose rule requires approval
    #[arg(long, value_enum, value_name = "CHANNEL")]
    approve: Option<Channel>,
    /// The approver's key file (aml-approval keygen); default: a key for this run only
    #[arg(long, value_name = "KEY.json", requires = "approve")]
    approver_key: Option<PathBuf>,
    /// How long a call waits for a decision before it is blocked (approval_error)
    #[arg(long, value_name = "SECONDS", requires = "approve", value_parser = clap::value_parser!(u64).range(1..))]
    approval_timeout: Option<u64>,
    /// The approval page's port on 127.0.0.1 (default: any free port); with --approve web
    #[arg(long, value_name = "PORT", requires = "approve")]
    approval_port: Option<u16>,
    /// How long a forwarded request may wait for the server; a tools/call that runs out of
    /// time is recorded `unknown` and the server is sent notifications/cancelled
    #[arg(long, value_name = "SECONDS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    upstream_timeout: u64,
    /// How long the server may take to answer the gate's startup ping and the client's
    /// initialize (or server/discover)
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    handshake_timeout: u64,
    /// sampling/createMessage from the server: refuse (answer the server with an error and
    /// record it) or relay to the client
    #[arg(long, value_enum, value_name = "SETTING", default_value_t = Setting::Refuse)]
    sampling: Setting,
    /// elicitation/create from the server: refuse or relay
    #[arg(long, value_enum, value_name = "SETTING", default_value_t = Setting::Refuse)]
    elicitation: Setting,
    /// The longest message accepted from either side; a longer one is answered with an
    /// error (a server's answer that long makes its call `unknown`)
    #[arg(long, value_name = "BYTES", default_value_t = 16 << 20, value_parser = clap::value_parser!(u64).range(1024..=1 << 30))]
    max_message_bytes: u64,
    #[command(flatten)]
    listen: listen::ListenArgs,
    #[command(flatten)]
    upstream: upstream::UpstreamArgs,
    /// The MCP server to start and its arguments
    #[arg(
        last = true,
        required_unless_present = "upstream",
        value_name = "SERVER_COMMAND"
    )]
    command: Vec<OsString>,
}

/// What the gate does with one kind of server-to-client request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Setting {
    /// Answer the server with an error; the client never sees the request
    Refuse,
    /// Pass the request to the client
    Relay,
}

impl From<Setting> for ServerRequestPolicy {
    fn from(setting: Setting) -> Self {
        match setting {
            Setting::Refuse => ServerRequestPolicy::Refuse,
            Setting::Relay => ServerRequestPolicy::Relay,
        }
    }
}

/// Everything read from files, checked before the server starts.
struct Loaded {
    policy: Policy,
    tools: Option<String>,
}

fn load(cli: &Cli) -> Result<Loaded, String> {
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let named = |path: &PathBuf, e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let document = aml_core::strict::parse_str(&read(&cli.policy)?).map_err(|e| named(&cli.policy, &e))?;
    let policy = Policy::try_from_value(&document).map_err(|e| named(&cli.policy, &e))?;
    let tools = match &cli.tools {
        Some(path) => {
            let text = read(path)?;
            // Checked now; built again with the boundary below.
            let probe = ActionBoundary::builder(Arc::new(Policy::empty())).build();
            RelayTools::from_json(&text, probe).map_err(|e| named(path, &e))?;
            Some(text)
        }
        None => None,
    };
    if let Some(key) = &cli.approver_key {
        read(key)?;
    }
    Ok(Loaded { policy, tools })
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,aml_mcp_gate=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .init();
}

fn main() -> ExitCode {
    // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2).
    let cli = Cli::parse();
    if cli.approval_port.is_some() && cli.approve != Some(Channel::Web) {
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--approval-port needs --approve web",
            )
            .exit();
    }
    init_logging();
    let loaded = match load(&cli) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("aml-mcp-gate: {e}");
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
    let code = match runtime.block_on(run(cli, loaded)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Config(e)) => {
            eprintln!("aml-mcp-gate: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(e)) => {
            eprintln!("aml-mcp-gate: {e}");
            ExitCode::from(1)
        }
    };
    // A terminal on stdin is read by a blocking thread that never returns: do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

enum Failure {
    Config(String),
    Runtime(String),
}

async fn run(cli: Cli, loaded: Loaded) -> Result<(), Failure> {
    // One JSON line per record (calls and approval decisions), never on stdout.
    let sink: Arc<JsonLinesSink> = Arc::new(
        match &cli.receipts {
            Some(path) => JsonLinesSink::append(path),
            None => JsonLinesSink::stderr(),
        }
        .map_err(|e| Failure::Config(format!("cannot open the receipt log: {e}")))?,
    );
    // Call records go out after each answer; approval decisions straight to the log.
    let (deferred, records) = DeferredSink::spawn(sink.clone());
    // Shared with the reloader: SIGHUP or an edit of the files replaces it for every call.
    let live_policy = LivePolicy::new(loaded.policy.clone());
    let mut boundary = ActionBoundary::builder(live_policy.clone()).sink(deferred);
    if let Some(channel) = cli.approve {
        let timeout = Duration::from_secs(cli.approval_timeout.unwrap_or(300));
        let port = cli.approval_port.unwrap_or(0);
        boundary = approvals::with_approvals(
            boundary,
            channel,
            cli.approver_key.as_deref(),
            timeout,
            port,
            &sink,
        )
        .await
        .map_err(Failure::Config)?;
    }
    let boundary = boundary.build();
    let tools = match &loaded.tools {
        Some(text) => RelayTools::from_json(text, boundary).map_err(|e| Failure::Config(e.to_string()))?,
        None => RelayTools::empty(boundary),
    };
    let reloader = reload::Reloader::new(cli.policy.clone(), cli.tools.clone(), live_policy, tools.clone())
        .start(&loaded.policy)
        .map_err(|e| Failure::Runtime(format!("cannot listen for SIGHUP: {e}")))?;
    let config = RelayConfig::default()
        .with_upstream_timeout(Duration::from_secs(cli.upstream_timeout))
        .with_handshake_timeout(Duration::from_secs(cli.handshake_timeout))
        .with_sampling(cli.sampling.into())
        .with_elicitation(cli.elicitation.into())
        .with_max_message_bytes(cli.max_message_bytes as usize);

    let server = upstream::Server::from_args(&cli.upstream, &cli.command, config.max_message_bytes)
        .map_err(Failure::Config)?;
    if let Some(addr) = cli.listen.listen {
        let front = cli.listen.front_config(addr).map_err(Failure::Config)?;
        let served = listen::serve(addr, front, tools, config, server).await;
        // Every relay has ended: its records are on their way to the log.
        reloader.abort();
        let _ = tokio::time::timeout(Duration::from_secs(5), records).await;
        if !sink.flush(Duration::from_secs(5)) {
            eprintln!("aml-mcp-gate: the receipt log could not be flushed");
        }
        return served.map_err(Failure::Runtime);
    }
    let program = server.name();
    let (mut upstream, stopper) = server
        .start(config.max_message_bytes)
        .map_err(Failure::Runtime)?
        .split();
    // Started by hand (a terminal, no MCP client): check the server now. An MCP client's own
    // first request is the check otherwise (a probe would choose the protocol era for it).
    let early = if std::io::stdin().is_terminal() {
        eprintln!(
            "aml-mcp-gate: stdin is a terminal; MCP clients start the gate with pipes. Checking the server…"
        );
        relay::probe(&mut upstream, config.handshake_timeout).await
    } else {
        Ok(Vec::new())
    };
    let end = match early {
        Ok(early) => {
            let client = stdio::stdio_connection(config.max_message_bytes);
            // A task of the runtime, not the `block_on` future: waking a task from another
            // task on this thread is a queue push; waking `block_on` writes to an eventfd.
            tokio::spawn(relay::run(tools, config, client, upstream, early))
                .await
                .map_err(|e| format!("the relay failed: {e}"))
        }
        Err(e) => {
            // Closes the server's input, so a server that reads until the end can exit.
            drop((upstream, tools));
            Err(format!("{program}: {e}"))
        }
    };
    // The relay is gone, and with the reloader every other handle to the deferred sink: its
    // task ends once it has passed every record on.
    reloader.abort();
    if tokio::time::timeout(Duration::from_secs(5), records)
        .await
        .is_err()
    {
        eprintln!("aml-mcp-gate: some call records were not written in time");
    }
    stopper.stop(Duration::from_secs(2)).await;
    if !sink.flush(Duration::from_secs(5)) {
        eprintln!("aml-mcp-gate: the receipt log could not be flushed");
    }
    match end {
        Ok(RelayEnd::ClientClosed) => Ok(()),
        Ok(RelayEnd::UpstreamGone(reason)) => Err(Failure::Runtime(format!(
            "the server {program} is gone ({reason}); calls after that were refused"
        ))),
        Ok(RelayEnd::Handshake(why)) => Err(Failure::Runtime(format!("{program}: {why}"))),
        Ok(other) => Err(Failure::Runtime(format!("the relay ended: {other:?}"))),
        Err(e) => Err(Failure::Runtime(e)),
    }
}

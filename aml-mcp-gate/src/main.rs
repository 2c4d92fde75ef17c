//! `aml-mcp-gate`: an MCP server on stdin/stdout that starts the real server as a child
//! process, relays everything between them faithfully, and gates every `tools/call` with the
//! host's policy (the engine is `aml_mcp::relay`); and `aml-mcp-gate journal`, which reads
//! what the gate's durable state says happened; and `aml-mcp-gate policy`, which checks a
//! host's policy without a server.

mod approvals;
mod audit;
mod child;
mod cli;
mod config;
mod init;
mod journal;
mod listen;
mod parent_death;
mod policy_cases;
mod policy_cmd;
mod reload;
mod run;
mod servers;
mod sinks;
mod state;
mod telemetry;
mod upstream;
mod verify;

use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::Parser;

use approvals::Channel;
use cli::{usage_error, Cli, Command, RunArgs};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    init_logging();
    match cli.command {
        Some(Command::Journal(args)) => journal::main(args),
        Some(Command::Init(args)) => init::main(args),
        Some(Command::Policy(args)) => policy_cmd::main(args),
        Some(Command::Run(args)) => run_main(args),
        None => run_main(cli.run),
    }
}

fn run_main(mut args: RunArgs) -> ExitCode {
    if let Some(path) = args.config.clone() {
        if let Err(e) = config::merge(&mut args, &path) {
            eprintln!("aml-mcp-gate: {e}");
            return ExitCode::from(2);
        }
    }
    let settings = settle(args);
    let loaded = match run::load(&settings) {
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
    let code = match runtime.block_on(run::run(settings, loaded)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(run::Failure::Config(e)) => {
            eprintln!("aml-mcp-gate: {e}");
            ExitCode::from(2)
        }
        Err(run::Failure::Runtime(e)) => {
            eprintln!("aml-mcp-gate: {e}");
            ExitCode::from(1)
        }
    };
    // A terminal on stdin is read by a blocking thread that never returns: do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

/// The options after `--config`, checked together (whichever source each came from) and with
/// their defaults; a usage error exits 2 before anything starts.
fn settle(args: RunArgs) -> run::Settings {
    let Some(policy) = args.policy else {
        usage_error(
            ErrorKind::MissingRequiredArgument,
            "--policy is required (or `policy` in --config)",
        )
    };
    if args.command.is_empty() && args.upstream.upstream.is_none() && args.servers.is_empty() {
        usage_error(
            ErrorKind::MissingRequiredArgument,
            "the server command is required: -- SERVER_COMMAND… (or `server` in --config, or --upstream URL)",
        );
    }
    if args.approval_port.is_some() && args.approve != Some(Channel::Web) {
        usage_error(ErrorKind::ArgumentConflict, "--approval-port needs --approve web");
    }
    let approval_page = args
        .approval_page
        .settle(args.approve)
        .unwrap_or_else(|(kind, message)| usage_error(kind, message));
    for (given, flag) in [
        (args.approver_key.is_some(), "--approver-key"),
        (args.approval_timeout.is_some(), "--approval-timeout"),
    ] {
        if given && args.approve.is_none() {
            usage_error(
                ErrorKind::MissingRequiredArgument,
                format!("{flag} needs --approve"),
            );
        }
    }
    // Values from --config did not pass clap's range checks.
    let seconds = |value: Option<u64>, default: u64, flag: &str| match value.unwrap_or(default) {
        0 => usage_error(
            ErrorKind::InvalidValue,
            format!("{flag} must be at least 1 second"),
        ),
        n => Duration::from_secs(n),
    };
    let max_message_bytes = args.max_message_bytes.unwrap_or(16 << 20);
    if !(1024..=1 << 30).contains(&max_message_bytes) {
        usage_error(
            ErrorKind::InvalidValue,
            "--max-message-bytes must be between 1024 and 1073741824",
        );
    }
    let state = state::Location::parse(args.state.as_deref())
        .unwrap_or_else(|e| usage_error(ErrorKind::InvalidValue, e));
    for (given, flag) in [
        (args.audit_every.is_some(), "--audit-every"),
        (args.audit_interval.is_some(), "--audit-interval"),
    ] {
        if given && args.audit_key.is_none() {
            usage_error(
                ErrorKind::MissingRequiredArgument,
                format!("{flag} needs --audit-key"),
            );
        }
    }
    if args.audit_key.is_some() && state == state::Location::Memory {
        usage_error(
            ErrorKind::ArgumentConflict,
            "--audit-key needs a database --state: --state memory keeps no audit chain",
        );
    }
    if args.audit_every == Some(0) || args.audit_interval == Some(0) {
        usage_error(
            ErrorKind::InvalidValue,
            "--audit-every and --audit-interval must be at least 1",
        );
    }
    let metrics = args.metrics.as_deref().map(|value| {
        run::MetricsAt::parse(value, args.listen.listen.is_some())
            .unwrap_or_else(|e| usage_error(ErrorKind::InvalidValue, e))
    });
    let otlp = args.otlp_endpoint.as_deref().map(|value| {
        #[cfg(feature = "otel")]
        return telemetry::traces_url(value).unwrap_or_else(|e| usage_error(ErrorKind::InvalidValue, e));
        #[cfg(not(feature = "otel"))]
        usage_error(
            ErrorKind::InvalidValue,
            format!("--otlp-endpoint {value:?}: this build has no OpenTelemetry (cargo feature `otel`)"),
        )
    });
    let audit_schedule = audit::Schedule {
        every: args.audit_every.unwrap_or(1000),
        interval: Duration::from_secs(args.audit_interval.unwrap_or(60)),
    };
    run::Settings {
        policy,
        tools: args.tools,
        state,
        receipts: args.receipts,
        metrics,
        otlp,
        approve: args.approve,
        approver_key: args.approver_key,
        shadow: args.enforce == Some(cli::Enforcement::Shadow),
        audit_key: args.audit_key,
        audit_schedule,
        approval_timeout: seconds(args.approval_timeout, 300, "--approval-timeout"),
        approval_port: args.approval_port.unwrap_or(0),
        approval_page,
        relay: aml_mcp::relay::RelayConfig::default()
            .with_product("aml-mcp-gate")
            .with_upstream_timeout(seconds(args.upstream_timeout, 120, "--upstream-timeout"))
            .with_handshake_timeout(seconds(args.handshake_timeout, 30, "--handshake-timeout"))
            .with_sampling(args.sampling.unwrap_or(cli::Setting::Refuse).into())
            .with_elicitation(args.elicitation.unwrap_or(cli::Setting::Refuse).into())
            .with_max_message_bytes(max_message_bytes as usize),
        command: args.command,
        server_dir: args.server_dir,
        servers: args.servers,
        listen: args.listen,
        upstream: args.upstream,
    }
}

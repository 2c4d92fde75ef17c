//! The command line: `run` (the default: `aml-mcp-gate --policy … -- SERVER…`), `init`,
//! `journal` and `policy`.

use std::ffi::OsString;
use std::path::PathBuf;

use aml_mcp::relay::ServerRequestPolicy;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::approvals::Channel;

const AFTER_HELP: &str = "\
Without --tools every tools/call is refused (invalid_or_unregistered_call); without
--approve, rules that require approval block with approval_unavailable. tools/list shows only
the tools in --tools that the policy can allow, with the input schema the host enforces.
Everything else (resources, prompts, completion, logging, tasks, notifications, _meta) is
relayed as sent, but for request ids (the server sees the gate's own), the task-call
capability taken out of the server's initialize answer, and client messages parsed strictly
first (duplicate keys, lone surrogates, 1e400: -32700, never relayed); tools/call reaches the
server re-encoded as the canonical JSON that was approved. Receipts never hold tool output, only its SHA-256 and size. Nothing is
ever written to stdout but MCP messages.

State (--state): one-use grants, the intent written before each call is forwarded, its
outcome, approval decisions and receipts. Default: a SQLite file in $XDG_STATE_HOME/aml-mcp-gate/
(else ~/.local/state/aml-mcp-gate/), named on stderr at start; `--state memory` keeps nothing
across restarts; `--state postgres://…` lets several gates share one database. Read it with
`aml-mcp-gate journal unresolved|reconcile|receipts`. Every stored record is a link of a hash
chain (`journal verify`, `journal export`); --audit-key signs checkpoints of it.

Start here: `aml-mcp-gate init --out DIR -- SERVER…` reads a server's tools and writes a
pinned tools.json and an empty policy.json to edit.

Examples (in an MCP client's configuration, instead of the server command):
  aml-mcp-gate --policy examples/policy.json --tools examples/tools.json \\
    -- npx -y @modelcontextprotocol/server-filesystem@2026.8.31 examples/files
  aml-mcp-gate --config gate.toml        (everything from one file; flags given as well win;
                                         its server command runs in the file's folder; its
                                         [[servers]] tables put several servers behind one
                                         gate: docs/GATE.md)

Reload: the gate re-reads --policy and --tools when either file changes and on SIGHUP
(kill -HUP PID; the PID is in the first log line). A file that does not load blocks every
call with invalid_policy, and the log says why, until a valid one is in place.

Exit status:
  0  the client closed the session (requests it had sent were answered first, within
     10 s; calls still waiting for approval were withdrawn)
  1  runtime failure: the server could not start, did not complete the MCP handshake (it
     sent initialize back, or did not answer within --handshake-timeout), or exited while
     the session ran; the state database could not be opened
  2  bad usage, or an unreadable or invalid --config, --policy, --tools, --approver-key or
     --audit-key file

Logging: RUST_LOG (default warn,aml_mcp_gate=info; e.g. RUST_LOG=aml_mcp=debug) for
diagnostics on stderr.";

/// A faithful MCP gateway: relays all of MCP between a client (stdio) and a server it starts,
/// and gates every tools/call with the host's policy, approval and one-use grants
#[derive(Debug, Parser)]
#[command(
    name = "aml-mcp-gate",
    version,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

/// What to do.
// Parsed once at start: the size of the variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the gate in front of a server (the default when no subcommand is given)
    #[command(after_help = AFTER_HELP)]
    Run(RunArgs),
    /// Read the state: calls whose outcome is unknown, reconcile one, print receipts
    Journal(crate::journal::JournalArgs),
    /// Start a server (or each server a config file lists), read its tools, write a pinned
    /// tools.json and an empty policy.json
    #[command(
        after_help = "Examples:\n  aml-mcp-gate init --out gate -- npx -y @modelcontextprotocol/server-everything\n  aml-mcp-gate init --out gate --config gate.toml   # its `server` or `[[servers]]`\n\nExit status: 0 written; 1 a server could not be started or read, or two servers' tools\nwould be shown under one name; 2 bad usage, a config file that cannot be read, or the\nfiles exist (without --force) or cannot be written."
    )]
    Init(crate::init::InitArgs),
    /// Check a policy without a server: validate it (check), decide one call (explain), or
    /// decide a table of calls against expected decisions (test)
    Policy(crate::policy_cmd::PolicyArgs),
}

/// Options of `run`. Every option may also come from `--config`; a flag given here wins.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// A TOML file with any of the options below (see docs/GATE.md, "Configure with one
    /// file"); relative paths in it are relative to the file, and its `server` command runs
    /// in the file's folder (a server command given after `--` runs here)
    #[arg(long, value_name = "GATE.toml")]
    pub(crate) config: Option<PathBuf>,
    /// Where the server command runs: the config file's folder when the command came from
    /// it, else this process's working directory.
    #[arg(skip)]
    pub(crate) server_dir: Option<PathBuf>,
    /// The `[[servers]]` of `--config`: several servers behind the gate (ADR 033).
    #[arg(skip)]
    pub(crate) servers: Vec<crate::servers::Listed>,
    /// The policy: an aml-action-policy/1 JSON document, or a Cedar policy set (a file
    /// ending in .cedar, with NAME.cedarschema beside it as its schema; docs/POLICY.md); a
    /// malformed policy is refused at start
    #[arg(
        long,
        value_name = "POLICY.json|POLICY.cedar",
        required_unless_present = "config"
    )]
    pub(crate) policy: Option<PathBuf>,
    /// `enforce` the policy, or `shadow` it for a rollout: every call is decided and
    /// recorded as the policy would have it (`would_block` in its record; `journal receipts
    /// --shadow` lists them) and is forwarded anyway, without approval [default: enforce]
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) enforce: Option<Enforcement>,
    /// The tools the agent may call: {"tools": [{name, effect, purpose, description?,
    /// resource: {"argument": NAME} | {"fixed": RESOURCE}, input_schema, pin?}]}; a pinned
    /// tool ("pin": "sha256:…", written by `init`) is hidden and refused while the server
    /// advertises another definition of it
    #[arg(long, value_name = "TOOLS.json")]
    pub(crate) tools: Option<PathBuf>,
    /// Where grants, intents, outcomes, decisions and receipts are kept: a SQLite file path,
    /// postgres://…, or `memory` (nothing kept across restarts)
    #[arg(long, value_name = "PATH|postgres://…|memory")]
    pub(crate) state: Option<String>,
    /// Also append one JSON line per gated call and approval decision to FILE (with
    /// `--state memory` and no --receipts: stderr)
    #[arg(long, value_name = "FILE")]
    pub(crate) receipts: Option<PathBuf>,
    /// Where a person approves calls whose rule requires approval
    #[arg(long, value_enum, value_name = "CHANNEL")]
    pub(crate) approve: Option<Channel>,
    /// The approver's key file (aml-approval keygen); default: a key for this run only
    #[arg(long, value_name = "KEY.json")]
    pub(crate) approver_key: Option<PathBuf>,
    /// The gate's audit key (a key file as `aml-approval keygen` writes it): signs a
    /// checkpoint of the state's audit chain every --audit-every links or --audit-interval
    /// seconds and at a clean exit, stored in the state and written to the --receipts log;
    /// without it the chain is kept with hashes only (docs/AUDIT.md)
    #[arg(long, value_name = "KEY.json")]
    pub(crate) audit_key: Option<PathBuf>,
    /// Links between checkpoints, at most [default: 1000]; with --audit-key
    #[arg(long, value_name = "LINKS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) audit_every: Option<u64>,
    /// Seconds between checkpoints when there are new links, at most [default: 60]; with
    /// --audit-key
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) audit_interval: Option<u64>,
    /// How long a call waits for a decision before it is blocked (approval_error) [default: 300]
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) approval_timeout: Option<u64>,
    /// The approval page's port on 127.0.0.1 (default: any free port); with --approve web
    #[arg(long, value_name = "PORT")]
    pub(crate) approval_port: Option<u16>,
    #[command(flatten)]
    pub(crate) approval_page: crate::approvals::PageLimitArgs,
    /// How long a forwarded request may wait for the server; a tools/call that runs out of
    /// time is recorded `unknown` and the server is sent notifications/cancelled [default: 120]
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) upstream_timeout: Option<u64>,
    /// How long the server may take to answer the gate's startup ping and the client's
    /// initialize (or server/discover) [default: 30]
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) handshake_timeout: Option<u64>,
    /// sampling/createMessage from the server: refuse (answer the server with an error and
    /// record it) or relay to the client [default: refuse]
    #[arg(long, value_enum, value_name = "SETTING")]
    pub(crate) sampling: Option<Setting>,
    /// elicitation/create from the server: refuse or relay [default: refuse]
    #[arg(long, value_enum, value_name = "SETTING")]
    pub(crate) elicitation: Option<Setting>,
    /// The longest message accepted from either side; a longer one is answered with an
    /// error (a server's answer that long makes its call `unknown`) [default: 16777216]
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1024..=1 << 30))]
    pub(crate) max_message_bytes: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics, and /healthz and /readyz (e.g.
    /// 127.0.0.1:9464; port 0 picks a free one; the address is named on stderr); with
    /// --listen they are served on its port too, and `--metrics listen` serves them there
    /// only (docs/GATE.md, "Metrics, traces and health")
    #[arg(long, value_name = "ADDR|listen")]
    pub(crate) metrics: Option<String>,
    /// Export one OpenTelemetry span per call as OTLP/HTTP protobuf to URL/v1/traces (e.g.
    /// http://127.0.0.1:4318, a collector's OTLP/HTTP port), continuing the client's W3C
    /// traceparent from params._meta (docs/GATE.md, "Metrics, traces and health")
    #[arg(long, value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    #[command(flatten)]
    pub(crate) listen: crate::listen::ListenArgs,
    #[command(flatten)]
    pub(crate) upstream: crate::upstream::UpstreamArgs,
    /// The MCP server to start and its arguments
    #[arg(
        last = true,
        value_name = "SERVER_COMMAND",
        required_unless_present_any = ["config", "upstream"]
    )]
    pub(crate) command: Vec<OsString>,
}

/// Whether the policy blocks calls or only records what it would block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Enforcement {
    /// Block what the policy blocks, ask for what needs approval
    Enforce,
    /// Forward every call; record what the policy would have done
    Shadow,
}

/// What the gate does with one kind of server-to-client request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Setting {
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

/// A usage error, reported the way clap reports its own (exit 2).
pub(crate) fn usage_error(kind: clap::error::ErrorKind, message: impl std::fmt::Display) -> ! {
    use clap::CommandFactory;
    Cli::command().error(kind, message).exit()
}

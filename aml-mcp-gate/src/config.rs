//! `--config gate.toml`: every `run` option in one file, so an MCP client's configuration
//! needs one argument. Flags given on the command line win over the file; relative paths in
//! the file are relative to the file's folder, and so is the `server` command: it runs in
//! the file's folder (an MCP client starts the gate in a folder of its own choosing, so a
//! server's relative arguments would otherwise name files there); unknown keys are errors.
//!
//! ```toml
//! policy = "policy.json"          # or "policy.cedar"
//! enforce = "enforce"             # or "shadow": forward everything, record what would block
//! tools = "tools.json"
//! state = "gate.sqlite3"          # or "memory", or "postgres://…"
//! receipts = "receipts.jsonl"
//! server = ["npx", "-y", "@modelcontextprotocol/server-everything"]
//! # or several servers instead of `server`, each a table (crate::servers, docs/GATE.md):
//! # [[servers]]
//! # name = "files"
//! # command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "share"]
//! # [[servers]]
//! # name = "notes"
//! # url = "http://127.0.0.1:8931/mcp"   # with [upstream]'s credentials: token = "notes.token", …
//! metrics = "127.0.0.1:9464"      # or "listen": /metrics, /healthz, /readyz
//! otlp_endpoint = "http://127.0.0.1:4318"   # one OpenTelemetry span per call
//!
//! [approval]
//! channel = "web"                 # or "tty"
//! key = "approver-key.json"
//! timeout_seconds = 300
//! port = 8765
//! max_unauthenticated_connections = 64
//! max_authenticated_connections = 16
//! token_timeout_seconds = 2
//! max_streams = 64
//! notify = "tell-me"               # a program for each new pending proposal
//!
//! [audit]
//! key = "audit-key.json"          # aml-approval keygen; signs checkpoints of the chain
//! every = 1000
//! interval_seconds = 60
//!
//! [listen]                        # with --listen: OAuth access tokens (docs/GATE.md)
//! auth_issuer = "http://127.0.0.1:9000"
//! auth_audience = "http://127.0.0.1:8080/mcp"
//! auth_jwks = "http://127.0.0.1:9000/jwks"   # default: from the issuer's metadata
//! auth_scopes = ["mcp:tools"]
//!
//! [upstream]                      # a remote server instead of `server` (docs/GATE.md)
//! url = "http://127.0.0.1:3001/mcp"
//! headers = ["X-Tenant: blue"]
//! token = "server-token.txt"      # or the gate's own OAuth client credentials:
//! token_url = "http://127.0.0.1:9000/token"
//! client_id = "aml-gate"
//! client_secret_file = "client-secret.txt"
//! scopes = ["mcp:tools"]
//! resource = "https://tools.example.com/mcp"
//! client_auth = "basic"           # or "post"
//!
//! [limits]
//! upstream_timeout_seconds = 120
//! handshake_timeout_seconds = 30
//! max_message_bytes = 16777216
//! sampling = "refuse"             # or "relay"
//! elicitation = "refuse"
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::approvals::Channel;
use crate::cli::{RunArgs, Setting};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    policy: Option<PathBuf>,
    enforce: Option<crate::cli::Enforcement>,
    tools: Option<PathBuf>,
    state: Option<String>,
    receipts: Option<PathBuf>,
    server: Option<Vec<String>>,
    metrics: Option<String>,
    otlp_endpoint: Option<String>,
    #[serde(default)]
    approval: Approval,
    #[serde(default)]
    audit: Audit,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    listen: Listen,
    #[serde(default)]
    upstream: Upstream,
    /// Several servers behind the gate (`crate::servers`), instead of `server`.
    servers: Option<Vec<crate::servers::Table>>,
}

/// `[upstream]`: a remote server and how the gate authenticates to it (and a `[[servers]]`
/// table's, for one with a `url`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Upstream {
    pub(crate) url: Option<String>,
    pub(crate) headers: Option<Vec<String>>,
    pub(crate) token: Option<PathBuf>,
    pub(crate) token_url: Option<String>,
    pub(crate) client_id: Option<String>,
    pub(crate) client_secret_file: Option<PathBuf>,
    pub(crate) scopes: Option<Vec<String>>,
    pub(crate) resource: Option<String>,
    pub(crate) client_auth: Option<crate::upstream::ClientAuthArg>,
}

impl Upstream {
    /// The settings as their flags give them, files relative to `folder`.
    pub(crate) fn args(self, folder: &Path) -> crate::upstream::UpstreamArgs {
        let relative = |p: PathBuf| if p.is_absolute() { p } else { folder.join(p) };
        crate::upstream::UpstreamArgs {
            upstream: self.url,
            upstream_header: self.headers.unwrap_or_default(),
            upstream_token: self.token.map(relative),
            upstream_token_url: self.token_url,
            upstream_client_id: self.client_id,
            upstream_client_secret_file: self.client_secret_file.map(relative),
            upstream_scopes: self.scopes.unwrap_or_default(),
            upstream_resource: self.resource,
            upstream_client_auth: self.client_auth,
        }
    }
}

/// `[listen]`: the HTTP front's OAuth settings (`--listen` itself stays a flag).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Listen {
    auth_issuer: Option<String>,
    auth_audience: Option<String>,
    auth_jwks: Option<String>,
    auth_scopes: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Audit {
    key: Option<PathBuf>,
    every: Option<u64>,
    interval_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Approval {
    channel: Option<Channel>,
    key: Option<PathBuf>,
    timeout_seconds: Option<u64>,
    port: Option<u16>,
    max_unauthenticated_connections: Option<u64>,
    max_authenticated_connections: Option<u64>,
    token_timeout_seconds: Option<u64>,
    max_streams: Option<u64>,
    notify: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Limits {
    upstream_timeout_seconds: Option<u64>,
    handshake_timeout_seconds: Option<u64>,
    max_message_bytes: Option<u64>,
    sampling: Option<Setting>,
    elicitation: Option<Setting>,
}

/// The folder of the file at `path` (`.` for a bare file name, whose parent is empty).
fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The servers of the file at `path`, for `init`: its `[[servers]]` (each named), or its one
/// `server` or `[upstream]` (unnamed); a command runs in the file's folder.
pub(crate) fn servers_for_init(path: &Path) -> Result<Vec<InitServer>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file: File = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let base = folder_of(path);
    let folder = std::path::absolute(base)
        .map_err(|e| format!("{}: cannot resolve its folder: {e}", path.display()))?;
    match (
        file.servers,
        file.server.filter(|s| !s.is_empty()),
        file.upstream.url.clone(),
    ) {
        (Some(tables), None, None) if !tables.is_empty() => {
            let listed =
                crate::servers::read(tables, &folder).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(listed
                .iter()
                .map(|l| InitServer {
                    named: Some((l.name().to_owned(), l.naming())),
                    server: l.server().clone(),
                })
                .collect())
        }
        (None, Some(server), None) => Ok(vec![InitServer {
            named: None,
            server: crate::upstream::Server::Child(crate::child::ServerCommand::new(
                server_command(&folder, server),
                Some(&folder),
            )),
        }]),
        (None, None, Some(_)) => {
            let args = file.upstream.args(&folder);
            let server = crate::upstream::Server::from_args(&args, &[], None, 16 << 20)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(vec![InitServer { named: None, server }])
        }
        (None, None, None) | (Some(_), None, None) => Err(format!(
            "{}: names no server (`server = [...]` or `[[servers]]` tables)",
            path.display()
        )),
        _ => Err(format!(
            "{}: `server`, `[upstream] url` and `[[servers]]` name the servers in different ways: keep one",
            path.display()
        )),
    }
}

/// A server `init` reads: its name and naming when the file lists several, and how it is
/// reached.
#[derive(Debug)]
pub(crate) struct InitServer {
    pub(crate) named: Option<(String, aml_mcp::relay::names::Naming)>,
    pub(crate) server: crate::upstream::Server,
}

/// Fills every option of `args` that was not given as a flag from the file at `path`.
pub(crate) fn merge(args: &mut RunArgs, path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file: File = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let base = folder_of(path);
    let relative = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    let state = file.state.map(|s| match s.as_str() {
        "memory" => s,
        _ if s.starts_with("postgres://") || s.starts_with("postgresql://") => s,
        _ => relative(PathBuf::from(s)).display().to_string(),
    });
    fill(&mut args.policy, file.policy.map(relative));
    fill(&mut args.enforce, file.enforce);
    fill(&mut args.tools, file.tools.map(relative));
    fill(&mut args.state, state);
    fill(&mut args.receipts, file.receipts.map(relative));
    fill(&mut args.metrics, file.metrics);
    fill(&mut args.otlp_endpoint, file.otlp_endpoint);
    fill(&mut args.approve, file.approval.channel);
    fill(&mut args.approver_key, file.approval.key.map(relative));
    fill(&mut args.approval_timeout, file.approval.timeout_seconds);
    fill(&mut args.audit_key, file.audit.key.map(relative));
    fill(&mut args.audit_every, file.audit.every);
    fill(&mut args.audit_interval, file.audit.interval_seconds);
    fill(&mut args.approval_port, file.approval.port);
    let page = &mut args.approval_page;
    fill(
        &mut page.approval_max_unauthenticated,
        file.approval.max_unauthenticated_connections,
    );
    fill(
        &mut page.approval_max_authenticated,
        file.approval.max_authenticated_connections,
    );
    fill(
        &mut page.approval_token_timeout,
        file.approval.token_timeout_seconds,
    );
    fill(&mut page.approval_max_streams, file.approval.max_streams);
    // A bare name is looked up on PATH; a path is relative to the file, as the others.
    let notify = file.approval.notify.map(|p| {
        if p.components().count() > 1 {
            relative(p)
        } else {
            p
        }
    });
    fill(&mut page.approval_notify, notify);
    fill(&mut args.upstream_timeout, file.limits.upstream_timeout_seconds);
    fill(&mut args.handshake_timeout, file.limits.handshake_timeout_seconds);
    fill(&mut args.max_message_bytes, file.limits.max_message_bytes);
    fill(&mut args.sampling, file.limits.sampling);
    let listen = &mut args.listen;
    fill(&mut listen.auth_issuer, file.listen.auth_issuer);
    fill(&mut listen.auth_audience, file.listen.auth_audience);
    fill(&mut listen.auth_jwks, file.listen.auth_jwks);
    if listen.auth_scopes.is_empty() {
        listen.auth_scopes = file.listen.auth_scopes.unwrap_or_default();
    }
    fill(&mut args.elicitation, file.limits.elicitation);
    let up = &mut args.upstream;
    let (server, url) = (file.server.filter(|s| !s.is_empty()), file.upstream.url);
    if server.is_some() && url.is_some() {
        return Err(format!(
            "{}: `server` and `[upstream] url` name two servers: keep one",
            path.display()
        ));
    }
    if let Some(tables) = file.servers {
        let one = server.is_some() || url.is_some() || !args.command.is_empty() || up.upstream.is_some();
        if one {
            return Err(format!(
                "{}: `[[servers]]` lists the gate's servers; it cannot be given with `server`, `[upstream] url`, --upstream or a command after `--`",
                path.display()
            ));
        }
        if tables.is_empty() {
            return Err(format!("{}: `servers` lists no server", path.display()));
        }
        let folder = std::path::absolute(base)
            .map_err(|e| format!("{}: cannot resolve its folder: {e}", path.display()))?;
        args.servers =
            crate::servers::read(tables, &folder).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if args.command.is_empty() {
        fill(&mut up.upstream, url);
    }
    if up.upstream_header.is_empty() {
        up.upstream_header = file.upstream.headers.unwrap_or_default();
    }
    fill(&mut up.upstream_token, file.upstream.token.map(relative));
    fill(&mut up.upstream_token_url, file.upstream.token_url);
    fill(&mut up.upstream_client_id, file.upstream.client_id);
    fill(
        &mut up.upstream_client_secret_file,
        file.upstream.client_secret_file.map(relative),
    );
    if up.upstream_scopes.is_empty() {
        up.upstream_scopes = file.upstream.scopes.unwrap_or_default();
    }
    fill(&mut up.upstream_resource, file.upstream.resource);
    fill(&mut up.upstream_client_auth, file.upstream.client_auth);
    if args.command.is_empty() && args.upstream.upstream.is_none() {
        if let Some(server) = server {
            let folder = std::path::absolute(base)
                .map_err(|e| format!("{}: cannot resolve its folder: {e}", path.display()))?;
            args.command = server_command(&folder, server);
            args.server_dir = Some(folder);
        }
    }
    Ok(())
}

/// The file's `server` command, to run in `folder`: a relative program path (one with a
/// `/`, such as `./server.sh`) names a file there; a bare name (`npx`) is looked up in
/// `PATH`; the arguments are passed as written.
pub(crate) fn server_command(folder: &Path, server: Vec<String>) -> Vec<OsString> {
    let mut command: Vec<OsString> = server.into_iter().map(OsString::from).collect();
    let program = Path::new(&command[0]);
    if program.is_relative() && program.components().count() > 1 {
        command[0] = folder.join(program).into_os_string();
    }
    command
}

fn fill<T>(slot: &mut Option<T>, from_file: Option<T>) {
    if slot.is_none() {
        *slot = from_file;
    }
}

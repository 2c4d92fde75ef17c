//! `--listen`: the gate as an MCP Streamable HTTP server. Each MCP session a client opens
//! gets its own relay and its own upstream: a child process of its own (so `--max-sessions`
//! caps the processes too), or its own session with the `--upstream` server. Protocol
//! 2026-07-28 requests (no session) all share one more relay and upstream, started with the
//! first of them and again after it ends; the server sees their messages as the clients sent
//! them, so it speaks the era they carry. All share the host's policy, grants and receipt log.
//! With `[[servers]]` (ADR 033) each session starts every listed server, and its relay is
//! in front of them all.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use aml_mcp::relay::{self, RelayConfig, RelayEnd, RelayTools};
use aml_mcp_http::{FrontConfig, HttpFront, OAuth, Tokens};
use tokio::task::JoinSet;

use crate::servers::Listed;
use crate::upstream::{Server, Stopper};

/// What each session is in front of: one server, or the `[[servers]]` list.
#[derive(Debug)]
pub(crate) enum Fronted<'a> {
    One(Server),
    Listed(&'a [Listed]),
}

/// A session's servers, started, with what stops them.
enum Started {
    One(relay::Upstream, Stopper),
    Listed(Vec<(String, relay::Upstream)>, Vec<Stopper>),
}

impl Fronted<'_> {
    fn start(&self, max: usize) -> Result<Started, String> {
        match self {
            Fronted::One(server) => server.start(max).map(|started| {
                let (upstream, stopper) = started.split();
                Started::One(upstream, stopper)
            }),
            Fronted::Listed(listed) => {
                let (upstreams, stoppers) = crate::servers::start(listed, max);
                Ok(Started::Listed(upstreams, stoppers))
            }
        }
    }

    /// What to call it in messages.
    fn name(&self) -> String {
        match self {
            Fronted::One(server) => server.name(),
            Fronted::Listed(listed) => format!("every server ({})", crate::servers::label(listed)),
        }
    }
}

impl Started {
    /// Runs the session's relay to its end, then stops its servers.
    async fn run(self, tools: RelayTools, config: RelayConfig, client: relay::Client) -> RelayEnd {
        let grace = Duration::from_secs(2);
        match self {
            Started::One(upstream, stopper) => {
                let end = relay::run(tools, config, client, upstream, Vec::new()).await;
                stopper.stop(grace).await;
                end
            }
            Started::Listed(upstreams, stoppers) => {
                let end = relay::run_servers(tools, config, client, upstreams).await;
                crate::servers::stop(stoppers, grace).await;
                end
            }
        }
    }
}

/// The HTTP front's settings, from the command line.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ListenArgs {
    /// Serve MCP over Streamable HTTP at http://ADDR/mcp (e.g. 127.0.0.1:8080 or
    /// localhost:8080: a name binds every address it resolves to) instead of on
    /// stdin/stdout; loopback addresses only unless --listen-public
    #[arg(long, value_name = "ADDR", value_parser = ListenAddr::parse)]
    pub(crate) listen: Option<ListenAddr>,
    /// Allow --listen on an address other than loopback (requires --tokens or --auth-issuer)
    #[arg(long, requires = "listen")]
    pub(crate) listen_public: bool,
    /// Bearer tokens clients must present, one per line (each at least 16 characters), as
    /// `TOKEN` or `NAME TOKEN`: the name is the caller the policy (Cedar principal
    /// Caller::"NAME"), budgets and receipts know the client by (default token-N); a
    /// request without a valid token gets 401 and reaches nothing
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub(crate) tokens: Option<PathBuf>,
    /// Accept OAuth 2.1 JWT access tokens issued by this authorization server (its issuer
    /// identifier: a token's `iss` must equal it), besides any --tokens. The token's `sub` is
    /// the caller: the Cedar principal Caller::"SUB", what budgets count per and `caller` in
    /// receipts. Needs --auth-audience. A request without a valid token gets 401 naming
    /// /.well-known/oauth-protected-resource, served without a token, where MCP clients
    /// find the server
    #[arg(long, value_name = "URL", requires = "listen")]
    pub(crate) auth_issuer: Option<String>,
    /// This gate's resource URI, as its clients reach it (e.g. https://gate.example.com/mcp):
    /// a token's `aud` must contain it (RFC 8707), and the metadata names it as `resource`
    #[arg(long, value_name = "URI", requires = "listen")]
    pub(crate) auth_audience: Option<String>,
    /// The issuer's JWK set, http:// only (an https one through a local TLS proxy) [default:
    /// the `jwks_uri` of the issuer's /.well-known/oauth-authorization-server, else of its
    /// /.well-known/openid-configuration]. Fetched with a 5 s limit and cached; a token
    /// naming a key the set lacks refetches it at most once per 30 s. Keys that cannot be
    /// had: 503, nothing forwarded
    #[arg(long, value_name = "URL", requires = "listen")]
    pub(crate) auth_jwks: Option<String>,
    /// Scopes every JWT must carry in its `scope` claim, comma-separated (e.g.
    /// mcp:tools,mcp:write); a valid token without one of them gets 403 insufficient_scope
    #[arg(long, value_name = "A,B", value_delimiter = ',', requires = "listen")]
    pub(crate) auth_scopes: Vec<String>,
    /// An Origin accepted besides the gate's own (repeatable, e.g. http://localhost:5173 for a
    /// browser client served there); any other Origin gets 403
    #[arg(long, value_name = "ORIGIN", requires = "listen")]
    pub(crate) allow_origin: Vec<String>,
    /// How long a connection may take to send a request's headers (from its start, or from
    /// its previous answer when kept alive); a connection still short of them is closed
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) header_timeout: u64,
    /// How long a request's body may take to arrive after its headers; a body still short
    /// of its Content-Length gets 408 and its connection is closed
    #[arg(long, value_name = "SECONDS", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) body_timeout: u64,
    /// How many client connections may be open at once; connections that have not yet sent
    /// a request with a valid token (and an accepted Origin) may hold three quarters, and
    /// the oldest of them is closed to make room for a new one [default: 1024, or fewer if
    /// the open-file limit needs it]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) max_connections: Option<u64>,
    /// The largest request body; a larger one gets 413
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20, value_parser = clap::value_parser!(u64).range(1024..=1 << 30))]
    pub(crate) max_body_bytes: u64,
    /// How many MCP sessions may be open at once; one more initialize gets 503
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) max_sessions: u64,
    /// How many MCP sessions one client (one token, or without --tokens one IP address) may
    /// have open at once; its next initialize gets 429
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) max_sessions_per_client: u64,
    /// A session with no request for this long is closed
    #[arg(long, value_name = "SECONDS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) session_idle_timeout: u64,
    /// A session that sent no request after initialize is closed after this long
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) unused_session_timeout: u64,
    /// How many requests of one session may wait for an answer at once; one more gets 429
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) max_calls_per_session: u64,
    /// How many protocol 2026-07-28 (session-less) requests, from all clients together, may
    /// wait for an answer at once; one more gets 429
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) max_stateless_calls: u64,
    /// While an SSE stream has had nothing to send for this long, send it a `: keep-alive`
    /// comment (clients ignore it; proxies that close idle connections see traffic); 0 sends
    /// none
    #[arg(long, value_name = "SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub(crate) sse_keep_alive: u64,
}

impl ListenArgs {
    /// The front's settings, for sessions each in front of `servers` servers; `Err` names
    /// what is wrong (exit 2).
    pub(crate) fn front_config(&self, addr: &ListenAddr, servers: usize) -> Result<FrontConfig, String> {
        let oauth = self.oauth()?;
        if self.listen_public && self.tokens.is_none() && oauth.is_none() {
            return Err("--listen-public needs --tokens or --auth-issuer: a public gate without them would serve anyone".into());
        }
        if let Some(public) = addr.addrs.iter().find(|a| !a.ip().is_loopback()) {
            if !self.listen_public {
                let named = match addr.text == public.to_string() {
                    true => String::new(),
                    false => format!(" ({} is {public})", addr.text),
                };
                return Err(format!(
                    "--listen {}{named} is not a loopback address: add --listen-public (and --tokens) to serve other machines",
                    addr.text
                ));
            }
        }
        let max_connections = self.max_connections(open_files::raise(), servers as u64)?;
        let mut config = FrontConfig::default()
            .with_max_body_bytes(self.max_body_bytes as usize)
            .with_header_read_timeout(Duration::from_secs(self.header_timeout))
            .with_body_read_timeout(Duration::from_secs(self.body_timeout))
            .with_max_connections(max_connections)
            .with_max_sessions(self.max_sessions as usize)
            .with_max_sessions_per_client(self.max_sessions_per_client as usize)
            .with_unused_session_timeout(Duration::from_secs(self.unused_session_timeout))
            .with_session_idle_timeout(Duration::from_secs(self.session_idle_timeout))
            .with_max_calls_per_session(self.max_calls_per_session as usize)
            .with_max_stateless_calls(self.max_stateless_calls as usize)
            .with_sse_keep_alive((self.sse_keep_alive > 0).then(|| Duration::from_secs(self.sse_keep_alive)));
        if let Some(path) = &self.tokens {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            config =
                config.with_tokens(Tokens::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?);
        }
        if let Some(oauth) = oauth {
            config = config.with_oauth(oauth);
        }
        for origin in &self.allow_origin {
            config = config.allow_origin(origin.clone());
        }
        Ok(config)
    }

    /// The `--auth-*` settings (flags or the file's `[listen]`), checked.
    fn oauth(&self) -> Result<Option<OAuth>, String> {
        let Some(issuer) = &self.auth_issuer else {
            if self.auth_audience.is_some() || self.auth_jwks.is_some() || !self.auth_scopes.is_empty() {
                return Err("--auth-audience, --auth-jwks and --auth-scopes need --auth-issuer".into());
            }
            return Ok(None);
        };
        let Some(audience) = &self.auth_audience else {
            return Err("--auth-issuer needs --auth-audience: this gate's resource URI as clients reach it (e.g. http://127.0.0.1:8080/mcp), which tokens must be issued for".into());
        };
        let mut oauth =
            OAuth::new(issuer, audience).map_err(|e| format!("--auth-issuer/--auth-audience: {e}"))?;
        if let Some(jwks) = &self.auth_jwks {
            oauth = oauth
                .with_jwks_url(jwks)
                .map_err(|e| format!("--auth-jwks: {e}"))?;
        }
        let scopes: Vec<String> = self
            .auth_scopes
            .iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        oauth = oauth
            .with_scopes(scopes)
            .map_err(|e| format!("--auth-scopes: {e}"))?;
        oauth.check_reachable().map_err(|e| format!("--auth-jwks: {e}"))?;
        Ok(Some(oauth))
    }

    /// The connection cap: `--max-connections`, or the default, within what the open-file
    /// limit `files` leaves once the gate's other files are counted (a cap above what the
    /// gate can open would let a flood take the descriptors every other file needs).
    fn max_connections(&self, files: u64, servers: u64) -> Result<usize, String> {
        // The state database, the approval page, logs, the listener, and for each session
        // (and the stateless relay) each of its servers' pipes or upstream connections.
        let others = 64 + 4 * servers.max(1) * (self.max_sessions + 1);
        let room = files.saturating_sub(others);
        let sessions = match servers {
            0 | 1 => format!("--max-sessions {}", self.max_sessions),
            n => format!("--max-sessions {} of {n} servers each", self.max_sessions),
        };
        match self.max_connections {
            Some(n) if n > room => Err(format!(
                "--max-connections {n} needs {} open files with {sessions}, and this process may open {files} (ulimit -n): lower them or raise the limit",
                n + others,
            )),
            Some(n) => Ok(n as usize),
            None if room < 16 => Err(format!(
                "the open-file limit ({files}, ulimit -n) leaves {room} connections with {sessions}: raise the limit or lower --max-sessions",
            )),
            None => Ok(room.min(1024) as usize),
        }
    }
}

/// Where `--listen` listens: an address, or a host name and every address it resolves to
/// (`localhost:8080`: `127.0.0.1` and, where the system says so, `::1`).
#[derive(Debug, Clone)]
pub(crate) struct ListenAddr {
    /// As given.
    text: String,
    pub(crate) addrs: Vec<SocketAddr>,
}

impl ListenAddr {
    fn parse(text: &str) -> Result<ListenAddr, String> {
        let addrs = match text.parse::<SocketAddr>() {
            Ok(addr) => vec![addr],
            Err(_) => {
                let port = text
                    .rsplit_once(':')
                    .map(|(host, port)| (host, port.parse::<u16>()));
                let (host, Ok(port)) =
                    port.ok_or("expected HOST:PORT, e.g. 127.0.0.1:8080 or localhost:8080")?
                else {
                    return Err("the port must be a number from 0 to 65535".into());
                };
                if host.is_empty() {
                    return Err("expected HOST:PORT with a host, e.g. localhost:8080".into());
                }
                let mut addrs = Vec::new();
                for addr in (host, port)
                    .to_socket_addrs()
                    .map_err(|e| format!("cannot resolve {host}: {e}"))?
                {
                    if !addrs.contains(&addr) {
                        addrs.push(addr);
                    }
                }
                addrs
            }
        };
        if addrs.is_empty() {
            return Err(format!("{text} resolves to no address"));
        }
        Ok(ListenAddr {
            text: text.to_string(),
            addrs,
        })
    }
}

/// The process's open-file limit.
mod open_files {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};

    /// Raises the soft open-file limit to the hard one (the soft one is often 1024 where
    /// the hard one is far higher); what the process may open now. A limit that cannot be
    /// read counts as 1024, the common soft default.
    pub(super) fn raise() -> u64 {
        let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
            return 1024;
        };
        if soft < hard {
            match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                Ok(()) => return hard,
                Err(e) => tracing::warn!("cannot raise the open-file limit from {soft} to {hard}: {e}"),
            }
        }
        soft
    }
}

/// What `--metrics` is told of the sessions: how many are open, and whether their servers
/// start.
#[derive(Debug)]
pub(crate) struct Observed {
    pub(crate) metrics: Option<std::sync::Arc<crate::telemetry::Metrics>>,
    pub(crate) upstream: std::sync::Arc<crate::telemetry::UpstreamProbe>,
}

impl Observed {
    fn sessions(&self, open: usize) {
        if let Some(metrics) = &self.metrics {
            metrics.sessions.set(open as i64);
        }
    }
}

/// Serves until SIGINT or SIGTERM, then ends every session (calls in flight get their
/// receipts within the relay's drain limit).
pub(crate) async fn serve(
    addr: &ListenAddr,
    front: FrontConfig,
    tools: RelayTools,
    config: RelayConfig,
    server: Fronted<'_>,
    observed: Observed,
) -> Result<(), String> {
    // Per-tool scopes come from the catalog in force (a reload applies at once).
    let catalog = tools.clone();
    let front = front.with_tool_scopes(aml_mcp_http::ToolScopes::new(move |tool| {
        let catalog = catalog.gate().gate().catalog();
        catalog.get(tool).map(|t| t.scopes().to_vec()).unwrap_or_default()
    }));
    // A call refused with its whole POST leaves its record too, as one the relay refuses.
    let gate = tools.gate().gate().clone();
    let front = front.with_refused_calls(aml_mcp_http::RefusedCalls::new(move |caller, tool, why| {
        let caller = caller
            .and_then(|c| aml_core::Caller::new(c).ok())
            .unwrap_or_else(aml_core::Caller::local);
        gate.refused_by(tool, &caller, aml_core::Refusal::MalformedRequest, why.to_owned());
    }));
    let mut front = HttpFront::bind_all(&addr.addrs, front)
        .await
        .map_err(|e| format!("cannot listen on {} ({:?}): {e}", addr.text, addr.addrs))?;
    if addr.addrs.len() > 1 {
        tracing::info!("listening on {:?} (every address of {})", addr.addrs, addr.text);
    }
    // The one line on stdout in this mode: where to connect (port 0 picks one).
    println!("aml-mcp-gate: MCP at http://{}/mcp", front.local_addr());
    let mut sessions = JoinSet::new();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    loop {
        let (client, info) = tokio::select! {
            next = front.accept() => match next {
                Some(next) => next,
                None => break,
            },
            _ = tokio::signal::ctrl_c() => break,
            _ = terminate.recv() => break,
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {
                observed.sessions(sessions.len());
                continue;
            }
        };
        // The token's name is the session's caller (checked when the token file was read).
        let caller = match info.caller.as_deref().map(aml_mcp::Caller::new).transpose() {
            Ok(caller) => caller.unwrap_or_else(aml_mcp::Caller::local),
            Err(why) => {
                tracing::error!(
                    "{}: refused: its token's name is not a caller name: {why}",
                    info.name
                );
                continue;
            }
        };
        let started = match server.start(config.max_message_bytes) {
            Ok(started) => {
                observed.upstream.set_child(true);
                started
            }
            Err(e) => {
                observed.upstream.set_child(false);
                // Dropping the connection answers the client's initialize with an error.
                tracing::error!("{}: {e}", info.name);
                continue;
            }
        };
        let (tools, config, name) = (tools.clone(), config.clone().with_caller(caller), server.name());
        sessions.spawn(async move {
            if info.stateless {
                tracing::info!(
                    "{}: a relay for protocol 2026-07-28 requests (no sessions)",
                    info.name
                );
            }
            match started.run(tools, config, client).await {
                RelayEnd::ClientClosed => tracing::info!("{} ended", info.name),
                other => tracing::warn!("{} with {name} ended: {other:?}", info.name),
            }
        });
        observed.sessions(sessions.len());
    }
    front.close_all();
    let drain = config.drain_timeout + Duration::from_secs(5);
    if tokio::time::timeout(drain, async { while sessions.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        eprintln!("aml-mcp-gate: some sessions did not end within {drain:?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        listen: ListenArgs,
    }

    fn flags(extra: &[&str]) -> ListenArgs {
        let args = ["gate", "--listen", "127.0.0.1:0"].iter().chain(extra);
        Flags::try_parse_from(args).unwrap().listen
    }

    #[test]
    fn a_name_binds_its_loopback_addresses_and_a_public_one_needs_the_flag() {
        let local = ListenAddr::parse("localhost:8080").unwrap();
        assert!(!local.addrs.is_empty());
        assert!(local
            .addrs
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 8080));
        assert!(flags(&[]).front_config(&local, 1).is_ok());
        for bad in ["localhost", "localhost:http", ":8080", "localhost:65536"] {
            assert!(ListenAddr::parse(bad).is_err(), "{bad}");
        }
        // A name that resolves beyond loopback (here as if resolved) is refused, naming it.
        let public = ListenAddr {
            text: "gate.example.test:8080".into(),
            addrs: vec![
                "127.0.0.1:8080".parse().unwrap(),
                "192.0.2.7:8080".parse().unwrap(),
            ],
        };
        let refused = flags(&[]).front_config(&public, 1).unwrap_err();
        assert!(
            refused.contains("gate.example.test:8080 (gate.example.test:8080 is 192.0.2.7:8080)"),
            "{refused}"
        );
        assert!(refused.contains("--listen-public"), "{refused}");
    }

    #[test]
    fn the_connection_cap_leaves_files_for_every_server_of_every_session() {
        let cap = flags(&["--max-sessions", "100", "--max-connections", "500"]);
        // 64 + 4 files for each of 101 sessions' one server: 468, and 500 connections fit.
        assert_eq!(cap.max_connections(1000, 1), Ok(500));
        // Four servers a session: 64 + 16 × 101 = 1680 files before any connection.
        let refused = cap.max_connections(2000, 4).unwrap_err();
        assert!(
            refused.contains("2180 open files") && refused.contains("of 4 servers each"),
            "{refused}"
        );
        assert!(flags(&["--max-sessions", "100"]).max_connections(2000, 4).is_ok());
    }

    #[test]
    fn auth_flags_are_checked_together() {
        let local = ListenAddr::parse("127.0.0.1:0").unwrap();
        let err = |extra: &[&str]| flags(extra).front_config(&local, 1).unwrap_err();
        assert!(err(&["--auth-issuer", "http://127.0.0.1:9"]).contains("needs --auth-audience"));
        assert!(err(&["--auth-audience", "http://127.0.0.1:8080/mcp"]).contains("need --auth-issuer"));
        assert!(err(&["--listen-public"]).contains("--tokens or --auth-issuer"));
        let issuer = ["--auth-issuer", "http://127.0.0.1:9", "--auth-audience"];
        assert!(err(&[&issuer[..], &["mcp"]].concat()).contains("absolute"));
        assert!(
            err(&[&issuer[..], &["http://g/mcp", "--auth-jwks", "https://as/jwks"]].concat())
                .contains("TLS proxy")
        );
        assert!(err(&[&issuer[..], &["http://g/mcp", "--auth-scopes", "a,b c"]].concat()).contains("scope"));
        let https = [
            "--auth-issuer",
            "https://as.example",
            "--auth-audience",
            "https://g/mcp",
        ];
        assert!(err(&https).contains("give its key set URL"));
        let ok = flags(
            &[
                &https[..],
                &[
                    "--auth-jwks",
                    "http://127.0.0.1:9/jwks",
                    "--auth-scopes",
                    "mcp:tools, mcp:write",
                ],
            ]
            .concat(),
        )
        .front_config(&local, 1)
        .unwrap();
        let oauth = ok.oauth.unwrap();
        assert_eq!(oauth.scopes, ["mcp:tools", "mcp:write"]);
        assert_eq!(oauth.jwks_url.as_deref(), Some("http://127.0.0.1:9/jwks"));
    }
}

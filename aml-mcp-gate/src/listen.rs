//! `--listen`: the gate as an MCP Streamable HTTP server. Each MCP session a client opens
//! gets its own relay and its own upstream: a child process of its own (so `--max-sessions`
//! caps the processes too), or its own session with the `--upstream` server. Protocol
//! 2026-07-28 requests (no session) all share one more relay and upstream, started with the
//! first of them and again after it ends; the server sees their messages as the clients sent
//! them, so it speaks the era they carry. All share the host's policy, grants and receipt log.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use aml_mcp::relay::{self, RelayConfig, RelayEnd, RelayTools};
use aml_mcp_http::{FrontConfig, HttpFront, Tokens};
use tokio::task::JoinSet;

use crate::upstream::Server;

/// The HTTP front's settings, from the command line.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ListenArgs {
    /// Serve MCP over Streamable HTTP at http://ADDR/mcp (e.g. 127.0.0.1:8080) instead of on
    /// stdin/stdout; a loopback address unless --listen-public
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<SocketAddr>,
    /// Allow --listen on an address other than loopback (requires --tokens)
    #[arg(long, requires_all = ["listen", "tokens"])]
    pub(crate) listen_public: bool,
    /// Bearer tokens clients must present, one per line (each at least 16 characters); a
    /// request without a valid one gets 401 and reaches nothing
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub(crate) tokens: Option<PathBuf>,
    /// An Origin accepted besides loopback ones (repeatable); any other Origin gets 403
    #[arg(long, value_name = "ORIGIN", requires = "listen")]
    pub(crate) allow_origin: Vec<String>,
    /// The largest request body; a larger one gets 413
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20, value_parser = clap::value_parser!(u64).range(1024..=1 << 30))]
    pub(crate) max_body_bytes: u64,
    /// How many MCP sessions may be open at once; one more initialize gets 503
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) max_sessions: u64,
    /// A session with no request for this long is closed
    #[arg(long, value_name = "SECONDS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) session_idle_timeout: u64,
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
    /// The front's settings; `Err` names what is wrong (exit 2).
    pub(crate) fn front_config(&self, addr: SocketAddr) -> Result<FrontConfig, String> {
        if !addr.ip().is_loopback() && !self.listen_public {
            return Err(format!(
                "--listen {addr} is not a loopback address: add --listen-public (and --tokens) to serve other machines"
            ));
        }
        let mut config = FrontConfig::default()
            .with_max_body_bytes(self.max_body_bytes as usize)
            .with_max_sessions(self.max_sessions as usize)
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
        for origin in &self.allow_origin {
            config = config.allow_origin(origin.clone());
        }
        Ok(config)
    }
}

/// Serves until SIGINT or SIGTERM, then ends every session (calls in flight get their
/// receipts within the relay's drain limit).
pub(crate) async fn serve(
    addr: SocketAddr,
    front: FrontConfig,
    tools: RelayTools,
    config: RelayConfig,
    server: Server,
) -> Result<(), String> {
    let mut front = HttpFront::bind(addr, front)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
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
            Some(_) = sessions.join_next(), if !sessions.is_empty() => continue,
        };
        let started = match server.start(config.max_message_bytes) {
            Ok(started) => started,
            Err(e) => {
                // Dropping the connection answers the client's initialize with an error.
                tracing::error!("session {}: {e}", info.id);
                continue;
            }
        };
        let (upstream, stopper) = started.split();
        let (tools, config, name) = (tools.clone(), config.clone(), server.name());
        sessions.spawn(async move {
            if info.stateless {
                tracing::info!(
                    "{}: a relay for protocol 2026-07-28 requests (no sessions)",
                    info.id
                );
            }
            let end = relay::run(tools, config, client, upstream, Vec::new()).await;
            match end {
                RelayEnd::ClientClosed => tracing::info!("session {} ended", info.id),
                other => tracing::warn!("session {} with {name} ended: {other:?}", info.id),
            }
            stopper.stop(Duration::from_secs(2)).await;
        });
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

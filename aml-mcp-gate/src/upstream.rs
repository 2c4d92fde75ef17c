//! The server the gate relays to: a child process it starts (`-- COMMAND`), or a remote MCP
//! server over Streamable HTTP (`--upstream URL`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use aml_mcp::relay::{OutboundTraces, Upstream};
use aml_mcp_http::{http_upstream, UpstreamConfig};
use tokio::sync::oneshot;

use crate::child::ServerCommand;

/// Where the server is, from the command line.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct UpstreamArgs {
    /// Relay to the MCP server at this Streamable HTTP URL (http://HOST:PORT/PATH) instead of
    /// starting SERVER_COMMAND
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub(crate) upstream: Option<String>,
    /// A header sent with every request to --upstream (repeatable)
    #[arg(long, value_name = "NAME: VALUE", requires = "upstream")]
    pub(crate) upstream_header: Vec<String>,
    /// A file holding the bearer token sent to --upstream (Authorization: Bearer …)
    #[arg(long, value_name = "FILE", requires = "upstream")]
    pub(crate) upstream_token: Option<PathBuf>,
}

/// How to reach the server, checked before anything starts.
#[derive(Debug, Clone)]
pub(crate) enum Server {
    Child(ServerCommand),
    Http { url: String, config: UpstreamConfig },
}

impl Server {
    /// The server from the arguments; `Err` names what is wrong (exit 2). `dir` is where a
    /// server command runs (`None`: here).
    pub(crate) fn from_args(
        args: &UpstreamArgs,
        command: &[OsString],
        dir: Option<&Path>,
        max: usize,
    ) -> Result<Server, String> {
        let Some(url) = &args.upstream else {
            // clap's `requires` is not enforced next to a `conflicts_with` that fires.
            if !args.upstream_header.is_empty() || args.upstream_token.is_some() {
                return Err("--upstream-header and --upstream-token need --upstream".into());
            }
            if let Some(dir) = dir {
                tracing::info!(
                    "the server command runs in {} (the --config file's folder)",
                    dir.display()
                );
            }
            return Ok(Server::Child(ServerCommand::new(command.to_vec(), dir)));
        };
        let mut config = UpstreamConfig::default().with_max_message_bytes(max);
        for header in &args.upstream_header {
            let (name, value) = header
                .split_once(':')
                .ok_or_else(|| format!("--upstream-header {header:?}: expected NAME: VALUE"))?;
            config = config.with_header(name.trim(), value.trim());
        }
        if let Some(path) = &args.upstream_token {
            let token =
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            if token.trim().is_empty() {
                return Err(format!("{}: no token in the file", path.display()));
            }
            config = config.with_bearer_token(token.trim());
        }
        // Checked now, so a bad URL or header is a usage error.
        drop(http_upstream_checked(url, config.clone())?);
        Ok(Server::Http {
            url: url.clone(),
            config,
        })
    }

    /// Sends each forwarded call's trace context from `traces` as W3C headers: a remote
    /// server only (a child's pipes carry nothing beside the message). Whether it will.
    pub(crate) fn send_traces(&mut self, traces: OutboundTraces) -> bool {
        match self {
            Server::Child(_) => false,
            Server::Http { config, .. } => {
                *config = config.clone().with_outbound_traces(traces);
                true
            }
        }
    }

    /// What to call it in messages.
    pub(crate) fn name(&self) -> String {
        match self {
            Server::Child(command) => command.name(),
            Server::Http { url, .. } => url.clone(),
        }
    }

    /// Starts the child, or opens the connection to the remote server (nothing is sent yet).
    pub(crate) fn start(&self, max: usize) -> Result<Started, String> {
        match self {
            Server::Child(command) => {
                let child = command
                    .spawn(max)
                    .map_err(|e| format!("cannot start {}: {e}", self.name()))?;
                Ok(Started {
                    upstream: child.upstream,
                    stop: Some((child.stop, child.stopped)),
                })
            }
            Server::Http { url, config } => Ok(Started {
                upstream: http_upstream_checked(url, config.clone())?,
                stop: None,
            }),
        }
    }
}

fn http_upstream_checked(url: &str, config: UpstreamConfig) -> Result<Upstream, String> {
    http_upstream(url, config).map_err(|e| format!("--upstream: {e}"))
}

/// A started server: the relay's upstream, and for a child, how to stop it.
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) upstream: Upstream,
    stop: Option<(oneshot::Sender<Duration>, oneshot::Receiver<Option<ExitStatus>>)>,
}

/// Stops a child server (closes its input, kills it after `grace`); nothing for HTTP.
#[derive(Debug)]
pub(crate) struct Stopper(Option<(oneshot::Sender<Duration>, oneshot::Receiver<Option<ExitStatus>>)>);

impl Started {
    /// The upstream, and what stops the server later.
    pub(crate) fn split(self) -> (Upstream, Stopper) {
        (self.upstream, Stopper(self.stop))
    }
}

impl Stopper {
    pub(crate) async fn stop(self, grace: Duration) {
        if let Some((stop, stopped)) = self.0 {
            let _ = stop.send(grace);
            let _ = tokio::time::timeout(grace + Duration::from_secs(3), stopped).await;
        }
    }
}

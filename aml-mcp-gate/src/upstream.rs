//! The server the gate relays to: a child process it starts (`-- COMMAND`), or a remote MCP
//! server over Streamable HTTP (`--upstream URL`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use aml_mcp::relay::{OutboundTraces, Upstream};
use aml_mcp_http::{http_upstream, ClientAuth, ClientCredentials, UpstreamConfig};
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
    #[arg(long, value_name = "NAME: VALUE")]
    pub(crate) upstream_header: Vec<String>,
    /// A file holding the bearer token sent to --upstream (Authorization: Bearer …)
    #[arg(long, value_name = "FILE", conflicts_with = "upstream_token_url")]
    pub(crate) upstream_token: Option<PathBuf>,
    /// Authenticate to --upstream with the gate's own OAuth access token, got from this token
    /// endpoint by the client credentials grant (http:// only; an https one through a local
    /// TLS proxy). Cached and fetched again before it expires, and when the upstream answers
    /// 401. Needs --upstream-client-id and --upstream-client-secret-file. The MCP clients'
    /// own tokens are never passed on
    #[arg(long, value_name = "URL")]
    pub(crate) upstream_token_url: Option<String>,
    /// The gate's client id at --upstream-token-url
    #[arg(long, value_name = "ID")]
    pub(crate) upstream_client_id: Option<String>,
    /// A file holding the gate's client secret for --upstream-token-url (never given on the
    /// command line, where other users of the machine can read it)
    #[arg(long, value_name = "FILE")]
    pub(crate) upstream_client_secret_file: Option<PathBuf>,
    /// Scopes to ask --upstream-token-url for, comma-separated [default: the server's]
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    pub(crate) upstream_scopes: Vec<String>,
    /// The upstream's resource URI to ask --upstream-token-url for (RFC 8707 `resource`: the
    /// audience its tokens must name, e.g. the upstream's canonical https:// URL)
    #[arg(long, value_name = "URI")]
    pub(crate) upstream_resource: Option<String>,
    /// How the gate authenticates to --upstream-token-url: basic (client_secret_basic) or
    /// post (client_secret_post) [default: basic]
    #[arg(long, value_name = "METHOD", value_enum)]
    pub(crate) upstream_client_auth: Option<ClientAuthArg>,
}

/// `--upstream-client-auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ClientAuthArg {
    /// client_secret_basic: HTTP Basic
    Basic,
    /// client_secret_post: in the form
    Post,
}

impl UpstreamArgs {
    /// Whether any client credentials setting was given.
    fn any_client_credentials(&self) -> bool {
        self.upstream_token_url.is_some()
            || self.upstream_client_id.is_some()
            || self.upstream_client_secret_file.is_some()
            || !self.upstream_scopes.is_empty()
            || self.upstream_resource.is_some()
            || self.upstream_client_auth.is_some()
    }

    /// The client credentials, if set; `Err` names what is missing or wrong (exit 2).
    fn client_credentials(&self) -> Result<Option<ClientCredentials>, String> {
        if !self.any_client_credentials() {
            return Ok(None);
        }
        if self.upstream_token.is_some() {
            return Err("--upstream-token and --upstream-token-url are two ways to authenticate to --upstream: give one".into());
        }
        let (Some(url), Some(id), Some(secret_file)) = (
            &self.upstream_token_url,
            &self.upstream_client_id,
            &self.upstream_client_secret_file,
        ) else {
            return Err("client credentials for --upstream need --upstream-token-url, --upstream-client-id and --upstream-client-secret-file (--upstream-scopes, --upstream-resource and --upstream-client-auth are optional)".into());
        };
        let secret = read_secret(secret_file)?;
        let bad = |e: aml_mcp_http::CredentialsError| format!("--upstream-token-url: {e}");
        let mut credentials = ClientCredentials::new(url, id, &secret)
            .map_err(bad)?
            .with_scopes(self.upstream_scopes.clone())
            .map_err(bad)?
            .with_client_auth(match self.upstream_client_auth {
                Some(ClientAuthArg::Post) => ClientAuth::Post,
                _ => ClientAuth::Basic,
            });
        if let Some(resource) = &self.upstream_resource {
            credentials = credentials.with_resource(resource).map_err(bad)?;
        }
        Ok(Some(credentials))
    }
}

/// The client secret from its file (surrounding white space dropped); a file others can
/// read is warned about.
fn read_secret(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(format!("{}: no client secret in the file", path.display()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0) {
            tracing::warn!(
                "{} (the upstream client secret) can be read by other users: chmod 600 it",
                path.display()
            );
        }
    }
    Ok(secret.to_owned())
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
            // Checked here, not by clap: the settings may come from --config.
            if !args.upstream_header.is_empty()
                || args.upstream_token.is_some()
                || args.any_client_credentials()
            {
                return Err("--upstream-header, --upstream-token and --upstream-token-url (and the client credentials flags) need --upstream".into());
            }
            if let Some(dir) = dir {
                tracing::info!(
                    "the server command runs in {} (the --config file's folder)",
                    dir.display()
                );
            }
            return Ok(Server::Child(ServerCommand::new(command.to_vec(), dir)));
        };
        // First: it says so when a static token is given too.
        let credentials = args.client_credentials()?;
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
        if let Some(credentials) = credentials {
            config = config
                .with_client_credentials(credentials)
                .map_err(|e| format!("--upstream-token-url: {e}"))?;
        }
        // Checked now, so a bad URL or header is a usage error.
        aml_mcp_http::check_upstream(url, &config).map_err(|e| format!("--upstream: {e}"))?;
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
                upstream: http_upstream_checked(url, config.clone().with_max_message_bytes(max))?,
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

//! `[[servers]]` in `--config`: several servers behind one gate (ADR 033). Each is a table
//! with a `name`, either a `command` (run in the file's folder, as `server` is) or a `url`
//! (Streamable HTTP, with the credentials `[upstream]` takes: `headers`, `token`, or
//! `token_url`, `client_id`, `client_secret_file`, `scopes`, `resource`, `client_auth`), and
//! optionally `names` (`"prefix"`, the default, `"on_conflict"` or `"never"`): how its tools'
//! names are shown to the client.
//!
//! ```toml
//! [[servers]]
//! name = "files"
//! command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/share"]
//!
//! [[servers]]
//! name = "notes"
//! url = "http://127.0.0.1:8931/mcp"
//! token = "notes.token"
//! names = "on_conflict"
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use aml_mcp::relay::names::Naming;
use aml_mcp::relay::Upstream;
use serde::Deserialize;

use crate::child::ServerCommand;
use crate::upstream::{ClientAuthArg, Server, Stopper};

/// One `[[servers]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Table {
    name: String,
    #[serde(default)]
    command: Vec<String>,
    names: Option<String>,
    url: Option<String>,
    headers: Option<Vec<String>>,
    token: Option<PathBuf>,
    token_url: Option<String>,
    client_id: Option<String>,
    client_secret_file: Option<PathBuf>,
    scopes: Option<Vec<String>>,
    resource: Option<String>,
    client_auth: Option<ClientAuthArg>,
}

impl Table {
    /// Whether a setting only a server over HTTP takes is given.
    fn any_http_setting(&self) -> bool {
        self.headers.is_some()
            || self.token.is_some()
            || self.token_url.is_some()
            || self.client_id.is_some()
            || self.client_secret_file.is_some()
            || self.scopes.is_some()
            || self.resource.is_some()
            || self.client_auth.is_some()
    }

    /// How the server is reached; its files are relative to `folder`.
    fn server(self, folder: &Path) -> Result<Server, String> {
        let Some(url) = self.url else {
            if self.command.is_empty() {
                return Err("`command` or `url` is missing".into());
            }
            if self.any_http_setting() {
                return Err("`headers`, `token` and the client credentials are for a server over HTTP (`url`), not a `command`".into());
            }
            let argv = crate::config::server_command(folder, self.command);
            return Ok(Server::Child(ServerCommand::new(argv, Some(folder))));
        };
        if !self.command.is_empty() {
            return Err("give `command` or `url`, not both".into());
        }
        // The same settings as `[upstream]`, checked the same way (its flags' names in errors).
        let args = crate::config::Upstream {
            url: Some(url),
            headers: self.headers,
            token: self.token,
            token_url: self.token_url,
            client_id: self.client_id,
            client_secret_file: self.client_secret_file,
            scopes: self.scopes,
            resource: self.resource,
            client_auth: self.client_auth,
        }
        .args(folder);
        // The message size is set again when it starts (`Server::start`).
        Server::from_args(&args, &[], None, DEFAULT_MAX_MESSAGE_BYTES)
    }
}

/// A placeholder message limit until the gate's own is known.
const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 << 20;

/// A server of the list: its name, how its tools are named, and how it is started.
#[derive(Debug)]
pub(crate) struct Listed {
    name: String,
    naming: Naming,
    server: Server,
}

impl Listed {
    /// The server's name in the list.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// How its tools' names are shown.
    pub(crate) fn naming(&self) -> Naming {
        self.naming
    }

    /// How it is reached.
    pub(crate) fn server(&self) -> &Server {
        &self.server
    }

    /// Sends each forwarded call's trace context from `traces` (a server over HTTP only);
    /// whether it will.
    pub(crate) fn send_traces(&mut self, traces: aml_mcp::relay::OutboundTraces) -> bool {
        self.server.send_traces(traces)
    }
}

/// The file's `[[servers]]`, their commands to run in `folder`.
pub(crate) fn read(tables: Vec<Table>, folder: &Path) -> Result<Vec<Listed>, String> {
    let mut listed = Vec::with_capacity(tables.len());
    for table in tables {
        let naming = match &table.names {
            Some(text) => text
                .parse()
                .map_err(|e| format!("[[servers]] {:?}: {e}", table.name))?,
            None => Naming::default(),
        };
        let name = table.name.clone();
        let server = table
            .server(folder)
            .map_err(|e| format!("[[servers]] {name:?}: {e}"))?;
        listed.push(Listed { name, naming, server });
    }
    // The names themselves (allowed, each once) are checked now, before any tool.
    let named: Vec<(&str, Naming)> = listed.iter().map(|l| (l.name.as_str(), l.naming)).collect();
    aml_mcp::relay::names::expose(&named, std::iter::empty()).map_err(|e| format!("[[servers]]: {e}"))?;
    Ok(listed)
}

/// Each server's name and naming, for the tools file (`RelayTools::from_json_for_servers`).
pub(crate) fn namings(listed: &[Listed]) -> Vec<(String, Naming)> {
    listed.iter().map(|l| (l.name.clone(), l.naming)).collect()
}

/// What to call the servers in messages and metrics: their names.
pub(crate) fn label(listed: &[Listed]) -> String {
    let names: Vec<&str> = listed.iter().map(|l| l.name.as_str()).collect();
    names.join(",")
}

/// Starts every server. One that cannot start is logged and left out as a server that
/// exited at once: the session goes on with the others (ADR 033), and ends as a session
/// whose servers are all gone when none starts.
pub(crate) fn start(listed: &[Listed], max: usize) -> (Vec<(String, Upstream)>, Vec<Stopper>) {
    let mut upstreams = Vec::with_capacity(listed.len());
    let mut stoppers = Vec::with_capacity(listed.len());
    for server in listed {
        match server.server.start(max) {
            Ok(started) => {
                let (upstream, stopper) = started.split();
                upstreams.push((server.name.clone(), upstream));
                stoppers.push(stopper);
            }
            Err(e) => {
                tracing::error!(server = %server.name, "cannot start the server: {e}; its tools are gone for the session");
                upstreams.push((server.name.clone(), never_started(&e)));
            }
        }
    }
    (upstreams, stoppers)
}

/// The upstream of a server that could not start: it has exited, saying why.
fn never_started(why: &str) -> Upstream {
    let (upstream, peer, exited) = Upstream::in_memory(1);
    drop(peer);
    let _ = exited.send(format!("it could not start: {why}"));
    upstream
}

/// Stops every server, each within `grace`.
pub(crate) async fn stop(stoppers: Vec<Stopper>, grace: Duration) {
    let stopping: Vec<_> = stoppers
        .into_iter()
        .map(|s| tokio::spawn(s.stop(grace)))
        .collect();
    for stopped in stopping {
        let _ = stopped.await;
    }
}

//! `[[servers]]` in `--config`: several servers behind one gate (ADR 033). Each is a table
//! with a `name`, a `command` (run in the file's folder, as `server` is) and optionally
//! `names` (`"prefix"`, the default, `"on_conflict"` or `"never"`): how its tools' names
//! are shown to the client.
//!
//! ```toml
//! [[servers]]
//! name = "files"
//! command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/share"]
//!
//! [[servers]]
//! name = "notes"
//! command = ["python3", "notes_server.py"]
//! names = "on_conflict"
//! ```

use std::path::Path;
use std::time::Duration;

use aml_mcp::relay::names::Naming;
use aml_mcp::relay::Upstream;
use serde::Deserialize;

use crate::child::ServerCommand;
use crate::upstream::{Server, Stopper};

/// One `[[servers]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Table {
    name: String,
    #[serde(default)]
    command: Vec<String>,
    names: Option<String>,
    /// Read only to say that HTTP servers cannot be listed yet.
    url: Option<String>,
}

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

    /// Its command (every listed server is one, for now).
    pub(crate) fn command(&self) -> Option<&ServerCommand> {
        match &self.server {
            Server::Child(command) => Some(command),
            Server::Http { .. } => None,
        }
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
        if table.url.is_some() {
            return Err(format!(
                "[[servers]] {:?}: `url` is not supported yet (a server in the list is a `command`); run a gate of its own for a server over HTTP (`[upstream] url`)",
                table.name
            ));
        }
        if table.command.is_empty() {
            return Err(format!(
                "[[servers]] {:?}: `command` is missing or empty",
                table.name
            ));
        }
        let argv = crate::config::server_command(folder, table.command);
        let server = Server::Child(ServerCommand::new(argv, Some(folder)));
        listed.push(Listed {
            name: table.name,
            naming,
            server,
        });
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

/// Starts every server; stops those already started if one cannot start.
pub(crate) async fn start(
    listed: &[Listed],
    max: usize,
) -> Result<(Vec<(String, Upstream)>, Vec<Stopper>), String> {
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
                drop(upstreams);
                stop(stoppers, Duration::from_secs(2)).await;
                return Err(format!("server {:?}: {e}", server.name));
            }
        }
    }
    Ok((upstreams, stoppers))
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

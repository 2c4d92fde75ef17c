//! Which server a tool is, when the gate fronts several (ADR 033, step 4): the tools file
//! names each tool's `"server"` and the server's own name for it; the client, the policy,
//! the approver and the records see the exposed name ([`super::names`]); the server is sent
//! its own.

use std::collections::HashMap;

use aml_core::{CatalogError, ToolCatalog};
use serde_json::Value;

use super::machine::{ServerId, FIRST_SERVER};
use super::names::{expose, Exposed, Naming};

/// The tools' servers: empty for a gate given one server the usual way (every tool is the
/// first server's, under its own name).
#[derive(Debug, Default)]
pub(crate) struct Routes {
    servers: Vec<(String, Naming)>,
    exposed: Exposed,
    /// Per server: its own name for a tool → the exposed name.
    shown: Vec<HashMap<String, String>>,
}

impl Routes {
    /// Whether the host gave its servers as a list (each tool names its server).
    pub(crate) fn listed(&self) -> bool {
        !self.servers.is_empty()
    }

    /// The servers as the host listed them.
    pub(crate) fn servers(&self) -> &[(String, Naming)] {
        &self.servers
    }

    /// The server of the tool exposed as `tool`, and its own name for it; `None` for a tool
    /// no server has (the gate refuses it as unregistered).
    pub(crate) fn resolve<'a>(&'a self, tool: &'a str) -> Option<(ServerId, &'a str)> {
        if !self.listed() {
            return Some((FIRST_SERVER, tool));
        }
        self.exposed.resolve(tool)
    }

    /// `catalog` (of exposed names) with each tool's registration naming its server, so
    /// that its records do; unchanged for a gate given one server the usual way.
    pub(crate) fn label(&self, catalog: ToolCatalog) -> Result<ToolCatalog, CatalogError> {
        if !self.listed() {
            return Ok(catalog);
        }
        let mut labelled = ToolCatalog::new();
        for tool in catalog.tools() {
            let mut tool = tool.clone();
            if let Some((server, _)) = self.exposed.resolve(tool.name()) {
                tool = tool.with_server(self.servers[server].0.clone());
            }
            labelled.register(tool)?;
        }
        Ok(labelled)
    }

    /// The name the client sees for `server`'s tool `own`; `None` when the host did not
    /// register it.
    pub(crate) fn exposed<'a>(&'a self, server: ServerId, own: &'a str) -> Option<&'a str> {
        if !self.listed() {
            return Some(own);
        }
        self.shown.get(server)?.get(own).map(String::as_str)
    }
}

/// A tools document for the servers `servers` (each a name and its [`Naming`]; empty: one
/// server given the usual way, and the document is returned as it is): each tool's
/// `"server"` is taken out and its `"name"` becomes the exposed name. Refused: a tool that
/// names no server, or one `servers` does not have, and names that would be exposed twice.
pub(crate) fn expose_document(
    text: &str,
    servers: &[(String, Naming)],
) -> Result<(String, Routes), CatalogError> {
    if servers.is_empty() {
        return Ok((text.to_owned(), Routes::default()));
    }
    let bad = |why: String| CatalogError::Document(why);
    let mut document = aml_core::strict::parse_str(text).map_err(|e| bad(e.to_string()))?;
    let tools = document
        .get_mut("tools")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| bad("the document needs a \"tools\" array".into()))?;
    let mut entries = Vec::with_capacity(tools.len());
    for tool in tools.iter_mut() {
        let object = tool
            .as_object_mut()
            .ok_or_else(|| bad("each tool must be a JSON object".into()))?;
        let own = object
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let server = match object.remove("server") {
            Some(Value::String(server)) => server,
            Some(_) => return Err(bad(format!("tool {own:?}: \"server\" must be a string"))),
            None => {
                return Err(bad(format!(
                    "tool {own:?} names no \"server\"; with several servers each tool names its own"
                )))
            }
        };
        let index = servers
            .iter()
            .position(|(name, _)| *name == server)
            .ok_or_else(|| {
                bad(format!(
                    "tool {own:?} names server {server:?}, which is not one of the gate's servers"
                ))
            })?;
        entries.push((index, own));
    }
    let named: Vec<(&str, Naming)> = servers
        .iter()
        .map(|(name, naming)| (name.as_str(), *naming))
        .collect();
    let exposed =
        expose(&named, entries.iter().map(|(s, own)| (*s, own.as_str()))).map_err(|e| bad(e.to_string()))?;
    let mut shown = vec![HashMap::new(); servers.len()];
    for (i, (tool, (server, own))) in tools.iter_mut().zip(&entries).enumerate() {
        let name = exposed.name(i).to_owned();
        shown[*server].insert(own.clone(), name.clone());
        if let Some(object) = tool.as_object_mut() {
            object.insert("name".into(), Value::String(name));
        }
    }
    let routes = Routes {
        servers: servers.to_vec(),
        exposed,
        shown,
    };
    Ok((document.to_string(), routes))
}

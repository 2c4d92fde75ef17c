//! The names a client sees for the tools (or prompts) of several servers behind one gate
//! (`docs/adr/033-several-servers-behind-one-gate.md`).
//!
//! Each server chooses how its names are exposed ([`Naming`]); [`expose`] applies every
//! server's choice to the whole catalog at once and refuses a catalog in which two entries
//! would be exposed under one name, so that a name the client (and the policy) uses always
//! means one tool of one server.
//!
//! ```
//! use aml_mcp::relay::names::{expose, Naming};
//!
//! let servers = [("files", Naming::Prefix), ("mail", Naming::OnConflict), ("web", Naming::OnConflict)];
//! let tools = [(0, "read"), (1, "send"), (1, "search"), (2, "search")];
//! let exposed = expose(&servers, tools).unwrap();
//! assert_eq!(exposed.name(0), "files__read");
//! assert_eq!(exposed.name(1), "send");
//! assert_eq!(exposed.name(2), "mail__search");
//! assert_eq!(exposed.resolve("web__search"), Some((2, "search")));
//! assert_eq!(exposed.resolve("search"), None);
//! ```

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// Between a server's name and its tool's in an exposed name.
pub const SEPARATOR: &str = "__";

/// The longest server name accepted.
pub const MAX_SERVER_NAME: usize = 32;

/// How one server's names are exposed to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Naming {
    /// Always `<server>__<name>` (the default).
    #[default]
    Prefix,
    /// The bare name, unless another server has an entry of the same name; then
    /// `<server>__<name>`.
    OnConflict,
    /// The bare name; another server exposing the same name is an error.
    Never,
}

impl FromStr for Naming {
    type Err = NameError;

    /// Reads `"prefix"`, `"on_conflict"` or `"never"` (as `gate.toml` spells them).
    fn from_str(text: &str) -> Result<Self, NameError> {
        match text {
            "prefix" => Ok(Naming::Prefix),
            "on_conflict" => Ok(Naming::OnConflict),
            "never" => Ok(Naming::Never),
            other => Err(NameError::UnknownNaming(other.to_owned())),
        }
    }
}

/// Why a catalog's names cannot be exposed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// A server's name is not 1 to [`MAX_SERVER_NAME`] ASCII letters, digits, `-` or `_`, or
    /// it holds the separator.
    #[error("server name {name:?} is not allowed: {why}")]
    ServerName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Two servers have one name.
    #[error("two servers are named {0:?}: server names must be unique")]
    DuplicateServer(String),
    /// An entry names a server index the list does not have.
    #[error("an entry names server {index}, but there are {servers} servers")]
    NoSuchServer {
        /// The index given.
        index: usize,
        /// How many servers there are.
        servers: usize,
    },
    /// Two entries would be exposed under one name.
    #[error(
        "{}",
        conflict_message(exposed, first_server, first_name, second_server, second_name)
    )]
    Conflict {
        /// The name both would have.
        exposed: String,
        /// The first entry's server.
        first_server: String,
        /// The first entry's own name.
        first_name: String,
        /// The second entry's server.
        second_server: String,
        /// The second entry's own name.
        second_name: String,
    },
    /// A naming other than `prefix`, `on_conflict` or `never`.
    #[error("names = {0:?} is not one of \"prefix\", \"on_conflict\", \"never\"")]
    UnknownNaming(String),
}

/// What a [`NameError::Conflict`] says: how to resolve it depends on whether two servers
/// or one server twice make it.
fn conflict_message(
    exposed: &str,
    first_server: &str,
    first_name: &str,
    second_server: &str,
    second_name: &str,
) -> String {
    if first_server == second_server {
        return format!("{exposed:?} is listed twice for server {first_server:?}: remove one");
    }
    format!(
        "{exposed:?} would name both {first_name:?} of server {first_server:?} and {second_name:?} of server \
         {second_server:?}: give one of the servers names = \"prefix\" or \"on_conflict\", or rename the entry"
    )
}

/// Every entry's exposed name, and the way back.
#[derive(Debug, Clone, Default)]
pub struct Exposed {
    /// Per entry, in the order given: the exposed name.
    names: Vec<String>,
    /// Exposed name → (server index, the entry's own name).
    owners: HashMap<String, (usize, String)>,
}

impl Exposed {
    /// The exposed name of entry `index` (in the order [`expose`] was given them).
    ///
    /// # Panics
    /// When there is no such entry.
    pub fn name(&self, index: usize) -> &str {
        &self.names[index]
    }

    /// The server (its index) and its own name for the entry exposed as `exposed`.
    pub fn resolve(&self, exposed: &str) -> Option<(usize, &str)> {
        self.owners
            .get(exposed)
            .map(|(server, name)| (*server, name.as_str()))
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Checks the servers' names (each `(name, naming)`), then names every entry (each
/// `(server index, the server's own name for it)`) by its server's [`Naming`].
pub fn expose<'a>(
    servers: &[(&str, Naming)],
    entries: impl IntoIterator<Item = (usize, &'a str)>,
) -> Result<Exposed, NameError> {
    for (i, (name, _)) in servers.iter().enumerate() {
        check_server_name(name)?;
        if servers[..i].iter().any(|(other, _)| other == name) {
            return Err(NameError::DuplicateServer((*name).to_owned()));
        }
    }
    let entries: Vec<(usize, &str)> = entries.into_iter().collect();
    if let Some(&(index, _)) = entries.iter().find(|(s, _)| *s >= servers.len()) {
        return Err(NameError::NoSuchServer {
            index,
            servers: servers.len(),
        });
    }
    // Which server first had each own name, and whether a second one has it too.
    let mut holders: HashMap<&str, (usize, bool)> = HashMap::new();
    for &(server, name) in &entries {
        let holder = holders.entry(name).or_insert((server, false));
        holder.1 |= holder.0 != server;
    }
    let mut exposed = Exposed::default();
    for (server, name) in entries {
        let (server_name, naming) = servers[server];
        let prefixed = match naming {
            Naming::Prefix => true,
            Naming::OnConflict => holders[name].1,
            Naming::Never => false,
        };
        let shown = if prefixed {
            format!("{server_name}{SEPARATOR}{name}")
        } else {
            name.to_owned()
        };
        if let Some((first, first_name)) = exposed.owners.get(&shown) {
            return Err(NameError::Conflict {
                exposed: shown,
                first_server: servers[*first].0.to_owned(),
                first_name: first_name.clone(),
                second_server: server_name.to_owned(),
                second_name: name.to_owned(),
            });
        }
        exposed.owners.insert(shown.clone(), (server, name.to_owned()));
        exposed.names.push(shown);
    }
    Ok(exposed)
}

/// Refuses a server name that cannot prefix a tool's name unambiguously.
fn check_server_name(name: &str) -> Result<(), NameError> {
    let why = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_SERVER_NAME {
        Some("it is longer than 32 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Some("only ASCII letters, digits, '-' and '_' may be used")
    } else if name.contains(SEPARATOR) {
        Some("it contains \"__\", which separates a server's name from its tool's")
    } else {
        None
    };
    match why {
        Some(why) => Err(NameError::ServerName {
            name: name.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

impl fmt::Display for Naming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Naming::Prefix => "prefix",
            Naming::OnConflict => "on_conflict",
            Naming::Never => "never",
        })
    }
}

#[cfg(test)]
#[path = "names_tests.rs"]
mod tests;

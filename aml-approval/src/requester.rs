//! Who asks for an approval: what the host knows about the caller behind one request.

use serde::{Deserialize, Serialize};

/// Who asks: the caller, the MCP client (name and version from its `initialize`), the session
/// and the server behind the gate, as far as the host knows them. Each part may be unknown;
/// the page and the API then say "not known" (JSON `null`).
///
/// The host sets it per request ([`crate::SignedApprovalHook::with_requester`]); it is shown
/// to the person and kept in the history, never used to decide anything.
///
/// ```
/// use aml_approval::Requester;
///
/// let who = Requester::unknown().with_caller("token 2").with_client("claude-code", "2.1.0");
/// assert_eq!(who.caller(), Some("token 2"));
/// assert_eq!(who.session(), None);
/// assert!(!who.is_unknown());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requester {
    caller: Option<String>,
    client_name: Option<String>,
    client_version: Option<String>,
    session: Option<String>,
    server: Option<String>,
}

impl Requester {
    /// Nothing known.
    pub fn unknown() -> Self {
        Requester::default()
    }

    /// Who the caller is (an authenticated principal, a token's name, an address).
    pub fn with_caller(mut self, caller: impl Into<String>) -> Self {
        self.caller = Some(caller.into());
        self
    }

    /// The client software, as it named itself (MCP `initialize`: `clientInfo`).
    pub fn with_client(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.client_name = Some(name.into());
        self.client_version = Some(version.into());
        self
    }

    /// The session the request came in (a number or an id the host shows in its logs).
    pub fn with_session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// The server the call is for, when several are behind the host.
    pub fn with_server(mut self, server: impl Into<String>) -> Self {
        self.server = Some(server.into());
        self
    }

    /// The caller, if known.
    pub fn caller(&self) -> Option<&str> {
        self.caller.as_deref()
    }

    /// The client's name, if known.
    pub fn client_name(&self) -> Option<&str> {
        self.client_name.as_deref()
    }

    /// The client's version, if known.
    pub fn client_version(&self) -> Option<&str> {
        self.client_version.as_deref()
    }

    /// The session, if known.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The server, if known.
    pub fn server(&self) -> Option<&str> {
        self.server.as_deref()
    }

    /// Whether nothing at all is known.
    pub fn is_unknown(&self) -> bool {
        *self == Requester::default()
    }

    /// The parts as the person reads them, each with its label: `("Client", "name 1.2")`;
    /// `None` for a part that is not known.
    pub fn parts(&self) -> [(&'static str, Option<String>); 4] {
        let client = match (&self.client_name, &self.client_version) {
            (Some(name), Some(version)) => Some(format!("{name} {version}")),
            (Some(name), None) => Some(name.clone()),
            (None, Some(version)) => Some(format!("(unnamed) {version}")),
            (None, None) => None,
        };
        [
            ("Caller", self.caller.clone()),
            ("Client", client),
            ("Session", self.session.clone()),
            ("Server", self.server.clone()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_parts_are_null_and_known_ones_named() {
        let nobody = Requester::unknown();
        assert!(nobody.is_unknown());
        assert_eq!(
            serde_json::to_value(&nobody).unwrap(),
            serde_json::json!({"caller": null, "client_name": null, "client_version": null,
                               "session": null, "server": null})
        );
        let who = Requester::unknown()
            .with_client("inspector", "0.9")
            .with_server("files");
        assert_eq!(
            who.parts().map(|(label, part)| format!("{label}={part:?}")),
            [
                "Caller=None",
                "Client=Some(\"inspector 0.9\")",
                "Session=None",
                "Server=Some(\"files\")"
            ]
        );
        let read: Requester = serde_json::from_value(serde_json::to_value(&who).unwrap()).unwrap();
        assert_eq!(read, who);
    }
}

//! The host's tool catalog: which tools an agent may call, what each one declares, where its
//! real destination comes from, and the input schema the host enforces before planning.
//! One catalog serves every adapter (MCP, gRPC, A2UI, your own) through [`crate::ToolGate`].
//!
//! Feature `catalog` (JSON Schema draft 2020-12 through `jsonschema`, compiled once per tool,
//! offline: remote references are not fetched).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::canonical::{canonical_digest, CanonicalError};
use crate::guarded::ResourceMapper;
use crate::hooks::ToolExecutor;
use crate::proposal::{FrozenProposal, ProposalParts};
pub use crate::resource::{ResourceKind, ResourceMapping, ResourceRule};
use crate::{Effect, ObjectOnly, Sha256Digest};

/// The members of a server's tool definition that a pin covers (absent ones stay absent).
pub const PINNED_MEMBERS: [&str; 5] = [
    "name",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// The digest a host pins a server's tool definition to: SHA-256 of the canonical JSON of
/// the definition object restricted to [`PINNED_MEMBERS`]. Anything else the server sends
/// (`title`, `icons`, `_meta`, …) may change without breaking the pin.
///
/// ```
/// use aml_core::catalog::definition_digest;
/// let seen = serde_json::json!({"name": "echo", "description": "Echoes",
///     "inputSchema": {"type": "object"}, "title": "ignored"});
/// // The canonical bytes are {"description":"Echoes","inputSchema":{"type":"object"},"name":"echo"}.
/// let bytes = r#"{"description":"Echoes","inputSchema":{"type":"object"},"name":"echo"}"#;
/// assert_eq!(definition_digest(&seen).unwrap(), aml_core::Sha256Digest::of(bytes.as_bytes()));
/// ```
pub fn definition_digest(definition: &Value) -> Result<Sha256Digest, CanonicalError> {
    let mut kept = serde_json::Map::new();
    if let Value::Object(members) = definition {
        for key in PINNED_MEMBERS {
            if let Some(value) = members.get(key) {
                kept.insert(key.to_owned(), value.clone());
            }
        }
    }
    canonical_digest(&Value::Object(kept)).map(|(_, digest)| digest)
}

/// Reads a pin as written in a catalog document: `sha256:` and 64 lower-case hex digits.
pub fn parse_pin(text: &str) -> Result<Sha256Digest, String> {
    text.strip_prefix("sha256:")
        .and_then(|hex| hex.parse::<Sha256Digest>().ok())
        .ok_or_else(|| format!("a pin must be \"sha256:\" and 64 lower-case hex digits, not {text:?}"))
}

/// A pin as a catalog document and refusals write it: `sha256:<hex>`.
pub fn pin_text(digest: &Sha256Digest) -> String {
    format!("sha256:{}", digest.hex().as_str())
}

/// A registration or catalog document the host cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// The catalog document is malformed.
    #[error("invalid tool catalog: {0}")]
    Document(String),
    /// The same tool name is registered twice.
    #[error("tool {0:?} is registered twice")]
    Duplicate(String),
    /// The tool name or purpose would make every proposal invalid.
    #[error("tool {tool:?}: {detail}")]
    Invalid {
        /// The tool.
        tool: String,
        /// Why.
        detail: String,
    },
    /// The input schema is not a JSON object or does not compile.
    #[error("tool {tool:?}: invalid input schema: {detail}")]
    Schema {
        /// The tool.
        tool: String,
        /// Why.
        detail: String,
    },
}

/// Why arguments were refused by a tool's input schema: the first violation, located by
/// JSON pointer, without echoing the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SchemaViolation(String);

/// One tool the host lets an agent call: name, declared effect, purpose, resource mapper and
/// the compiled input schema, plus (optionally) the host's implementation.
#[derive(Clone)]
pub struct ToolRegistration {
    name: Arc<str>,
    effect: Effect,
    purpose: Arc<str>,
    description: Arc<str>,
    mapper: Arc<dyn ResourceMapper>,
    input_schema: Arc<Value>,
    validator: Arc<jsonschema::Validator>,
    executor: Option<Arc<dyn ToolExecutor>>,
    pin: Option<Sha256Digest>,
    rule: Option<ResourceRule>,
    scopes: Arc<[String]>,
    server: Option<Arc<str>>,
}

impl core::fmt::Debug for ToolRegistration {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ToolRegistration")
            .field("name", &self.name)
            .field("effect", &self.effect)
            .field("purpose", &self.purpose)
            .field("has_executor", &self.executor.is_some())
            .field("pin", &self.pin.map(|p| pin_text(&p)))
            .finish_non_exhaustive()
    }
}

impl ToolRegistration {
    /// A tool named `name` with a host-written `purpose`, a resource mapper and an input
    /// schema (a JSON object, compiled now).
    ///
    /// ```
    /// use aml_core::{Effect, ResourceRule, ToolRegistration};
    /// let tool = ToolRegistration::new("write_file", Effect::Write, "Save a report",
    ///     ResourceRule::Argument("path".into()),
    ///     serde_json::json!({"type": "object", "required": ["path"]})).unwrap();
    /// assert!(tool.check(&serde_json::json!({"path": "/tmp/r"})).is_ok());
    /// assert!(tool.check(&serde_json::json!({})).is_err());
    /// ```
    pub fn new(
        name: impl Into<String>,
        effect: Effect,
        purpose: impl Into<String>,
        mapper: impl ResourceMapper + 'static,
        input_schema: Value,
    ) -> Result<Self, CatalogError> {
        // Keep the rule itself when the mapper is one, for gateways that apply it elsewhere.
        let rule = (&mapper as &dyn std::any::Any)
            .downcast_ref::<ResourceRule>()
            .cloned();
        let mut tool = Self::with_mapper(name, effect, purpose, Arc::new(mapper), input_schema)?;
        tool.rule = rule;
        Ok(tool)
    }

    /// Like [`new`](Self::new), with a shared mapper.
    pub fn with_mapper(
        name: impl Into<String>,
        effect: Effect,
        purpose: impl Into<String>,
        mapper: Arc<dyn ResourceMapper>,
        input_schema: Value,
    ) -> Result<Self, CatalogError> {
        let name: String = name.into();
        let purpose: String = purpose.into();
        // Freeze a probe proposal to apply the exact proposal rules to the host's strings.
        let probe = FrozenProposal::freeze(ProposalParts {
            tool: &name,
            effect,
            resource: "probe",
            purpose: &purpose,
            arguments: &serde_json::Map::new(),
        });
        if let Err(e) = probe {
            return Err(CatalogError::Invalid {
                tool: name,
                detail: e.detail().to_owned(),
            });
        }
        let schema_error = |detail: String| CatalogError::Schema {
            tool: name.clone(),
            detail,
        };
        if !input_schema.is_object() {
            return Err(schema_error("an input schema must be a JSON object".into()));
        }
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&input_schema)
            .map_err(|e| schema_error(e.to_string()))?;
        Ok(ToolRegistration {
            description: purpose.as_str().into(),
            name: name.into(),
            effect,
            purpose: purpose.into(),
            mapper,
            input_schema: Arc::new(input_schema),
            validator: Arc::new(validator),
            executor: None,
            pin: None,
            scopes: Arc::from([]),
            rule: None,
            server: None,
        })
    }

    /// The resource rule, when the registration was made with one (a `ResourceRule` as its
    /// mapper, or from a catalog document); `None` for a host's own mapper.
    ///
    /// ```
    /// use aml_core::{ArgumentSnapshot, Effect, ResourceMapper, ResourceRule, ToolRegistration};
    /// let tool = ToolRegistration::new("write_file", Effect::Write, "Save a report",
    ///     ResourceRule::Argument("path".into()), serde_json::json!({"type": "object"})).unwrap();
    /// let rule = tool.resource_rule().unwrap();
    /// let arguments = serde_json::json!({"path": "/tmp/r"}).as_object().cloned().unwrap();
    /// assert_eq!(rule.resource_for(&ArgumentSnapshot::from(arguments)).unwrap(), "/tmp/r");
    /// ```
    pub fn resource_rule(&self) -> Option<&ResourceRule> {
        self.rule.as_ref()
    }

    /// A description for agents (tool listings); defaults to the purpose.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into().into();
        self
    }

    /// The host's implementation of this tool. Without one, the gate uses the executor given
    /// for the call, else the boundary's own.
    pub fn with_executor(mut self, executor: Arc<dyn ToolExecutor>) -> Self {
        self.executor = Some(executor);
        self
    }

    /// Pins the server's definition of this tool to `digest` (see [`definition_digest`]): a
    /// gateway that forwards to a server hides the tool and refuses calls to it while the
    /// server advertises a definition with another digest.
    ///
    /// ```
    /// use aml_core::{catalog::definition_digest, Effect, ResourceRule, ToolRegistration};
    /// let seen = serde_json::json!({"name": "echo", "inputSchema": {"type": "object"}});
    /// let tool = ToolRegistration::new("echo", Effect::Read, "Echo text",
    ///     ResourceRule::Fixed("echo".into()), serde_json::json!({"type": "object"})).unwrap()
    ///     .with_pin(definition_digest(&seen).unwrap());
    /// assert_eq!(tool.pin(), Some(&definition_digest(&seen).unwrap()));
    /// ```
    pub fn with_pin(mut self, digest: Sha256Digest) -> Self {
        self.pin = Some(digest);
        self
    }

    /// The pinned digest of the server's definition, if the host pinned one.
    pub fn pin(&self) -> Option<&Sha256Digest> {
        self.pin.as_ref()
    }

    /// The OAuth scopes a caller's access token must hold to call this tool (an HTTP front
    /// refuses a call without them with `403 insufficient_scope`, naming them, so the client
    /// can ask for them). Each is an RFC 6749 scope token: printable ASCII without spaces,
    /// `"` or `\`.
    ///
    /// ```
    /// use aml_core::{Effect, ResourceRule, ToolRegistration};
    /// let tool = ToolRegistration::new("delete_file", Effect::Delete, "Delete a file",
    ///     ResourceRule::Argument("path".into()), serde_json::json!({"type": "object"})).unwrap()
    ///     .with_scopes(vec!["files:delete".into()]).unwrap();
    /// assert_eq!(tool.scopes(), ["files:delete"]);
    /// let bad = ToolRegistration::new("t", Effect::Read, "p", ResourceRule::Fixed("r".into()),
    ///     serde_json::json!({})).unwrap().with_scopes(vec!["two words".into()]);
    /// assert!(bad.is_err());
    /// ```
    pub fn with_scopes(mut self, scopes: Vec<String>) -> Result<Self, CatalogError> {
        let scope_token = |s: &String| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
        };
        if let Some(bad) = scopes.iter().find(|s| !scope_token(s)) {
            return Err(CatalogError::Invalid {
                tool: self.name.to_string(),
                detail: format!("scope {bad:?} is not an OAuth scope token (printable ASCII, no spaces, quotes or backslashes)"),
            });
        }
        self.scopes = Arc::from(scopes);
        Ok(self)
    }

    /// The scopes a caller's access token must hold to call this tool (none by default).
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// Names the server that serves this tool, for a gateway in front of several: every
    /// [`CallRecord`](crate::CallRecord) of a call to it names the server too. A label
    /// only; the boundary decides nothing by it.
    ///
    /// ```
    /// use aml_core::{Effect, ResourceRule, ToolRegistration};
    /// let tool = ToolRegistration::new("files__read", Effect::Read, "Read a file",
    ///     ResourceRule::Argument("path".into()), serde_json::json!({"type": "object"})).unwrap()
    ///     .with_server("files");
    /// assert_eq!(tool.server(), Some("files"));
    /// ```
    pub fn with_server(mut self, server: impl Into<String>) -> Self {
        self.server = Some(server.into().into());
        self
    }

    /// The server that serves this tool, when the host named one.
    pub fn server(&self) -> Option<&str> {
        self.server.as_deref()
    }

    /// The tool name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The declared effect.
    pub fn effect(&self) -> Effect {
        self.effect
    }
    /// The host's purpose text (part of every proposal).
    pub fn purpose(&self) -> &str {
        &self.purpose
    }
    /// The description for agents.
    pub fn description(&self) -> &str {
        &self.description
    }
    /// The resource mapper.
    pub fn mapper(&self) -> &Arc<dyn ResourceMapper> {
        &self.mapper
    }
    /// The input schema the host enforces.
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }
    /// The host's implementation, if registered.
    pub fn executor(&self) -> Option<&Arc<dyn ToolExecutor>> {
        self.executor.as_ref()
    }

    /// Whether `arguments` match the input schema; the first violation if not.
    pub fn check(&self, arguments: &Value) -> Result<(), SchemaViolation> {
        if self.validator.is_valid(arguments) {
            return Ok(());
        }
        let first = self
            .validator
            .validate(arguments)
            .err()
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_owned() } else { at };
                format!("at {at}: {}", e.masked())
            })
            .unwrap_or_else(|| "the arguments do not match the input schema".to_owned());
        Err(SchemaViolation(first))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogDocument {
    tools: Vec<ObjectOnly<ToolEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolEntry {
    name: String,
    effect: Effect,
    purpose: String,
    #[serde(default)]
    description: Option<String>,
    resource: ResourceRule,
    input_schema: Value,
    #[serde(default)]
    pin: Option<String>,
    #[serde(default)]
    scopes: Option<Vec<String>>,
}

/// The tools a host allows, by name.
///
/// ```
/// use aml_core::ToolCatalog;
/// let catalog = ToolCatalog::from_json(r#"{"tools": [{
///     "name": "write_file", "effect": "write", "purpose": "Save a report",
///     "resource": {"argument": "path"},
///     "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
///                      "content": {"type": "string"}}, "required": ["path", "content"],
///                      "additionalProperties": false}
/// }]}"#).unwrap();
/// assert!(catalog.get("write_file").is_some());
/// assert!(catalog.get("delete_file").is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct ToolCatalog {
    tools: BTreeMap<Arc<str>, ToolRegistration>,
}

impl ToolCatalog {
    /// An empty catalog: every call is refused as unregistered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool; a name already registered is an error.
    pub fn register(&mut self, tool: ToolRegistration) -> Result<(), CatalogError> {
        if self.tools.contains_key(tool.name()) {
            return Err(CatalogError::Duplicate(tool.name().to_owned()));
        }
        self.tools.insert(Arc::clone(&tool.name), tool);
        Ok(())
    }

    /// Adds a tool, builder style; a name already registered is an error.
    pub fn with(mut self, tool: ToolRegistration) -> Result<Self, CatalogError> {
        self.register(tool)?;
        Ok(self)
    }

    /// Reads `{"tools": [{name, effect, purpose, description?, resource, input_schema, pin?,
    /// scopes?}]}`,
    /// strictly (duplicate keys, unknown fields and duplicate tool names are errors). `pin`
    /// is `"sha256:<64 lower-case hex>"`, the [`definition_digest`] of the server's definition.
    pub fn from_json(text: &str) -> Result<Self, CatalogError> {
        let value = crate::strict::parse_str(text).map_err(|e| CatalogError::Document(e.to_string()))?;
        // Objects only: serde would also read a struct from an array of its fields.
        let ObjectOnly(doc): ObjectOnly<CatalogDocument> =
            serde_json::from_value(value).map_err(|e| CatalogError::Document(e.to_string()))?;
        let mut catalog = ToolCatalog::new();
        for ObjectOnly(entry) in doc.tools {
            let pin = match &entry.pin {
                Some(text) => Some(parse_pin(text).map_err(|detail| CatalogError::Invalid {
                    tool: entry.name.clone(),
                    detail,
                })?),
                None => None,
            };
            let mut tool = ToolRegistration::new(
                entry.name,
                entry.effect,
                entry.purpose,
                entry.resource,
                entry.input_schema,
            )?;
            if let Some(description) = entry.description {
                tool = tool.with_description(description);
            }
            if let Some(pin) = pin {
                tool = tool.with_pin(pin);
            }
            if let Some(scopes) = entry.scopes {
                tool = tool.with_scopes(scopes)?;
            }
            catalog.register(tool)?;
        }
        Ok(catalog)
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&ToolRegistration> {
        self.tools.get(name)
    }

    /// Every registered tool, by name.
    pub fn tools(&self) -> impl Iterator<Item = &ToolRegistration> {
        self.tools.values()
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The exact rules of `policy` that can allow nothing here, most likely typos: one naming
    /// a tool this catalog does not register, or registers with another effect. One sentence
    /// each, for the host's log at start and at every reload (a Cedar policy has no exact
    /// rules: none).
    ///
    /// ```
    /// # use aml_core::{Effect, Policy, ResourceRule, ToolCatalog, ToolRegistration};
    /// let catalog = ToolCatalog::new()
    ///     .with(ToolRegistration::new("read", Effect::Read, "p", ResourceRule::Fixed("r".into()),
    ///         serde_json::json!({"type": "object"})).unwrap())
    ///     .unwrap();
    /// let policy = Policy::from_value(&serde_json::json!({"protocol": "aml-action-policy/1", "rules": [
    ///     {"tool": "raed", "effect": "read", "resource": "r", "requires_approval": false}]}));
    /// let warnings = catalog.policy_warnings(&policy);
    /// assert!(warnings[0].contains("\"raed\", which the tools file does not register"));
    /// ```
    pub fn policy_warnings(&self, policy: &crate::Policy) -> Vec<String> {
        let mut warnings = Vec::new();
        for rule in policy.rules() {
            match self.get(&rule.tool) {
                None => warnings.push(format!(
                    "the policy has a rule for tool {:?}, which the tools file does not register: the rule allows nothing",
                    rule.tool
                )),
                Some(tool) if tool.effect() != rule.effect => warnings.push(format!(
                    "the policy's rule for tool {:?} has effect {}, but the tools file registers it with effect {}: the rule allows nothing",
                    rule.tool,
                    rule.effect,
                    tool.effect()
                )),
                Some(_) => {}
            }
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"],
               "additionalProperties": false})
    }

    #[test]
    fn violations_name_the_place_without_the_value() {
        let tool = ToolRegistration::new(
            "t",
            Effect::Send,
            "p",
            ResourceRule::Argument("to".into()),
            schema(),
        )
        .unwrap();
        let err = tool.check(&json!({"to": "secret-value", "cc": "x"})).unwrap_err();
        assert!(!err.to_string().contains("secret-value"), "{err}");
        let err = tool.check(&json!({"to": 7})).unwrap_err();
        assert!(err.to_string().starts_with("at /to:"), "{err}");
    }

    /// Fuzzing finding: serde reads a struct from an array of its fields, so a catalog (or
    /// one tool entry) written as an array was accepted.
    #[test]
    fn a_catalog_or_entry_written_as_an_array_is_refused() {
        let entry = r#"["t", "read", "p", null, {"fixed": "r"}, {}]"#;
        for text in [format!("[[{entry}]]"), format!(r#"{{"tools": [{entry}]}}"#)] {
            let err = ToolCatalog::from_json(&text).unwrap_err();
            assert!(
                matches!(&err, CatalogError::Document(d) if d.contains("a JSON object")),
                "{text}: {err}"
            );
        }
        let object = r#"{"tools": [{"name": "t", "effect": "read", "purpose": "p",
            "resource": {"fixed": "r"}, "input_schema": {}}]}"#;
        assert_eq!(ToolCatalog::from_json(object).unwrap().len(), 1);
    }

    #[test]
    fn bad_registrations_are_refused() {
        let blank = ToolRegistration::new(" ", Effect::Send, "p", ResourceRule::Fixed("r".into()), schema());
        assert!(matches!(blank, Err(CatalogError::Invalid { .. })));
        let not_object = ToolRegistration::new(
            "t",
            Effect::Send,
            "p",
            ResourceRule::Fixed("r".into()),
            json!(true),
        );
        assert!(matches!(not_object, Err(CatalogError::Schema { .. })));
        let broken = ToolRegistration::new(
            "t",
            Effect::Send,
            "p",
            ResourceRule::Fixed("r".into()),
            json!({"type": 7}),
        );
        assert!(matches!(broken, Err(CatalogError::Schema { .. })));
        let dup = r#"{"tools": [
            {"name": "t", "effect": "read", "purpose": "p", "resource": {"fixed": "r"}, "input_schema": {}},
            {"name": "t", "effect": "read", "purpose": "p", "resource": {"fixed": "r"}, "input_schema": {}}]}"#;
        assert_eq!(
            ToolCatalog::from_json(dup).unwrap_err(),
            CatalogError::Duplicate("t".into())
        );
        let unknown = r#"{"tools": [{"name": "t", "effect": "read", "purpose": "p",
            "resource": {"fixed": "r"}, "input_schema": {}, "extra": 1}]}"#;
        assert!(matches!(
            ToolCatalog::from_json(unknown),
            Err(CatalogError::Document(_))
        ));
    }

    #[test]
    fn pins_are_read_checked_and_cover_only_the_pinned_members() {
        let seen = json!({"name": "t", "description": "d", "inputSchema": {"type": "object"},
                          "title": "T", "_meta": {"x": 1}});
        let digest = definition_digest(&seen).unwrap();
        let doc = |pin: &str| {
            format!(
                r#"{{"tools": [{{"name": "t", "effect": "read", "purpose": "p",
                "resource": {{"fixed": "r"}}, "input_schema": {{}}, "pin": "{pin}"}}]}}"#
            )
        };
        let catalog = ToolCatalog::from_json(&doc(&pin_text(&digest))).unwrap();
        assert_eq!(catalog.get("t").unwrap().pin(), Some(&digest));
        let changed = json!({"name": "t", "description": "d2", "inputSchema": {"type": "object"}});
        assert_ne!(definition_digest(&changed).unwrap(), digest);
        let reordered = json!({"inputSchema": {"type": "object"}, "description": "d", "name": "t"});
        assert_eq!(definition_digest(&reordered).unwrap(), digest);
        let hex = digest.hex();
        for bad in ["abc", "sha256:ABC", hex.as_str()] {
            let err = ToolCatalog::from_json(&doc(bad)).unwrap_err();
            assert!(
                matches!(&err, CatalogError::Invalid { tool, .. } if tool == "t"),
                "{err}"
            );
        }
    }

    /// The worked example of docs/PROTOCOL.md ("Pinned tool definitions").
    #[test]
    fn the_documented_worked_example_has_the_documented_digest() {
        let advertised = json!({"name": "echo", "title": "Echo", "description": "Echoes back the input",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
            "annotations": {"readOnlyHint": true}, "_meta": {"x": 1}});
        assert_eq!(
            pin_text(&definition_digest(&advertised).unwrap()),
            "sha256:f9a0cc3cda54b503cc2636e4116725c265af6983f4d5a510bd14e7cc3eb0cec1"
        );
    }
}

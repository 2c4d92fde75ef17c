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

use crate::guarded::{ArgumentSnapshot, MapperError, ResourceMapper};
use crate::hooks::ToolExecutor;
use crate::proposal::{FrozenProposal, ProposalParts};
use crate::{Effect, ObjectOnly};

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

/// Where a tool's policy resource comes from.
///
/// In a catalog document: `{"argument": "path"}` or `{"fixed": "queue:ops"}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
#[non_exhaustive]
pub enum ResourceRule {
    /// The value of one string argument (e.g. `to`, `path`).
    Argument(String),
    /// A fixed resource, for tools whose destination is not in their arguments.
    Fixed(String),
}

impl ResourceMapper for ResourceRule {
    fn resource_for(&self, snapshot: &ArgumentSnapshot) -> Result<String, MapperError> {
        match self {
            ResourceRule::Argument(name) => snapshot
                .str(name)
                .map(str::to_owned)
                .ok_or_else(|| MapperError::new(format!("argument {name:?} must be a string"))),
            ResourceRule::Fixed(resource) => Ok(resource.clone()),
        }
    }
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
}

impl core::fmt::Debug for ToolRegistration {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ToolRegistration")
            .field("name", &self.name)
            .field("effect", &self.effect)
            .field("purpose", &self.purpose)
            .field("has_executor", &self.executor.is_some())
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
        Self::with_mapper(name, effect, purpose, Arc::new(mapper), input_schema)
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
        })
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

    /// Reads `{"tools": [{name, effect, purpose, description?, resource, input_schema}]}`,
    /// strictly (duplicate keys, unknown fields and duplicate tool names are errors).
    pub fn from_json(text: &str) -> Result<Self, CatalogError> {
        let value = crate::strict::parse_str(text).map_err(|e| CatalogError::Document(e.to_string()))?;
        // Objects only: serde would also read a struct from an array of its fields.
        let ObjectOnly(doc): ObjectOnly<CatalogDocument> =
            serde_json::from_value(value).map_err(|e| CatalogError::Document(e.to_string()))?;
        let mut catalog = ToolCatalog::new();
        for ObjectOnly(entry) in doc.tools {
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
}

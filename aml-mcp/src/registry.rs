//! The tools a host lets an agent call through MCP: effect, purpose, how the real
//! destination is read from the arguments, and the input schema the host enforces.

use std::collections::BTreeMap;
use std::sync::Arc;

use aml_core::{ArgumentSnapshot, Effect, MapperError, ResourceMapper};
use serde::Deserialize;
use serde_json::Value;

/// A tool registration the host cannot use.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The registry document is malformed.
    #[error("invalid tool registry: {0}")]
    Document(String),
    /// A tool's input schema does not compile (draft 2020-12, no remote references).
    #[error("tool {tool}: invalid input schema: {detail}")]
    Schema {
        /// The tool.
        tool: String,
        /// Why.
        detail: String,
    },
}

/// Where a tool's policy resource comes from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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

/// One registered tool.
#[derive(Clone)]
pub struct RegisteredTool {
    pub(crate) name: String,
    pub(crate) effect: Effect,
    pub(crate) purpose: String,
    pub(crate) mapper: Arc<dyn ResourceMapper>,
    pub(crate) input_schema: Value,
    validator: Arc<jsonschema::Validator>,
}

impl core::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.name)
            .field("effect", &self.effect)
            .field("purpose", &self.purpose)
            .finish_non_exhaustive()
    }
}

impl RegisteredTool {
    /// A tool with a host-written purpose, a resource mapper and an input schema.
    pub fn new(
        name: impl Into<String>,
        effect: Effect,
        purpose: impl Into<String>,
        mapper: impl ResourceMapper + 'static,
        input_schema: Value,
    ) -> Result<Self, RegistryError> {
        let name = name.into();
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&input_schema)
            .map_err(|e| RegistryError::Schema {
                tool: name.clone(),
                detail: e.to_string(),
            })?;
        Ok(RegisteredTool {
            name,
            effect,
            purpose: purpose.into(),
            mapper: Arc::new(mapper),
            input_schema,
            validator: Arc::new(validator),
        })
    }

    /// The tool name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host's input schema.
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// Whether `arguments` match the host's input schema.
    pub fn accepts(&self, arguments: &Value) -> bool {
        self.validator.is_valid(arguments)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolsDocument {
    tools: Vec<ToolEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolEntry {
    name: String,
    effect: Effect,
    purpose: String,
    resource: ResourceRule,
    input_schema: Value,
}

/// The tools the host allows, by name.
///
/// ```
/// use aml_mcp::ToolRegistry;
/// let registry = ToolRegistry::from_json(r#"{"tools": [{
///     "name": "write_file", "effect": "write", "purpose": "Save a report",
///     "resource": {"argument": "path"},
///     "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
///                      "content": {"type": "string"}}, "required": ["path", "content"],
///                      "additionalProperties": false}
/// }]}"#).unwrap();
/// assert!(registry.get("write_file").is_some());
/// assert!(registry.get("delete_file").is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, RegisteredTool>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a tool.
    pub fn with_tool(mut self, tool: RegisteredTool) -> Self {
        self.tools.insert(tool.name.clone(), tool);
        self
    }

    /// Reads `{"tools": [{name, effect, purpose, resource, input_schema}]}`, strictly.
    pub fn from_json(text: &str) -> Result<Self, RegistryError> {
        let value = aml_core::strict::parse_str(text).map_err(|e| RegistryError::Document(e.to_string()))?;
        let doc: ToolsDocument =
            serde_json::from_value(value).map_err(|e| RegistryError::Document(e.to_string()))?;
        let mut registry = ToolRegistry::new();
        for entry in doc.tools {
            if registry.tools.contains_key(&entry.name) {
                return Err(RegistryError::Document(format!(
                    "tool {:?} is registered twice",
                    entry.name
                )));
            }
            registry = registry.with_tool(RegisteredTool::new(
                entry.name,
                entry.effect,
                entry.purpose,
                entry.resource,
                entry.input_schema,
            )?);
        }
        Ok(registry)
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    /// Every registered tool.
    pub fn tools(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.values()
    }
}

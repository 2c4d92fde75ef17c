//! The host's function catalogs: which functions exist, who may call them, their argument
//! schemas, and the guarded tool behind each agent-callable one.

use std::collections::BTreeMap;

use aml_core::{ToolCatalog, ToolRegistration};
use serde_json::{json, Map, Value};

use crate::reason::GateReason;
use crate::wire::WireForm;

/// Who may invoke a catalog function (`allowedCallers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AllowedCallers {
    /// `"rendererOnly"` (the spec's default): agents may not call it.
    #[default]
    RendererOnly,
    /// `"agentOnly"`.
    AgentOnly,
    /// `"rendererOrAgent"`.
    RendererOrAgent,
}

impl AllowedCallers {
    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            AllowedCallers::RendererOnly => "rendererOnly",
            AllowedCallers::AgentOnly => "agentOnly",
            AllowedCallers::RendererOrAgent => "rendererOrAgent",
        }
    }

    /// Whether an agent may invoke the function.
    pub const fn agent_may_call(self) -> bool {
        !matches!(self, AllowedCallers::RendererOnly)
    }
}

/// A string that is not an `allowedCallers` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown allowedCallers value {0:?} (expected agentOnly, rendererOrAgent or rendererOnly)")]
pub struct UnknownAllowedCallers(String);

impl core::str::FromStr for AllowedCallers {
    type Err = UnknownAllowedCallers;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            AllowedCallers::RendererOnly,
            AllowedCallers::AgentOnly,
            AllowedCallers::RendererOrAgent,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
        .ok_or_else(|| UnknownAllowedCallers(s.to_owned()))
    }
}

/// A catalog or function definition the host cannot use.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FunctionCatalogError {
    /// A renderer-only function's argument schema is not a valid JSON Schema object.
    #[error("function {function}: argument schema is invalid: {detail}")]
    InvalidSchema {
        /// The function.
        function: String,
        /// Why.
        detail: String,
    },
    /// An agent-callable function has no tool registration, or a renderer-only one has one.
    #[error("function {0}: agent-callable functions need a tool registration, and only they may have one")]
    ToolBinding(String),
    /// `requiresUserActivation` forces `rendererOnly`.
    #[error("function {0}: a function that requires user activation can only be renderer-only")]
    UserActivation(String),
    /// Two functions bind different registrations under one tool name.
    #[error("tool {0:?} is bound by several functions with different registrations")]
    ConflictingTool(String),
}

/// One catalog function.
#[derive(Debug)]
pub struct HostFunction {
    name: String,
    description: String,
    /// The argument schema of a renderer-only function (an agent-callable one uses its
    /// registration's input schema).
    renderer_args_schema: Value,
    allowed_callers: AllowedCallers,
    requires_user_activation: bool,
    requires_args: bool,
    return_type: &'static str,
    tool: Option<ToolRegistration>,
}

impl HostFunction {
    /// A function agents may call (`agentOnly`), run through the host's tool catalog as
    /// `tool`: its input schema is the function's argument schema, checked before planning.
    pub fn agent_callable(
        name: impl Into<String>,
        description: impl Into<String>,
        tool: ToolRegistration,
    ) -> Self {
        HostFunction {
            name: name.into(),
            description: description.into(),
            renderer_args_schema: Value::Null,
            allowed_callers: AllowedCallers::AgentOnly,
            requires_user_activation: false,
            requires_args: true,
            return_type: "any",
            tool: Some(tool),
        }
    }

    /// A function only the renderer may call; an agent's call to it is refused.
    pub fn renderer_only(
        name: impl Into<String>,
        description: impl Into<String>,
        args_schema: Value,
    ) -> Result<Self, FunctionCatalogError> {
        Self::new(
            name.into(),
            description.into(),
            AllowedCallers::RendererOnly,
            Err(args_schema),
        )
    }

    /// Any combination, checked: an agent-callable function takes its tool registration
    /// (`Ok`), a renderer-only one its argument schema (`Err`).
    pub fn new(
        name: String,
        description: String,
        allowed_callers: AllowedCallers,
        tool_or_schema: Result<ToolRegistration, Value>,
    ) -> Result<Self, FunctionCatalogError> {
        if allowed_callers.agent_may_call() != tool_or_schema.is_ok() {
            return Err(FunctionCatalogError::ToolBinding(name));
        }
        let (tool, renderer_args_schema) = match tool_or_schema {
            Ok(tool) => (Some(tool), Value::Null),
            Err(schema) => {
                let invalid = |detail: String| FunctionCatalogError::InvalidSchema {
                    function: name.clone(),
                    detail,
                };
                if !schema.is_object() {
                    return Err(invalid("an argument schema must be a JSON object".into()));
                }
                // Compiled once here only to refuse a schema that would make the catalog
                // document invalid; agents cannot call this function.
                jsonschema::options()
                    .with_draft(jsonschema::Draft::Draft202012)
                    .build(&schema)
                    .map_err(|e| invalid(e.to_string()))?;
                (None, schema)
            }
        };
        Ok(HostFunction {
            name,
            description,
            renderer_args_schema,
            allowed_callers,
            requires_user_activation: false,
            requires_args: true,
            return_type: "any",
            tool,
        })
    }

    /// Marks the function as needing user activation; only renderer-only functions may.
    pub fn requiring_user_activation(mut self) -> Result<Self, FunctionCatalogError> {
        if self.allowed_callers.agent_may_call() {
            return Err(FunctionCatalogError::UserActivation(self.name));
        }
        self.requires_user_activation = true;
        Ok(self)
    }

    /// Lets calls leave `args` out (they then run with `{}`). By default the catalog
    /// requires `args`, and a call without them is refused (`args_missing`).
    pub fn with_optional_args(mut self) -> Self {
        self.requires_args = false;
        self
    }

    /// The function name (`call` / `@call`).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The description.
    pub fn description(&self) -> &str {
        &self.description
    }
    /// Whether calls must carry `args`.
    pub fn requires_args(&self) -> bool {
        self.requires_args
    }
    /// Who may call it.
    pub fn allowed_callers(&self) -> AllowedCallers {
        self.allowed_callers
    }
    /// The tool registration behind an agent-callable function.
    pub fn tool(&self) -> Option<&ToolRegistration> {
        self.tool.as_ref()
    }
    /// The argument schema.
    pub fn args_schema(&self) -> &Value {
        match &self.tool {
            Some(tool) => tool.input_schema(),
            None => &self.renderer_args_schema,
        }
    }

    /// The catalog `FunctionDefinition` in the Candidate form (`call`).
    pub fn definition(&self) -> Value {
        self.definition_in(WireForm::Candidate)
    }

    /// The catalog `FunctionDefinition` in `form` (function key `call` or `@call`).
    pub fn definition_in(&self, form: WireForm) -> Value {
        let key = form.function_key();
        let required: &[&str] = if self.requires_args {
            &[key, "args"]
        } else {
            &[key]
        };
        json!({
            "type": "object",
            "description": self.description,
            "returnType": self.return_type,
            "allowedCallers": self.allowed_callers.as_str(),
            // Stated explicitly: the catalog schema treats an absent value as `true` here.
            "requiresUserActivation": self.requires_user_activation,
            "allOf": [
                {"$ref": "common_types.json#/$defs/FunctionCommon"},
                {
                    "type": "object",
                    "properties": {key: {"const": self.name}, "args": self.args_schema()},
                    "required": required,
                },
            ],
            "unevaluatedProperties": false,
        })
    }
}

/// One host catalog, identified by its `catalogId`.
#[derive(Debug)]
pub struct HostCatalog {
    catalog_id: String,
    title: String,
    functions: BTreeMap<String, HostFunction>,
}

impl HostCatalog {
    /// An empty catalog.
    pub fn new(catalog_id: impl Into<String>, title: impl Into<String>) -> Self {
        HostCatalog {
            catalog_id: catalog_id.into(),
            title: title.into(),
            functions: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) a function.
    pub fn with_function(mut self, function: HostFunction) -> Self {
        self.functions.insert(function.name.clone(), function);
        self
    }

    /// The `catalogId`.
    pub fn catalog_id(&self) -> &str {
        &self.catalog_id
    }

    /// A function by name.
    pub fn function(&self, name: &str) -> Option<&HostFunction> {
        self.functions.get(name)
    }

    /// The title.
    pub fn title(&self) -> &str {
        &self.title
    }

    /// The functions, by name.
    pub fn functions(&self) -> impl Iterator<Item = &HostFunction> {
        self.functions.values()
    }

    /// The catalog document in the Candidate form (`catalog_definition.json`).
    pub fn definition(&self) -> Value {
        self.definition_in(WireForm::Candidate)
    }

    /// The catalog document in `form`.
    pub fn definition_in(&self, form: WireForm) -> Value {
        let functions: Map<String, Value> = self
            .functions
            .values()
            .map(|f| (f.name.clone(), f.definition_in(form)))
            .collect();
        let any_function: Vec<Value> = self
            .functions
            .keys()
            .map(|name| json!({"$ref": format!("#/functions/{name}")}))
            .collect();
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "protocolVersion": "1.0",
            "title": self.title,
            "catalogId": self.catalog_id,
            "components": {},
            "functions": functions,
            "$defs": {"anyComponent": false, "anyFunction": {"oneOf": any_function}},
        })
    }
}

/// Whether two registrations are one tool: clones of the same registration (same mapper and
/// executor), so that no function's implementation is silently replaced by another's.
fn same_binding(a: &ToolRegistration, b: &ToolRegistration) -> bool {
    fn addr<T: ?Sized>(arc: &std::sync::Arc<T>) -> *const () {
        std::sync::Arc::as_ptr(arc).cast()
    }
    a.effect() == b.effect()
        && a.purpose() == b.purpose()
        && a.input_schema() == b.input_schema()
        && addr(a.mapper()) == addr(b.mapper())
        && a.executor().map(addr) == b.executor().map(addr)
}

/// The catalogs a renderer host serves, by `catalogId`.
#[derive(Debug, Default)]
pub struct FunctionRegistry {
    catalogs: BTreeMap<String, HostCatalog>,
}

impl FunctionRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a catalog.
    pub fn with_catalog(mut self, catalog: HostCatalog) -> Self {
        self.catalogs.insert(catalog.catalog_id.clone(), catalog);
        self
    }

    /// A function, if the catalog and the function both exist.
    pub fn lookup(&self, catalog_id: &str, function: &str) -> Option<&HostFunction> {
        self.catalogs.get(catalog_id)?.function(function)
    }

    /// A function, or which of the two was not found (`catalog_not_found`,
    /// `function_not_found`).
    pub fn find(&self, catalog_id: &str, function: &str) -> Result<&HostFunction, GateReason> {
        self.catalogs
            .get(catalog_id)
            .ok_or(GateReason::CatalogNotFound)?
            .function(function)
            .ok_or(GateReason::FunctionNotFound)
    }

    /// The catalogs, by `catalogId`.
    pub fn catalogs(&self) -> impl Iterator<Item = &HostCatalog> {
        self.catalogs.values()
    }

    /// A catalog.
    pub fn catalog(&self, catalog_id: &str) -> Option<&HostCatalog> {
        self.catalogs.get(catalog_id)
    }

    /// The host tool catalog behind every agent-callable function: one registration per tool
    /// name (functions in several catalogs may bind the same tool, with the same effect,
    /// purpose and input schema).
    pub fn tool_catalog(&self) -> Result<ToolCatalog, FunctionCatalogError> {
        let mut tools: BTreeMap<&str, &ToolRegistration> = BTreeMap::new();
        for tool in self
            .catalogs()
            .flat_map(HostCatalog::functions)
            .filter_map(HostFunction::tool)
        {
            match tools.get(tool.name()) {
                None => {
                    tools.insert(tool.name(), tool);
                }
                Some(bound) if same_binding(bound, tool) => {}
                Some(_) => return Err(FunctionCatalogError::ConflictingTool(tool.name().to_owned())),
            }
        }
        let mut catalog = ToolCatalog::new();
        for tool in tools.into_values() {
            catalog
                .register(tool.clone())
                .map_err(|_| FunctionCatalogError::ConflictingTool(tool.name().to_owned()))?;
        }
        Ok(catalog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aml_core::{tool_fn, Effect, ResourceRule};

    fn registration() -> ToolRegistration {
        ToolRegistration::new(
            "send",
            Effect::Send,
            "Send",
            ResourceRule::Fixed("r".into()),
            json!({"type": "object"}),
        )
        .unwrap()
        .with_executor(std::sync::Arc::new(tool_fn(|_| async { Ok(json!(1)) })))
    }

    #[test]
    fn one_tool_bound_by_two_functions_must_be_one_registration() {
        let shared = registration();
        let same = FunctionRegistry::new().with_catalog(
            HostCatalog::new("c", "t")
                .with_function(HostFunction::agent_callable("a", "a", shared.clone()))
                .with_function(HostFunction::agent_callable("b", "b", shared)),
        );
        assert_eq!(same.tool_catalog().unwrap().len(), 1);
        // Same name, another implementation: refused rather than one silently replacing the other.
        let other = FunctionRegistry::new().with_catalog(
            HostCatalog::new("c", "t")
                .with_function(HostFunction::agent_callable("a", "a", registration()))
                .with_function(HostFunction::agent_callable("b", "b", registration())),
        );
        assert!(
            matches!(other.tool_catalog(), Err(FunctionCatalogError::ConflictingTool(name)) if name == "send")
        );
    }
}

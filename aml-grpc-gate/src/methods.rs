//! The host's tools file: which upstream methods are tools (gated) and which streaming
//! methods are relayed ungated, checked against the upstream's descriptors.
//!
//! ```json
//! {"tools": [{"name": "refund", "method": "payments.v1.Payments/Refund", "effect": "pay",
//!             "purpose": "Refund an order", "resource": {"argument": "order_id"}}],
//!  "relay_ungated": ["payments.v1.Payments/WatchOrders"]}
//! ```

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use aml_core::{
    ArgumentSnapshot, Effect, MapperError, ResourceMapper, ResourceRule, ToolCatalog, ToolRegistration,
};
use prost_reflect::{DescriptorPool, Kind, MessageDescriptor, MethodDescriptor};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// What the gateway does with one method path (`/package.Service/Method`).
#[derive(Debug, Clone)]
pub enum Route {
    /// A unary method gated as the tool named.
    Gated(Arc<GatedMethod>),
    /// A streaming method the host relays without gating.
    Relayed(Arc<str>),
}

/// A unary method that is a tool.
#[derive(Debug)]
pub struct GatedMethod {
    /// The tool's name in the catalog and the policy.
    pub tool: String,
    /// The method path, `/package.Service/Method`.
    pub path: String,
    /// The request type.
    pub input: MessageDescriptor,
}

/// The tools file, read and checked.
#[derive(Debug)]
pub struct Methods {
    /// The tools, for the core's gate.
    pub catalog: ToolCatalog,
    /// Every method path the gateway serves.
    pub routes: HashMap<String, Route>,
    /// The services that have at least one routed method (health and reflection name them).
    pub services: BTreeSet<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    tools: Vec<Entry>,
    #[serde(default)]
    relay_ungated: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    method: String,
    effect: Effect,
    purpose: String,
    #[serde(default)]
    description: Option<String>,
    resource: ResourceRule,
    #[serde(default)]
    input_schema: Option<Value>,
}

/// The tools file cannot be used with these descriptors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MethodsError(String);

impl Methods {
    /// Reads a tools file (strict JSON: duplicate keys and unknown members are errors) and
    /// checks every method and resource path against `pool`.
    pub fn from_json(text: &str, pool: &DescriptorPool) -> Result<Methods, MethodsError> {
        let err = |e: &dyn std::fmt::Display| MethodsError(e.to_string());
        let value = aml_core::strict::parse_str(text).map_err(|e| err(&e))?;
        let document: Document = serde_json::from_value(value).map_err(|e| err(&e))?;
        let mut catalog = ToolCatalog::new();
        let mut routes = HashMap::new();
        let mut services = BTreeSet::new();
        for entry in document.tools {
            let tool = entry.name.clone();
            let fail = |detail: String| MethodsError(format!("tool {tool:?}: {detail}"));
            let method = find(pool, &entry.method).map_err(fail)?;
            if method.is_client_streaming() || method.is_server_streaming() {
                return Err(fail(format!(
                    "{} is a streaming method: only unary methods are gated (list it in relay_ungated to relay it ungated)",
                    entry.method
                )));
            }
            let input = method.input();
            for path in entry.resource.arguments() {
                check_path(&input, path).map_err(fail)?;
            }
            let schema = entry.input_schema.unwrap_or_else(|| json!({"type": "object"}));
            let mapper = Arc::new(FieldPaths(entry.resource));
            let mut registration = ToolRegistration::with_mapper(
                entry.name.clone(),
                entry.effect,
                entry.purpose,
                mapper,
                schema,
            )
            .map_err(|e| err(&e))?;
            if let Some(description) = entry.description {
                registration = registration.with_description(description);
            }
            catalog.register(registration).map_err(|e| err(&e))?;
            let path = format!("/{}", entry.method);
            services.insert(method.parent_service().full_name().to_owned());
            let gated = GatedMethod {
                tool: entry.name,
                path: path.clone(),
                input,
            };
            if routes.insert(path, Route::Gated(Arc::new(gated))).is_some() {
                return Err(MethodsError(format!("method {} is named twice", entry.method)));
            }
        }
        for name in document.relay_ungated {
            let method = find(pool, &name).map_err(|d| MethodsError(format!("relay_ungated: {d}")))?;
            if !method.is_client_streaming() && !method.is_server_streaming() {
                return Err(MethodsError(format!(
                    "relay_ungated: {name} is unary; a unary method is gated: give it a tool entry"
                )));
            }
            services.insert(method.parent_service().full_name().to_owned());
            let path = format!("/{name}");
            if routes.insert(path.clone(), Route::Relayed(path.into())).is_some() {
                return Err(MethodsError(format!("method {name} is named twice")));
            }
        }
        Ok(Methods {
            catalog,
            routes,
            services,
        })
    }
}

/// The method `package.Service/Method` in `pool`.
fn find(pool: &DescriptorPool, name: &str) -> Result<MethodDescriptor, String> {
    let (service, method) = name
        .split_once('/')
        .ok_or_else(|| format!("method {name:?} must be written package.Service/Method"))?;
    let service = pool
        .get_service_by_name(service)
        .ok_or_else(|| format!("the upstream's descriptors have no service {service:?}"))?;
    let found = service.methods().find(|m| m.name() == method);
    found.ok_or_else(|| format!("service {} has no method {method:?}", service.full_name()))
}

/// Checks that a resource's field path (`customer.email`) names a field of `input`, through
/// singular message fields.
fn check_path(input: &MessageDescriptor, path: &str) -> Result<(), String> {
    let mut message = input.clone();
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let field = message.get_field_by_name(part).ok_or_else(|| {
            format!(
                "resource path {path:?}: {} has no field {part:?}",
                message.full_name()
            )
        })?;
        if parts.peek().is_none() {
            return Ok(());
        }
        match field.kind() {
            Kind::Message(inner) if !field.is_list() && !field.is_map() => message = inner,
            _ => {
                return Err(format!(
                    "resource path {path:?}: {part:?} is not a singular message field"
                ))
            }
        }
    }
    Err(format!("resource path {path:?} is empty"))
}

/// A resource rule whose argument names are field paths into the request's proto3 JSON
/// form: `customer.email` is the `email` member of the `customer` member.
struct FieldPaths(ResourceRule);

impl FieldPaths {
    /// The values at the rule's paths, as a flat object keyed by path.
    fn flatten(&self, arguments: &Map<String, Value>) -> Map<String, Value> {
        let mut flat = Map::new();
        for path in self.0.arguments() {
            let mut value = None;
            let mut here = Some(arguments);
            for part in path.split('.') {
                value = here.and_then(|object| object.get(part));
                here = value.and_then(Value::as_object);
            }
            if let Some(value) = value {
                flat.insert(path.clone(), value.clone());
            }
        }
        flat
    }
}

impl ResourceMapper for FieldPaths {
    fn resource_for(&self, snapshot: &ArgumentSnapshot) -> Result<String, MapperError> {
        let mut all = self.resources_for(snapshot)?;
        match all.len() {
            1 => Ok(all.remove(0)),
            n => Err(MapperError::new(format!("{n} resources where one was expected"))),
        }
    }

    fn resources_for(&self, snapshot: &ArgumentSnapshot) -> Result<Vec<String>, MapperError> {
        if self.0.arguments().iter().all(|p| !p.contains('.')) {
            return self.0.resources_in(snapshot.as_map());
        }
        self.0.resources_in(&self.flatten(snapshot.as_map()))
    }
}

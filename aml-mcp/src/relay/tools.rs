//! The host's tools as the relay gates them: the catalog's gate for first calls, a gate over
//! envelope registrations for input-required retries (ADR 013), and the filtered
//! `tools/list`.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use aml_core::{
    ActionBoundary, ArgumentSnapshot, CatalogError, MapperError, ResourceMapper, ResourceRule, ToolCatalog,
    ToolGate, ToolRegistration,
};
use serde_json::{json, Value};

use super::names::Naming;
use super::routes::{expose_document, Routes};
use super::{CallObserver, ForwardWrapper, OutboundTraces};

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}
use crate::McpGate;

/// The `$id` given to a tool's input schema inside its retry envelope's schema, so that its
/// own `#/...` references resolve inside it.
const EMBEDDED_SCHEMA_ID: &str = "urn:aml-mcp-gate:tool-arguments";

/// The host's tools for the relay.
#[derive(Debug, Clone)]
pub struct RelayTools {
    gate: McpGate,
    retry: McpGate,
    wrapper: Option<Arc<dyn ForwardWrapper>>,
    observer: Option<Arc<dyn CallObserver>>,
    outbound: Option<OutboundTraces>,
    /// Each tool's server, when the gate fronts a list of servers (replaced with the tools).
    routes: Arc<RwLock<Arc<Routes>>>,
}

impl RelayTools {
    /// The tools of `catalog`, gated by `boundary`. `rules` names each tool's resource rule,
    /// which input-required retries need to find the resource inside their envelope; a tool
    /// without one is refused on retry (`invalid_or_unregistered_call`).
    pub fn new(
        catalog: ToolCatalog,
        rules: &BTreeMap<String, ResourceRule>,
        boundary: ActionBoundary,
    ) -> Result<Self, CatalogError> {
        let retry = retry_catalog(&catalog, rules)?;
        Ok(RelayTools {
            gate: McpGate::new(ToolGate::new(catalog, boundary.clone())),
            retry: McpGate::new(ToolGate::new(retry, boundary)),
            wrapper: None,
            observer: None,
            outbound: None,
            routes: Arc::default(),
        })
    }

    /// The tools of a catalog document (`{"tools": [...]}`, as [`ToolCatalog::from_json`]
    /// reads it), gated by `boundary`.
    pub fn from_json(text: &str, boundary: ActionBoundary) -> Result<Self, CatalogError> {
        let (catalog, rules) = parse_document(text)?;
        Self::new(catalog, &rules, boundary)
    }

    /// The tools of a catalog document for a gate in front of the servers `servers` (each
    /// a name and how its tools' names are shown, ADR 033): each tool names its `"server"`,
    /// and is registered, listed, gated and recorded under its exposed name, while its
    /// server is sent its own. An empty `servers` is [`RelayTools::from_json`].
    pub fn from_json_for_servers(
        text: &str,
        boundary: ActionBoundary,
        servers: &[(String, Naming)],
    ) -> Result<Self, CatalogError> {
        let (document, routes) = expose_document(text, servers)?;
        let (catalog, rules) = parse_document(&document)?;
        let tools = Self::new(routes.label(catalog)?, &rules, boundary)?;
        *write(&tools.routes) = Arc::new(routes);
        Ok(tools)
    }

    /// No tools: every call is refused as unregistered.
    pub fn empty(boundary: ActionBoundary) -> Self {
        RelayTools {
            gate: McpGate::new(ToolGate::new(ToolCatalog::new(), boundary.clone())),
            retry: McpGate::new(ToolGate::new(ToolCatalog::new(), boundary)),
            wrapper: None,
            observer: None,
            outbound: None,
            routes: Arc::default(),
        }
    }

    /// Wraps the forward of every gated call with `wrapper` (see [`ForwardWrapper`]).
    pub fn with_forward_wrapper(mut self, wrapper: Arc<dyn ForwardWrapper>) -> Self {
        self.wrapper = Some(wrapper);
        self
    }

    /// Tells `observer` of every call the relay ends (see [`CallObserver`]).
    pub fn with_call_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Sends the trace context the [`CallObserver`] gives for each forwarded call through
    /// `traces`, which the server's transport shares (see [`OutboundTraces`]).
    pub fn with_outbound_traces(mut self, traces: OutboundTraces) -> Self {
        self.outbound = Some(traces);
        self
    }

    /// The table the server's transport takes each forwarded call's trace context from, if
    /// any.
    pub(crate) fn outbound_traces(&self) -> Option<&OutboundTraces> {
        self.outbound.as_ref()
    }

    /// The host's observer of ended calls, if any.
    pub(crate) fn call_observer(&self) -> Option<&Arc<dyn CallObserver>> {
        self.observer.as_ref()
    }

    /// The host's wrapper around each forward, if any.
    pub(crate) fn forward_wrapper(&self) -> Option<&Arc<dyn ForwardWrapper>> {
        self.wrapper.as_ref()
    }

    /// Replaces the tools with those of a catalog document, for every session that shares
    /// them (clones of this value do): what a host does when its tools file changes. A bad
    /// document changes nothing and says why. A call already planned goes on under the
    /// registration it was planned with; the boundary's re-checks are the policy's.
    pub fn replace_from_json(&self, text: &str) -> Result<(), CatalogError> {
        let servers = self.routes().servers().to_vec();
        let (document, routes) = expose_document(text, &servers)?;
        let (catalog, rules) = parse_document(&document)?;
        let catalog = routes.label(catalog)?;
        let retry = retry_catalog(&catalog, &rules)?;
        self.gate.gate().live_catalog().replace(catalog);
        self.retry.gate().live_catalog().replace(retry);
        *write(&self.routes) = Arc::new(routes);
        Ok(())
    }

    /// Each tool's server, as the tools now stand.
    pub(crate) fn routes(&self) -> Arc<Routes> {
        Arc::clone(&self.routes.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The gate for first calls.
    pub fn gate(&self) -> &McpGate {
        &self.gate
    }

    /// The gate for retries that carry `inputResponses` or `requestState`.
    pub fn retry_gate(&self) -> &McpGate {
        &self.retry
    }

    /// The host's pin of the server's definition of `tool`, if it pinned one.
    pub(crate) fn pin(&self, tool: &str) -> Option<aml_core::Sha256Digest> {
        self.gate.gate().catalog().get(tool)?.pin().copied()
    }

    /// Whether `tool` is listed: registered, and allowed by at least one policy rule for
    /// its declared effect. With the input schema the host enforces.
    pub(crate) fn listed(&self, tool: &str) -> Option<Arc<Value>> {
        let gate = self.gate.gate();
        let catalog = gate.catalog();
        let registration = catalog.get(tool)?;
        let policy = gate.boundary().policy().current();
        // Shadow mode lets every call through: every registered tool is listed.
        (gate.boundary().is_shadow() || policy.may_allow(tool, registration.effect()))
            .then(|| Arc::new(registration.input_schema().clone()))
    }
}

/// What in a host's tools document and policy is most likely a typo: a rule naming a tool
/// the document does not register (or registers with another effect: the rule then allows
/// nothing), and a tool whose resource comes from an argument its input schema does not
/// define (a call without it is refused). One sentence each; none for a
/// document that does not load (that is an error of its own). `tools` is the document's
/// text, `None` when the host gave none.
pub fn catalog_warnings(tools: Option<&str>, policy: &aml_core::Policy) -> Vec<String> {
    let (catalog, rules) = match tools.map(parse_document) {
        Some(Ok(parsed)) => parsed,
        Some(Err(_)) => return Vec::new(),
        None => (ToolCatalog::new(), BTreeMap::new()),
    };
    let mut warnings = catalog.policy_warnings(policy);
    for tool in catalog.tools() {
        let Some(rule) = rules.get(tool.name()) else {
            continue;
        };
        let properties = tool.input_schema().get("properties").and_then(Value::as_object);
        for argument in rule.arguments() {
            if !properties.is_some_and(|p| p.contains_key(argument)) {
                warnings.push(format!(
                    "tool {:?} takes its resource from argument {argument:?}, which its input schema does not define (\"properties\"): calls without it are refused",
                    tool.name()
                ));
            }
        }
    }
    warnings
}

/// A catalog document's registrations and each tool's resource rule.
fn parse_document(text: &str) -> Result<(ToolCatalog, BTreeMap<String, ResourceRule>), CatalogError> {
    let catalog = ToolCatalog::from_json(text)?;
    let rules = catalog
        .tools()
        .filter_map(|tool| Some((tool.name().to_owned(), tool.resource_rule()?.clone())))
        .collect();
    Ok((catalog, rules))
}

/// The envelope registrations that input-required retries are gated with, one per tool that
/// has a resource rule.
fn retry_catalog(
    catalog: &ToolCatalog,
    rules: &BTreeMap<String, ResourceRule>,
) -> Result<ToolCatalog, CatalogError> {
    let mut retry = ToolCatalog::new();
    for tool in catalog.tools() {
        if let Some(rule) = rules.get(tool.name()) {
            retry.register(envelope_registration(tool, rule.clone())?)?;
        }
    }
    Ok(retry)
}

/// A retry's proposal arguments: `{"arguments": …, "inputResponses": …, "requestState": …}`
/// (the last two only when present), checked by the tool's own schema for `arguments` and
/// mapped to the resource by the tool's own rule applied to `arguments`.
fn envelope_registration(
    tool: &ToolRegistration,
    rule: ResourceRule,
) -> Result<ToolRegistration, CatalogError> {
    let mut inner = tool.input_schema().clone();
    if let Some(object) = inner.as_object_mut() {
        object
            .entry("$id")
            .or_insert_with(|| Value::from(EMBEDDED_SCHEMA_ID));
    }
    let schema = json!({
        "type": "object",
        "properties": {
            "arguments": inner,
            "inputResponses": {"type": "object"},
            "requestState": {"type": "string"},
        },
        "required": ["arguments"],
        "additionalProperties": false,
    });
    let mapper = EnvelopeResource(rule);
    let mut envelope = ToolRegistration::new(tool.name(), tool.effect(), tool.purpose(), mapper, schema)?
        .with_description(tool.description());
    if let Some(server) = tool.server() {
        envelope = envelope.with_server(server);
    }
    Ok(envelope)
}

/// The tool's resource rule, applied to the envelope's `arguments`.
#[derive(Debug)]
struct EnvelopeResource(ResourceRule);

impl ResourceMapper for EnvelopeResource {
    fn resource_for(&self, snapshot: &ArgumentSnapshot) -> Result<String, MapperError> {
        self.0.resource_for(&inner_arguments(snapshot))
    }

    fn resources_for(&self, snapshot: &ArgumentSnapshot) -> Result<Vec<String>, MapperError> {
        self.0.resources_for(&inner_arguments(snapshot))
    }
}

/// The envelope's `arguments` (the schema has checked it is an object).
fn inner_arguments(snapshot: &ArgumentSnapshot) -> ArgumentSnapshot {
    let inner = snapshot.get("arguments").and_then(Value::as_object);
    ArgumentSnapshot::from(inner.cloned().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aml_core::{CallStatus, Policy};

    fn tools() -> RelayTools {
        let catalog = r##"{"tools": [{"name": "delete", "effect": "delete", "purpose": "Delete a file",
            "resource": {"argument": "path"},
            "input_schema": {"type": "object", "$defs": {"p": {"type": "string"}},
              "properties": {"path": {"$ref": "#/$defs/p"}}, "required": ["path"], "additionalProperties": false}},
            {"name": "unused", "effect": "read", "purpose": "Never allowed", "resource": {"fixed": "x"},
             "input_schema": {}}]}"##;
        let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
            {"tool": "delete", "effect": "delete", "resource": "/tmp/a", "requires_approval": false},
            {"tool": "unused", "effect": "write", "resource": "x", "requires_approval": false}]}));
        RelayTools::from_json(catalog, ActionBoundary::builder(Arc::new(policy)).build()).unwrap()
    }

    #[test]
    fn only_registered_tools_that_policy_can_allow_are_listed() {
        let tools = tools();
        assert!(tools.listed("delete").is_some());
        assert!(
            tools.listed("unused").is_none(),
            "its only rule names another effect"
        );
        assert!(tools.listed("other").is_none());
    }

    #[test]
    fn typos_in_the_tools_file_and_policy_are_named() {
        let catalog = r#"{"tools": [{"name": "delete", "effect": "delete", "purpose": "p",
            "resource": {"argument": "file"}, "input_schema": {"type": "object", "properties": {"path": {}}}},
            {"name": "read", "effect": "read", "purpose": "p", "resource": {"argument": "path"},
             "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]}"#;
        let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
            {"tool": "delete", "effect": "delete", "resource": "/tmp/a", "requires_approval": false},
            {"tool": "read", "effect": "write", "resource": "/tmp/a", "requires_approval": false},
            {"tool": "raed", "effect": "read", "resource": "/tmp/a", "requires_approval": false}]}));
        let warnings = catalog_warnings(Some(catalog), &policy);
        assert_eq!(warnings.len(), 3, "{warnings:#?}");
        assert!(
            warnings[0].contains("\"read\" has effect write"),
            "{}",
            warnings[0]
        );
        assert!(warnings[1].contains("\"raed\", which the tools file does not register"));
        assert!(warnings[2].contains("\"delete\" takes its resource from argument \"file\""));
        assert_eq!(
            catalog_warnings(None, &policy).len(),
            3,
            "no tools file: no rule allows anything"
        );
        assert!(
            catalog_warnings(Some("{"), &policy).is_empty(),
            "a file that does not load is an error"
        );
    }

    #[tokio::test]
    async fn retries_check_the_tool_schema_inside_the_envelope_and_map_its_resource() {
        let tools = tools();
        let gate = tools.retry_gate().gate();
        let ok = json!({"arguments": {"path": "/tmp/a"}, "inputResponses": {"c": {"action": "accept"}},
                        "requestState": "opaque"});
        let prepared = gate.prepare_value("delete", ok);
        assert!(prepared.plan().unwrap().proposal_sha256().is_some());
        let bad = gate
            .call_value(
                "delete",
                json!({"arguments": {"path": 7}, "requestState": "s"}),
                None,
                None,
            )
            .await;
        assert_eq!(
            bad.status(),
            CallStatus::Refused(aml_core::Refusal::InvalidArguments)
        );
        let extra = gate
            .call_value(
                "delete",
                json!({"arguments": {"path": "/tmp/a"}, "task": {}}),
                None,
                None,
            )
            .await;
        assert_eq!(
            extra.status(),
            CallStatus::Refused(aml_core::Refusal::InvalidArguments)
        );
    }

    #[tokio::test]
    async fn retries_apply_a_typed_rule_with_several_resources_to_the_envelope_arguments() {
        let catalog = r#"{"tools": [{"name": "move", "effect": "write", "purpose": "Move a file",
            "resource": {"arguments": ["from", "to"], "as": "path", "root": "/srv"},
            "input_schema": {"type": "object", "properties": {"from": {"type": "string"}, "to": {"type": "string"}}}}]}"#;
        let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
            {"tool": "move", "effect": "write", "resource": "a", "requires_approval": false},
            {"tool": "move", "effect": "write", "resource": "b", "requires_approval": false}]}));
        let tools =
            RelayTools::from_json(catalog, ActionBoundary::builder(Arc::new(policy)).build()).unwrap();
        let gate = tools.retry_gate().gate();
        let envelope = json!({"arguments": {"from": "/srv/a", "to": "./b"}, "requestState": "s"});
        let both = gate.prepare_value("move", envelope.clone());
        let parts = aml_core::ProposalParts {
            tool: "move",
            effect: aml_core::Effect::Write,
            resource: "a",
            purpose: "Move a file",
            arguments: envelope.as_object().unwrap(),
        };
        let expected = aml_core::FrozenProposal::freeze_many(parts, &["b"]).unwrap();
        assert_eq!(both.plan().unwrap().proposal_sha256(), Some(expected.digest()));
        let outside = gate
            .call_value(
                "move",
                json!({"arguments": {"from": "a", "to": "../x"}, "requestState": "s"}),
                None,
                None,
            )
            .await;
        assert_eq!(
            outside.status(),
            CallStatus::Refused(aml_core::Refusal::ResourceOutsideRoot)
        );
        assert!(catalog_warnings(
            Some(catalog),
            tools.gate().gate().boundary().policy().current().as_ref()
        )
        .is_empty());
    }
}

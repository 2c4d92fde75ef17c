//! Gate A2UI v1.0 `callRendererFunction` requests through the AML action boundary.
//!
//! This crate provides:
//!
//! - [`wire`]: the A2UI v1.0 messages it reads and writes, in both forms that say
//!   `"version": "v1.0"` — the current one (`@call`, what `a2ui-core` 0.4.0 and
//!   `a2ui-agent-sdk` 0.9.0 send) and the Candidate one (`call`, seed `002_…`) — and the
//!   one table that turns outcomes into error codes;
//! - [`catalog`]: the host's function registry — catalogs by `catalogId`, functions with
//!   `allowedCallers`, each agent-callable function bound to a registration of the host's
//!   shared tool catalog ([`aml_core::ToolRegistration`]: effect, purpose, resource mapper,
//!   and the input schema that is the function's argument schema);
//! - [`binding`]: data bindings and nested calls inside `args`, refused unless a
//!   [`BindingResolver`] turns them into literal values before the proposal is frozen;
//! - [`gate`]: [`FunctionGate`], which takes one message and returns one response through
//!   the host's [`aml_core::ToolGate`], and a [`MessageOutcome`] (plan, receipt, or the
//!   [`GateReason`] it refused with); every message also ends in one record in the
//!   boundary's receipt sink.
//!
//! Every refusal is answered in the call's own form, with a code that tells malformed
//! input, unknown functions, policy refusals and host errors apart (see [`wire`]). Size
//! limits ([`GateLimits`]) apply before anything is parsed.
//!
//! No npm renderer shipped today speaks v1.0: `@a2ui/lit` 0.11 and
//! `@copilotkit/a2ui-renderer` 1.74 run v0.8 and v0.9, and their v0.9 message processor
//! ignores `callRendererFunction` without an answer. A host with such a renderer routes
//! every agent message whose key is `callRendererFunction` to [`FunctionGate::handle`]
//! and writes the response back to the agent; every other message goes to the renderer.
//! The `gate_stdio` example does exactly that for JSON lines.
//!
//! ```
//! use std::sync::Arc;
//! use aml_a2ui::{FunctionGate, FunctionRegistry, HostCatalog, HostFunction};
//! use aml_core::{tool_fn, ActionBoundary, Effect, Policy, ResourceRule, ToolRegistration};
//! use serde_json::json;
//!
//! let policy = Arc::new(Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
//!     {"tool": "open_ticket", "effect": "write", "resource": "queue:ops", "requires_approval": false}]})));
//! let schema = json!({"type": "object", "properties": {"queue": {"type": "string"}},
//!                     "required": ["queue"], "additionalProperties": false});
//! let tool = ToolRegistration::new("open_ticket", Effect::Write, "Open an ops ticket",
//!                                  ResourceRule::Fixed("queue:ops".into()), schema)
//!     .unwrap()
//!     .with_executor(Arc::new(tool_fn(|_| async { Ok(json!({"ticket": 7})) })));
//! let registry = FunctionRegistry::new().with_catalog(
//!     HostCatalog::new("https://example.test/catalog.json", "Ops")
//!         .with_function(HostFunction::agent_callable("openTicket", "Open a ticket", tool)),
//! );
//! let gate = FunctionGate::new(Arc::new(registry), ActionBoundary::builder(policy).build()).unwrap();
//! let message = br#"{"version": "v1.0", "callRendererFunction": {"functionCallId": "c1",
//!     "callFunction": {"@call": "openTicket", "catalogId": "https://example.test/catalog.json",
//!                      "args": {"queue": "ops"}}}}"#;
//! let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! let outcome = rt.block_on(gate.handle(message)).unwrap();
//! assert_eq!(outcome.response.to_value()["rendererFunctionResponse"]["value"], json!({"ticket": 7}));
//! // The same call id is never run twice.
//! let again = rt.block_on(gate.handle(message)).unwrap();
//! assert_eq!(again.response.to_value()["rendererFunctionResponse"]["error"]["code"], "DUPLICATE");
//! assert_eq!(again.code(), "replayed");
//! ```
#![forbid(unsafe_code)]

pub mod binding;
pub mod catalog;
pub mod gate;
pub mod reason;
pub mod wire;

pub use binding::{BindingError, BindingRequest, BindingResolver};
pub use catalog::{AllowedCallers, FunctionCatalogError, FunctionRegistry, HostCatalog, HostFunction};
pub use gate::{FunctionGate, Invocation, MessageOutcome, MessageRefusal};
pub use reason::GateReason;
pub use wire::{CallRendererFunction, DecodeError, GateLimits, RendererMessage, WireForm};

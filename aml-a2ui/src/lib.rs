//! Gate A2UI v1.0 `callRendererFunction` requests through the AML action boundary.
//!
//! This crate provides:
//!
//! - [`wire`]: the A2UI v1.0 messages it reads and writes (the spec is a Candidate, so the
//!   whole mapping lives in that one module);
//! - [`catalog`]: the host's function registry — catalogs by `catalogId`, functions with
//!   their argument JSON schema and `allowedCallers`, each agent-callable function bound to
//!   an [`aml_core::GuardedTool`];
//! - [`gate`]: [`FunctionGate`], which takes one message and returns one response.
//!
//! ```
//! use std::sync::Arc;
//! use aml_a2ui::{FunctionGate, FunctionRegistry, HostCatalog, HostFunction};
//! use aml_core::{tool_fn, ArgumentSnapshot, Effect, GuardedTool, MapperError, Policy};
//! use serde_json::json;
//!
//! let policy = Arc::new(Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
//!     {"tool": "open_ticket", "effect": "write", "resource": "queue:ops", "requires_approval": false}]})));
//! let tool = GuardedTool::builder("open_ticket", Effect::Write, "Open an ops ticket", policy)
//!     .resource_for(|a: &ArgumentSnapshot| {
//!         a.str("queue").map(|q| format!("queue:{q}")).ok_or_else(|| MapperError::new("no queue"))
//!     })
//!     .executor(tool_fn(|_| async { Ok(json!({"ticket": 7})) }))
//!     .build()
//!     .unwrap();
//! let schema = json!({"type": "object", "properties": {"queue": {"type": "string"}},
//!                     "required": ["queue"], "additionalProperties": false});
//! let registry = FunctionRegistry::new().with_catalog(
//!     HostCatalog::new("https://example.test/catalog.json", "Ops")
//!         .with_function(HostFunction::agent_callable("openTicket", "Open a ticket", schema, Arc::new(tool)).unwrap()),
//! );
//! let gate = FunctionGate::new(Arc::new(registry));
//! let message = br#"{"version": "v1.0", "callRendererFunction": {"functionCallId": "c1",
//!     "callFunction": {"call": "openTicket", "catalogId": "https://example.test/catalog.json",
//!                      "args": {"queue": "ops"}}}}"#;
//! let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! let outcome = rt.block_on(gate.handle(message)).unwrap();
//! assert_eq!(outcome.response.to_value()["rendererFunctionResponse"]["value"], json!({"ticket": 7}));
//! // The same call id is never run twice.
//! let again = rt.block_on(gate.handle(message)).unwrap();
//! assert_eq!(again.response.to_value()["error"]["code"], "INVALID_FUNCTION_CALL");
//! ```
#![forbid(unsafe_code)]

pub mod catalog;
pub mod gate;
pub mod wire;

pub use catalog::{AllowedCallers, CatalogError, FunctionRegistry, HostCatalog, HostFunction};
pub use gate::{FunctionGate, GateOutcome, Invocation};
pub use wire::{CallRendererFunction, DecodeError, RendererMessage};

//! Gate MCP `tools/call` through the AML action boundary, with the official Rust SDK `rmcp`.
//!
//! This crate provides:
//!
//! - [`McpGate`]: the host's [`aml_core::ToolGate`] (the shared tool catalog — effect,
//!   purpose, resource mapping and input schema per tool — policy, hooks and receipt sink)
//!   for MCP: unknown tool → `invalid_or_unregistered_call`, arguments outside the schema →
//!   `invalid_arguments` (both before any plan), then the boundary; a result with `isError`
//!   is `dispatched` with status `tool_error`, and a transport loss after the request left is
//!   `unknown`, never retried; the verdict ([`McpVerdict`]) never holds the result, only its
//!   digest;
//! - [`GatedClient`]: an rmcp client peer behind the gate;
//! - [`GatedServer`]: a wrapper around any rmcp `ServerHandler` that delegates every method
//!   and gates `call_tool`;
//! - [`GuardedToolServer`]: an MCP server whose tools are the host's own guarded tools;
//! - [`relay`]: a faithful MCP relay (JSON-RPC messages relayed as bytes, the gate on
//!   `tools/call`, `tools/list` and server-to-client sampling/elicitation, time limits and
//!   answers for everything), the engine of the `aml-mcp-gate` binary (crate
//!   `aml-mcp-gate`).
//!
//! Server-advertised annotations (`readOnlyHint`, …) are never read by the gate: the host's
//! registry and policy alone decide.
#![forbid(unsafe_code)]

pub mod client;
pub mod gate;
pub mod relay;
pub mod server;
pub mod tool_server;

pub use aml_core::{Caller, ResourceRule, ToolCatalog, ToolGate, ToolRegistration};
pub use client::GatedClient;
pub use gate::{ForwardError, McpGate, McpVerdict, ResultStatus, VERDICT_META_KEY};
pub use server::GatedServer;
pub use tool_server::GuardedToolServer;

//! Gate MCP `tools/call` through the AML action boundary, with the official Rust SDK `rmcp`.
//!
//! This crate provides:
//!
//! - [`ToolRegistry`]: the tools a host lets an agent call — effect, purpose, how the real
//!   destination is read from the arguments, and the input schema the host enforces;
//! - [`McpGate`]: the gate itself — unknown tool → `invalid_or_unregistered_call`, arguments
//!   outside the schema → `invalid_arguments` (both before any plan), then the boundary;
//!   a result with `isError` is `dispatched` with status `tool_error`, and a transport loss
//!   after the request left is `unknown`, never retried;
//! - [`GatedClient`]: an rmcp client peer behind the gate;
//! - [`GatedServer`]: a wrapper around any rmcp `ServerHandler` that delegates every method
//!   and gates `call_tool`;
//! - [`GuardedToolServer`]: an MCP server whose tools are the host's own guarded tools;
//! - [`proxy`] and the `aml-mcp-gate` binary: an MCP server on stdio in front of any stdio
//!   MCP server started as a child process.
//!
//! Server-advertised annotations (`readOnlyHint`, …) are never read by the gate: the host's
//! registry and policy alone decide.
#![forbid(unsafe_code)]

pub mod client;
pub mod gate;
pub mod proxy;
pub mod registry;
pub mod server;
pub mod tool_server;

pub use client::GatedClient;
pub use gate::{McpGate, Rejection, ResultStatus, Verdict, VERDICT_META_KEY};
pub use registry::{RegisteredTool, RegistryError, ResourceRule, ToolRegistry};
pub use server::{GatedServer, VerdictSink};
pub use tool_server::GuardedToolServer;

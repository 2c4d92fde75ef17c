//! A gated gRPC tool service on tonic/prost: the AML action boundary behind
//! `aml.v1.ToolService`.
//!
//! This crate provides:
//!
//! - the versioned proto package `aml.v1` (`proto/aml/v1/tool_service.proto`, compiled at
//!   build time by the pure-Rust `protox`, so no `protoc` is needed) and its generated code
//!   in [`pb`];
//! - [`GatedToolService`], the service over the host's [`aml_core::ToolGate`]: the gate's
//!   catalog names the tools and their input schemas, and every call, refusals included,
//!   leaves exactly one [`aml_core::CallRecord`] in the gate's receipt sink;
//! - [`status`]: outcomes as status codes clients can act on, each with a
//!   `google.rpc.ErrorInfo` carrying the reason, the plan and the receipt;
//! - deadlines and cancellation (ADR 006): until the one-use claim, a caller that
//!   cancels, disconnects or passes its deadline (`grpc-timeout`, else
//!   [`ServerLimits::default_timeout`]) ends the call as blocked and the tool is never
//!   entered; from the claim on, the dispatch completes and its receipt is recorded;
//! - [`GatedToolService::routes`] (tonic `Routes` with `grpc.health.v1` and reflection, for
//!   a server with the host's own tower layers) and [`serve`];
//! - [`ToolClient`], a typed client over any transport whose errors say whether the tool
//!   ran ([`CallError`]).
//!
//! `examples/tool_server/` is a runnable server configured from a JSON file.
#![forbid(unsafe_code)]

mod client;
mod convert;
mod fields;
mod frames;
mod route;
mod server;
mod service;
pub mod status;
mod timeout;
mod wire;

/// Code generated from `aml.v1` by tonic-prost-build; `CallToolRequest` is written by hand so
/// its text fields decode as bytes.
#[allow(missing_docs, unreachable_pub, missing_debug_implementations, clippy::all)]
pub mod pb {
    tonic::include_proto!("aml.v1");
    pub use crate::wire::CallToolRequest;
}

pub use client::{CallError, Dispatched, ToolClient};
pub use convert::{plan_from_message, plan_message, receipt_from_message, receipt_message};
pub use route::{RouteFuture, ToolServiceRoute};
pub use server::{serve, ServeError, ServerLimits, FILE_DESCRIPTOR_SET};
pub use service::{GatedToolService, ADAPTER};
pub use status::{
    code_for, receipt_code, refusal_status, report_of, service_status, status_for, ServiceReason,
    StatusReport, DETAIL_LIMIT, DOMAIN,
};
pub use timeout::{answer_by, parse_grpc_timeout, InvalidTimeout, ANSWER_MARGIN};

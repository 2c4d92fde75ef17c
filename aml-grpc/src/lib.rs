//! A gated gRPC tool service on tonic/prost: the AML action boundary behind
//! `aml.v1.ToolService`.
//!
//! This crate provides:
//!
//! - the versioned proto package `aml.v1` (`proto/aml/v1/tool_service.proto`, compiled at
//!   build time by the pure-Rust `protox`, so no `protoc` is needed) and its generated code
//!   in [`pb`];
//! - [`GatedToolService`], the service implementation: each call is schema-checked and run
//!   through the host's [`aml_core::GuardedTool`] (async approval included, which tonic's
//!   synchronous `Interceptor` could not await);
//! - [`status`]: outcomes as status codes clients can act on, each with a
//!   `google.rpc.ErrorInfo` carrying the receipt reason, the plan and the receipt;
//! - [`serve`]: the service with `grpc.health.v1`, server reflection (`v1` and `v1alpha`)
//!   and a request size limit; the caller's deadline bounds approval, and a request that
//!   arrives after its deadline is never dispatched;
//! - [`ToolClient`], a typed client.
#![forbid(unsafe_code)]

mod client;
mod convert;
mod server;
mod service;
pub mod status;

/// Code generated from `aml.v1` by tonic-prost-build.
#[allow(missing_docs, unreachable_pub, missing_debug_implementations, clippy::all)]
pub mod pb {
    tonic::include_proto!("aml.v1");
}

pub use client::{Dispatched, NotDispatched, ToolClient};
pub use convert::{plan_from_message, plan_message, receipt_from_message, receipt_message};
pub use server::{serve, ServeError, ServerLimits, FILE_DESCRIPTOR_SET};
pub use service::{GatedToolService, OutcomeSink, SchemaError};
pub use status::{code_for, report_of, StatusReport, DOMAIN};

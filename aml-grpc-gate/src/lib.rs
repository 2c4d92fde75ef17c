//! `aml-grpc-gate`: a gRPC gateway that gates an existing gRPC service with the AML action
//! boundary, learning the service's types from its descriptors (ADR 024).
//!
//! A request to a method the host lists as a tool is decoded with the upstream's
//! descriptors ([`transcode`]), written as proto3 JSON (64-bit integers as strings, unknown
//! fields refused), and run through the core's one call contract
//! ([`aml_core::ToolGate::call`]): frozen, hashed, planned, approved, claimed, re-checked.
//! What the upstream receives is the frozen message re-encoded ([`forward`]). Streaming
//! methods are refused unless the host relays them ungated; every other path is refused.
//! The gateway's own refusals are `aml-grpc`'s statuses with `ErrorInfo`.
#![forbid(unsafe_code)]

pub mod codec;
pub mod descriptors;
pub mod forward;
pub mod gateway;
pub mod health;
pub mod metadata;
pub mod methods;
pub mod serve;
mod size;
pub mod transcode;
pub mod upstream;

pub use gateway::{Gateway, Limits, ADAPTER};
pub use methods::{Methods, Route};
pub use upstream::Upstream;

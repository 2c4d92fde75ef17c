//! aml-testkit's integration tests: one binary, a module per area.
//!
//! Some run the workspace's `aml-mcp-gate` and `aml-approval` binaries, which
//! `cargo test -p aml-testkit` does not build: [`bins`] builds them (once, with the same
//! cargo, target directory and profile) when they are missing or older than their sources,
//! so these tests also pass from a clean target directory.

mod a2ui;
mod architecture;
mod bins;
mod canonicalize;
mod challenge;
mod cli;
mod conformance;
mod examples;
mod interop_grpc;
mod interop_mcp;
mod interop_relay;
mod mcp;
mod readme;
mod receipt_stream;
mod rehearsal;
mod relay_answers;
mod relay_wire;
mod tracing_events;

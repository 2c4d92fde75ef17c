//! aml-testkit's integration tests: one binary, a module per area.

mod a2ui;
mod architecture;
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

//! aml-a2ui's integration tests: one binary, a module per area.

mod hostile_inputs;
mod interop_sdk;

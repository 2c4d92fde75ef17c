//! aml-core's integration tests: one binary, a module per area.

mod every_reason;
mod node_differential;

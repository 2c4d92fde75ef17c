//! aml-mcp-http's integration tests: one binary, a module per area.

mod front_cost;
mod ops;
mod transports;

//! aml-http-example's integration tests: one binary, a module per area.

mod cedar;
mod rehearse;
mod wire;

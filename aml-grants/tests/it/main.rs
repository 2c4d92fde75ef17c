//! aml-grants's integration tests: one binary, a module per area.

mod common;

mod budgets;
mod chain;
mod group_commit;
mod memory;
mod postgres;
mod sqlite;

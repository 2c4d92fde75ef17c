//! aml-mcp-gate's load test, in a binary of its own: it keeps both cores busy for about a
//! minute, and cargo runs test binaries one after another, so no test with a time bound
//! runs beside it.

#[path = "../it/common/mod.rs"]
mod common;

mod http_load;

//! aml-mcp-gate's integration tests: one binary, a module per area.

mod cli_support;
mod common;
mod pinned;
mod pipelined;
mod raw;
mod session;
mod stateless;

mod approval_page;
mod audit;
mod changes;
mod cli;
mod config_server;
mod durable;
mod eof;
mod http_budgets;
mod http_cli;
mod http_front;
mod http_interop;
mod http_lockouts;
mod http_replicas;
mod http_stateless;
mod http_stateless_wire;
mod idless;
mod init;
mod orphan;
mod pins;
mod policy_cmd;
mod reload;
mod replicas;
mod telemetry;
mod traces;
mod traces_http;
mod traces_upstream;
mod typos;
mod withdraw;

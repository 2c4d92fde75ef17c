//! Try the A2UI gate without writing Rust: A2UI messages in as JSON lines on stdin, one
//! response line out on stdout for each, JSON log lines on stderr.
//!
//! ```text
//! cargo run -p aml-a2ui --example gate_stdio -- --config aml-a2ui/examples/host.json
//! ```
//!
//! `host.json` holds the policy and the catalog (see `aml-a2ui/examples/host.json`). Every
//! agent-callable function runs a fixture tool that logs `{"tool_entry": …}` on stderr and
//! returns `{"ok": true}`; every input line also ends in one `aml-call-record/1` line on
//! stderr (the boundary's receipt stream).
#![allow(missing_docs)]

mod host;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use aml_a2ui::GateLimits;
use aml_core::JsonLinesSink;
use clap::Parser;

use crate::host::{capabilities, serve, HostConfig, Log};

/// Gate A2UI v1.0 callRendererFunction messages read as JSON lines on stdin.
#[derive(Debug, Parser)]
#[command(name = "gate_stdio")]
struct Args {
    /// The host configuration: policy, catalogId and functions.
    #[arg(long, value_name = "PATH")]
    config: PathBuf,
    /// Print the renderer capabilities (the catalog in the current v1.0 form) and exit.
    #[arg(long)]
    capabilities: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let log: Log = Arc::new(Mutex::new(io::stderr()));
    let host = match HostConfig::load(&args.config).and_then(|c| c.host(&log)) {
        Ok(host) => host,
        Err(e) => return fail(&e),
    };
    if args.capabilities {
        return match writeln!(io::stdout(), "{}", capabilities(&host.registry)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e.to_string()),
        };
    }
    let sink = match JsonLinesSink::stderr() {
        Ok(sink) => Arc::new(sink),
        Err(e) => return fail(&format!("cannot start the receipt writer: {e}")),
    };
    let limits = GateLimits::default();
    let gate = match host.gate(sink) {
        Ok(gate) => gate.with_limits(limits),
        Err(e) => return fail(&e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    let stdout = io::stdout();
    match serve(
        &gate,
        limits.max_message_bytes,
        &runtime,
        io::stdin().lock(),
        stdout.lock(),
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

fn fail(message: &str) -> ExitCode {
    // Nothing is left to tell if stderr is gone too.
    let _ = writeln!(io::stderr(), "gate_stdio: {message}");
    ExitCode::FAILURE
}

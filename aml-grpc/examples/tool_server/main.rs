//! A runnable gated tool server: the policy, tools and demonstration hooks come from a JSON
//! file.
//!
//! ```text
//! cargo run -p aml-grpc --example tool_server -- --addr 127.0.0.1:50051 \
//!     --config aml-grpc/examples/server.json [--receipts receipts.jsonl]
//! ```
//!
//! stdout carries one JSON line per event a demonstration watches for: `{"listening":
//! ADDR}` once, `{"approval_requested": TOOL, "proposal_sha256": …}` when the fixture
//! approver is asked, and `{"entered": TOOL, "proposal_sha256": …}` each time the fixture
//! tool is entered. Call records go to `--receipts` (JSON lines; stderr without it); logs go
//! to stderr, filtered by `RUST_LOG` (default `info`).

mod config;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aml_core::{
    approval_fn, tool_fn, ActionBoundary, Approval, JsonLinesSink, ReceiptSink, ToolError, ToolGate,
};
use aml_grpc::GatedToolService;
use clap::Parser;
use serde_json::{json, Value};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};

use crate::config::{Config, Fixture};

/// Serves `aml.v1.ToolService` (with health and reflection) from a configuration file.
#[derive(Debug, Parser)]
#[command(name = "tool_server")]
struct Args {
    /// Address to listen on (port 0 picks a free port; see the `listening` line).
    #[arg(long, value_name = "HOST:PORT")]
    addr: SocketAddr,
    /// The server configuration: policy, tools, fixture and optional limits.
    #[arg(long, value_name = "PATH")]
    config: PathBuf,
    /// Append call records here as JSON lines (default: stderr).
    #[arg(long, value_name = "PATH")]
    receipts: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env();
    let filter = match filter {
        Ok(filter) => filter,
        Err(e) => return fail(&format!("RUST_LOG: {e}")),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(message: &str) -> std::process::ExitCode {
    eprintln!("tool_server: {message}");
    std::process::ExitCode::FAILURE
}

async fn run(args: Args) -> Result<(), String> {
    let config = Config::load(&args.config).map_err(|e| e.to_string())?;
    let sink = Arc::new(
        match &args.receipts {
            Some(path) => JsonLinesSink::append(path),
            None => JsonLinesSink::stderr(),
        }
        .map_err(|e| format!("receipts: {e}"))?,
    );
    let boundary = ActionBoundary::builder(Arc::new(config.policy))
        .approval(fixture_approver(config.fixture))
        .executor(fixture_tool(config.fixture))
        .sink_arc(Arc::clone(&sink) as Arc<dyn ReceiptSink>)
        .build();
    let gate = ToolGate::new(config.catalog, boundary);
    let service = GatedToolService::new(gate).with_limits(config.limits);
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.addr))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    print_line(&json!({"listening": address.to_string()}));
    tracing::info!(%address, "serving aml.v1.ToolService");
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let served = aml_grpc::serve(listener, service, stop).await;
    if !sink.flush(Duration::from_secs(5)) {
        tracing::error!("call records may not all be written");
    }
    served.map_err(|e| e.to_string())
}

/// One JSON line on stdout, flushed at once so a watcher sees it now.
fn print_line(line: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

fn fixture_approver(fixture: Fixture) -> impl aml_core::ApprovalHook {
    approval_fn(move |request| async move {
        let digest = request.proposal().digest();
        print_line(&json!({"approval_requested": request.proposal().tool(),
                           "proposal_sha256": digest.to_string()}));
        tokio::time::sleep(Duration::from_millis(fixture.approval_delay_ms)).await;
        Ok(if fixture.approve {
            Approval::approve(digest)
        } else {
            Approval::decline(digest)
        })
    })
}

fn fixture_tool(fixture: Fixture) -> impl aml_core::ToolExecutor {
    tool_fn(move |call| async move {
        let tool = call.proposal().tool().to_owned();
        print_line(&json!({"entered": tool, "proposal_sha256": call.proposal().digest().to_string()}));
        tokio::time::sleep(Duration::from_millis(fixture.tool_delay_ms)).await;
        if fixture.tool_error_bytes > 0 {
            return Err(ToolError::new("E".repeat(fixture.tool_error_bytes)));
        }
        Ok(json!({"tool": tool, "arguments": call.arguments()}))
    })
}

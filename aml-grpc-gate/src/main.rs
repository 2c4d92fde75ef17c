//! `aml-grpc-gate`: gates an existing gRPC server.
//!
//! ```text
//! aml-grpc-gate --listen 127.0.0.1:50052 --upstream http://127.0.0.1:50051 \
//!     --tools tools.json --policy policy.json [--descriptors api.pb] [--approve web]
//! ```
//!
//! stdout carries JSON lines a supervisor can wait on: `{"listening": ADDR}` once serving,
//! and with `--approve web` first `{"approval_page": URL}`. Call records go to
//! `--receipts` (JSON lines; stderr without it); logs to stderr (`RUST_LOG`, default `info`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aml_core::{ActionBoundary, JsonLinesSink, LivePolicy, Policy, ReceiptSink, ToolGate};
use aml_grpc_gate::gateway::{Gateway, Limits};
use aml_grpc_gate::health::HealthFollower;
use aml_grpc_gate::metadata::Allowed;
use aml_grpc_gate::{descriptors, serve, Methods, Upstream};
use clap::Parser;
use serde_json::{json, Value};
use tonic_health::server::HealthReporter;
use tracing_subscriber::filter::{EnvFilter, LevelFilter};

mod approve;
mod reload;

/// Listens as a gRPC server and forwards to one upstream gRPC server, gating every unary
/// method the tools file lists with the host's policy, approval and one-use grants.
#[derive(Debug, Parser)]
#[command(name = "aml-grpc-gate", version)]
struct Args {
    /// Address to listen on (port 0 picks a free one; see the `listening` line)
    #[arg(long, value_name = "HOST:PORT")]
    listen: SocketAddr,
    /// The upstream gRPC server (plaintext HTTP/2)
    #[arg(long, value_name = "http://HOST:PORT")]
    upstream: String,
    /// The tools file: methods as tools, and streaming methods relayed ungated
    #[arg(long, value_name = "FILE")]
    tools: PathBuf,
    /// The host policy: aml-action-policy/1 JSON, or Cedar (a .cedar file)
    #[arg(long, value_name = "FILE")]
    policy: PathBuf,
    /// The upstream's types as a descriptor set (protoc --descriptor_set_out
    /// --include_imports); default: ask the upstream's server reflection
    #[arg(long, value_name = "FILE.pb")]
    descriptors: Option<PathBuf>,
    /// Where a person approves calls whose rule requires approval (only `web`: a page on
    /// 127.0.0.1 with a JSON API); without it such calls block with approval_unavailable
    #[arg(long, value_name = "CHANNEL", value_parser = ["web"])]
    approve: Option<String>,
    /// How long a call waits for a decision before it is blocked (approval_error)
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    approval_timeout: u64,
    /// A metadata key forwarded to the upstream and back (repeatable); nothing else is
    #[arg(long = "forward-metadata", value_name = "KEY")]
    forward_metadata: Vec<String>,
    /// Largest request message accepted, in bytes
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20)]
    max_request_bytes: usize,
    /// Append call records here as JSON lines (default: stderr)
    #[arg(long, value_name = "FILE")]
    receipts: Option<PathBuf>,
    /// Threads that serve calls, each accepting connections on the one listening socket and
    /// holding its own connection to the upstream (1: the lowest added latency)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,
    /// How often the gateway's health asks the upstream's (a service is SERVING only while
    /// the upstream serves it)
    #[arg(long, value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    health_interval: u64,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let filter = match EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env()
    {
        Ok(filter) => filter,
        Err(e) => return fail(&format!("RUST_LOG: {e}")),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    // A call crosses no thread: each worker's runtime runs its connections, its calls and its
    // upstream connection on one thread (ADR 029).
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(Failure::Start(e)) => {
            eprintln!("aml-grpc-gate: {e}");
            // As clap's usage errors and aml-mcp-gate's refused configuration.
            std::process::ExitCode::from(2)
        }
        Err(Failure::Serve(e)) => fail(&e),
    }
}

fn fail(message: &str) -> std::process::ExitCode {
    eprintln!("aml-grpc-gate: {message}");
    std::process::ExitCode::FAILURE
}

/// Why the gateway stopped: before it served (its files, its flags: exit 2), or while
/// serving (exit 1).
enum Failure {
    Start(String),
    Serve(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure::Start(e)
    }
}

/// One JSON line on stdout, flushed at once so a watcher sees it now.
fn print_line(line: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

async fn run(args: Args) -> Result<(), Failure> {
    let policy =
        Policy::read_file(&args.policy).map_err(|e| format!("--policy {}: {e}", args.policy.display()))?;
    // A malformed policy would deny every call (invalid_policy): refuse to start instead.
    if let Some(e) = policy.error() {
        return Err(Failure::Start(format!("--policy {}: {e}", args.policy.display())));
    }
    let upstream = Upstream::lazy(&args.upstream).map_err(|e| e.to_string())?;
    let pool = match &args.descriptors {
        Some(path) => descriptors::from_file(path),
        None => descriptors::from_reflection(upstream.channel()).await,
    }
    .map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(&args.tools)
        .map_err(|e| format!("cannot read {}: {e}", args.tools.display()))?;
    let methods = Methods::from_json(&text, &pool).map_err(|e| format!("{}: {e}", args.tools.display()))?;
    let sink = Arc::new(match &args.receipts {
        Some(path) => {
            JsonLinesSink::append(path).map_err(|e| format!("--receipts {}: {e}", path.display()))?
        }
        None => JsonLinesSink::stderr().map_err(|e| format!("receipts to stderr: {e}"))?,
    });
    reload::warn_of_typos(&methods.catalog, &policy);
    let live = LivePolicy::new(policy);
    let hangups = reload::listen()?;
    let catalog = methods.catalog.clone();
    tokio::spawn(reload::on_hangup(
        hangups,
        args.policy.clone(),
        live.clone(),
        catalog,
    ));
    let mut boundary = ActionBoundary::builder(live).sink_arc(Arc::clone(&sink) as Arc<dyn ReceiptSink>);
    if args.approve.is_some() {
        let (with, url) =
            approve::with_web_approvals(boundary, Duration::from_secs(args.approval_timeout)).await?;
        boundary = with;
        eprintln!("aml-grpc-gate: approve or deny pending calls at {url}");
        print_line(&json!({"approval_page": url}));
    }
    let gate = ToolGate::new(methods.catalog, boundary.build());
    let limits = Limits {
        max_request_bytes: args.max_request_bytes,
        ..Limits::default()
    };
    let allowed = Allowed::new(args.forward_metadata.clone());
    let gateway = |upstream| {
        Gateway::new(
            gate.clone(),
            methods.routes.clone(),
            upstream,
            allowed.clone(),
            limits,
        )
    };
    let listener = std::net::TcpListener::bind(args.listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    // One health for every worker, following the upstream's; its first answer is in before
    // the gateway says it is listening.
    let health = HealthReporter::new();
    let follower = HealthFollower::new(
        health.clone(),
        upstream.channel(),
        methods.services.clone(),
        Duration::from_secs(2),
    );
    follower.check_once().await;
    tokio::spawn(follower.follow(Duration::from_secs(args.health_interval)));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    for n in 1..args.workers {
        let worker = Worker {
            listener: listener
                .try_clone()
                .map_err(|e| format!("cannot share the listener: {e}"))?,
            gateway: gateway(Upstream::lazy(&args.upstream).map_err(|e| e.to_string())?),
            health: health.clone(),
            pool: pool.clone(),
            services: methods.services.clone(),
            stop: stop_rx.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("aml-grpc-gate-worker-{n}"))
            .spawn(move || worker.run())
            .map_err(|e| format!("cannot start worker {n}: {e}"))?;
        workers.push(thread);
    }
    let first = Worker {
        listener,
        gateway: gateway(upstream),
        health,
        pool,
        services: methods.services,
        stop: stop_rx,
    };
    print_line(&json!({"listening": address.to_string()}));
    tracing::info!(%address, upstream = %args.upstream, workers = args.workers, pid = std::process::id(),
                   "serving; SIGHUP (kill -HUP PID) reloads --policy");
    let stop = async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = stop_tx.send(true);
    };
    tokio::spawn(stop);
    let mut served = first.serve().await;
    for thread in workers {
        let result = thread.join().unwrap_or_else(|_| Err("a worker panicked".into()));
        served = served.and(result);
    }
    if !sink.flush(Duration::from_secs(5)) {
        tracing::error!("call records may not all be written");
    }
    served.map_err(|e| Failure::Serve(e.to_string()))
}

/// One serving thread: its own runtime, its own accept loop on the shared listening socket,
/// its own upstream connection; the gate (policy, approvals, grants, records) is shared.
struct Worker {
    listener: std::net::TcpListener,
    gateway: Gateway,
    health: HealthReporter,
    pool: prost_reflect::DescriptorPool,
    services: std::collections::BTreeSet<String>,
    stop: tokio::sync::watch::Receiver<bool>,
}

impl Worker {
    fn run(self) -> Result<(), String> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a worker's runtime: {e}"))?
            .block_on(self.serve())
    }

    async fn serve(self) -> Result<(), String> {
        let listener = tokio::net::TcpListener::from_std(self.listener).map_err(|e| e.to_string())?;
        let routes = serve::routes(self.gateway, &self.health, &self.pool, &self.services)
            .map_err(|e| e.to_string())?;
        let mut stop = self.stop;
        let stopped = async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        };
        serve::serve(listener, routes, stopped)
            .await
            .map_err(|e| e.to_string())
    }
}

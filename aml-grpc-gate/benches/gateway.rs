//! One unary call on loopback, from a tonic client over raw bytes, three ways, interleaved
//! so that all see the same noise: straight to a Rust upstream (a tonic server that answers
//! a fixed message), through a bare byte forwarder (the yardstick: what any extra hop costs
//! here), and through the gateway (descriptors, proto3 JSON, the gate with an allow rule,
//! the frozen message re-encoded and forwarded).
//!
//! Two placements (`cargo bench -p aml-grpc-gate --bench gateway`):
//! - **as deployed**: the `aml-grpc-gate` binary as its own process (records to a file),
//!   the upstream and the forwarder on threads of their own, so every hop wakes another
//!   thread, as separate processes do;
//! - **one thread**: upstream, forwarder and gateway (in process) on the client's own
//!   thread, so a hop costs its own work and system calls and no thread wake-up: the
//!   gateway's cost apart from this machine's scheduler.
//!
//! The goal (issue 38) is an added p50 of at most 30 µs over calling the upstream directly;
//! both placements are printed with the forwarder's added p50 beside the gateway's. Also the
//! gateway's own work in process with no network (decode, gate, re-encode).
#![allow(missing_docs)]

#[path = "../../aml-testkit/benches/support/summary.rs"]
mod summary;

use std::convert::Infallible;
use std::future::Future;
use std::io::BufRead;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use aml_core::{ActionBoundary, NoSink, Policy, ToolGate};
use aml_grpc_gate::codec::RawCodec;
use aml_grpc_gate::gateway::{Gateway, Limits};
use aml_grpc_gate::metadata::Allowed;
use aml_grpc_gate::{serve, Methods, Upstream as GatewayUpstream};
use bytes::Bytes;
use criterion::{criterion_group, Criterion};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage};
use tonic::body::Body;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::server::{Grpc, UnaryService};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

const TOOLS: &str = r#"{"tools": [{"name": "lookup_order", "method": "payments.v1.Payments/Lookup",
  "effect": "read", "purpose": "Look up an order", "resource": {"argument": "order_id"}}]}"#;
const POLICY: &str = r#"{"protocol": "aml-action-policy/1", "rules": [
  {"tool": "lookup_order", "effect": "read", "resource": "A-1", "requires_approval": false}]}"#;
const PATH: &str = "/payments.v1.Payments/Lookup";
const ROUNDS: usize = 5000;

/// The upstream: answers every call with the same reply.
#[derive(Clone)]
struct Upstream(Bytes);

impl UnaryService<Bytes> for Upstream {
    type Response = Bytes;
    type Future = std::future::Ready<Result<Response<Bytes>, Status>>;
    fn call(&mut self, _request: Request<Bytes>) -> Self::Future {
        std::future::ready(Ok(Response::new(self.0.clone())))
    }
}

impl<B> tower_service::Service<http::Request<B>> for Upstream
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move { Ok(Grpc::new(RawCodec).unary(service, request).await) })
    }
}

fn pool() -> DescriptorPool {
    let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proto");
    let set = protox::compile(["payments.proto"], [proto]).unwrap();
    DescriptorPool::decode(set.encode_to_vec().as_slice()).unwrap()
}

fn message(pool: &DescriptorPool, name: &str, json: &str) -> Bytes {
    let desc = pool.get_message_by_name(name).unwrap();
    let mut de = serde_json::Deserializer::from_str(json);
    Bytes::from(
        DynamicMessage::deserialize(desc, &mut de)
            .unwrap()
            .encode_to_vec(),
    )
}

async fn listen(routes: tonic::service::Routes) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(serve::serve(listener, routes, std::future::pending()));
    format!("http://{address}")
}

async fn connect(url: String) -> Channel {
    tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap()
}

/// The environment variable that makes this bench binary, run again, one of the parties.
const ROLE: &str = "AML_GRPC_GATE_BENCH_ROLE";
const ROLE_UPSTREAM: &str = "upstream";
const ROLE_FORWARDER: &str = "forwarder";

/// A party in a process of its own (this binary, run again), killed on drop.
struct Party(std::process::Child);

impl Drop for Party {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs this binary again as `role` (with `target`, the upstream a forwarder forwards to);
/// returns it and the URL from its first stdout line.
fn role_process(role: &str, target: &str) -> (Party, String) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .env(ROLE, role)
        .arg(target)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let url = first_line(&mut child);
    (Party(child), url)
}

fn first_line(child: &mut std::process::Child) -> String {
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_owned()
}

/// When run as a party: serves on a current-thread runtime until killed.
fn run_role(role: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = match role {
            ROLE_UPSTREAM => {
                let pool = pool();
                let reply = message(
                    &pool,
                    "payments.v1.LookupReply",
                    r#"{"order_id": "A-1", "cursor": "9223372036854775807", "state": "open"}"#,
                );
                upstream(reply).await
            }
            _ => forwarder(std::env::args().nth(1).unwrap()).await,
        };
        println!("{url}");
        std::future::pending::<()>().await;
    });
}

/// The yardstick: a byte forwarder, one upstream connection per client connection.
async fn forwarder(upstream: String) -> String {
    let target = upstream.trim_start_matches("http://").to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut inbound, _) = listener.accept().await.unwrap();
            let mut outbound = tokio::net::TcpStream::connect(&target).await.unwrap();
            inbound.set_nodelay(true).unwrap();
            outbound.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    format!("http://{address}")
}

async fn upstream(reply: Bytes) -> String {
    let router = tonic::service::Routes::default()
        .into_axum_router()
        .fallback_service(Upstream(reply));
    listen(tonic::service::Routes::from(router)).await
}

/// The gateway in process, on the current runtime.
async fn gateway_in_process(pool: DescriptorPool, upstream: String) -> String {
    let methods = Methods::from_json(TOOLS, &pool).unwrap();
    let policy = Policy::from_value(&serde_json::from_str(POLICY).unwrap());
    let boundary = ActionBoundary::builder(Arc::new(policy)).sink(NoSink).build();
    let gate = ToolGate::new(methods.catalog, boundary);
    let gateway = Gateway::new(
        gate,
        methods.routes,
        GatewayUpstream::lazy(&upstream).unwrap(),
        Allowed::default(),
        Limits::default(),
    );
    let health = tonic_health::server::HealthReporter::new();
    let routes = serve::routes(gateway, &health, &pool, &methods.services).unwrap();
    listen(routes).await
}

/// The gateway binary in front of `upstream`, with its files in `dir`; killed on drop.
struct GatewayProcess(std::process::Child);

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn gateway_process(dir: &Path, pool: &DescriptorPool, upstream: &str) -> (GatewayProcess, String) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("tools.json"), TOOLS).unwrap();
    std::fs::write(dir.join("policy.json"), POLICY).unwrap();
    let set = prost_types::FileDescriptorSet {
        file: pool.file_descriptor_protos().cloned().collect(),
    };
    std::fs::write(dir.join("api.pb"), set.encode_to_vec()).unwrap();
    // AML_GRPC_GATE_BIN: another build of the binary, to compare it in the same run's terms.
    let binary = std::env::var_os("AML_GRPC_GATE_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_aml-grpc-gate").into());
    let mut child = std::process::Command::new(binary)
        .args(["--listen", "127.0.0.1:0", "--upstream", upstream])
        .arg("--tools")
        .arg(dir.join("tools.json"))
        .arg("--policy")
        .arg(dir.join("policy.json"))
        .arg("--descriptors")
        .arg(dir.join("api.pb"))
        .arg("--receipts")
        .arg(dir.join("receipts.jsonl"))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the aml-grpc-gate binary starts");
    let stdout = child.stdout.take().unwrap();
    let running = GatewayProcess(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line).unwrap();
    let ready: serde_json::Value = serde_json::from_str(&line).expect("a listening line");
    let address = ready["listening"]
        .as_str()
        .expect("a listening address")
        .to_owned();
    (running, format!("http://{address}"))
}

/// p50 and p99 of `ROUNDS` calls of each of `variants`, interleaved.
fn interleaved(variants: &[(&str, &dyn Fn())]) -> Vec<(Duration, Duration)> {
    let mut samples = vec![Vec::with_capacity(ROUNDS); variants.len()];
    for round in 0..ROUNDS {
        for k in 0..variants.len() {
            let i = (round + k) % variants.len();
            let start = Instant::now();
            (variants[i].1)();
            samples[i].push(start.elapsed());
        }
    }
    samples
        .iter_mut()
        .map(|s| {
            s.sort();
            (s[ROUNDS / 2], s[ROUNDS * 99 / 100])
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pool = pool();
    let reply = message(
        &pool,
        "payments.v1.LookupReply",
        r#"{"order_id": "A-1", "cursor": "9223372036854775807", "state": "open"}"#,
    );
    let request = message(
        &pool,
        "payments.v1.LookupRequest",
        r#"{"order_id": "A-1", "cursor": "9223372036854775807", "tags": ["x", "y"]}"#,
    );
    let call = |channel: &Channel| {
        rt.block_on(async {
            let mut grpc = tonic::client::Grpc::new(channel.clone());
            grpc.ready().await.unwrap();
            let path = PathAndQuery::from_static(PATH);
            grpc.unary(Request::new(request.clone()), path, RawCodec)
                .await
                .unwrap();
        })
    };

    // As deployed: every party a process of its own.
    let (_upstream_process, far_upstream) = role_process(ROLE_UPSTREAM, "");
    let (_forwarder_process, far_forwarder) = role_process(ROLE_FORWARDER, &far_upstream);
    let dir = std::env::temp_dir().join(format!("aml-grpc-gate-bench-{}", std::process::id()));
    let (_process, far_gateway) = gateway_process(&dir, &pool, &far_upstream);
    // One thread: every party on the client's runtime.
    let (near_upstream, near_forwarder, near_gateway) = rt.block_on(async {
        let up = upstream(reply).await;
        let forwarded = forwarder(up.clone()).await;
        let gated = gateway_in_process(pool.clone(), up.clone()).await;
        (up, forwarded, gated)
    });
    let channels = rt.block_on(async {
        let mut out = Vec::new();
        for url in [
            far_upstream,
            far_forwarder,
            far_gateway,
            near_upstream,
            near_forwarder,
            near_gateway,
        ] {
            out.push(connect(url).await);
        }
        out
    });
    let [far_direct, far_forwarded, far_gated, near_direct, near_forwarded, near_gated] = &channels[..]
    else {
        unreachable!()
    };

    // The gateway's own work without any network: decode to proto3 JSON, the gate (strict
    // parse, freeze, hash, plan, record), and the frozen message re-encoded by the executor.
    let local = {
        let methods = Methods::from_json(TOOLS, &pool).unwrap();
        let Some(aml_grpc_gate::Route::Gated(method)) = methods.routes.get(PATH).cloned() else {
            unreachable!()
        };
        let policy = Policy::from_value(&serde_json::from_str(POLICY).unwrap());
        let input = method.input.clone();
        let executor = aml_core::tool_fn(move |call| {
            let input = input.clone();
            async move {
                let bytes = aml_grpc_gate::transcode::encode(&input, call.into_arguments()).unwrap();
                Ok(serde_json::json!({"bytes": bytes.len()}))
            }
        });
        let boundary = ActionBoundary::builder(Arc::new(policy))
            .sink(NoSink)
            .executor(executor)
            .build();
        (ToolGate::new(methods.catalog, boundary), method)
    };
    let decide_locally = || {
        let (gate, method) = &local;
        let json = aml_grpc_gate::transcode::to_json(&method.input, &request).unwrap();
        let outcome = rt.block_on(gate.call(aml_core::CallRequest::bytes(&method.tool, &json)));
        assert!(matches!(outcome, aml_core::CallOutcome::Dispatched(_)));
    };

    let mut group = c.benchmark_group("grpc_gateway");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("decode_decide_encode_in_process", |b| b.iter(decide_locally));
    group.bench_function("direct", |b| b.iter(|| call(far_direct)));
    group.bench_function("through_gateway", |b| b.iter(|| call(far_gated)));
    group.finish();

    let placements: [(&str, [&Channel; 3]); 2] = [
        ("as deployed", [far_direct, far_forwarded, far_gated]),
        ("one thread", [near_direct, near_forwarded, near_gated]),
    ];
    let names = [
        "direct to the upstream",
        "through a byte forwarder",
        "through the gateway",
    ];
    let goal = Duration::from_micros(30);
    let mut rows = Vec::new();
    let mut goals = Vec::new();
    for (placement, [direct, forwarded, gated]) in placements {
        let variants: [(&str, &dyn Fn()); 3] = [
            (names[0], &|| call(direct)),
            (names[1], &|| call(forwarded)),
            (names[2], &|| call(gated)),
        ];
        let percentiles = interleaved(&variants);
        println!("grpc_gateway, {placement}, over {ROUNDS} interleaved calls each:");
        for (name, (p50, p99)) in names.iter().zip(&percentiles) {
            let added = p50.saturating_sub(percentiles[0].0);
            println!("  {name:24} p50 {p50:>10.1?} p99 {p99:>10.1?} added p50 {added:>8.1?}");
            rows.push(serde_json::json!({"name": format!("{name} ({placement})"),
                "p50_us": summary::micros(*p50), "p99_us": summary::micros(*p99),
                "added_p50_us": summary::micros(added)}));
        }
        let added = percentiles[2].0.saturating_sub(percentiles[0].0);
        let hop = percentiles[1].0.saturating_sub(percentiles[0].0);
        let verdict = if added <= goal { "met" } else { "NOT met" };
        println!(
            "  {placement}: the gateway adds {added:.1?} (goal <= {goal:?}: {verdict}); a bare forwarder adds {hop:.1?}, the gateway {:.1?} beyond it",
            added.saturating_sub(hop)
        );
        goals.push(serde_json::json!({"goal": format!("gateway added p50 <= 30 µs ({placement}; the forwarder adds {:.1} µs)", summary::micros(hop)),
            "measured": format!("{:.1} µs", summary::micros(added)), "met": added <= goal}));
    }
    let mut own: Vec<Duration> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            decide_locally();
            start.elapsed()
        })
        .collect();
    own.sort();
    println!(
        "  the gateway's own work in process (decode, gate, re-encode): p50 {:.1?}",
        own[ROUNDS / 2]
    );
    rows.push(serde_json::json!({"name": "the gateway's own work in process", "p50_us": summary::micros(own[ROUNDS / 2])}));
    summary::write_summary("grpc_gateway", rows, goals);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        return run_role(&role);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

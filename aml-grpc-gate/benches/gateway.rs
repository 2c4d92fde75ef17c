//! One unary call on loopback, from a tonic client over raw bytes: straight to a Rust
//! upstream (a tonic server that answers a fixed message), and through the gateway in front
//! of the same upstream (descriptors, proto3 JSON, the gate with an allow rule and no sink,
//! the frozen message re-encoded and forwarded). Criterion times each; then p50 and p99 of
//! calls interleaved so that both see the same noise, and the gateway's added p50 against
//! the goal of 30 µs (`cargo bench -p aml-grpc-gate --bench gateway`). Also the gateway's own
//! work in process, with no network (decode, gate, re-encode), which separates its CPU from
//! the cost of the extra HTTP/2 hop.
#![allow(missing_docs)]

#[path = "../../aml-testkit/benches/support/summary.rs"]
mod summary;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use aml_core::{ActionBoundary, NoSink, Policy, ToolGate};
use aml_grpc_gate::codec::RawCodec;
use aml_grpc_gate::gateway::{Gateway, Limits};
use aml_grpc_gate::metadata::Allowed;
use aml_grpc_gate::{serve, Methods};
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
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

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
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
    let (direct, gated) = rt.block_on(async {
        let router = tonic::service::Routes::default()
            .into_axum_router()
            .fallback_service(Upstream(reply));
        let upstream = listen(tonic::service::Routes::from(router)).await;
        let methods = Methods::from_json(TOOLS, &pool).unwrap();
        let policy = Policy::from_value(&serde_json::from_str(POLICY).unwrap());
        let boundary = ActionBoundary::builder(Arc::new(policy)).sink(NoSink).build();
        let gate = ToolGate::new(methods.catalog, boundary);
        let to_upstream = connect(upstream.clone()).await;
        let gateway = Gateway::new(
            gate,
            methods.routes,
            to_upstream,
            Allowed::default(),
            Limits::default(),
        );
        let routes = serve::routes(gateway, &pool, &methods.services).await.unwrap();
        let front = listen(routes).await;
        (connect(upstream).await, connect(front).await)
    });
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
    let call_direct = || call(&direct);
    let call_gated = || call(&gated);

    // The gateway's own work without any network: decode to proto3 JSON, the gate (strict
    // parse, freeze, hash, plan, record), and the frozen message re-encoded by the executor.
    let local = rt.block_on(async {
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
    });
    let local_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let decide_locally = || {
        let (gate, method) = &local;
        let json = aml_grpc_gate::transcode::to_json(&method.input, &request).unwrap();
        let outcome = local_rt.block_on(gate.call(aml_core::CallRequest::bytes(&method.tool, &json)));
        assert!(matches!(outcome, aml_core::CallOutcome::Dispatched(_)));
    };

    let mut group = c.benchmark_group("grpc_gateway");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("decode_decide_encode_in_process", |b| b.iter(decide_locally));
    group.bench_function("direct", |b| b.iter(call_direct));
    group.bench_function("through_gateway", |b| b.iter(call_gated));
    group.finish();

    let variants: [(&str, &dyn Fn()); 2] = [
        ("direct to the upstream", &call_direct),
        ("through the gateway", &call_gated),
    ];
    let rounds = 5000;
    let mut samples = vec![Vec::with_capacity(rounds); variants.len()];
    for round in 0..rounds {
        for k in 0..variants.len() {
            let i = (round + k) % variants.len();
            let start = Instant::now();
            (variants[i].1)();
            samples[i].push(start.elapsed());
        }
    }
    let percentiles: Vec<(Duration, Duration)> = samples
        .iter_mut()
        .map(|s| {
            s.sort();
            (s[rounds / 2], s[rounds * 99 / 100])
        })
        .collect();
    println!("grpc_gateway over {rounds} interleaved calls each:");
    for ((name, _), (p50, p99)) in variants.iter().zip(&percentiles) {
        println!("  {name:24} p50 {p50:>10.1?} p99 {p99:>10.1?}");
    }
    let mut own: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            decide_locally();
            start.elapsed()
        })
        .collect();
    own.sort();
    println!(
        "  the gateway's own work in process (decode, gate, re-encode): p50 {:.1?}",
        own[rounds / 2]
    );
    let added = percentiles[1].0.saturating_sub(percentiles[0].0);
    let goal = Duration::from_micros(30);
    let verdict = if added <= goal { "met" } else { "NOT met" };
    println!("  added p50 {added:.1?}; goal <= {goal:?}: {verdict}");
    let mut rows: Vec<serde_json::Value> = variants
        .iter()
        .zip(&percentiles)
        .map(|((name, _), (p50, p99))| {
            serde_json::json!({"name": name, "p50_us": summary::micros(*p50), "p99_us": summary::micros(*p99),
                "added_p50_us": summary::micros(p50.saturating_sub(percentiles[0].0))})
        })
        .collect();
    rows.push(serde_json::json!({"name": "the gateway's own work in process", "p50_us": summary::micros(own[rounds / 2])}));
    let goals = vec![serde_json::json!({"goal": "gateway added p50 <= 30 µs",
        "measured": format!("{:.1} µs", summary::micros(added)), "met": added <= goal})];
    summary::write_summary("grpc_gateway", rows, goals);
}

criterion_group!(benches, bench);
criterion_main!(benches);

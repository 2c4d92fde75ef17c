//! One unary `CallTool` on loopback: the same tool behind a service with no gate (it parses
//! the arguments and calls the tool directly) and behind the gated service, both on the same
//! bare tonic server with the generated client (the difference is the gate alone); then the
//! gated service as hosts run it (`serve`: health and reflection beside it, and `ToolClient`,
//! which also checks the plan and receipt), with and without a JSON-lines receipt file. Then
//! p50 and p99 of each, with the calls interleaved so that every variant sees the same noise.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use aml_core::{
    tool_fn, ActionBoundary, ArgumentSnapshot, Effect, JsonLinesSink, NoSink, Policy, ReceiptSink,
    ToolCatalog, ToolGate, ToolRegistration,
};
use aml_grpc::pb::tool_service_server::{ToolService, ToolServiceServer};
use aml_grpc::{pb, serve, GatedToolService, ToolClient};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use tonic::{Request, Response, Status};

/// The same tool with no boundary in front of it.
struct Ungated;

#[tonic::async_trait]
impl ToolService for Ungated {
    async fn list_tools(
        &self,
        _: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        Ok(Response::new(pb::ListToolsResponse { tools: vec![] }))
    }
    async fn call_tool(
        &self,
        request: Request<pb::CallToolRequest>,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        let args: Value = serde_json::from_slice(&request.into_inner().arguments_json)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let result = json!({"record": args["id"], "status": "open"});
        Ok(Response::new(pb::CallToolResponse {
            result_json: result.to_string(),
            plan: None,
            receipt: None,
        }))
    }
}

fn gated(sink: Arc<dyn ReceiptSink>) -> GatedToolService {
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "fetch_record", "effect": "read", "resource": "record:42", "requires_approval": false}]}));
    let fetch = ToolRegistration::new(
        "fetch_record",
        Effect::Read,
        "Inspect record",
        |s: &ArgumentSnapshot| Ok(format!("record:{}", s.get("id").cloned().unwrap_or_default())),
        json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}),
    )
    .unwrap();
    let boundary = ActionBoundary::builder(Arc::new(policy))
        .executor(tool_fn(|call| async move {
            Ok(json!({"record": call.arguments()["id"], "status": "open"}))
        }))
        .sink_arc(sink)
        .build();
    GatedToolService::new(ToolGate::new(ToolCatalog::new().with(fetch).unwrap(), boundary))
}

type BareClient = pb::tool_service_client::ToolServiceClient<tonic::transport::Channel>;

/// `service` on a bare tonic server (TCP_NODELAY), and the generated client for it.
fn bare<S: ToolService>(rt: &tokio::runtime::Runtime, service: S) -> BareClient {
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(ToolServiceServer::new(service))
                .serve_with_incoming(
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                ),
        );
        BareClient::connect(format!("http://{address}")).await.unwrap()
    })
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let serve_gated = |service: GatedToolService| {
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            tokio::spawn(serve(listener, service, std::future::pending()));
            ToolClient::connect(format!("http://{address}")).await.unwrap()
        })
    };
    let receipts = std::env::temp_dir().join(format!("aml-grpc-bench-{}.jsonl", std::process::id()));
    let gate_only = serve_gated(gated(Arc::new(NoSink)));
    let with_file = serve_gated(gated(Arc::new(JsonLinesSink::append(&receipts).unwrap())));
    // The same bare tonic server and generated client for a service with and without the
    // gate, so that their difference is the gate alone.
    let plain = bare(&rt, Ungated);
    let gated_bare = bare(&rt, gated(Arc::new(NoSink)));
    let call_bare = |client: &BareClient| {
        let response = rt
            .block_on(
                client
                    .clone()
                    .call_tool(pb::CallToolRequest::new("fetch_record", r#"{"id":42}"#)),
            )
            .unwrap();
        let result: Value = serde_json::from_str(&response.into_inner().result_json).unwrap();
        drop(result);
    };
    let call_plain = || call_bare(&plain);
    let call_gated_bare = || call_bare(&gated_bare);
    let call = |client: &ToolClient| {
        rt.block_on(client.call_tool("fetch_record", r#"{"id":42}"#, None))
            .map(drop)
            .unwrap()
    };
    let call_gate_only = || call(&gate_only);
    let call_with_file = || call(&with_file);

    let mut group = c.benchmark_group("grpc_unary");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("no_gate", |b| b.iter(call_plain));
    group.bench_function("gated_same_server", |b| b.iter(call_gated_bare));
    group.bench_function("gated", |b| b.iter(call_gate_only));
    group.bench_function("gated_jsonl_sink", |b| b.iter(call_with_file));
    group.finish();

    let variants: [(&str, &dyn Fn()); 4] = [
        ("no gate", &call_plain),
        ("gated, same server", &call_gated_bare),
        ("gated, serve + ToolClient", &call_gate_only),
        ("and a JSON-lines sink", &call_with_file),
    ];
    let mut samples = vec![Vec::with_capacity(5000); variants.len()];
    for _ in 0..5000 {
        for (i, (_, call)) in variants.iter().enumerate() {
            let start = Instant::now();
            call();
            samples[i].push(start.elapsed());
        }
    }
    let percentiles: Vec<(Duration, Duration)> = samples
        .iter_mut()
        .map(|s| {
            s.sort();
            (s[2500], s[4950])
        })
        .collect();
    println!("grpc_unary over 5000 interleaved calls each:");
    for ((name, _), (p50, p99)) in variants.iter().zip(&percentiles) {
        let added = p50.saturating_sub(percentiles[0].0);
        println!("  {name:24} p50 {p50:>10.1?} p99 {p99:>10.1?}  p50 minus no gate {added:.1?}");
    }
    let _ = std::fs::remove_file(&receipts);
}

criterion_group!(benches, bench);
criterion_main!(benches);

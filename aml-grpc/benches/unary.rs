//! One unary `CallTool` on loopback through the gated service versus the same call through
//! a service with no gate (it parses the arguments and calls the tool directly), with p50
//! and p99 of each.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use aml_core::{
    tool_fn, ActionBoundary, ArgumentSnapshot, Effect, JsonLinesSink, Policy, ToolCatalog, ToolGate,
    ToolRegistration,
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

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
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
    // The gated side records every call, as a host does: to a JSON-lines file.
    let receipts = std::env::temp_dir().join(format!("aml-grpc-bench-{}.jsonl", std::process::id()));
    let sink = JsonLinesSink::append(&receipts).unwrap();
    let boundary = ActionBoundary::builder(Arc::new(policy))
        .executor(tool_fn(|call| async move {
            Ok(json!({"record": call.arguments()["id"], "status": "open"}))
        }))
        .sink(sink)
        .build();
    let gated = GatedToolService::new(ToolGate::new(ToolCatalog::new().with(fetch).unwrap(), boundary));

    let gated_address = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, gated, std::future::pending()));
        address
    });
    let plain_address = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(ToolServiceServer::new(Ungated))
                .serve_with_incoming(
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                ),
        );
        address
    });
    let gated = rt
        .block_on(ToolClient::connect(format!("http://{gated_address}")))
        .unwrap();
    let plain = rt
        .block_on(pb::tool_service_client::ToolServiceClient::connect(format!(
            "http://{plain_address}"
        )))
        .unwrap();
    let request = || pb::CallToolRequest::new("fetch_record", r#"{"id":42}"#);
    let call_gated = || {
        rt.block_on(gated.call_tool("fetch_record", r#"{"id":42}"#, None))
            .map(drop)
            .unwrap()
    };
    let call_plain = || rt.block_on(plain.clone().call_tool(request())).map(drop).unwrap();

    let mut group = c.benchmark_group("grpc_unary");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("no_gate", |b| b.iter(call_plain));
    group.bench_function("gated", |b| b.iter(call_gated));
    group.finish();

    let percentiles = |call: &dyn Fn()| {
        let mut samples: Vec<Duration> = (0..5000)
            .map(|_| {
                let start = Instant::now();
                call();
                start.elapsed()
            })
            .collect();
        samples.sort();
        (samples[2500], samples[4950])
    };
    let (p50, p99) = percentiles(&call_plain);
    let (g50, g99) = percentiles(&call_gated);
    println!("grpc_unary over 5000 calls each: no gate p50 {p50:?} p99 {p99:?}; gated p50 {g50:?} p99 {g99:?}; added p50 {:?} p99 {:?}",
        g50.saturating_sub(p50), g99.saturating_sub(p99));
    let _ = std::fs::remove_file(&receipts);
}

criterion_group!(benches, bench);
criterion_main!(benches);

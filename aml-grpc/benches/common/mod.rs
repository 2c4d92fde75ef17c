//! The services both benchmarks call: the same tool with and without the gate, each on the
//! same bare tonic server with the generated client, so that their difference is the gate.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use aml_core::{
    tool_fn, ActionBoundary, ArgumentSnapshot, Effect, Policy, ReceiptSink, ToolCatalog, ToolGate,
    ToolRegistration,
};
use aml_grpc::pb::tool_service_server::{ToolService, ToolServiceServer};
use aml_grpc::{pb, GatedToolService};
use serde_json::{json, Value};
use tonic::{Request, Response, Status};

/// The arguments every benchmarked call sends.
pub const ARGUMENTS: &str = r#"{"id":42}"#;

/// The same tool with no boundary in front of it. With `sized`, it answers with a plan and
/// receipt of the gated answer's size (fixed text): the same bytes on the wire, no gate.
pub struct Ungated {
    pub sized: bool,
}

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
        let digest = || "0".repeat(64);
        Ok(Response::new(pb::CallToolResponse {
            result_json: result.to_string(),
            plan: self.sized.then(|| pb::Plan {
                protocol: aml_core::PLAN_PROTOCOL.to_owned(),
                proposal_sha256: digest(),
                decision: "allow".to_owned(),
                reason: "exact_rule".to_owned(),
            }),
            receipt: self.sized.then(|| pb::Receipt {
                protocol: aml_core::RECEIPT_PROTOCOL.to_owned(),
                proposal_sha256: digest(),
                policy_decision: "allow".to_owned(),
                execution_status: "dispatched".to_owned(),
                reason: "host_dispatch_returned".to_owned(),
            }),
        }))
    }
}

/// `fetch_record` behind the gate: an allow rule, a schema, a resource mapper, `sink`.
pub fn gated(sink: Arc<dyn ReceiptSink>) -> GatedToolService {
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

/// The generated client over a tonic channel.
pub type BareClient = pb::tool_service_client::ToolServiceClient<tonic::transport::Channel>;

/// `service` on a bare tonic server (TCP_NODELAY), and the generated client for it.
pub fn bare<S: ToolService>(rt: &tokio::runtime::Runtime, service: S) -> BareClient {
    bare_route(rt, ToolServiceServer::new(service))
}

/// `route` (a tonic service) on a bare tonic server (TCP_NODELAY), and the generated client.
pub fn bare_route<R>(rt: &tokio::runtime::Runtime, route: R) -> BareClient
where
    R: tower_service::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    R::Future: Send + 'static,
{
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(route)
                .serve_with_incoming(
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                ),
        );
        BareClient::connect(format!("http://{address}")).await.unwrap()
    })
}

/// One call through `client`, its result parsed as the caller would.
pub fn call_bare(rt: &tokio::runtime::Runtime, client: &BareClient) {
    let response = rt
        .block_on(
            client
                .clone()
                .call_tool(pb::CallToolRequest::new("fetch_record", ARGUMENTS)),
        )
        .unwrap();
    let result: Value = serde_json::from_str(&response.into_inner().result_json).unwrap();
    assert_eq!(result["record"], 42);
}

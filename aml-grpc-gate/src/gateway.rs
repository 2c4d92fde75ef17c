//! The gateway as a tower service: every method path the host listed, gated or relayed,
//! and a refusal with `ErrorInfo` for every other.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use aml_core::{
    CallClock, CallOutcome, CallRecord, CallRequest, Receipt, Record, Refusal, TokioRuntime, ToolGate,
};
use aml_grpc::{answer_by, parse_grpc_timeout, refusal_status, service_status, status_for, ServiceReason};
use bytes::Bytes;
use tokio::time::Instant;
use tonic::body::Body;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::server::{Grpc, StreamingService, UnaryService};
use tonic::{Request, Response, Status, Streaming};

use crate::codec::RawCodec;
use crate::forward::{Answer, Forward};
use crate::metadata::Allowed;
use crate::methods::{GatedMethod, Route};
use crate::upstream::Upstream;

/// The adapter name in call records.
pub const ADAPTER: &str = "grpc-gate";

/// The gateway's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request message, in bytes (larger: `RESOURCE_EXHAUSTED`, never read).
    pub max_request_bytes: usize,
    /// Largest response message accepted from the upstream.
    pub max_response_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 4 << 20,
            max_response_bytes: 4 << 20,
        }
    }
}

struct Inner {
    gate: ToolGate,
    routes: HashMap<String, Route>,
    upstream: Arc<Upstream>,
    allowed: Arc<Allowed>,
    limits: Limits,
}

/// The gateway: a tower service over HTTP/2 gRPC requests for any path.
#[derive(Clone)]
pub struct Gateway(Arc<Inner>);

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("routes", &self.0.routes.len())
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// A gateway that gates `routes` with `gate` and forwards to `upstream`, passing the
    /// metadata `allowed` lets through.
    pub fn new(
        gate: ToolGate,
        routes: HashMap<String, Route>,
        upstream: Upstream,
        allowed: Allowed,
        limits: Limits,
    ) -> Self {
        Gateway(Arc::new(Inner {
            gate: gate.for_adapter(ADAPTER).with_runtime(TokioRuntime),
            routes,
            upstream: Arc::new(upstream),
            allowed: Arc::new(allowed),
            limits,
        }))
    }

    /// The gate (its catalog, policy, hooks and sink).
    pub fn gate(&self) -> &ToolGate {
        &self.0.gate
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<B> tower_service::Service<http::Request<B>> for Gateway
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let inner = Arc::clone(&self.0);
        let path = request.uri().path().to_owned();
        let limits = inner.limits;
        let grpc = Grpc::new(RawCodec)
            .apply_max_message_size_config(Some(limits.max_request_bytes), Some(limits.max_response_bytes));
        match inner.routes.get(&path).cloned() {
            Some(Route::Gated(method)) => Box::pin(async move {
                let request = request.map(|body| {
                    Body::new(crate::size::SizeChecked::new(
                        body,
                        &inner.gate,
                        &method.tool,
                        limits.max_request_bytes,
                    ))
                });
                let mut grpc = grpc;
                Ok(grpc.unary(Gated { inner, method }, request).await)
            }),
            Some(Route::Relayed(path)) => Box::pin(async move {
                let mut grpc = grpc;
                Ok(grpc.streaming(Relay { inner, path }, request).await)
            }),
            None => {
                // The path is the caller's: the record keeps a bounded prefix of it.
                let path = shown(&path);
                let detail = format!(
                    "{path} is not a method this gateway serves (the host's tools file lists none such)"
                );
                inner
                    .gate
                    .refuse_request(path, Refusal::InvalidOrUnregisteredCall, detail.clone());
                let status = refusal_status(Refusal::InvalidOrUnregisteredCall, &detail);
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}

/// At most the first 256 bytes of `text`, cut on a character boundary.
fn shown(text: &str) -> &str {
    let mut end = text.len().min(256);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// One gated unary call.
struct Gated {
    inner: Arc<Inner>,
    method: Arc<GatedMethod>,
}

impl UnaryService<Bytes> for Gated {
    type Response = Bytes;
    type Future = BoxFuture<Result<Response<Bytes>, Status>>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let inner = Arc::clone(&self.inner);
        let method = Arc::clone(&self.method);
        Box::pin(async move { gated(inner, method, request).await })
    }
}

async fn gated(
    inner: Arc<Inner>,
    method: Arc<GatedMethod>,
    request: Request<Bytes>,
) -> Result<Response<Bytes>, Status> {
    let arrived = Instant::now();
    let gate = &inner.gate;
    let tool = method.tool.as_str();
    let (metadata, _, message) = request.into_parts();
    let budget = match metadata
        .get("grpc-timeout")
        .map(|v| parse_grpc_timeout(v.as_bytes()))
    {
        Some(Ok(budget)) => Some(budget),
        None => None,
        Some(Err(invalid)) => {
            let detail = invalid.to_string();
            let reason = ServiceReason::InvalidTimeout;
            gate.refuse_request(tool, Refusal::MalformedRequest, format!("{reason}: {detail}"));
            return Err(service_status(
                reason,
                "the grpc-timeout header is malformed; nothing was planned",
                &detail,
                None,
            ));
        }
    };
    let json = match crate::transcode::to_json(&method.input, &message) {
        Ok(json) => json,
        Err(refused) => {
            let refusal = match refused {
                crate::transcode::DecodeError::UnknownField { .. } => Refusal::InvalidArguments,
                _ => Refusal::MalformedRequest,
            };
            let detail = refused.to_string();
            gate.refuse_request(tool, refusal, detail.clone());
            return Err(refusal_status(refusal, &detail));
        }
    };
    let forward = Arc::new(Forward {
        upstream: Arc::clone(&inner.upstream),
        method: Arc::clone(&method),
        metadata: inner.allowed.filter(&metadata),
        deadline: budget.and_then(|b| arrived.checked_add(b)),
        allowed: Arc::clone(&inner.allowed),
        max_response_bytes: inner.limits.max_response_bytes,
        answer: Mutex::new(None),
    });
    let mut call =
        CallRequest::bytes(tool, &json).executor(Arc::clone(&forward) as Arc<dyn aml_core::ToolExecutor>);
    if let Some(due) = budget.and_then(|b| answer_by(arrived, b)) {
        call = call.deadline(due.into_std());
    }
    // If the caller goes away, tonic drops this future: before the claim nothing reaches the
    // upstream; from the claim on, the core finishes the call on its own (ADR 019).
    match gate.call(call).await {
        CallOutcome::Dispatched(done) => match forward.take() {
            Some(Answer::Message(mut response)) => {
                mark(response.metadata_mut(), done.receipt());
                Ok(response)
            }
            Some(Answer::Status(mut status)) => {
                mark(status.metadata_mut(), done.receipt());
                Err(status)
            }
            None => Err(service_status(
                ServiceReason::HostError,
                "the upstream's answer was lost",
                "no answer kept",
                None,
            )),
        },
        other => Err(status_for(&other)),
    }
}

/// Adds the receipt to an answer's metadata: `aml-proposal-sha256` and `aml-receipt-bin`
/// (its JSON).
fn mark(metadata: &mut MetadataMap, receipt: &Receipt) {
    let value = receipt.to_value();
    if let Some(Ok(digest)) = value["proposal_sha256"].as_str().map(MetadataValue::try_from) {
        metadata.insert("aml-proposal-sha256", digest);
    }
    metadata.insert_bin(
        "aml-receipt-bin",
        MetadataValue::from_bytes(value.to_string().as_bytes()),
    );
}

/// One streaming call the host relays ungated.
struct Relay {
    inner: Arc<Inner>,
    path: Arc<str>,
}

impl StreamingService<Bytes> for Relay {
    type Response = Bytes;
    type ResponseStream = Streaming<Bytes>;
    type Future = BoxFuture<Result<Response<Streaming<Bytes>>, Status>>;

    fn call(&mut self, request: Request<Streaming<Bytes>>) -> Self::Future {
        let inner = Arc::clone(&self.inner);
        let path = Arc::clone(&self.path);
        Box::pin(async move { relay(inner, path, request).await })
    }
}

async fn relay(
    inner: Arc<Inner>,
    path: Arc<str>,
    request: Request<Streaming<Bytes>>,
) -> Result<Response<Streaming<Bytes>>, Status> {
    let clock = CallClock::start();
    let mut record = CallRecord::new(ADAPTER, &*path, &clock);
    record.detail = Some("relayed ungated: a streaming method the host lists in relay_ungated; no policy, approval or grant applied".into());
    inner.gate.boundary().sink().record(&Record::Call(record));
    let (metadata, extensions, messages) = request.into_parts();
    let budget = metadata
        .get("grpc-timeout")
        .and_then(|v| parse_grpc_timeout(v.as_bytes()).ok());
    let messages = tokio_stream::StreamExt::map_while(messages, Result::ok);
    let mut out = Request::from_parts(inner.allowed.filter(&metadata), extensions, messages);
    if let Some(budget) = budget {
        out.set_timeout(budget);
    }
    let path = PathAndQuery::try_from(&*path).map_err(|e| Status::internal(e.to_string()))?;
    let mut grpc = tonic::client::Grpc::new(inner.upstream.channel());
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(format!("the upstream is not reachable: {e}")))?;
    let response = grpc.streaming(out, path, RawCodec).await?;
    let (metadata, stream, extensions) = response.into_parts();
    Ok(Response::from_parts(
        inner.allowed.filter(&metadata),
        stream,
        extensions,
    ))
}

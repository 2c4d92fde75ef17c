//! `aml.v1.ToolService` as a tower service: the generated tonic server behind a check of
//! the request's declared size.
//!
//! tonic refuses a message above its limit with `OUT_OF_RANGE`, without details, before
//! the service sees the call. The check here reads the 5-byte gRPC message prefix as it
//! streams past and ends the request with `RESOURCE_EXHAUSTED` (the gRPC convention for a
//! message above a limit), an `ErrorInfo`, and a call record, before the message is read.
//! Answers leave in frames that let h2 write a short one at once (`frames.rs`).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use aml_core::{CallClock, CallRecord, ReceiptSink, Record};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::Status;
use tower_service::Service;

use crate::frames::SmallFrames;
use crate::pb::tool_service_server::ToolServiceServer;
use crate::service::{GatedToolService, ADAPTER};
use crate::status::{service_status, ServiceReason};

const CALL_TOOL_PATH: &str = "/aml.v1.ToolService/CallTool";

/// `aml.v1.ToolService` ready to add to a tonic server (`Server::builder().add_service`,
/// `Routes::add_service`) under any tower layers the host wants.
#[derive(Debug, Clone)]
pub struct ToolServiceRoute {
    inner: ToolServiceServer<GatedToolService>,
    limit: usize,
    sink: Arc<dyn ReceiptSink>,
}

impl ToolServiceRoute {
    pub(crate) fn new(service: GatedToolService) -> Self {
        let limit = service.limits().max_request_bytes;
        let sink = Arc::clone(service.gate().boundary().sink());
        ToolServiceRoute {
            // The transport's own limit stays as a backstop (e.g. for compressed messages).
            inner: ToolServiceServer::new(service).max_decoding_message_size(limit),
            limit,
            sink,
        }
    }
}

impl NamedService for ToolServiceRoute {
    const NAME: &'static str = "aml.v1.ToolService";
}

impl Service<http::Request<Body>> for ToolServiceRoute {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = RouteFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<http::Request<Body>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let records = request.uri().path() == CALL_TOOL_PATH;
        let limit = self.limit;
        let sink = records.then(|| Arc::clone(&self.sink));
        let request = request.map(|body| {
            Body::new(SizeChecked {
                inner: body,
                prefix: [0; 5],
                seen: 0,
                limit,
                sink,
                clock: CallClock::start(),
            })
        });
        RouteFuture {
            inner: self.inner.call(request),
        }
    }
}

/// The answer of a [`ToolServiceRoute`]: tonic's, its data in frames that let h2 write a
/// short answer at once.
pub struct RouteFuture {
    inner: <ToolServiceServer<GatedToolService> as Service<http::Request<Body>>>::Future,
}

impl std::fmt::Debug for RouteFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteFuture").finish_non_exhaustive()
    }
}

impl Future for RouteFuture {
    type Output = Result<http::Response<Body>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let response = std::task::ready!(self.inner.as_mut().poll(cx))?;
        Poll::Ready(Ok(response.map(|body| Body::new(SmallFrames::new(body)))))
    }
}

/// Passes the request body through, refusing it once the first message's prefix declares
/// more than `limit` bytes.
struct SizeChecked {
    inner: Body,
    prefix: [u8; 5],
    seen: usize,
    limit: usize,
    sink: Option<Arc<dyn ReceiptSink>>,
    clock: CallClock,
}

impl SizeChecked {
    fn observe(&mut self, data: &Bytes) -> Result<(), Status> {
        if self.seen >= self.prefix.len() {
            return Ok(());
        }
        let take = (self.prefix.len() - self.seen).min(data.len());
        self.prefix[self.seen..self.seen + take].copy_from_slice(&data[..take]);
        self.seen += take;
        if self.seen < self.prefix.len() {
            return Ok(());
        }
        let declared = u32::from_be_bytes([self.prefix[1], self.prefix[2], self.prefix[3], self.prefix[4]]);
        let declared = usize::try_from(declared).unwrap_or(usize::MAX);
        if declared <= self.limit {
            return Ok(());
        }
        let detail = format!(
            "the request message is {declared} bytes; this server accepts at most {}",
            self.limit
        );
        tracing::info!(target: "aml.grpc", declared, limit = self.limit, "request refused: too large");
        if let Some(sink) = self.sink.take() {
            let mut record = CallRecord::new(ADAPTER, "", &self.clock);
            record.refusal = ServiceReason::RequestTooLarge.refusal();
            record.detail = Some(format!("{}: {detail}", ServiceReason::RequestTooLarge));
            sink.record(&Record::Call(record));
        }
        Err(service_status(
            ServiceReason::RequestTooLarge,
            "the request is larger than this server accepts; nothing was planned",
            &detail,
            None,
        ))
    }
}

impl HttpBody for SizeChecked {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(frame)) = &frame {
            if let Some(data) = frame.data_ref() {
                if let Err(refused) = self.observe(data) {
                    return Poll::Ready(Some(Err(refused)));
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

//! A request body that is refused as soon as its first message's 5-byte gRPC prefix
//! declares more than the limit: `RESOURCE_EXHAUSTED` with `ErrorInfo`
//! (`request_too_large`) and a call record, before the message is read (tonic's own limit
//! would answer `OUT_OF_RANGE` without details). A unary request carries one message: bytes
//! after it are refused too (`malformed_request`), where tonic would ignore them.

use std::pin::Pin;
use std::task::{Context, Poll};

use aml_core::{Refusal, ToolGate};
use aml_grpc::{service_status, ServiceReason};
use bytes::{Buf, Bytes};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::Status;

/// See the module documentation.
pub(crate) struct SizeChecked<B> {
    inner: Pin<Box<B>>,
    prefix: [u8; 5],
    seen: usize,
    /// Where the first message ends, once its prefix is read.
    end: Option<usize>,
    limit: usize,
    gate: Option<(ToolGate, String)>,
}

impl<B> SizeChecked<B> {
    pub(crate) fn new(inner: B, gate: &ToolGate, tool: &str, limit: usize) -> Self {
        SizeChecked {
            inner: Box::pin(inner),
            prefix: [0; 5],
            seen: 0,
            end: None,
            limit,
            gate: Some((gate.clone(), tool.to_owned())),
        }
    }

    fn observe(&mut self, data: &Bytes) -> Result<(), Status> {
        if self.seen < self.prefix.len() {
            let take = (self.prefix.len() - self.seen).min(data.remaining());
            self.prefix[self.seen..self.seen + take].copy_from_slice(&data[..take]);
        }
        self.seen = self.seen.saturating_add(data.remaining());
        if let Some(end) = self.end {
            if self.seen > end {
                return Err(self.more_than_one());
            }
            return Ok(());
        }
        if self.seen < self.prefix.len() {
            return Ok(());
        }
        let declared = u32::from_be_bytes([self.prefix[1], self.prefix[2], self.prefix[3], self.prefix[4]]);
        let declared = usize::try_from(declared).unwrap_or(usize::MAX);
        if declared <= self.limit {
            let end = declared.saturating_add(self.prefix.len());
            self.end = Some(end);
            if self.seen > end {
                return Err(self.more_than_one());
            }
            return Ok(());
        }
        let detail = format!(
            "the request message is {declared} bytes; this gateway accepts at most {}",
            self.limit
        );
        if let Some((gate, tool)) = self.gate.take() {
            let reason = ServiceReason::RequestTooLarge;
            gate.refuse_request(&tool, Refusal::RequestTooLarge, format!("{reason}: {detail}"));
        }
        Err(service_status(
            ServiceReason::RequestTooLarge,
            "the request is larger than this gateway accepts; nothing was planned",
            &detail,
            None,
        ))
    }
}

impl<B> SizeChecked<B> {
    fn more_than_one(&mut self) -> Status {
        let detail = "a unary request carries exactly one message; this one carries more";
        if let Some((gate, tool)) = self.gate.take() {
            gate.refuse_request(&tool, Refusal::MalformedRequest, detail.to_owned());
        }
        aml_grpc::refusal_status(Refusal::MalformedRequest, detail)
    }
}

impl<B> HttpBody for SizeChecked<B>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let frame = std::task::ready!(self.inner.as_mut().poll_frame(cx));
        let frame = match frame {
            None => return Poll::Ready(None),
            Some(Err(e)) => return Poll::Ready(Some(Err(Status::from_error(e.into())))),
            Some(Ok(frame)) => frame,
        };
        if let Some(data) = frame.data_ref() {
            if let Err(refused) = self.observe(data) {
                return Poll::Ready(Some(Err(refused)));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

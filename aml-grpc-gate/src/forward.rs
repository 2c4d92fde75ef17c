//! The per-call executor: the frozen arguments re-encoded as the request message and sent
//! once to the upstream, with the caller's allowed metadata and remaining deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::{async_trait, ToolCall, ToolError, ToolExecutor};
use serde_json::{json, Value};
use tokio::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::{Response, Status};

use crate::metadata::Allowed;
use crate::methods::GatedMethod;
use crate::upstream::{UnaryAnswer, Upstream, UpstreamError};

/// What the upstream answered.
#[derive(Debug)]
pub enum Answer {
    /// A response message.
    Message(Response<bytes::Bytes>),
    /// A status of the upstream's own (its code, message, details and trailers).
    Status(Status),
}

/// Sends one call's frozen message to the upstream and keeps its answer for the handler.
#[derive(Debug)]
pub struct Forward {
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) method: Arc<GatedMethod>,
    pub(crate) metadata: MetadataMap,
    /// The caller's own deadline (not the earlier instant the gate answers by).
    pub(crate) deadline: Option<Instant>,
    pub(crate) allowed: Arc<Allowed>,
    pub(crate) max_response_bytes: usize,
    pub(crate) answer: Mutex<Option<Answer>>,
}

impl Forward {
    /// The upstream's answer, once the tool has run.
    pub fn take(&self) -> Option<Answer> {
        self.answer.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn keep(&self, answer: Answer) {
        *self.answer.lock().unwrap_or_else(|p| p.into_inner()) = Some(answer);
    }
}

#[async_trait]
impl ToolExecutor for Forward {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
        let message = crate::transcode::encode(&self.method.input, call.into_arguments())
            .map_err(|e| ToolError::not_entered("the arguments could not be encoded; nothing was sent", e))?;
        let left = self.deadline.map(|deadline| {
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1))
        });
        let metadata = self.metadata.clone();
        let answer = self
            .upstream
            .unary(
                &self.method.path,
                metadata,
                left,
                &message,
                self.max_response_bytes,
            )
            .await
            .map_err(|e| match e {
                // No connection and no stream: nothing of the call left the gateway.
                UpstreamError::Unreachable(_) => ToolError::not_entered("nothing was sent", e),
                // A reset stream, a broken response, the deadline: the call may or may not
                // have reached the upstream.
                _ => ToolError::new(e.to_string()),
            })?;
        match answer {
            UnaryAnswer::Message { message, metadata } => {
                let bytes = message.len();
                let mut response = Response::new(message);
                *response.metadata_mut() = self.allowed.filter(&metadata);
                self.keep(Answer::Message(response));
                Ok(json!({"grpc_status": "OK", "response_bytes": bytes}))
            }
            UnaryAnswer::Status(status) => {
                let code = status.code();
                let relayed = Status::with_details_and_metadata(
                    code,
                    status.message().to_owned(),
                    bytes::Bytes::copy_from_slice(status.details()),
                    self.allowed.filter(status.metadata()),
                );
                self.keep(Answer::Status(relayed));
                Ok(json!({"grpc_status": format!("{code:?}"), "grpc_code": code as i32}))
            }
        }
    }
}

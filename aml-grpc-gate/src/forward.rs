//! The per-call executor: the frozen arguments re-encoded as the request message and sent
//! once to the upstream, with the caller's allowed metadata and remaining deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::{async_trait, ToolCall, ToolError, ToolExecutor};
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::time::Instant;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::{Response, Status};

use crate::codec::RawCodec;
use crate::metadata::Allowed;
use crate::methods::GatedMethod;

/// What the upstream answered.
#[derive(Debug)]
pub enum Answer {
    /// A response message.
    Message(Response<Bytes>),
    /// A status of the upstream's own (its code, message, details and trailers).
    Status(Status),
}

/// Sends one call's frozen message to the upstream and keeps its answer for the handler.
#[derive(Debug)]
pub struct Forward {
    pub(crate) channel: Channel,
    pub(crate) method: Arc<GatedMethod>,
    pub(crate) path: PathAndQuery,
    pub(crate) metadata: MetadataMap,
    /// The caller's own deadline (not the earlier instant the gate answers by).
    pub(crate) deadline: Option<Instant>,
    pub(crate) allowed: Arc<Allowed>,
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
            .map_err(|e| ToolError::new(e.to_string()))?;
        let mut request = tonic::Request::new(Bytes::from(message));
        *request.metadata_mut() = self.metadata.clone();
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            request.set_timeout(left.max(Duration::from_millis(1)));
        }
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| ToolError::new(format!("the upstream is not reachable: {e}")))?;
        match grpc.unary(request, self.path.clone(), RawCodec).await {
            Ok(response) => {
                let bytes = response.get_ref().len();
                let (metadata, message, extensions) = response.into_parts();
                let metadata = self.allowed.filter(&metadata);
                self.keep(Answer::Message(Response::from_parts(
                    metadata, message, extensions,
                )));
                Ok(json!({"grpc_status": "OK", "response_bytes": bytes}))
            }
            // A status the transport made up (no connection, a reset stream): the call may or
            // may not have reached the upstream.
            Err(status) if std::error::Error::source(&status).is_some() => Err(ToolError::new(format!(
                "the upstream call failed: {}: {}",
                status.code(),
                status.message()
            ))),
            Err(status) => {
                let code = status.code();
                let relayed = Status::with_details_and_metadata(
                    code,
                    status.message().to_owned(),
                    Bytes::copy_from_slice(status.details()),
                    self.allowed.filter(status.metadata()),
                );
                self.keep(Answer::Status(relayed));
                Ok(json!({"grpc_status": format!("{code:?}"), "grpc_code": code as i32}))
            }
        }
    }
}

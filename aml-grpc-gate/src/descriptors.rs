//! The upstream's types: from a descriptor set file (`protoc --descriptor_set_out
//! --include_imports`) or from the upstream's server reflection.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use prost::Message;
use prost_reflect::DescriptorPool;
use prost_types::FileDescriptorProto;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic_reflection::pb::v1alpha::{
    server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    ServerReflectionRequest, ServerReflectionResponse,
};

/// The descriptors could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DescriptorError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The descriptors are not a consistent set (a missing import, a malformed file).
    #[error("invalid descriptors: {0}")]
    Invalid(String),
    /// The upstream's reflection failed or answered something unusable.
    #[error("upstream reflection: {0}")]
    Reflection(String),
}

/// Reads a `FileDescriptorSet` file.
pub fn from_file(path: &Path) -> Result<DescriptorPool, DescriptorError> {
    let bytes = std::fs::read(path).map_err(|source| DescriptorError::Read {
        path: path.display().to_string(),
        source,
    })?;
    DescriptorPool::decode(bytes.as_slice())
        .map_err(|e| DescriptorError::Invalid(format!("{}: {e}", path.display())))
}

/// Services a gateway never learns from the upstream: its own reflection and health, which
/// the gateway serves itself.
fn own_service(name: &str) -> bool {
    name.starts_with("grpc.reflection.") || name == "grpc.health.v1.Health"
}

/// Most files one reflection exchange may bring (a bound on a hostile upstream).
const MAX_FILES: usize = 10_000;

/// Asks the upstream's server reflection (`grpc.reflection.v1`, else `v1alpha`: their
/// messages are the same on the wire) for every service it lists and the files that define
/// them, with their imports.
pub async fn from_reflection(channel: Channel) -> Result<DescriptorPool, DescriptorError> {
    let mut last = None;
    for path in [
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    ] {
        match reflect(channel.clone(), path).await {
            Ok(pool) => return Ok(pool),
            Err(Failure::Unimplemented(e)) => last = Some(e),
            Err(Failure::Other(e)) => return Err(DescriptorError::Reflection(e)),
        }
    }
    Err(DescriptorError::Reflection(
        last.unwrap_or_else(|| "the upstream serves no reflection".into()),
    ))
}

enum Failure {
    Unimplemented(String),
    Other(String),
}

/// One exchange: ask, read the answer.
async fn ask(
    grpc: &mut tonic::client::Grpc<Channel>,
    path: &'static str,
    request: MessageRequest,
) -> Result<ServerReflectionResponse, Failure> {
    let other = |e: &dyn std::fmt::Display| Failure::Other(e.to_string());
    grpc.ready().await.map_err(|e| other(&e))?;
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let stream = tokio_stream::once(request);
    let codec = tonic_prost::ProstCodec::<ServerReflectionRequest, ServerReflectionResponse>::default();
    let response = grpc
        .streaming(
            tonic::Request::new(stream),
            PathAndQuery::from_static(path),
            codec,
        )
        .await
        .map_err(|status| match status.code() {
            tonic::Code::Unimplemented => Failure::Unimplemented(status.message().to_owned()),
            _ => Failure::Other(format!("{}: {}", status.code(), status.message())),
        })?;
    let mut answers = response.into_inner();
    match answers.message().await {
        Ok(Some(answer)) => Ok(answer),
        Ok(None) => Err(Failure::Other(
            "the upstream's reflection answered nothing".into(),
        )),
        Err(status) => Err(Failure::Other(format!("{}: {}", status.code(), status.message()))),
    }
}

async fn reflect(channel: Channel, path: &'static str) -> Result<DescriptorPool, Failure> {
    let mut grpc = tonic::client::Grpc::new(channel);
    let listed = ask(&mut grpc, path, MessageRequest::ListServices(String::new())).await?;
    let services: BTreeSet<String> = match listed.message_response {
        Some(MessageResponse::ListServicesResponse(list)) => list
            .service
            .into_iter()
            .map(|s| s.name)
            .filter(|n| !own_service(n))
            .collect(),
        Some(MessageResponse::ErrorResponse(e)) => return Err(Failure::Other(e.error_message)),
        _ => return Err(Failure::Other("unexpected answer to list_services".into())),
    };
    let mut files: Vec<FileDescriptorProto> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut wanted: Vec<MessageRequest> = services
        .iter()
        .map(|s| MessageRequest::FileContainingSymbol(s.clone()))
        .collect();
    while let Some(request) = wanted.pop() {
        let answer = ask(&mut grpc, path, request).await?;
        let protos = match answer.message_response {
            Some(MessageResponse::FileDescriptorResponse(found)) => found.file_descriptor_proto,
            Some(MessageResponse::ErrorResponse(e)) => return Err(Failure::Other(e.error_message)),
            _ => return Err(Failure::Other("unexpected answer to a file request".into())),
        };
        for bytes in protos {
            let file = FileDescriptorProto::decode(bytes.as_slice())
                .map_err(|e| Failure::Other(format!("a malformed file descriptor: {e}")))?;
            let name = file.name().to_owned();
            if !seen.insert(name) {
                continue;
            }
            for import in &file.dependency {
                if !seen.contains(import) {
                    wanted.push(MessageRequest::FileByFilename(import.clone()));
                }
            }
            files.push(file);
            if files.len() > MAX_FILES {
                return Err(Failure::Other(format!("more than {MAX_FILES} files")));
            }
        }
    }
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_protos(files)
        .map_err(|e| Failure::Other(format!("invalid descriptors: {e}")))?;
    Ok(pool)
}

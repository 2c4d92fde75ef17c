//! Serving the gated tool service with health checking, reflection and limits.

use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

use crate::pb::tool_service_server::ToolServiceServer;
use crate::service::GatedToolService;

/// The encoded `FileDescriptorSet` of `aml.v1`, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/aml_v1_descriptor.bin"));

/// Limits the server enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Largest request message, in bytes (larger ones get `OUT_OF_RANGE`/`RESOURCE_EXHAUSTED`
    /// from the transport before the handler runs).
    pub max_request_bytes: usize,
    /// Longest time a call may take when the client set no deadline of its own.
    pub default_timeout: Option<Duration>,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_request_bytes: 1 << 20,
            default_timeout: None,
        }
    }
}

/// Serves `service` on `listener` with `grpc.health.v1` and server reflection (`v1` and
/// `v1alpha`) until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    service: GatedToolService,
    limits: ServerLimits,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<ToolServiceServer<GatedToolService>>().await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let tools = ToolServiceServer::new(service).max_decoding_message_size(limits.max_request_bytes);
    Server::builder()
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(tools)
        // Without TCP_NODELAY, small responses wait out delayed ACKs (tens of milliseconds).
        .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), shutdown)
        .await?;
    Ok(())
}

/// The server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// Reflection could not be built from the descriptors.
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The transport failed.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

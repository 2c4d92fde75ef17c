//! Serving the gated tool service with health checking, reflection and limits, either as
//! tonic `Routes` for a host's own server or on a listener with [`serve`].

use std::time::Duration;

use tokio::net::TcpListener;
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

use crate::route::ToolServiceRoute;
use crate::service::GatedToolService;

/// The encoded `FileDescriptorSet` of `aml.v1`, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/aml_v1_descriptor.bin"));

/// Limits the service enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Largest request message, in bytes. A larger one is refused with `RESOURCE_EXHAUSTED`
    /// (reason `request_too_large`) before it is read.
    pub max_request_bytes: usize,
    /// The deadline of a call whose client set none: approval stops waiting by then, and
    /// the caller is answered by then even if the tool is still running.
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

impl GatedToolService {
    /// The tool service with `grpc.health.v1` (reporting it `SERVING`) and server
    /// reflection (`v1` and `v1alpha`, with the `google.rpc` error types), as tonic
    /// `Routes` for a host's own server and tower layers:
    ///
    /// ```no_run
    /// # async fn run(service: aml_grpc::GatedToolService) -> Result<(), Box<dyn std::error::Error>> {
    /// let routes = service.routes().await?;
    /// tonic::transport::Server::builder()
    ///     .concurrency_limit_per_connection(64) // or .layer(...) of your own
    ///     .add_routes(routes)
    ///     .serve("127.0.0.1:50051".parse()?)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn routes(self) -> Result<Routes, ServeError> {
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_serving::<ToolServiceRoute>().await;
        let reflection_v1 = reflection().build_v1()?;
        let reflection_v1alpha = reflection().build_v1alpha()?;
        Ok(Routes::new(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(self.into_route()))
    }
}

fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
}

/// Serves [`GatedToolService::routes`] on `listener` (with `TCP_NODELAY`) until `shutdown`
/// completes.
pub async fn serve(
    listener: TcpListener,
    service: GatedToolService,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let routes = service.routes().await?;
    Server::builder()
        .add_routes(routes)
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

//! The gateway's server: the fronted methods, with `grpc.health.v1` and server reflection
//! (`v1` and `v1alpha`) for the services it fronts.

use std::collections::BTreeSet;

use prost_reflect::DescriptorPool;
use prost_types::FileDescriptorSet;
use tokio::net::TcpListener;
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};

use crate::gateway::Gateway;

/// The server could not start or stopped with an error (the same causes as `aml-grpc`'s).
pub use aml_grpc::ServeError;

/// The upstream's files, without the reflection and health files the gateway serves itself.
fn fronted_files(pool: &DescriptorPool) -> FileDescriptorSet {
    let own = |name: &str| name.starts_with("grpc/reflection/") || name == "grpc/health/v1/health.proto";
    FileDescriptorSet {
        file: pool
            .file_descriptor_protos()
            .filter(|f| !own(f.name()))
            .cloned()
            .collect(),
    }
}

/// The gateway's routes: health answers from `health` (see [`crate::health`]), reflection
/// lists `services`, and every other path goes to `gateway`.
pub fn routes(
    gateway: Gateway,
    health: &HealthReporter,
    pool: &DescriptorPool,
    services: &BTreeSet<String>,
) -> Result<Routes, ServeError> {
    let health_service = HealthServer::new(HealthService::from_health_reporter(health.clone()));
    let files = fronted_files(pool);
    let reflection = || {
        let mut builder = tonic_reflection::server::Builder::configure()
            .register_file_descriptor_set(files.clone())
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
        for service in services {
            builder = builder.with_service_name(service.as_str());
        }
        builder.with_service_name("grpc.health.v1.Health")
    };
    let v1 = reflection().build_v1()?;
    let v1alpha = reflection().build_v1alpha()?;
    let router = Routes::new(health_service)
        .add_service(v1)
        .add_service(v1alpha)
        .into_axum_router()
        .fallback_service(gateway);
    Ok(Routes::from(router))
}

/// Serves `routes` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    routes: Routes,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    Server::builder()
        .add_routes(routes)
        // Without TCP_NODELAY, small responses wait out delayed ACKs (tens of milliseconds).
        .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), shutdown)
        .await?;
    Ok(())
}

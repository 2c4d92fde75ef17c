//! The gateway's `grpc.health.v1` follows the upstream: a service it fronts is `SERVING`
//! only while the upstream says so (or, for an upstream without a health service, while it
//! answers at all). A client or load balancer that checks the gateway learns whether calls
//! can get through, not merely that the gateway process is up.

use std::collections::BTreeSet;
use std::time::Duration;

use tonic::transport::Channel;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus as Wire;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// Follows the upstream's health for `services` (and the whole server, `""`), writing what it
/// finds into `reporter`.
#[derive(Debug, Clone)]
pub struct HealthFollower {
    reporter: HealthReporter,
    client: HealthClient<Channel>,
    services: BTreeSet<String>,
    timeout: Duration,
}

impl HealthFollower {
    /// A follower asking the upstream behind `channel`, each check bounded by `timeout`.
    pub fn new(
        reporter: HealthReporter,
        channel: Channel,
        services: BTreeSet<String>,
        timeout: Duration,
    ) -> Self {
        HealthFollower {
            reporter,
            client: HealthClient::new(channel),
            services,
            timeout,
        }
    }

    /// Asks the upstream once and updates every status.
    pub async fn check_once(&self) {
        let whole = match self.ask("").await {
            Asked::Status(status) => Some(status),
            // It answered, without a health service: reachable is all that can be known.
            Asked::Unimplemented => None,
            Asked::Unreachable => Some(ServingStatus::NotServing),
        };
        let server = whole.unwrap_or(ServingStatus::Serving);
        for service in &self.services {
            let status = match (whole, server) {
                (None, _) | (_, ServingStatus::NotServing) => server,
                (Some(_), _) => match self.ask(service).await {
                    Asked::Status(status) => status,
                    // The upstream's health does not know the service: the server's status.
                    Asked::Unimplemented => server,
                    Asked::Unreachable => ServingStatus::NotServing,
                },
            };
            self.reporter.set_service_status(service.as_str(), status).await;
        }
        self.reporter.set_service_status("", server).await;
    }

    /// Checks every `every`, for as long as the returned future runs.
    pub async fn follow(self, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            self.check_once().await;
        }
    }

    async fn ask(&self, service: &str) -> Asked {
        let mut client = self.client.clone();
        let request = HealthCheckRequest {
            service: service.to_owned(),
        };
        match tokio::time::timeout(self.timeout, client.check(request)).await {
            Ok(Ok(answer)) => Asked::Status(match answer.into_inner().status() {
                Wire::Serving => ServingStatus::Serving,
                _ => ServingStatus::NotServing,
            }),
            Ok(Err(status)) if matches!(status.code(), Code::Unimplemented | Code::NotFound) => {
                Asked::Unimplemented
            }
            Ok(Err(_)) | Err(_) => Asked::Unreachable,
        }
    }
}

enum Asked {
    Status(ServingStatus),
    /// No health service, or none for that name: the upstream answered.
    Unimplemented,
    Unreachable,
}

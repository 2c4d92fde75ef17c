//! The gateway's health follows the upstream's: a fronted service is `SERVING` while the
//! upstream's health says so, `NOT_SERVING` when it says otherwise, and everything is
//! `NOT_SERVING` once the upstream is gone. (An upstream with no health service at all counts
//! as serving while it answers: `interop_python.rs`.)

use crate::support;

use support::gateway_on;
use tonic_health::pb::health_check_response::ServingStatus as Wire;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::ServingStatus;

const TOOLS: &str = r#"{"tools": [{"name": "lookup_order", "method": "payments.v1.Payments/Lookup",
  "effect": "read", "purpose": "Look up an order", "resource": {"argument": "order_id"}}]}"#;
const POLICY: &str = r#"{"protocol": "aml-action-policy/1", "rules": []}"#;
const SERVICE: &str = "payments.v1.Payments";

/// What the gateway's health says of `service`.
async fn status_of(client: &HealthClient<tonic::transport::Channel>, service: &str) -> Wire {
    let request = HealthCheckRequest {
        service: service.to_owned(),
    };
    client
        .clone()
        .check(request)
        .await
        .expect("the gateway's health answers")
        .into_inner()
        .status()
}

/// Waits (bounded) until the gateway's health says `want` of `service`.
async fn until(client: &HealthClient<tonic::transport::Channel>, service: &str, want: Wire) {
    aml_test_support::wait_until_async(&format!("{service:?} to be {want:?}"), support::WAIT, || async {
        (status_of(client, service).await == want).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_health_follows_the_upstreams() {
    // The upstream: a health service only (no call reaches it in this test).
    let (upstream_health, health_service) = tonic_health::server::health_reporter();
    upstream_health
        .set_service_status(SERVICE, ServingStatus::Serving)
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health_service)
            .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener), async {
                let _ = stopped.await;
            }),
    );

    let upstream_url = format!("http://{upstream}");
    let (mut gate, address, _) = gateway_on(
        "health",
        TOOLS,
        POLICY,
        &upstream_url,
        &["--health-interval", "1"],
    );
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let client = HealthClient::new(channel);

    // Asked once before the gateway said it was listening: serving from the start.
    assert_eq!(status_of(&client, SERVICE).await, Wire::Serving);
    assert_eq!(status_of(&client, "").await, Wire::Serving);

    upstream_health
        .set_service_status(SERVICE, ServingStatus::NotServing)
        .await;
    until(&client, SERVICE, Wire::NotServing).await;
    assert_eq!(
        status_of(&client, "").await,
        Wire::Serving,
        "the server as a whole still serves"
    );

    upstream_health
        .set_service_status(SERVICE, ServingStatus::Serving)
        .await;
    until(&client, SERVICE, Wire::Serving).await;

    // The upstream goes away: nothing it fronts can be served.
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    until(&client, "", Wire::NotServing).await;
    until(&client, SERVICE, Wire::NotServing).await;
    assert!(
        gate.alive(),
        "the gateway keeps running, and says so through its health"
    );
}

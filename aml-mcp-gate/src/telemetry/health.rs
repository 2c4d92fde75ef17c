//! The operator endpoints: `/metrics`, `/healthz` (the process answers) and `/readyz` (the
//! server is reachable, the state takes writes, the policy in force loaded).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aml_core::{LivePolicy, PolicySource};
use aml_mcp_http::{Ops, OpsReply};

use super::Telemetry;
use crate::sinks::Receipts;

/// How long a readiness check may wait for the server's port or the state's flush.
const CHECK_LIMIT: Duration = Duration::from_secs(2);

/// How `/readyz` knows whether the server is reachable.
#[derive(Debug)]
pub(crate) enum UpstreamProbe {
    /// A child process (or one per session): whether the last start succeeded and the
    /// server has not exited.
    Child(AtomicBool),
    /// A remote server (`--upstream`): whether its host and port accept a TCP connection.
    Remote {
        /// `host:port` of the URL.
        authority: String,
    },
}

impl UpstreamProbe {
    /// The probe for `--upstream URL` (`http://host[:port]/…`), or for a child.
    pub(crate) fn for_server(url: Option<&str>) -> UpstreamProbe {
        let Some(url) = url else {
            return UpstreamProbe::Child(AtomicBool::new(true));
        };
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = host.rsplit_once('@').map_or(host, |(_, host)| host);
        let has_port = match host.rfind(']') {
            Some(end) => host[end..].contains(':'),
            None => host.contains(':'),
        };
        let authority = match has_port {
            true => host.to_owned(),
            false => format!("{host}:80"),
        };
        UpstreamProbe::Remote { authority }
    }

    /// Records that a child server started (`true`) or failed to start or exited.
    pub(crate) fn set_child(&self, up: bool) {
        if let UpstreamProbe::Child(flag) = self {
            flag.store(up, Ordering::Relaxed);
        }
    }

    async fn check(&self) -> Result<(), String> {
        match self {
            UpstreamProbe::Child(up) => match up.load(Ordering::Relaxed) {
                true => Ok(()),
                false => Err("the server is not running".into()),
            },
            UpstreamProbe::Remote { authority } => {
                let addrs: Vec<SocketAddr> = tokio::net::lookup_host(authority.as_str())
                    .await
                    .map_err(|e| format!("cannot resolve {authority}: {e}"))?
                    .collect();
                let connect = async {
                    let mut last = None;
                    for addr in &addrs {
                        match tokio::net::TcpStream::connect(addr).await {
                            Ok(_) => return Ok(()),
                            Err(e) => last = Some(e),
                        }
                    }
                    Err(last.map_or_else(|| "no address".to_owned(), |e| e.to_string()))
                };
                match tokio::time::timeout(CHECK_LIMIT, connect).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(format!("{authority}: {e}")),
                    Err(_) => Err(format!("{authority}: no connection within {CHECK_LIMIT:?}")),
                }
            }
        }
    }
}

/// The gate's operator endpoints.
#[derive(Debug)]
pub(crate) struct Health {
    pub(crate) telemetry: Arc<Telemetry>,
    pub(crate) policy: LivePolicy,
    pub(crate) receipts: Receipts,
    pub(crate) upstream: Arc<UpstreamProbe>,
    /// Failed state writes seen by the previous readiness check.
    failures_seen: AtomicU64,
}

impl Health {
    pub(crate) fn new(
        telemetry: Arc<Telemetry>,
        policy: LivePolicy,
        receipts: Receipts,
        upstream: Arc<UpstreamProbe>,
    ) -> Health {
        Health {
            telemetry,
            policy,
            receipts,
            upstream,
            failures_seen: AtomicU64::new(0),
        }
    }

    fn policy_check(&self) -> Result<(), String> {
        let valid = self.policy.current().error().map(ToString::to_string);
        self.telemetry
            .metrics
            .policy_valid
            .set(i64::from(valid.is_none()));
        match valid {
            None => Ok(()),
            Some(e) => Err(format!("every call is blocked with invalid_policy: {e}")),
        }
    }

    async fn upstream_check(&self) -> Result<(), String> {
        let checked = self.upstream.check().await;
        self.telemetry.metrics.set_upstream_up(checked.is_ok());
        checked
    }

    /// Whether the state took every write since the previous check, and flushes in time.
    async fn state_check(&self) -> Result<(), String> {
        if !self.receipts.flush_state_within(CHECK_LIMIT).await {
            return Err(format!("the state did not flush within {CHECK_LIMIT:?}"));
        }
        let failures = self.receipts.failures();
        let seen = self.failures_seen.swap(failures, Ordering::Relaxed);
        match failures > seen {
            true => Err(format!("{} writes failed since the last check", failures - seen)),
            false => Ok(()),
        }
    }

    async fn ready(&self) -> OpsReply {
        let (upstream, state) = tokio::join!(self.upstream_check(), self.state_check());
        let checks = [
            ("upstream", upstream),
            ("state", state),
            ("policy", self.policy_check()),
        ];
        let ready = checks.iter().all(|(_, c)| c.is_ok());
        let mut body = String::from(if ready { "ready\n" } else { "not ready\n" });
        for (name, check) in &checks {
            match check {
                Ok(()) => body.push_str(&format!("{name}: ok\n")),
                Err(e) => body.push_str(&format!("{name}: {e}\n")),
            }
        }
        OpsReply::text(if ready { 200 } else { 503 }, body)
    }

    async fn metrics(&self) -> OpsReply {
        // Gauges that are read, not counted: brought up to date for the scrape.
        let _ = self.upstream_check().await;
        let _ = self.policy_check();
        OpsReply {
            status: 200,
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
            body: self.telemetry.metrics.encode().into(),
        }
    }
}

impl Ops for Health {
    fn answer(&self, path: &str) -> Option<aml_mcp_http::ops::OpsFuture<'_>> {
        match path {
            "/metrics" => Some(Box::pin(self.metrics())),
            "/healthz" => Some(Box::pin(async { OpsReply::text(200, "ok\n") })),
            "/readyz" => Some(Box::pin(self.ready())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_reaches_the_urls_host_and_port() {
        let authority = |url| match UpstreamProbe::for_server(Some(url)) {
            UpstreamProbe::Remote { authority } => authority,
            UpstreamProbe::Child(_) => unreachable!(),
        };
        assert_eq!(authority("http://127.0.0.1:3001/mcp"), "127.0.0.1:3001");
        assert_eq!(
            authority("http://user:pw@mcp.example.test/mcp"),
            "mcp.example.test:80"
        );
        assert_eq!(authority("http://[::1]:8080/mcp"), "[::1]:8080");
        assert_eq!(authority("http://[::1]/mcp"), "[::1]:80");
    }
}

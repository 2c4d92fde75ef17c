//! The issuer's keys: found through its metadata (RFC 8414, else OpenID discovery) unless
//! given, fetched over plain HTTP with hyper, cached, and fetched again when a token names a
//! key the set lacks, at most once per [`REFETCH_EVERY`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use jsonwebtoken::jwk::JwkSet;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::fetch::{self, check_http_url};

/// The least time between two fetches for an unknown `kid`: a stream of tokens with made-up
/// key ids costs the issuer one request per window, not one per token.
pub(crate) const REFETCH_EVERY: Duration = Duration::from_secs(30);
/// After a failed fetch, requests are refused without trying again for this long.
const RETRY_FAILED_AFTER: Duration = Duration::from_secs(5);
/// Cached keys are fetched again after this long (keys the issuer withdrew stop working).
const MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// Why no keys could be had: the request is refused (503) and this is logged.
#[derive(Debug, Clone)]
pub(crate) struct Unavailable(pub(crate) String);

#[derive(Debug, Default)]
struct State {
    /// The key set URL: given, or discovered once.
    url: Option<String>,
    keys: Option<Arc<JwkSet>>,
    fetched: Option<Instant>,
    /// The last attempt and its failure, if it failed.
    failed: Option<(Instant, Unavailable)>,
    /// Fetches so far (tests and logs).
    fetches: u64,
}

/// The cache of one issuer's keys.
#[derive(Debug)]
pub(crate) struct Jwks {
    issuer: String,
    state: Mutex<State>,
}

impl Jwks {
    pub(crate) fn new(issuer: &str, url: Option<&str>) -> Jwks {
        let state = State {
            url: url.map(str::to_owned),
            ..State::default()
        };
        Jwks {
            issuer: issuer.to_owned(),
            state: Mutex::new(state),
        }
    }

    /// A key set already in hand (tests).
    #[cfg(test)]
    pub(crate) fn preloaded(issuer: &str, keys: JwkSet) -> Jwks {
        let state = State {
            url: Some("http://127.0.0.1:9/unused".into()),
            keys: Some(Arc::new(keys)),
            fetched: Some(Instant::now()),
            ..State::default()
        };
        Jwks {
            issuer: issuer.to_owned(),
            state: Mutex::new(state),
        }
    }

    /// The cached keys, fetched first when there are none or they are old. One request at a
    /// time fetches; the others wait for its result.
    pub(crate) async fn keys(&self) -> Result<Arc<JwkSet>, Unavailable> {
        let mut state = self.state.lock().await;
        match (&state.keys, state.fetched) {
            (Some(keys), Some(at)) if at.elapsed() < MAX_AGE => Ok(keys.clone()),
            (Some(stale), _) => {
                let stale = stale.clone();
                // Old keys beat none while the issuer is unreachable.
                Ok(self.fetch(&mut state).await.unwrap_or(stale))
            }
            _ => self.fetch(&mut state).await,
        }
    }

    /// The keys after a token named one `seen` lacks: a fresh set if none was fetched in the
    /// last [`REFETCH_EVERY`] (another request may have just fetched one), else `None`.
    pub(crate) async fn refetched(&self, seen: &Arc<JwkSet>) -> Option<Arc<JwkSet>> {
        let mut state = self.state.lock().await;
        if let Some(keys) = state.keys.as_ref().filter(|k| !Arc::ptr_eq(k, seen)) {
            return Some(keys.clone());
        }
        if state.fetched.is_some_and(|at| at.elapsed() < REFETCH_EVERY) {
            return None;
        }
        self.fetch(&mut state).await.ok()
    }

    /// How many times the keys (or the metadata before them) were fetched.
    #[cfg(test)]
    pub(crate) async fn fetches(&self) -> u64 {
        self.state.lock().await.fetches
    }

    async fn fetch(&self, state: &mut State) -> Result<Arc<JwkSet>, Unavailable> {
        if let Some((at, why)) = &state.failed {
            if at.elapsed() < RETRY_FAILED_AFTER {
                return Err(why.clone());
            }
        }
        state.fetches += 1;
        let fetched = self.fetch_once(state).await;
        let now = Instant::now();
        match fetched {
            Ok(keys) => {
                let keys = Arc::new(keys);
                tracing::info!(target: "aml_mcp_http", "fetched {} keys of {} from {}", keys.keys.len(), self.issuer, state.url.as_deref().unwrap_or("?"));
                state.keys = Some(keys.clone());
                state.fetched = Some(now);
                state.failed = None;
                Ok(keys)
            }
            Err(why) => {
                tracing::error!(target: "aml_mcp_http", "cannot get the token issuer's keys: {}", why.0);
                // A failure counts as a fetch for the unknown-kid window too.
                state.fetched = state.fetched.map(|_| now);
                state.failed = Some((now, why.clone()));
                Err(why)
            }
        }
    }

    async fn fetch_once(&self, state: &mut State) -> Result<JwkSet, Unavailable> {
        let url = match &state.url {
            Some(url) => url.clone(),
            None => {
                let url = discover(&self.issuer).await?;
                state.url = Some(url.clone());
                url
            }
        };
        let body = get(&url).await.map_err(|e| Unavailable(format!("{url}: {e}")))?;
        serde_json::from_slice::<JwkSet>(&body).map_err(|e| Unavailable(format!("{url}: not a JWK set: {e}")))
    }
}

/// The issuer's `jwks_uri`, from its RFC 8414 metadata, else its OpenID configuration.
async fn discover(issuer: &str) -> Result<String, Unavailable> {
    let mut tried = Vec::new();
    for url in metadata_urls(issuer) {
        match get(&url).await {
            Ok(body) => {
                let doc: serde_json::Value = serde_json::from_slice(&body)
                    .map_err(|e| Unavailable(format!("{url}: not JSON: {e}")))?;
                if doc["issuer"].as_str() != Some(issuer) {
                    return Err(Unavailable(format!(
                        "{url}: names issuer {}, not {issuer}",
                        doc["issuer"]
                    )));
                }
                let Some(jwks) = doc["jwks_uri"].as_str() else {
                    tried.push(format!("{url}: no jwks_uri"));
                    continue;
                };
                check_http_url(jwks).map_err(|e| Unavailable(format!("{url}: jwks_uri {e}")))?;
                return Ok(jwks.to_owned());
            }
            Err(e) => tried.push(format!("{url}: {e}")),
        }
    }
    Err(Unavailable(format!(
        "no authorization server metadata: {}",
        tried.join("; ")
    )))
}

/// RFC 8414 §3.1 puts the well-known segment between the host and the issuer's path;
/// OpenID Connect Discovery appends it to the issuer.
pub(crate) fn metadata_urls(issuer: &str) -> Vec<String> {
    let issuer = issuer.trim_end_matches('/');
    let Some((origin, path)) =
        issuer
            .find("://")
            .map(|i| i + 3)
            .map(|start| match issuer[start..].find('/') {
                Some(slash) => issuer.split_at(start + slash),
                None => (issuer, ""),
            })
    else {
        return Vec::new();
    };
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{issuer}/.well-known/openid-configuration"),
    ]
}

/// One GET; `200` only.
async fn get(url: &str) -> Result<Bytes, String> {
    let uri = check_http_url(url)?;
    match fetch::exchange(Method::GET, &uri, &[], Bytes::new()).await? {
        (StatusCode::OK, body) => Ok(body),
        (status, _) => Err(format!("answered {status}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_urls_follow_rfc_8414_and_openid() {
        assert_eq!(
            metadata_urls("http://127.0.0.1:9000"),
            [
                "http://127.0.0.1:9000/.well-known/oauth-authorization-server",
                "http://127.0.0.1:9000/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            metadata_urls("http://as.test/tenant1"),
            [
                "http://as.test/.well-known/oauth-authorization-server/tenant1",
                "http://as.test/tenant1/.well-known/openid-configuration"
            ]
        );
        assert!(check_http_url("https://as.test/jwks")
            .unwrap_err()
            .contains("TLS proxy"));
        assert!(check_http_url("ftp://as.test").is_err());
    }

    #[tokio::test]
    async fn a_closed_port_is_unavailable_quickly_and_named() {
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let url = format!("http://{closed}/jwks");
        let jwks = Jwks::new("http://127.0.0.1:1", Some(&url));
        let err = jwks.keys().await.unwrap_err();
        assert!(err.0.contains(&url), "{}", err.0);
        // Within the retry delay the failure is answered without a second attempt.
        assert!(jwks.keys().await.is_err());
        assert_eq!(jwks.fetches().await, 1);
    }
}

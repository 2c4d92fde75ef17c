//! The upstream client as an OAuth client of the upstream's authorization server: the client
//! credentials grant (RFC 6749 §4.4). The token is cached, fetched again before it expires,
//! and dropped when the upstream answers 401. ADR 028.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Uri};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::{fetch, is_scope_token, wire};

/// After a failed fetch, requests are refused without asking again for this long (a token
/// endpoint that is down is not asked once per request).
const RETRY_FAILED_AFTER: Duration = Duration::from_secs(2);

/// How the gate authenticates to the token endpoint (RFC 6749 §2.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ClientAuth {
    /// `client_secret_basic`: HTTP Basic with the client id and secret.
    #[default]
    Basic,
    /// `client_secret_post`: `client_id` and `client_secret` in the form.
    Post,
}

/// The gate's own OAuth client registration for an upstream: what it asks the token endpoint
/// for. The secret is never shown (`Debug` leaves it out).
#[derive(Clone)]
#[non_exhaustive]
pub struct ClientCredentials {
    /// The token endpoint (`http://` only; an `https` one through a local TLS proxy).
    pub token_url: String,
    /// The client identifier the authorization server gave the gate.
    pub client_id: String,
    client_secret: String,
    /// Scopes asked for (`scope`, space-separated on the wire); none: the server's default.
    pub scopes: Vec<String>,
    /// The RFC 8707 `resource` asked for: the upstream's resource URI, which its tokens'
    /// audience must name.
    pub resource: Option<String>,
    /// How the client authenticates.
    pub auth: ClientAuth,
}

impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .field("resource", &self.resource)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

/// Why client credentials were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialsError {
    /// The token endpoint is not an `http://` URL.
    #[error("the token endpoint {0}")]
    TokenUrl(String),
    /// A client id or secret that is empty or holds control characters.
    #[error("the client {0} is empty or holds control characters")]
    Client(&'static str),
    /// A scope with a space, a quote or a control character.
    #[error("the scope {0:?} is not a scope token")]
    Scope(String),
    /// The resource is not an absolute `http(s)://` URI without a fragment (RFC 8707 §2).
    #[error("the resource {0:?} is not an absolute http:// or https:// URI without a fragment")]
    Resource(String),
}

impl ClientCredentials {
    /// The client `client_id` with `client_secret` at the token endpoint `token_url`.
    ///
    /// ```
    /// use aml_mcp_http::{ClientAuth, ClientCredentials};
    /// let credentials = ClientCredentials::new("http://127.0.0.1:9000/token", "gate-1", "s3cret")
    ///     .unwrap()
    ///     .with_scopes(vec!["mcp:tools".into()])
    ///     .unwrap()
    ///     .with_resource("https://tools.example.com/mcp")
    ///     .unwrap()
    ///     .with_client_auth(ClientAuth::Post);
    /// assert!(!format!("{credentials:?}").contains("s3cret"));
    /// assert!(ClientCredentials::new("https://as.example.com/token", "gate-1", "s3cret").is_err());
    /// ```
    pub fn new(token_url: &str, client_id: &str, client_secret: &str) -> Result<Self, CredentialsError> {
        fetch::check_http_url(token_url).map_err(CredentialsError::TokenUrl)?;
        let fine = |s: &str| !s.is_empty() && !s.chars().any(char::is_control);
        if !fine(client_id) {
            return Err(CredentialsError::Client("id"));
        }
        if !fine(client_secret) {
            return Err(CredentialsError::Client("secret"));
        }
        Ok(ClientCredentials {
            token_url: token_url.into(),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            scopes: Vec::new(),
            resource: None,
            auth: ClientAuth::Basic,
        })
    }

    /// Sets [`scopes`](Self::scopes).
    pub fn with_scopes(mut self, scopes: Vec<String>) -> Result<Self, CredentialsError> {
        if let Some(bad) = scopes.iter().find(|s| !is_scope_token(s)) {
            return Err(CredentialsError::Scope(bad.clone()));
        }
        self.scopes = scopes;
        Ok(self)
    }

    /// Sets [`resource`](Self::resource).
    pub fn with_resource(mut self, resource: &str) -> Result<Self, CredentialsError> {
        let absolute = resource
            .parse::<Uri>()
            .is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some());
        if !absolute || resource.contains('#') {
            return Err(CredentialsError::Resource(resource.into()));
        }
        self.resource = Some(resource.into());
        Ok(self)
    }

    /// Sets [`auth`](Self::auth).
    pub fn with_client_auth(mut self, auth: ClientAuth) -> Self {
        self.auth = auth;
        self
    }

    /// The token request: its headers and form body.
    fn request(&self) -> (Vec<(HeaderName, HeaderValue)>, String) {
        let scope = self.scopes.join(" ");
        let mut pairs = vec![("grant_type", "client_credentials")];
        // With Basic too: servers that look the client up by the form's `client_id` (the MCP
        // SDK's) need it, and RFC 6749 §3.2.1 lets a client send it.
        pairs.push(("client_id", &self.client_id));
        if self.auth == ClientAuth::Post {
            pairs.push(("client_secret", &self.client_secret));
        }
        if !scope.is_empty() {
            pairs.push(("scope", &scope));
        }
        if let Some(resource) = &self.resource {
            pairs.push(("resource", resource));
        }
        let mut headers = vec![(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        )];
        if self.auth == ClientAuth::Basic {
            if let Ok(value) = HeaderValue::try_from(wire::basic(&self.client_id, &self.client_secret)) {
                headers.push((header::AUTHORIZATION, value));
            }
        }
        (headers, wire::form(&pairs))
    }

    /// `text` with the secret blotted out, should a server have echoed it.
    fn scrub(&self, text: String) -> String {
        match text.contains(&self.client_secret) {
            true => text.replace(&self.client_secret, "…"),
            false => text,
        }
    }
}

#[derive(Debug)]
struct Token {
    header: HeaderValue,
    refresh_at: Instant,
    expires_at: Instant,
}

#[derive(Debug, Default)]
struct State {
    token: Option<Token>,
    /// The last failed fetch, and why.
    failed: Option<(Instant, String)>,
    /// Fetches so far (tests).
    fetches: u64,
}

/// The gate's access token for one upstream, shared by all its sessions.
pub(crate) struct TokenSource {
    credentials: ClientCredentials,
    uri: Uri,
    state: Mutex<State>,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource")
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    pub(crate) fn new(credentials: ClientCredentials) -> Result<TokenSource, CredentialsError> {
        let uri = fetch::check_http_url(&credentials.token_url).map_err(CredentialsError::TokenUrl)?;
        Ok(TokenSource {
            credentials,
            uri,
            state: Mutex::new(State::default()),
        })
    }

    pub(crate) fn credentials(&self) -> &ClientCredentials {
        &self.credentials
    }

    /// The `Authorization` value for the next request: the cached token until it is due for
    /// refresh, else a new one. One request fetches at a time; the others wait for it. A
    /// fetch that fails leaves a token that has not yet expired in use.
    pub(crate) async fn authorization(&self) -> Result<HeaderValue, String> {
        let mut state = self.state.lock().await;
        let now = Instant::now();
        if let Some(token) = state.token.as_ref().filter(|t| now < t.refresh_at) {
            return Ok(token.header.clone());
        }
        let fetched = match &state.failed {
            Some((at, why)) if at.elapsed() < RETRY_FAILED_AFTER => Err(why.clone()),
            _ => self.fetch(&mut state).await,
        };
        match (fetched, state.token.as_ref().filter(|t| now < t.expires_at)) {
            (Ok(header), _) => Ok(header),
            (Err(_), Some(old)) => Ok(old.header.clone()),
            (Err(why), None) => Err(why),
        }
    }

    /// The upstream answered 401 to `used`: it is dropped (unless a newer token already
    /// replaced it), so the next [`authorization`](Self::authorization) fetches.
    pub(crate) async fn refused(&self, used: &HeaderValue) {
        let mut state = self.state.lock().await;
        if state.token.as_ref().is_some_and(|t| t.header == *used) {
            state.token = None;
            state.failed = None;
        }
    }

    /// How many token requests were made.
    #[cfg(test)]
    pub(crate) async fn fetches(&self) -> u64 {
        self.state.lock().await.fetches
    }

    async fn fetch(&self, state: &mut State) -> Result<HeaderValue, String> {
        state.fetches += 1;
        let asked = Instant::now();
        let (headers, body) = self.credentials.request();
        let answer = fetch::exchange(Method::POST, &self.uri, &headers, Bytes::from(body))
            .await
            .and_then(|(status, body)| wire::read_answer(status, &body));
        let url = &self.credentials.token_url;
        match answer {
            Ok(issued) => {
                tracing::info!(target: "aml_mcp_http", "got an access token for the upstream from {url} (client {}, expires in {:?})", self.credentials.client_id, issued.lifetime);
                let token = Token {
                    header: issued.header.clone(),
                    refresh_at: asked + wire::refresh_after(issued.lifetime),
                    expires_at: asked + issued.lifetime,
                };
                state.token = Some(token);
                state.failed = None;
                Ok(issued.header)
            }
            Err(why) => {
                let why = self.credentials.scrub(why);
                tracing::error!(target: "aml_mcp_http", "cannot get an access token for the upstream from {url} (client {}): {why}", self.credentials.client_id);
                let why = format!("the gate cannot get an access token for its upstream: {why}");
                state.failed = Some((Instant::now(), why.clone()));
                Err(why)
            }
        }
    }
}

//! The front as an OAuth 2.1 resource server (MCP authorization): JWT access tokens of one
//! issuer, bound to this gate by their audience (RFC 8707), checked against the issuer's
//! JWKS; and the RFC 9728 metadata that tells a client where to get them. ADR 026.

mod client;
mod fetch;
mod jwks;
mod validate;
mod wire;

use std::sync::Arc;

use bytes::Bytes;
use hyper::Uri;

pub(crate) use client::TokenSource;
pub use client::{ClientAuth, ClientCredentials, CredentialsError};
pub(crate) use validate::{Accepted, Rejection, MAX_TOKEN_BYTES};

/// Where RFC 9728 puts protected resource metadata.
pub(crate) const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// The front's OAuth settings: which issuer's tokens it accepts, and for which resource.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OAuth {
    /// The authorization server's issuer identifier; a token's `iss` must equal it.
    pub issuer: String,
    /// This gate's resource URI (e.g. `https://gate.example.com/mcp`); a token's `aud` must
    /// contain it, and the metadata names it as `resource`.
    pub audience: String,
    /// The issuer's JWK set URL; `None`: its metadata's `jwks_uri` (RFC 8414, else OpenID
    /// discovery), looked up at the first token.
    pub jwks_url: Option<String>,
    /// Scopes every token must carry in its `scope` claim.
    pub scopes: Vec<String>,
}

/// Why OAuth settings were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OAuthError {
    /// The issuer is not an `http(s)://` URL.
    #[error("the issuer {0:?} is not an http:// or https:// URL")]
    Issuer(String),
    /// The audience is not an absolute `http(s)://` URI.
    #[error("the audience {0:?} is not an absolute http:// or https:// URI (this gate's MCP URL, e.g. https://gate.example.com/mcp)")]
    Audience(String),
    /// The key set cannot be fetched from there (or, without one, from the issuer's metadata).
    #[error("{0}")]
    Jwks(String),
    /// A scope with a space, a quote or a control character.
    #[error("the scope {0:?} is not a scope token")]
    Scope(String),
}

impl OAuth {
    /// Tokens of `issuer` for the resource `audience`.
    ///
    /// ```
    /// let oauth = aml_mcp_http::OAuth::new("http://127.0.0.1:9000", "http://127.0.0.1:8080/mcp")
    ///     .unwrap()
    ///     .with_scopes(vec!["mcp:tools".into()])
    ///     .unwrap();
    /// assert_eq!(oauth.resource_metadata_url(), "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp");
    /// assert!(aml_mcp_http::OAuth::new("http://127.0.0.1:9000", "mcp").is_err());
    /// ```
    pub fn new(issuer: &str, audience: &str) -> Result<OAuth, OAuthError> {
        let web = |u: &Uri| matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some();
        if !issuer.parse::<Uri>().is_ok_and(|u| web(&u)) {
            return Err(OAuthError::Issuer(issuer.into()));
        }
        if !audience.parse::<Uri>().is_ok_and(|u| web(&u)) || audience.contains(['"', '\\']) {
            return Err(OAuthError::Audience(audience.into()));
        }
        Ok(OAuth {
            issuer: issuer.into(),
            audience: audience.into(),
            jwks_url: None,
            scopes: Vec::new(),
        })
    }

    /// Sets [`jwks_url`](Self::jwks_url): `http://` only (https is not built in: reach an
    /// `https` key set through a local TLS proxy). Needed for an `https` issuer, whose
    /// metadata cannot be read either.
    pub fn with_jwks_url(mut self, url: &str) -> Result<OAuth, OAuthError> {
        fetch::check_http_url(url).map_err(OAuthError::Jwks)?;
        self.jwks_url = Some(url.into());
        Ok(self)
    }

    /// Whether the keys can be reached: a key set URL, or an `http://` issuer to discover it.
    pub fn check_reachable(&self) -> Result<(), OAuthError> {
        match (&self.jwks_url, self.issuer.starts_with("http://")) {
            (Some(_), _) | (None, true) => Ok(()),
            (None, false) => Err(OAuthError::Jwks(format!(
                "the issuer {:?} is https, which is not built in, so its metadata cannot be read: give its key set URL (http://, e.g. through a local TLS proxy)",
                self.issuer
            ))),
        }
    }

    /// Sets [`scopes`](Self::scopes).
    pub fn with_scopes(mut self, scopes: Vec<String>) -> Result<OAuth, OAuthError> {
        if let Some(bad) = scopes.iter().find(|s| !is_scope_token(s)) {
            return Err(OAuthError::Scope(bad.clone()));
        }
        self.scopes = scopes;
        Ok(self)
    }

    /// This gate's RFC 9728 metadata URL, as clients see it: the audience's origin, the
    /// well-known path, then the audience's path.
    pub fn resource_metadata_url(&self) -> String {
        let (origin, path) = split_origin(&self.audience);
        format!("{origin}{METADATA_PATH}{path}")
    }

    /// The paths the front serves the metadata at: the bare well-known one, and with the
    /// audience's path (and [`crate::MCP_PATH`]) after it.
    pub(crate) fn metadata_paths(&self) -> Vec<String> {
        let (_, path) = split_origin(&self.audience);
        let mut paths = vec![
            METADATA_PATH.to_owned(),
            format!("{METADATA_PATH}{}", crate::MCP_PATH),
        ];
        let own = format!("{METADATA_PATH}{path}");
        if !paths.contains(&own) {
            paths.push(own);
        }
        paths
    }

    /// The RFC 9728 document.
    pub(crate) fn metadata(&self) -> Bytes {
        let doc = serde_json::json!({
            "resource": self.audience,
            "authorization_servers": [self.issuer],
            "scopes_supported": self.scopes,
            "bearer_methods_supported": ["header"],
        });
        Bytes::from(doc.to_string())
    }
}

/// RFC 6749 §3.3 scope-token characters, at least one.
fn is_scope_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

/// `(scheme://authority, path)`, the path without a trailing `/` (empty for the root).
fn split_origin(uri: &str) -> (&str, &str) {
    let start = uri.find("://").map_or(0, |i| i + 3);
    let (origin, rest) = match uri[start..].find(['/', '?', '#']) {
        Some(i) => uri.split_at(start + i),
        None => (uri, ""),
    };
    let path = rest.split(['?', '#']).next().unwrap_or("").trim_end_matches('/');
    (origin, path)
}

/// What a presented token came to.
#[derive(Debug)]
pub(crate) enum Verdict {
    Accepted(Accepted),
    Rejected(Rejection),
    /// The issuer's keys could not be had: refused, fail closed.
    Unavailable(String),
}

/// The checks and the key cache a front shares between requests.
#[derive(Debug)]
pub(crate) struct Verifier {
    pub(crate) oauth: OAuth,
    /// The RFC 9728 document, the paths it is served at, and its URL.
    pub(crate) metadata: Bytes,
    pub(crate) metadata_paths: Vec<String>,
    pub(crate) metadata_url: String,
    checker: validate::Checker,
    jwks: jwks::Jwks,
}

impl Verifier {
    pub(crate) fn new(oauth: OAuth) -> Arc<Verifier> {
        // The crate picks its backend from its features; one installed by another crate
        // in the build is used as it is.
        if jsonwebtoken::crypto::CryptoProvider::try_get_default().is_none() {
            let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
        }
        Arc::new(Verifier::with_jwks(
            jwks::Jwks::new(&oauth.issuer, oauth.jwks_url.as_deref()),
            oauth,
        ))
    }

    fn with_jwks(jwks: jwks::Jwks, oauth: OAuth) -> Verifier {
        Verifier {
            checker: validate::Checker::new(&oauth.issuer, &oauth.audience, &oauth.scopes),
            metadata: oauth.metadata(),
            metadata_paths: oauth.metadata_paths(),
            metadata_url: oauth.resource_metadata_url(),
            jwks,
            oauth,
        }
    }

    /// Checks one bearer token: against the cached keys, and once more against a fresh set
    /// when it names a key they lack (at most one fetch per window, whatever the tokens).
    pub(crate) async fn verify(&self, token: &str) -> Verdict {
        if token.len() > MAX_TOKEN_BYTES {
            let why = format!("the token is {} bytes, over {MAX_TOKEN_BYTES}", token.len());
            return Verdict::Rejected(Rejection::Invalid(why));
        }
        let keys = match self.jwks.keys().await {
            Ok(keys) => keys,
            Err(why) => return Verdict::Unavailable(why.0),
        };
        match self.checker.check(token, &keys) {
            Err(Rejection::UnknownKey(kid)) => match self.jwks.refetched(&keys).await {
                Some(fresh) => verdict(self.checker.check(token, &fresh)),
                None => verdict(Err(Rejection::UnknownKey(kid))),
            },
            other => verdict(other),
        }
    }
}

fn verdict(checked: Result<Accepted, Rejection>) -> Verdict {
    match checked {
        Ok(accepted) => Verdict::Accepted(accepted),
        Err(rejection) => Verdict::Rejected(rejection),
    }
}

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod tests;

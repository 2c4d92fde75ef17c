//! One JWT access token checked against a key set already in hand: no network here, so the
//! checks are tested with a JWKS in memory. All JOSE work is the `jsonwebtoken` crate's.

use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{errors::ErrorKind, Algorithm, AlgorithmFamily, DecodingKey, Validation};
use serde::Deserialize;

/// A longer `Authorization` value is refused before any parsing.
pub(crate) const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Allowed clock skew for `exp` and `nbf`, in seconds.
pub(crate) const LEEWAY_SECONDS: u64 = 60;

/// Public-key algorithms only: never `none` (the crate cannot even name it) nor HMAC, whose
/// "secret" would be the issuer's public key.
const ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// Not a valid token for this gate (401 `invalid_token`); the reason is for the log.
    Invalid(String),
    /// Signed with a key the set lacks: worth one refetch of the set.
    UnknownKey(Option<String>),
    /// Valid, but without these required scopes (403 `insufficient_scope`).
    InsufficientScope(Vec<String>),
}

/// What the gate takes from an accepted token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Accepted {
    /// The `sub` claim: the caller.
    pub(crate) subject: String,
    /// The `scope` claim's scopes: what per-tool scopes are checked against.
    pub(crate) scopes: Vec<String>,
}

#[derive(Deserialize)]
struct Claims {
    // Optional here so that a missing one is reported as such by the required-claims check.
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    scope: Option<String>,
}

/// The checks for one issuer and audience.
#[derive(Debug, Clone)]
pub(crate) struct Checker {
    /// One per key family: the crate checks a key against every algorithm allowed, so
    /// each validation allows one family's.
    validations: [(AlgorithmFamily, Validation); 3],
    scopes: Vec<String>,
}

impl Checker {
    pub(crate) fn new(issuer: &str, audience: &str, scopes: &[String]) -> Checker {
        let validation = |family: AlgorithmFamily| {
            let mut validation = Validation::new_for_family(family);
            validation.algorithms.retain(|a| ALGORITHMS.contains(a));
            validation.set_issuer(&[issuer]);
            validation.set_audience(&[audience]);
            validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
            validation.validate_exp = true;
            validation.validate_nbf = true;
            validation.validate_aud = true;
            validation.leeway = LEEWAY_SECONDS;
            (family, validation)
        };
        Checker {
            validations: [
                validation(AlgorithmFamily::Rsa),
                validation(AlgorithmFamily::Ec),
                validation(AlgorithmFamily::Ed),
            ],
            scopes: scopes.to_vec(),
        }
    }

    /// Checks `token` against `keys`: signature, algorithm, `iss`, `aud`, `exp`, `nbf`, a
    /// caller-name `sub`, then the required scopes.
    pub(crate) fn check(&self, token: &str, keys: &JwkSet) -> Result<Accepted, Rejection> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(invalid(format!(
                "the token is {} bytes, over {MAX_TOKEN_BYTES}",
                token.len()
            )));
        }
        let header = jsonwebtoken::decode_header(token).map_err(|e| invalid(format!("not a JWT: {e}")))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(invalid(format!("algorithm {:?} is not allowed", header.alg)));
        }
        let jwk = pick_key(keys, header.kid.as_deref(), header.alg)?;
        let key =
            DecodingKey::from_jwk(jwk).map_err(|e| invalid(format!("the issuer's key is unusable: {e}")))?;
        let Some((_, validation)) = self.validations.iter().find(|(f, _)| *f == header.alg.family()) else {
            return Err(invalid(format!("algorithm {:?} is not allowed", header.alg)));
        };
        let data = jsonwebtoken::decode::<Claims>(token, &key, validation).map_err(|e| {
            invalid(match e.kind() {
                ErrorKind::ExpiredSignature => "expired".to_owned(),
                ErrorKind::ImmatureSignature => "not valid yet (nbf)".to_owned(),
                ErrorKind::InvalidIssuer => "wrong issuer".to_owned(),
                ErrorKind::InvalidAudience => "not for this resource (aud)".to_owned(),
                ErrorKind::InvalidSignature => "bad signature".to_owned(),
                ErrorKind::InvalidAlgorithm => "algorithm does not match the key".to_owned(),
                ErrorKind::MissingRequiredClaim(c) => format!("no {c} claim"),
                _ => format!("invalid: {e}"),
            })
        })?;
        let subject = data.claims.sub.unwrap_or_default();
        match aml_mcp::Caller::new(&subject) {
            Ok(caller) if caller.is_local() => return Err(invalid("sub `local` is the stdio caller".into())),
            Ok(_) => {}
            Err(why) => return Err(invalid(format!("sub is not a caller name: {why}"))),
        }
        let granted: Vec<&str> = data.claims.scope.as_deref().unwrap_or("").split(' ').collect();
        let missing: Vec<String> = self
            .scopes
            .iter()
            .filter(|s| !granted.contains(&s.as_str()))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(Rejection::InsufficientScope(missing));
        }
        let scopes = granted
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| (*s).to_owned())
            .collect();
        Ok(Accepted { subject, scopes })
    }
}

fn invalid(why: String) -> Rejection {
    Rejection::Invalid(why)
}

/// The key a token names by `kid`; without one, the set's only signing key for the
/// algorithm (several would leave the choice to the token's holder).
fn pick_key<'k>(keys: &'k JwkSet, kid: Option<&str>, alg: Algorithm) -> Result<&'k Jwk, Rejection> {
    let usable = |k: &&Jwk| {
        let for_signing = matches!(k.common.public_key_use, None | Some(PublicKeyUse::Signature));
        let same_alg = k
            .common
            .key_algorithm
            .is_none_or(|a| a.to_string() == format!("{alg:?}"));
        for_signing && same_alg
    };
    match kid {
        Some(kid) => match keys.find(kid) {
            Some(key) if usable(&key) => Ok(key),
            Some(_) => Err(invalid(format!("key {kid:?} is not for {alg:?} signatures"))),
            None => Err(Rejection::UnknownKey(Some(kid.to_owned()))),
        },
        None => {
            let family = DecodingKey::from_jwk;
            let fits: Vec<&Jwk> = keys
                .keys
                .iter()
                .filter(usable)
                .filter(|k| family(k).is_ok_and(|d| d.family() == alg.family()))
                .collect();
            match fits[..] {
                [one] => Ok(one),
                [] => Err(Rejection::UnknownKey(None)),
                _ => Err(invalid("no kid, and the issuer has several keys".into())),
            }
        }
    }
}

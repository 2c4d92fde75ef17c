//! Issuing grants: one grant per approved digest, with an id and an expiry.

use std::time::Duration;

use aml_core::{async_trait, FrozenProposal, Sha256Digest};

/// A store operation failed. A claim that fails this way blocks with
/// `approval_consume_error`, and the grant is left spent or unspent as it truly is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The requested lifetime is longer than the host allows.
    #[error("grant lifetime {requested:?} exceeds the maximum {max:?}")]
    TtlTooLong {
        /// What was asked for.
        requested: Duration,
        /// The host's maximum.
        max: Duration,
    },
    /// The database failed. The message carries the whole cause chain (the database's own
    /// words, never the connection string); the cause is kept as the source.
    #[error("{backend} {operation} failed: {cause}")]
    Database {
        /// `"sqlite"` or `"postgres"`.
        backend: &'static str,
        /// What the store was doing, e.g. `"claim"`.
        operation: &'static str,
        /// The cause chain as text.
        cause: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A grant with this id was already issued.
    #[error("grant {0} was already issued")]
    Duplicate(String),
    /// No randomness was available for a grant id.
    #[error("no randomness for a grant id: {0}")]
    Random(#[source] getrandom::Error),
    /// Writes accepted for a later commit (outcomes, receipt records) could not be stored;
    /// the store's log (`aml.state`) says why. An intent whose outcome was lost stays
    /// unresolved.
    #[error("{backend}: {count} outcome or receipt writes could not be stored")]
    Lost {
        /// `"sqlite"` or `"postgres"`.
        backend: &'static str,
        /// How many.
        count: u64,
    },
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl StoreError {
    /// A database failure during `operation`, keeping `source` and its cause chain.
    pub(crate) fn database(
        backend: &'static str,
        operation: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Database {
            backend,
            operation,
            cause: cause_chain(&source),
            source: Box::new(source),
        }
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// `error: cause: cause…`, skipping a cause whose text the previous message already ends
/// with (some errors print their source themselves).
pub(crate) fn cause_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = cause.source();
    }
    text
}

/// Lifetimes of issued grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantLifetimes {
    /// Used when the issuer asks for none (default 60 s).
    pub default: Duration,
    /// The longest the host allows (default 15 min).
    pub max: Duration,
}

impl Default for GrantLifetimes {
    fn default() -> Self {
        GrantLifetimes {
            default: Duration::from_secs(60),
            max: Duration::from_secs(15 * 60),
        }
    }
}

impl GrantLifetimes {
    /// The lifetime to use for a request, or why it is refused.
    pub fn resolve(&self, requested: Option<Duration>) -> Result<Duration, StoreError> {
        let ttl = requested.unwrap_or(self.default);
        if ttl > self.max {
            return Err(StoreError::TtlTooLong {
                requested: ttl,
                max: self.max,
            });
        }
        Ok(ttl)
    }

    /// [`resolve`](Self::resolve), in whole milliseconds.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn resolve_ms(&self, requested: Option<Duration>) -> Result<i64, StoreError> {
        Ok(i64::try_from(self.resolve(requested)?.as_millis()).unwrap_or(i64::MAX))
    }
}

/// Issues one-use grants, each bound to one proposal digest.
///
/// ```
/// use std::time::Duration;
/// use aml_core::{async_trait, Sha256Digest};
/// use aml_grants::{GrantIssuer, StoreError};
///
/// /// An issuer that keeps its grant ids in their own namespace of another store.
/// #[derive(Debug)]
/// struct Prefixed<I>(I);
///
/// #[async_trait]
/// impl<I: GrantIssuer> GrantIssuer for Prefixed<I> {
///     async fn issue_named(&self, id: &str, digest: Sha256Digest, ttl: Option<Duration>) -> Result<(), StoreError> {
///         self.0.issue_named(&format!("host-{id}"), digest, ttl).await
///     }
/// }
/// ```
#[async_trait]
pub trait GrantIssuer: Send + Sync + core::fmt::Debug {
    /// Issues a grant under an id chosen beforehand (e.g. one a signed approval statement
    /// names), for `digest`, expiring after `ttl` (or the default). An id that was already
    /// issued is refused with [`StoreError::Duplicate`], so a replayed statement cannot mint
    /// a second grant.
    async fn issue_named(
        &self,
        id: &str,
        digest: Sha256Digest,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError>;

    /// Like [`issue_named`](Self::issue_named) for `proposal`'s digest; a durable store
    /// also records the proposal's tool and resource, so the intent a claim writes
    /// ([`ClaimsWithIntent`](crate::ClaimsWithIntent)) names them.
    async fn issue_for(
        &self,
        id: &str,
        proposal: &FrozenProposal,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.issue_named(id, proposal.digest(), ttl).await
    }

    /// Issues a grant under a fresh random id; the id.
    async fn issue(&self, digest: Sha256Digest, ttl: Option<Duration>) -> Result<String, StoreError> {
        let id = new_grant_id()?;
        self.issue_named(&id, digest, ttl).await?;
        Ok(id)
    }
}

/// A fresh random grant id: 128 bits from the operating system, lowercase hex.
pub fn new_grant_id() -> Result<String, StoreError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(StoreError::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// How a stored grant answers a claim that changed nothing, from its row.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn classify(consumed: bool, expired: bool) -> aml_core::ClaimStatus {
    if consumed {
        aml_core::ClaimStatus::AlreadyClaimed
    } else if expired {
        aml_core::ClaimStatus::Expired
    } else {
        // The row matched but the atomic update did not: another claimant won between the
        // two statements.
        aml_core::ClaimStatus::AlreadyClaimed
    }
}

#[cfg(all(test, any(feature = "sqlite", feature = "postgres")))]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn database_errors_keep_the_cause_chain_in_their_message() {
        let inner = std::io::Error::other("disk full");
        let e = StoreError::database("sqlite", "claim", Outer(inner));
        assert_eq!(e.to_string(), "sqlite claim failed: outer: disk full");
        assert!(std::error::Error::source(&e).is_some());
    }
}

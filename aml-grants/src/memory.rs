//! One-use grants with expiry in this process's memory: for tests and single-process hosts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::{async_trait, ClaimError, ClaimStatus, GrantRef, GrantStore, Sha256Digest};

use crate::clock::{Clock, SystemClock};
use crate::grant::{GrantIssuer, GrantLifetimes, StoreError};

#[derive(Debug)]
struct Row {
    digest: Sha256Digest,
    expires_at: i64,
    consumed: bool,
}

/// Issued grants in memory; lost when the process ends (use SQLite or PostgreSQL for
/// anything that must survive a restart).
#[derive(Debug)]
pub struct MemoryGrants {
    rows: Mutex<HashMap<String, Row>>,
    clock: Arc<dyn Clock>,
    lifetimes: GrantLifetimes,
}

impl Default for MemoryGrants {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock), GrantLifetimes::default())
    }
}

impl MemoryGrants {
    /// A store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>, lifetimes: GrantLifetimes) -> Self {
        MemoryGrants {
            rows: Mutex::default(),
            clock,
            lifetimes,
        }
    }
}

#[async_trait]
impl GrantIssuer for MemoryGrants {
    async fn issue_named(
        &self,
        id: &str,
        digest: Sha256Digest,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let ttl = self.lifetimes.resolve(ttl)?;
        let expires_at = self
            .clock
            .now_ms()
            .saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        if rows.contains_key(id) {
            return Err(StoreError::Duplicate(id.to_owned()));
        }
        rows.insert(
            id.to_owned(),
            Row {
                digest,
                expires_at,
                consumed: false,
            },
        );
        Ok(())
    }
}

#[async_trait]
impl GrantStore for MemoryGrants {
    async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        let Some(id) = &grant.approval_id else {
            return Ok(ClaimStatus::NotIssued);
        };
        let now = self.clock.now_ms();
        let mut rows = self
            .rows
            .lock()
            .map_err(|_| ClaimError::new("grant store lock poisoned"))?;
        Ok(match rows.get_mut(id) {
            Some(row) if row.digest != grant.proposal_sha256 => ClaimStatus::NotIssued,
            Some(row) if row.consumed => ClaimStatus::AlreadyClaimed,
            Some(row) if row.expires_at <= now => ClaimStatus::Expired,
            Some(row) => {
                row.consumed = true;
                ClaimStatus::Claimed
            }
            None => ClaimStatus::NotIssued,
        })
    }
}

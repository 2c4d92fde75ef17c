//! Approvals shared by several hosts on one store: a proposal a person approved once is
//! dispatched once, whichever host (replica) receives it.

use std::sync::Arc;
use std::time::Duration;

use aml_core::{async_trait, Approval, ApprovalError, ApprovalHook, ApprovalRequest, Sha256Digest};

use crate::grant::StoreError;

/// A store that can say whether a digest has an issued grant nobody has claimed yet.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
/// use aml_core::{async_trait, Sha256Digest};
/// use aml_grants::{OpenGrants, StoreError};
///
/// /// Grant ids by digest, for a test; a claimed grant is removed.
/// #[derive(Debug, Default)]
/// struct Open(Mutex<HashMap<Sha256Digest, String>>);
///
/// #[async_trait]
/// impl OpenGrants for Open {
///     async fn open_grant(&self, digest: Sha256Digest) -> Result<Option<String>, StoreError> {
///         Ok(self.0.lock().unwrap().get(&digest).cloned())
///     }
/// }
/// ```
#[async_trait]
pub trait OpenGrants: Send + Sync + core::fmt::Debug {
    /// The id of an unexpired, unclaimed grant for `digest`, if there is one (the oldest).
    async fn open_grant(&self, digest: Sha256Digest) -> Result<Option<String>, StoreError>;
}

/// An approval hook for hosts that share one grant store (replicas behind one address): a
/// request whose exact proposal already has an open grant — a person approved it on any
/// host — is approved with that grant instead of asking again; a request still waiting for
/// its person takes such a grant as soon as it appears. Whoever claims the grant first
/// dispatches; every other request for that approval gets `approval_reused_or_expired`. An
/// approval is still one dispatch of one exact proposal; it is only no longer tied to the
/// host that showed it.
///
/// ```
/// # use std::sync::Arc;
/// # use aml_core::{approval_fn, Approval};
/// use aml_grants::{SharedApproval, SqliteStore};
/// # fn host(store: Arc<SqliteStore>) {
/// let person = Arc::new(approval_fn(|req| async move { Ok(Approval::decline(req.proposal().digest())) }));
/// let hook = SharedApproval::new(person, store);
/// # let _ = hook; }
/// ```
#[derive(Debug, Clone)]
pub struct SharedApproval {
    person: Arc<dyn ApprovalHook>,
    grants: Arc<dyn OpenGrants>,
    poll: Duration,
}

impl SharedApproval {
    /// Asks `person` unless `grants` has an open grant for the proposal; looks again every
    /// 200 ms while the person has not decided.
    pub fn new(person: Arc<dyn ApprovalHook>, grants: Arc<dyn OpenGrants>) -> Self {
        SharedApproval {
            person,
            grants,
            poll: Duration::from_millis(200),
        }
    }

    /// How often a waiting request looks for a grant issued elsewhere.
    pub fn with_poll(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    async fn issued_elsewhere(&self, digest: Sha256Digest) -> Result<String, ApprovalError> {
        loop {
            tokio::time::sleep(self.poll).await;
            if let Some(id) = self.open(digest).await? {
                return Ok(id);
            }
        }
    }

    async fn open(&self, digest: Sha256Digest) -> Result<Option<String>, ApprovalError> {
        self.grants
            .open_grant(digest)
            .await
            .map_err(|e| ApprovalError::with_source(format!("could not look for a shared grant: {e}"), e))
    }
}

#[async_trait]
impl ApprovalHook for SharedApproval {
    async fn request_approval(&self, request: ApprovalRequest) -> Result<Approval, ApprovalError> {
        let digest = request.proposal().digest();
        if let Some(id) = self.open(digest).await? {
            tracing::info!(target: "aml.approval", digest = %digest, grant_id = %id,
                           "the proposal was already approved; using its open grant");
            return Ok(Approval::approve(digest).with_id(id));
        }
        tokio::select! {
            decided = self.person.request_approval(request) => decided,
            id = self.issued_elsewhere(digest) => {
                let id = id?;
                tracing::info!(target: "aml.approval", digest = %digest, grant_id = %id,
                               "approved while waiting; using its open grant");
                Ok(Approval::approve(digest).with_id(id))
            }
        }
    }
}

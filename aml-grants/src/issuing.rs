//! An approval hook that issues a one-use grant for every approval it passes on.

use std::sync::Arc;
use std::time::Duration;

use aml_core::{async_trait, Approval, ApprovalError, ApprovalHook, ApprovalRequest};

use crate::grant::{new_grant_id, GrantIssuer, StoreError};

/// Wraps the host's approval decision: when it approves the exact digest, a grant is issued
/// in the durable store and named in the approval, so the boundary's claim spends exactly
/// that grant, once.
#[derive(Debug, Clone)]
pub struct IssuingApproval {
    decide: Arc<dyn ApprovalHook>,
    issuer: Arc<dyn GrantIssuer>,
    ttl: Option<Duration>,
}

impl IssuingApproval {
    /// Issues grants from `issuer` for approvals `decide` makes.
    pub fn new(decide: Arc<dyn ApprovalHook>, issuer: Arc<dyn GrantIssuer>) -> Self {
        IssuingApproval {
            decide,
            issuer,
            ttl: None,
        }
    }

    /// Grants expire after `ttl` instead of the store's default.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

#[async_trait]
impl ApprovalHook for IssuingApproval {
    async fn request_approval(&self, request: ApprovalRequest) -> Result<Approval, ApprovalError> {
        let proposal = request.proposal().clone();
        let digest = proposal.digest();
        let approval = self.decide.request_approval(request).await?;
        if !approval.approved || approval.proposal_sha256 != digest {
            // Nothing to issue; the boundary refuses it.
            return Ok(approval);
        }
        let issued = async {
            let id = new_grant_id()?;
            self.issuer.issue_for(&id, &proposal, self.ttl).await?;
            Ok::<_, StoreError>(id)
        };
        let id = issued
            .await
            .map_err(|e| ApprovalError::with_source(format!("could not issue the one-use grant: {e}"), e))?;
        Ok(approval.with_id(id))
    }
}

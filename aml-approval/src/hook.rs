//! The approval hook that turns a signed statement into an approval bound to one grant.

use std::sync::Arc;
use std::time::Duration;

use aml_core::{async_trait, Approval, ApprovalError, ApprovalHook, ApprovalRequest, FrozenProposal};
use aml_grants::{Clock, DecisionJournal, DecisionRecord, GrantIssuer, StoreError, SystemClock};

use crate::statement::{Keyring, SignedStatement, Verdict};

/// A proposal waiting for a person's decision.
#[derive(Debug, Clone)]
pub struct PendingApproval {
    /// The frozen proposal (canonical JSON, digest, tool, effect, resource, purpose).
    pub proposal: FrozenProposal,
    /// The grant id a decision should name.
    pub grant_id: String,
}

/// The channel did not produce a decision.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ChannelError(pub String);

/// Where a person's signed decision comes from: a web page, a terminal, a file.
///
/// ```
/// use aml_approval::{ApproverKey, ChannelError, DecisionChannel, PendingApproval, SignedStatement, Statement, Verdict, STATEMENT_PROTOCOL};
/// use aml_core::async_trait;
///
/// /// Signs every decision with one key: a stand-in for a person, for tests.
/// #[derive(Debug)]
/// struct AlwaysApprove(ApproverKey);
///
/// #[async_trait]
/// impl DecisionChannel for AlwaysApprove {
///     async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError> {
///         Statement {
///             protocol: STATEMENT_PROTOCOL.into(),
///             proposal_sha256: pending.proposal.digest().to_string(),
///             grant_id: pending.grant_id,
///             approver_key_id: self.0.key_id().into(),
///             decision: Verdict::Approve,
///             issued_at_ms: 0,
///             expires_at_ms: i64::MAX,
///         }
///         .sign(&self.0)
///         .map_err(|e| ChannelError(e.to_string()))
///     }
/// }
/// ```
#[async_trait]
pub trait DecisionChannel: Send + Sync + core::fmt::Debug {
    /// Waits for a signed decision about `pending`.
    async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError>;
}

/// Approves only on a valid signed statement, then issues the grant it names.
///
/// | statement | result |
/// |---|---|
/// | no decision within the timeout, channel failure | blocked, `approval_error` |
/// | malformed, unknown key, bad signature | blocked, `approval_error` |
/// | valid, but for another digest, expired, or `deny` | blocked, `approval_missing_or_mismatched` |
/// | valid approval | approved with the statement's grant id, issued now |
///
/// A replayed statement names a grant that was already issued: the approval still names it,
/// and the boundary's one-use claim refuses it (`approval_reused_or_expired`).
#[derive(Debug, Clone)]
pub struct SignedApprovalHook {
    keyring: Arc<Keyring>,
    channel: Arc<dyn DecisionChannel>,
    issuer: Arc<dyn GrantIssuer>,
    clock: Arc<dyn Clock>,
    timeout: Duration,
    grant_ttl: Option<Duration>,
    journal: Option<Arc<dyn DecisionJournal>>,
}

impl SignedApprovalHook {
    /// Statements from `channel`, verified against `keyring`, grants from `issuer`; waits at
    /// most five minutes for a decision.
    pub fn new(keyring: Keyring, channel: Arc<dyn DecisionChannel>, issuer: Arc<dyn GrantIssuer>) -> Self {
        SignedApprovalHook {
            keyring: Arc::new(keyring),
            channel,
            issuer,
            clock: Arc::new(SystemClock),
            timeout: Duration::from_secs(300),
            grant_ttl: None,
            journal: None,
        }
    }

    /// Records every verified decision (approve or deny) in `journal` before acting on it;
    /// if it cannot be recorded, the call is blocked (`approval_error`).
    pub fn with_journal(mut self, journal: Arc<dyn DecisionJournal>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// Waits at most `timeout` for a decision; then blocks.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Reads time from `clock` (for expiry checks).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Issued grants expire after `ttl` instead of the store's default.
    pub fn with_grant_ttl(mut self, ttl: Duration) -> Self {
        self.grant_ttl = Some(ttl);
        self
    }
}

#[async_trait]
impl ApprovalHook for SignedApprovalHook {
    async fn request_approval(&self, request: ApprovalRequest) -> Result<Approval, ApprovalError> {
        let digest = request.proposal().digest();
        let grant_id =
            aml_grants::new_grant_id().map_err(|e| ApprovalError::with_source("no grant id", e))?;
        let pending = PendingApproval {
            proposal: request.proposal().clone(),
            grant_id,
        };
        let signed = tokio::time::timeout(self.timeout, self.channel.decide(pending))
            .await
            .map_err(|_| ApprovalError::new(format!("no decision within {:?}", self.timeout)))?
            .map_err(|e| ApprovalError::with_source("the approval channel failed", e))?;
        let statement = self
            .keyring
            .verify(&signed)
            .map_err(|e| ApprovalError::with_source("the decision is not a valid signed statement", e))?;
        if let Some(journal) = &self.journal {
            let record = DecisionRecord {
                proposal_sha256: statement.proposal_sha256.clone(),
                grant_id: statement.grant_id.clone(),
                approver_key_id: statement.approver_key_id.clone(),
                decision: if statement.decision == Verdict::Approve {
                    "approve"
                } else {
                    "deny"
                }
                .to_owned(),
                statement_json: signed.to_value().to_string(),
            };
            journal
                .record_decision(&record)
                .await
                .map_err(|e| ApprovalError::with_source("could not journal the decision", e))?;
        }
        let current = statement.proposal_sha256 == digest.to_string()
            && statement.decision == Verdict::Approve
            && self.clock.now_ms() < statement.expires_at_ms;
        if !current {
            return Ok(Approval::decline(digest));
        }
        match self
            .issuer
            .issue_named(&statement.grant_id, digest, self.grant_ttl)
            .await
        {
            // A replay: the grant exists already, and the claim will refuse it if spent.
            Ok(()) | Err(StoreError::Duplicate(_)) => {}
            Err(e) => return Err(ApprovalError::with_source("could not issue the one-use grant", e)),
        }
        Ok(Approval::approve(digest).with_id(statement.grant_id.clone()))
    }
}

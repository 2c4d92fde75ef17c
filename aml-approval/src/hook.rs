//! The approval hook that turns a signed statement into an approval bound to one grant.

use std::sync::Arc;
use std::time::Duration;

use aml_core::{async_trait, Approval, ApprovalError, ApprovalHook, ApprovalRequest, FrozenProposal};
use aml_grants::{Clock, DecisionJournal, DecisionRecord, GrantIssuer, SystemClock};

use crate::keys::Keyring;
use crate::requester::Requester;
use crate::statement::{SignedStatement, StatementRules};

/// A proposal waiting for a person's decision.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PendingApproval {
    /// The frozen proposal (canonical JSON, digest, tool, effect, resource, purpose).
    pub proposal: FrozenProposal,
    /// The grant id a decision must name.
    pub grant_id: String,
    /// Who asks, as far as the host knows.
    pub requester: Requester,
    /// When the request stops waiting for a decision (ms since the epoch), if it has a limit.
    pub expires_at_ms: Option<i64>,
}

impl PendingApproval {
    /// `proposal` waiting for a decision that names `grant_id`; nobody known asks, no limit.
    pub fn new(proposal: FrozenProposal, grant_id: impl Into<String>) -> Self {
        PendingApproval {
            proposal,
            grant_id: grant_id.into(),
            requester: Requester::unknown(),
            expires_at_ms: None,
        }
    }

    /// Asked by `requester`.
    pub fn with_requester(mut self, requester: Requester) -> Self {
        self.requester = requester;
        self
    }

    /// Stops waiting at `expires_at_ms` (ms since the epoch).
    pub fn with_expiry(mut self, expires_at_ms: i64) -> Self {
        self.expires_at_ms = Some(expires_at_ms);
        self
    }
}

/// What the host tells about who asks, for each request (see
/// [`SignedApprovalHook::with_requester`]).
pub type RequesterOf = Arc<dyn Fn(&ApprovalRequest) -> Requester + Send + Sync>;

/// The channel did not produce a decision.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ChannelError(pub String);

/// Where a person's signed decision comes from: a web page, a terminal, a file.
///
/// ```
/// use std::time::Duration;
/// use aml_approval::{
///     ApproverKey, ChannelError, DecisionChannel, PendingApproval, SignedStatement, Statement,
///     StatementDecision, Validity,
/// };
/// use aml_core::async_trait;
/// use aml_grants::{Clock, SystemClock};
///
/// /// Signs every decision with one key: a stand-in for a person, for tests.
/// #[derive(Debug)]
/// struct AlwaysApprove(ApproverKey);
///
/// #[async_trait]
/// impl DecisionChannel for AlwaysApprove {
///     async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError> {
///         let fail = |e: aml_approval::StatementError| ChannelError(e.to_string());
///         let validity = Validity::lasting(SystemClock.now_ms(), Duration::from_secs(60)).map_err(fail)?;
///         Statement::new(
///             pending.proposal.digest(),
///             pending.grant_id,
///             self.0.key_id(),
///             StatementDecision::Approve,
///             validity,
///         )
///         .sign(&self.0)
///         .map_err(fail)
///     }
/// }
/// ```
#[async_trait]
pub trait DecisionChannel: Send + Sync + core::fmt::Debug {
    /// Waits for a signed decision about `pending`.
    async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError>;
}

/// Approves only on a valid signed statement for this exact request, then issues the grant
/// it names.
///
/// | statement | result |
/// |---|---|
/// | no decision within the timeout (or by the caller's deadline, when sooner), channel failure | blocked, `approval_error` |
/// | malformed, unknown key, bad signature | blocked, `approval_error` |
/// | valid, but for another digest or another grant id (e.g. one signed for an earlier request), `deny`, issued in the future (beyond the clock skew), valid for longer than the maximum lifetime, or expired | blocked, `approval_missing_or_mismatched` |
/// | valid approval of this digest and this request's grant id | approved; the grant is issued now |
///
/// Each request gets a fresh grant id, so a statement approves one request only: replayed
/// for an identical later request — or to another host's hook — it names the wrong grant.
#[derive(Clone)]
pub struct SignedApprovalHook {
    keyring: Arc<Keyring>,
    channel: Arc<dyn DecisionChannel>,
    issuer: Arc<dyn GrantIssuer>,
    clock: Arc<dyn Clock>,
    timeout: Duration,
    grant_ttl: Option<Duration>,
    rules: StatementRules,
    journal: Option<Arc<dyn DecisionJournal>>,
    requester: Option<RequesterOf>,
}

impl core::fmt::Debug for SignedApprovalHook {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SignedApprovalHook")
            .field("keyring", &self.keyring)
            .field("channel", &self.channel)
            .field("timeout", &self.timeout)
            .field("grant_ttl", &self.grant_ttl)
            .field("rules", &self.rules)
            .field("journal", &self.journal)
            .field("requester", &self.requester.as_ref().map(|_| "host-supplied"))
            .finish_non_exhaustive()
    }
}

impl SignedApprovalHook {
    /// Statements from `channel`, verified against `keyring`, grants from `issuer`; waits at
    /// most five minutes for a decision; [`StatementRules::default`] (24 h maximum lifetime,
    /// 30 s clock skew).
    pub fn new(keyring: Keyring, channel: Arc<dyn DecisionChannel>, issuer: Arc<dyn GrantIssuer>) -> Self {
        SignedApprovalHook {
            keyring: Arc::new(keyring),
            channel,
            issuer,
            clock: Arc::new(SystemClock),
            timeout: Duration::from_secs(300),
            grant_ttl: None,
            rules: StatementRules::default(),
            journal: None,
            requester: None,
        }
    }

    /// Tells the channel who asks for each request: `requester` reads it from the request
    /// (the page shows it, the history keeps it). Without it, nobody is known.
    pub fn with_requester(
        mut self,
        requester: impl Fn(&ApprovalRequest) -> Requester + Send + Sync + 'static,
    ) -> Self {
        self.requester = Some(Arc::new(requester));
        self
    }

    /// Records every verified decision (approve or deny) in `journal` before acting on it;
    /// if it cannot be recorded, the call is blocked (`approval_error`).
    pub fn with_journal(mut self, journal: Arc<dyn DecisionJournal>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// Waits at most `timeout` for a decision (less when the caller's deadline is sooner: see
    /// [`ApprovalRequest::deadline`]); then blocks.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Reads time from `clock` (for the statement's time checks).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Issued grants expire after `ttl` instead of the store's default.
    pub fn with_grant_ttl(mut self, ttl: Duration) -> Self {
        self.grant_ttl = Some(ttl);
        self
    }

    /// The host's limits on statements: maximum lifetime, clock skew.
    pub fn with_rules(mut self, rules: StatementRules) -> Self {
        self.rules = rules;
        self
    }
}

#[async_trait]
impl ApprovalHook for SignedApprovalHook {
    async fn request_approval(&self, request: ApprovalRequest) -> Result<Approval, ApprovalError> {
        let proposal = request.proposal().clone();
        let digest = proposal.digest();
        let grant_id =
            aml_grants::new_grant_id().map_err(|e| ApprovalError::with_source("no grant id", e))?;
        let requester = self
            .requester
            .as_ref()
            .map_or_else(Requester::unknown, |of| of(&request));
        // The person sees, and the wait lasts, until the caller's deadline when that is sooner.
        let wait = request.deadline().map_or(self.timeout, |at| {
            self.timeout
                .min(at.saturating_duration_since(std::time::Instant::now()))
        });
        let limit = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        let pending = PendingApproval::new(proposal, grant_id.clone())
            .with_requester(requester)
            .with_expiry(self.clock.now_ms().saturating_add(limit));
        let signed = tokio::time::timeout(wait, self.channel.decide(pending))
            .await
            .map_err(|_| ApprovalError::new(format!("no decision within {wait:?}")))?
            .map_err(|e| ApprovalError::with_source(format!("the approval channel failed: {e}"), e))?;
        let statement = self.keyring.verify(&signed).map_err(|e| {
            ApprovalError::with_source(format!("the decision is not a valid signed statement: {e}"), e)
        })?;
        if let Some(journal) = &self.journal {
            let record = DecisionRecord {
                proposal_sha256: statement.proposal_sha256().to_string(),
                grant_id: statement.grant_id().to_owned(),
                approver_key_id: statement.approver_key_id().to_owned(),
                decision: statement.decision().as_str().to_owned(),
                statement_json: signed.to_value().to_string(),
            };
            journal
                .record_decision(&record)
                .await
                .map_err(|e| ApprovalError::with_source(format!("could not journal the decision: {e}"), e))?;
        }
        let checked = statement.check(self.clock.now_ms(), &self.rules, Some(digest), Some(&grant_id));
        if let Err(refusal) = checked {
            tracing::info!(
                target: "aml.approval",
                digest = %digest,
                grant_id = %grant_id,
                approver_key_id = statement.approver_key_id(),
                refusal = refusal.as_str(),
                reason = statement.reason().map(|r| crate::display::shown(r).to_string()),
                "signed statement does not approve this request"
            );
            return Ok(Approval::decline(digest));
        }
        self.issuer
            .issue_for(&grant_id, request.proposal(), self.grant_ttl)
            .await
            .map_err(|e| ApprovalError::with_source(format!("could not issue the one-use grant: {e}"), e))?;
        tracing::info!(
            target: "aml.approval",
            digest = %digest,
            grant_id = %grant_id,
            approver_key_id = statement.approver_key_id(),
            "signed approval accepted; grant issued"
        );
        Ok(Approval::approve(digest).with_id(grant_id))
    }
}

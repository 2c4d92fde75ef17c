//! The host's hooks: approval, the one-use grant claim, and tool execution.
//!
//! Every hook is async and stored as `Arc<dyn …>`. A hook that fails — by returning `Err`
//! or by panicking — never lets the call through: approval and claim failures block, a
//! tool failure after entry is `unknown`.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Mutex;

use serde_json::{Map, Value};

use crate::plan::Plan;
use crate::proposal::FrozenProposal;
use crate::Sha256Digest;

pub use async_trait::async_trait;

macro_rules! hook_error {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, thiserror::Error)]
        #[error("{message}")]
        pub struct $name {
            message: String,
            #[source]
            source: Option<Box<dyn std::error::Error + Send + Sync>>,
        }

        impl $name {
            /// An error with a message.
            pub fn new(message: impl Into<String>) -> Self {
                $name { message: message.into(), source: None }
            }
            /// An error caused by `source`.
            pub fn with_source(
                message: impl Into<String>,
                source: impl std::error::Error + Send + Sync + 'static,
            ) -> Self {
                $name { message: message.into(), source: Some(Box::new(source)) }
            }
        }
    };
}

hook_error! {
    /// The approval hook failed before returning a decision. Blocks with `approval_error`.
    ApprovalError
}
hook_error! {
    /// The grant store failed. Blocks with `approval_consume_error`; the grant may be spent.
    ClaimError
}
/// The tool failed. The outcome is `unknown` (it was entered: a side effect may have
/// happened), unless the executor says it never reached the tool
/// ([`not_entered`](Self::not_entered)): the call is then `blocked`,
/// `host_dispatch_not_entered`.
///
/// ```
/// use aml_core::ToolError;
/// // Nothing was sent: the connection to the server was refused.
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let e = ToolError::not_entered("the server is not reachable", refused);
/// assert!(!e.entered());
/// // The request left; whether it ran is unknown.
/// assert!(ToolError::new("the connection reset").entered());
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
    entered: bool,
}

impl ToolError {
    /// A failure after the tool was entered (or where that cannot be ruled out).
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            source: None,
            entered: true,
        }
    }

    /// [`new`](Self::new), caused by `source`.
    pub fn with_source(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ToolError {
            source: Some(Box::new(source)),
            ..Self::new(message)
        }
    }

    /// A failure before any of the call reached the tool: no connection could be made, or
    /// the request could not be encoded. Say it only when that is certain; a request that
    /// may have left is [`new`](Self::new). A grant claimed for the call stays spent.
    pub fn not_entered(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ToolError {
            entered: false,
            ..Self::with_source(message, source)
        }
    }

    /// Whether the tool may have been entered (`false` only for
    /// [`not_entered`](Self::not_entered)).
    pub fn entered(&self) -> bool {
        self.entered
    }
}
hook_error! {
    /// The usage ledger failed ([`crate::UsageLedger`]). Before the plan, the call is denied
    /// (`policy_error`); when counting, it is blocked (`policy_error`): nothing runs.
    UsageError
}

/// What the boundary asks the approval hook: approve exactly this frozen proposal.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub(crate) proposal: FrozenProposal,
    pub(crate) plan: Plan,
    pub(crate) facts: crate::CallFacts,
    pub(crate) deadline: Option<std::time::Instant>,
}

impl ApprovalRequest {
    /// The frozen proposal (canonical JSON, digest, tool, effect, resource, purpose).
    pub fn proposal(&self) -> &FrozenProposal {
        &self.proposal
    }
    /// The plan that required approval.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    /// The caller's deadline, when the call has one: the boundary stops waiting for a
    /// decision then (blocked, nothing claimed), so a hook that shows a person how long is
    /// left should count down to the earlier of this and its own timeout.
    pub fn deadline(&self) -> Option<std::time::Instant> {
        self.deadline
    }
    /// Who asks (the caller, and the client software as it named itself) and the usage the
    /// plan was decided on: for the person asked, who should know who is asking.
    pub fn facts(&self) -> &crate::CallFacts {
        &self.facts
    }
}

/// A host's answer: `{ "approved": true, "proposal_sha256": "<digest>" }`, optionally with
/// an `approval_id` that names the one-use grant.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, from = "crate::ObjectOnly<ApprovalFields>")]
pub struct Approval {
    /// Whether the proposal was approved.
    pub approved: bool,
    /// The digest the approval is bound to; it must equal the frozen proposal's.
    pub proposal_sha256: Sha256Digest,
    /// The grant this approval issued, if the host's grant store names grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

/// [`Approval`]'s fields as serde reads them, from an object only (see [`crate::ObjectOnly`]).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalFields {
    approved: bool,
    proposal_sha256: Sha256Digest,
    #[serde(default)]
    approval_id: Option<String>,
}

impl From<crate::ObjectOnly<ApprovalFields>> for Approval {
    fn from(crate::ObjectOnly(f): crate::ObjectOnly<ApprovalFields>) -> Self {
        Approval {
            approved: f.approved,
            proposal_sha256: f.proposal_sha256,
            approval_id: f.approval_id,
        }
    }
}

impl Approval {
    /// An approval of `digest`.
    pub fn approve(digest: Sha256Digest) -> Self {
        Approval {
            approved: true,
            proposal_sha256: digest,
            approval_id: None,
        }
    }
    /// A refusal of `digest`.
    pub fn decline(digest: Sha256Digest) -> Self {
        Approval {
            approved: false,
            proposal_sha256: digest,
            approval_id: None,
        }
    }
    /// Names the one-use grant this approval issued.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.approval_id = Some(id.into());
        self
    }
}

/// Asks a human (or the host's approval system) to approve one exact proposal.
///
/// ```
/// use aml_core::{async_trait, Approval, ApprovalError, ApprovalHook, ApprovalRequest};
///
/// /// Approves only proposals to one resource.
/// #[derive(Debug)]
/// struct OnlyTeam;
///
/// #[async_trait]
/// impl ApprovalHook for OnlyTeam {
///     async fn request_approval(&self, req: ApprovalRequest) -> Result<Approval, ApprovalError> {
///         let digest = req.proposal().digest();
///         Ok(if req.proposal().resource() == "team@example.test" {
///             Approval::approve(digest)
///         } else {
///             Approval::decline(digest)
///         })
///     }
/// }
/// ```
#[async_trait]
pub trait ApprovalHook: Send + Sync + core::fmt::Debug {
    /// Returns the decision bound to `request.proposal().digest()`.
    async fn request_approval(&self, request: ApprovalRequest) -> Result<Approval, ApprovalError>;
}

/// The grant a claim is made for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GrantRef {
    /// The approved proposal digest.
    pub proposal_sha256: Sha256Digest,
    /// The approval's grant id, when the approval named one.
    pub approval_id: Option<String>,
}

/// The result of the atomic one-use compare-and-set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimStatus {
    /// This call spent the grant; dispatch may proceed.
    Claimed,
    /// The grant was already spent. Blocks with `approval_reused_or_expired`.
    AlreadyClaimed,
    /// The grant expired. Blocks with `approval_reused_or_expired`.
    Expired,
    /// No such grant was issued for this digest (unknown id, another digest, or an
    /// approval that names no grant where the store requires one). Blocks with
    /// `approval_reused_or_expired`.
    NotIssued,
}

/// An atomic, one-use grant store: each grant is claimed at most once.
///
/// ```
/// use std::sync::Mutex;
/// use std::collections::HashSet;
/// use aml_core::{async_trait, ClaimError, ClaimStatus, GrantRef, GrantStore};
///
/// #[derive(Debug, Default)]
/// struct Spent(Mutex<HashSet<GrantRef>>);
///
/// #[async_trait]
/// impl GrantStore for Spent {
///     async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
///         let mut spent = self.0.lock().map_err(|_| ClaimError::new("store poisoned"))?;
///         Ok(if spent.insert(grant.clone()) { ClaimStatus::Claimed } else { ClaimStatus::AlreadyClaimed })
///     }
/// }
/// ```
#[async_trait]
pub trait GrantStore: Send + Sync + core::fmt::Debug {
    /// Spends `grant` if it is unspent and unexpired.
    async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError>;

    /// Takes up a one-use call id of an adapter's wire (A2UI's `functionCallId`), which no
    /// approval issued: `Claimed` the first time, `AlreadyClaimed` after (ADR 019). `id`'s
    /// digest stands for the call id and can be no proposal's. The default claims it like a
    /// grant, which suits stores that spend any reference once ([`InMemoryGrantStore`]);
    /// a store that spends only grants it issued answers `NotIssued`, which the gate refuses
    /// as a host error, and should keep call ids itself.
    async fn claim_call_id(&self, id: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        self.claim(id).await
    }
}

/// Proof that a grant was spent for this dispatch. Not `Clone`: it is used once.
#[derive(Debug, PartialEq, Eq)]
pub struct ClaimedGrant(GrantRef);

impl ClaimedGrant {
    pub(crate) fn new(grant: GrantRef) -> Self {
        ClaimedGrant(grant)
    }
    /// The spent grant.
    pub fn grant(&self) -> &GrantRef {
        &self.0
    }
}

/// One-use grants kept in this process's memory: for tests and single-process hosts.
/// Unnamed approvals are keyed by digest, so one proposal is dispatched at most once.
#[derive(Debug, Default)]
pub struct InMemoryGrantStore {
    spent: Mutex<HashSet<GrantRef>>,
}

impl InMemoryGrantStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl GrantStore for InMemoryGrantStore {
    async fn claim(&self, grant: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        let mut spent = self
            .spent
            .lock()
            .map_err(|_| ClaimError::new("grant store lock poisoned"))?;
        Ok(if spent.insert(grant.clone()) {
            ClaimStatus::Claimed
        } else {
            ClaimStatus::AlreadyClaimed
        })
    }
}

/// What the tool receives: the frozen proposal and a fresh copy of its arguments, parsed
/// from the exact bytes that were hashed and approved.
#[derive(Debug)]
pub struct ToolCall {
    pub(crate) proposal: FrozenProposal,
    /// Parsed from the frozen bytes on first use: a tool that forwards the bytes themselves
    /// (a relay) never pays for the copy.
    pub(crate) arguments: std::sync::OnceLock<Map<String, Value>>,
    pub(crate) grant: Option<ClaimedGrant>,
}

impl ToolCall {
    /// The frozen proposal.
    pub fn proposal(&self) -> &FrozenProposal {
        &self.proposal
    }
    /// The frozen arguments.
    pub fn arguments(&self) -> &Map<String, Value> {
        self.arguments.get_or_init(|| self.proposal.arguments())
    }
    /// The spent grant, for approval-required rules.
    pub fn grant(&self) -> Option<&ClaimedGrant> {
        self.grant.as_ref()
    }
    /// Takes the arguments.
    pub fn into_arguments(self) -> Map<String, Value> {
        match self.arguments.into_inner() {
            Some(arguments) => arguments,
            None => self.proposal.arguments(),
        }
    }
}

/// Runs the host's real tool, once, with the frozen arguments.
///
/// ```
/// use aml_core::{async_trait, ToolCall, ToolError, ToolExecutor};
/// use serde_json::{json, Value};
///
/// #[derive(Debug)]
/// struct Echo;
///
/// #[async_trait]
/// impl ToolExecutor for Echo {
///     async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
///         Ok(json!({ "echo": call.arguments() }))
///     }
/// }
/// ```
#[async_trait]
pub trait ToolExecutor: Send + Sync + core::fmt::Debug {
    /// Performs the call. `Err` (or a panic) after entry makes the outcome `unknown`.
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError>;
}

/// An [`ApprovalHook`] from an async closure (like tower's `service_fn`).
///
/// ```
/// use aml_core::{approval_fn, Approval};
/// let hook = approval_fn(|req| async move { Ok(Approval::approve(req.proposal().digest())) });
/// ```
pub fn approval_fn<F, Fut>(f: F) -> ApprovalFn<F>
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Approval, ApprovalError>> + Send,
{
    ApprovalFn(f)
}

/// See [`approval_fn`].
pub struct ApprovalFn<F>(F);

impl<F> core::fmt::Debug for ApprovalFn<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ApprovalFn")
    }
}

#[async_trait]
impl<F, Fut> ApprovalHook for ApprovalFn<F>
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Approval, ApprovalError>> + Send,
{
    async fn request_approval(&self, request: ApprovalRequest) -> Result<Approval, ApprovalError> {
        (self.0)(request).await
    }
}

/// A [`ToolExecutor`] from an async closure.
///
/// ```
/// use aml_core::tool_fn;
/// let tool = tool_fn(|call| async move { Ok(serde_json::json!({"to": call.arguments()["to"]})) });
/// ```
pub fn tool_fn<F, Fut>(f: F) -> ToolFn<F>
where
    F: Fn(ToolCall) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Value, ToolError>> + Send,
{
    ToolFn(f)
}

/// See [`tool_fn`].
pub struct ToolFn<F>(F);

impl<F> core::fmt::Debug for ToolFn<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ToolFn")
    }
}

#[async_trait]
impl<F, Fut> ToolExecutor for ToolFn<F>
where
    F: Fn(ToolCall) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Value, ToolError>> + Send,
{
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
        (self.0)(call).await
    }
}

//! The guarded function tool: one host tool behind the boundary.
//!
//! The host owns everything but the arguments: tool name, effect, purpose, the resource
//! mapper, the policy and the hooks. A call captures the arguments once (canonically),
//! maps them to the real destination with a read-only mapper, freezes and plans the
//! proposal — all before the returned future is first polled — and then dispatches.
//!
//! The mapper receives the snapshot by shared reference and cannot change it; this does
//! not compile:
//!
//! ```compile_fail,E0596
//! use aml_core::{ArgumentSnapshot, MapperError};
//! fn resource_for(snapshot: &ArgumentSnapshot) -> Result<String, MapperError> {
//!     snapshot.as_map().insert("to".into(), "other@example.test".into());
//!     Ok("team@example.test".into())
//! }
//! ```
//!
//! while reading it does:
//!
//! ```
//! use aml_core::{ArgumentSnapshot, MapperError};
//! fn resource_for(snapshot: &ArgumentSnapshot) -> Result<String, MapperError> {
//!     snapshot.str("to").map(str::to_owned).ok_or_else(|| MapperError::new("no `to`"))
//! }
//! ```

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::dispatch::{ActionBoundary, ActionBoundaryBuilder, DispatchOutcome};
use crate::front::CallTracker;
use crate::plan::{refused, Plan};
use crate::proposal::{FrozenProposal, ProposalParts, ProposalRefusal};
use crate::reason::{PlanReason, ReceiptReason};
use crate::unwind::panic_message;
use crate::{ApprovalHook, Deadline, Effect, GrantStore, JsonErrorCode, PolicySource, ToolExecutor};
use tracing::Instrument;

/// The captured arguments, read-only.
#[derive(Debug)]
pub struct ArgumentSnapshot(Map<String, Value>);

/// A snapshot of arguments a gateway holds itself (an input-required retry's `arguments`), to
/// apply a tool's [`ResourceMapper`] to. Read-only like every snapshot (ADR 003).
impl From<Map<String, Value>> for ArgumentSnapshot {
    fn from(arguments: Map<String, Value>) -> Self {
        ArgumentSnapshot(arguments)
    }
}

impl ArgumentSnapshot {
    /// The arguments object.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }
    /// One argument.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }
    /// One string argument.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }
}

/// A resource mapper failed: a host error (no plan, no receipt), or, when made with
/// [`refused`](Self::refused), a refusal of the call's arguments that a gate answers as such.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct MapperError {
    message: String,
    refusal: Option<crate::Refusal>,
}

impl MapperError {
    /// A mapper error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        MapperError {
            message: message.into(),
            refusal: None,
        }
    }

    /// The call's arguments name a resource the host refuses (a path outside its root, a URL
    /// with userinfo, …): [`crate::ToolGate`] answers the call as refused with `refusal`
    /// (its record says so) instead of as a host error.
    ///
    /// ```
    /// use aml_core::{MapperError, Refusal};
    /// let refused = MapperError::refused(Refusal::ResourceOutsideRoot, "the path leaves /srv");
    /// assert_eq!(refused.refusal(), Some(Refusal::ResourceOutsideRoot));
    /// assert_eq!(MapperError::new("bug").refusal(), None);
    /// ```
    pub fn refused(refusal: crate::Refusal, detail: impl Into<String>) -> Self {
        MapperError {
            message: detail.into(),
            refusal: Some(refusal),
        }
    }

    /// The refusal, for an error made with [`refused`](Self::refused).
    pub fn refusal(&self) -> Option<crate::Refusal> {
        self.refusal
    }
}

/// Maps the frozen argument snapshot to the real destination that policy rules name.
///
/// Closures `Fn(&ArgumentSnapshot) -> Result<String, MapperError>` implement it.
///
/// ```
/// use aml_core::{ArgumentSnapshot, MapperError, ResourceMapper};
///
/// /// The destination is the `to` argument, lower-cased by the host's own rules.
/// #[derive(Debug)]
/// struct Recipient;
///
/// impl ResourceMapper for Recipient {
///     fn resource_for(&self, snapshot: &ArgumentSnapshot) -> Result<String, MapperError> {
///         snapshot.str("to").map(str::to_lowercase).ok_or_else(|| MapperError::new("missing `to`"))
///     }
/// }
/// ```
pub trait ResourceMapper: Send + Sync {
    /// The destination for these arguments.
    fn resource_for(&self, snapshot: &ArgumentSnapshot) -> Result<String, MapperError>;

    /// Every destination of these arguments, in order (a move names its source and its
    /// destination): each is decided by the policy and all are in the digest. By default the
    /// one of [`resource_for`](Self::resource_for).
    fn resources_for(&self, snapshot: &ArgumentSnapshot) -> Result<Vec<String>, MapperError> {
        self.resource_for(snapshot).map(|one| vec![one])
    }
}

impl<F> ResourceMapper for F
where
    F: Fn(&ArgumentSnapshot) -> Result<String, MapperError> + Send + Sync,
{
    fn resource_for(&self, snapshot: &ArgumentSnapshot) -> Result<String, MapperError> {
        self(snapshot)
    }
}

/// A host error from a guarded tool: no plan and no receipt exist.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardedToolError {
    /// The resource mapper returned an error (displayed as the mapper's own message). Host
    /// state it changed is the host's to reconcile.
    #[error(transparent)]
    Mapper(MapperError),
    /// The resource mapper panicked.
    #[error("resource mapper {0}")]
    MapperPanicked(String),
}

/// The host's configuration is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No resource mapper was given.
    #[error("a guarded tool needs a resource mapper")]
    MissingResourceMapper,
    /// Tool name or purpose would make every proposal invalid.
    #[error("invalid guarded tool configuration: {0}")]
    Invalid(String),
}

/// One host tool behind the boundary.
///
/// ```
/// use std::sync::Arc;
/// use aml_core::{approval_fn, tool_fn, Approval, Effect, GuardedTool, Policy, ReceiptReason};
/// use serde_json::json;
///
/// let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
///     {"tool": "send_message", "effect": "send", "resource": "team@example.test",
///      "requires_approval": true}]}));
/// let tool = GuardedTool::builder("send_message", Effect::Send, "Send a status update", Arc::new(policy))
///     .resource_for(|s: &aml_core::ArgumentSnapshot| {
///         s.str("to").map(str::to_owned).ok_or_else(|| aml_core::MapperError::new("no `to`"))
///     })
///     .approval(approval_fn(|req| async move { Ok(Approval::approve(req.proposal().digest())) }))
///     .executor(tool_fn(|call| async move { Ok(json!({"sent_to": call.arguments()["to"]})) }))
///     .build()
///     .unwrap();
///
/// let args = json!({"to": "team@example.test", "body": "Build passed."});
/// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let first = rt.block_on(tool.call(&args)).unwrap();
/// assert_eq!(first.receipt().reason(), ReceiptReason::HostDispatchReturned);
/// // The one-use grant is spent: the same approval cannot run the tool again.
/// let replay = rt.block_on(tool.call(&args)).unwrap();
/// assert_eq!(replay.receipt().reason(), ReceiptReason::ApprovalReusedOrExpired);
/// ```
pub struct GuardedTool {
    tool: Box<str>,
    effect: Effect,
    purpose: Box<str>,
    mapper: Arc<dyn ResourceMapper>,
    boundary: ActionBoundary,
}

impl core::fmt::Debug for GuardedTool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GuardedTool")
            .field("tool", &self.tool)
            .field("effect", &self.effect)
            .field("purpose", &self.purpose)
            .field("boundary", &self.boundary)
            .finish_non_exhaustive()
    }
}

/// Builds a [`GuardedTool`].
pub struct GuardedToolBuilder {
    tool: String,
    effect: Effect,
    purpose: String,
    mapper: Option<Arc<dyn ResourceMapper>>,
    boundary: ActionBoundaryBuilder,
}

impl core::fmt::Debug for GuardedToolBuilder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GuardedToolBuilder")
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

impl GuardedToolBuilder {
    /// The read-only resource mapper (required).
    pub fn resource_for(mut self, mapper: impl ResourceMapper + 'static) -> Self {
        self.mapper = Some(Arc::new(mapper));
        self
    }
    /// Like [`resource_for`](Self::resource_for), for a shared mapper.
    pub fn resource_for_arc(mut self, mapper: Arc<dyn ResourceMapper>) -> Self {
        self.mapper = Some(mapper);
        self
    }
    /// See [`ActionBoundaryBuilder::approval`].
    pub fn approval(mut self, hook: impl ApprovalHook + 'static) -> Self {
        self.boundary = self.boundary.approval(hook);
        self
    }
    /// See [`ActionBoundaryBuilder::approval_arc`].
    pub fn approval_arc(mut self, hook: Arc<dyn ApprovalHook>) -> Self {
        self.boundary = self.boundary.approval_arc(hook);
        self
    }
    /// See [`ActionBoundaryBuilder::grants`].
    pub fn grants(mut self, store: impl GrantStore + 'static) -> Self {
        self.boundary = self.boundary.grants(store);
        self
    }
    /// See [`ActionBoundaryBuilder::grants_arc`].
    pub fn grants_arc(mut self, store: Arc<dyn GrantStore>) -> Self {
        self.boundary = self.boundary.grants_arc(store);
        self
    }
    /// See [`ActionBoundaryBuilder::replayable_approvals`].
    pub fn replayable_approvals(mut self) -> Self {
        self.boundary = self.boundary.replayable_approvals();
        self
    }
    /// See [`ActionBoundaryBuilder::executor`].
    pub fn executor(mut self, tool: impl ToolExecutor + 'static) -> Self {
        self.boundary = self.boundary.executor(tool);
        self
    }
    /// See [`ActionBoundaryBuilder::sink`].
    pub fn sink(mut self, sink: impl crate::ReceiptSink + 'static) -> Self {
        self.boundary = self.boundary.sink(sink);
        self
    }
    /// See [`ActionBoundaryBuilder::sink_arc`].
    pub fn sink_arc(mut self, sink: Arc<dyn crate::ReceiptSink>) -> Self {
        self.boundary = self.boundary.sink_arc(sink);
        self
    }
    /// See [`ActionBoundaryBuilder::executor_arc`].
    pub fn executor_arc(mut self, tool: Arc<dyn ToolExecutor>) -> Self {
        self.boundary = self.boundary.executor_arc(tool);
        self
    }
    /// The tool, or why the configuration is unusable.
    pub fn build(self) -> Result<GuardedTool, ConfigError> {
        let mapper = self.mapper.ok_or(ConfigError::MissingResourceMapper)?;
        // Freeze a probe proposal to apply the exact proposal rules to the host's strings.
        let probe = FrozenProposal::freeze(ProposalParts {
            tool: &self.tool,
            effect: self.effect,
            resource: "probe",
            purpose: &self.purpose,
            arguments: &Map::new(),
        });
        if let Err(e) = probe {
            return Err(ConfigError::Invalid(e.detail().to_owned()));
        }
        Ok(GuardedTool {
            tool: self.tool.into(),
            effect: self.effect,
            purpose: self.purpose.into(),
            mapper,
            boundary: self.boundary.build(),
        })
    }
}

/// A call prepared synchronously: either a blocked outcome or a plan to dispatch.
pub(crate) enum Prepared {
    Ended(DispatchOutcome),
    Planned(crate::Planned),
}

/// What the host declares for one tool: everything of a proposal but the arguments and the
/// resource, and the mapper that finds the resource.
pub(crate) struct ToolIdentity<'a> {
    pub(crate) tool: &'a str,
    pub(crate) effect: Effect,
    pub(crate) purpose: &'a str,
    pub(crate) mapper: &'a dyn ResourceMapper,
}

/// Maps, freezes and plans captured arguments (shared by every front door).
pub(crate) fn prepare_call(
    identity: &ToolIdentity<'_>,
    arguments: Map<String, Value>,
    policy: &crate::Policy,
    facts: crate::CallFacts,
    tracker: &mut CallTracker,
) -> Result<Prepared, GuardedToolError> {
    tracker.called_by(&facts.caller);
    let snapshot = ArgumentSnapshot(arguments);
    let resources = match catch_unwind(AssertUnwindSafe(|| identity.mapper.resources_for(&snapshot))) {
        Ok(Ok(resources)) if !resources.is_empty() => resources,
        Ok(Ok(_)) => {
            return Err(GuardedToolError::Mapper(MapperError::new(
                "the resource mapper named no resource",
            )))
        }
        Ok(Err(e)) => return Err(GuardedToolError::Mapper(e)),
        Err(payload) => return Err(GuardedToolError::MapperPanicked(panic_message(payload.as_ref()))),
    };
    let more: Vec<&str> = resources[1..].iter().map(String::as_str).collect();
    let frozen = FrozenProposal::freeze_many(
        ProposalParts {
            tool: identity.tool,
            effect: identity.effect,
            resource: &resources[0],
            purpose: identity.purpose,
            arguments: snapshot.as_map(),
        },
        &more,
    );
    let planned = match frozen {
        Ok(frozen) => crate::plan::plan_frozen_for(frozen, policy, facts),
        Err(refusal) => refused(refusal),
    };
    tracker.planned(planned.plan(), identity.effect, planned.policies());
    Ok(Prepared::Planned(planned))
}

impl GuardedTool {
    /// Starts a builder.
    pub fn builder(
        tool: impl Into<String>,
        effect: Effect,
        purpose: impl Into<String>,
        policy: impl PolicySource + 'static,
    ) -> GuardedToolBuilder {
        GuardedToolBuilder {
            tool: tool.into(),
            effect,
            purpose: purpose.into(),
            mapper: None,
            boundary: ActionBoundary::builder(policy),
        }
    }

    /// The boundary behind this tool.
    pub fn boundary(&self) -> &ActionBoundary {
        &self.boundary
    }

    /// The tool identity in its proposals.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The declared effect.
    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// The host purpose text.
    pub fn purpose(&self) -> &str {
        &self.purpose
    }

    /// The resource mapper.
    pub fn mapper(&self) -> &Arc<dyn ResourceMapper> {
        &self.mapper
    }

    /// This tool as a catalog registration with the input schema an adapter enforces (its
    /// hooks stay with [`boundary`](Self::boundary)): to serve it through a
    /// [`crate::ToolGate`].
    #[cfg(feature = "catalog")]
    pub fn registration(&self, input_schema: Value) -> Result<crate::ToolRegistration, crate::CatalogError> {
        crate::ToolRegistration::with_mapper(
            self.tool.as_ref(),
            self.effect,
            self.purpose.as_ref(),
            Arc::clone(&self.mapper),
            input_schema,
        )
    }

    /// Calls the tool with typed arguments.
    ///
    /// Capture, mapping and planning happen now; the returned future does not borrow
    /// `args`, so nothing the caller does to them afterwards reaches the tool.
    pub fn call<T: Serialize + ?Sized>(
        &self,
        args: &T,
    ) -> impl Future<Output = Result<DispatchOutcome, GuardedToolError>> + Send + '_ {
        let mut tracker = self.tracker();
        let prepared = match crate::capture::capture(args) {
            Ok(value) => self.prepare(value, &mut tracker),
            Err(e) => Ok(capture_refused(e.code(), e.detail().to_owned())),
        };
        self.finish(tracker, prepared, None)
    }

    /// Calls the tool with arguments given as JSON text from an agent, parsed strictly
    /// ([`crate::strict`]); text the parser refuses blocks with its `AML_JSON_*` code.
    pub fn call_json(
        &self,
        text: impl AsRef<[u8]>,
    ) -> impl Future<Output = Result<DispatchOutcome, GuardedToolError>> + Send + '_ {
        self.call_json_inner(text.as_ref(), None)
    }

    /// Like [`call_json`](Self::call_json), waiting for approval only until `deadline`
    /// (see [`Deadline`]).
    pub fn call_json_until(
        &self,
        text: impl AsRef<[u8]>,
        deadline: Deadline,
    ) -> impl Future<Output = Result<DispatchOutcome, GuardedToolError>> + Send + '_ {
        self.call_json_inner(text.as_ref(), Some(deadline))
    }

    fn call_json_inner(
        &self,
        text: &[u8],
        deadline: Option<Deadline>,
    ) -> impl Future<Output = Result<DispatchOutcome, GuardedToolError>> + Send + '_ {
        let mut tracker = self.tracker();
        let prepared = match crate::strict::parse_slice(text) {
            Ok(value) => self.prepare(value, &mut tracker),
            Err(e) => Ok(capture_refused(e.code(), e.to_string())),
        };
        self.finish(tracker, prepared, deadline)
    }

    fn tracker(&self) -> CallTracker {
        CallTracker::start(&Arc::from("core"), &self.tool, self.boundary.sink())
    }

    async fn finish(
        &self,
        tracker: CallTracker,
        prepared: Result<Prepared, GuardedToolError>,
        deadline: Option<Deadline>,
    ) -> Result<DispatchOutcome, GuardedToolError> {
        let outcome = match prepared {
            Err(host) => {
                tracker.finish(|r| r.host_error = Some(host.to_string()));
                return Err(host);
            }
            Ok(Prepared::Ended(outcome)) => outcome,
            Ok(Prepared::Planned(planned)) => {
                let executor = self.boundary.executor().cloned();
                let span = tracker.span.clone();
                self.boundary
                    .dispatch_to(
                        planned,
                        executor.as_deref(),
                        crate::deadline::Watch::until(deadline),
                        &tracker.progress,
                    )
                    .instrument(span)
                    .await
            }
        };
        tracker.finish_outcome(&outcome);
        Ok(outcome)
    }

    fn prepare(&self, value: Value, tracker: &mut CallTracker) -> Result<Prepared, GuardedToolError> {
        let Value::Object(map) = value else {
            let refusal = refused(ProposalRefusal::invalid_arguments());
            return Ok(Prepared::Planned(refusal));
        };
        let identity = ToolIdentity {
            tool: &self.tool,
            effect: self.effect,
            purpose: &self.purpose,
            mapper: self.mapper.as_ref(),
        };
        prepare_call(
            &identity,
            map,
            &self.boundary.policy().current(),
            crate::CallFacts::default(),
            tracker,
        )
    }
}

pub(crate) fn capture_refused(code: JsonErrorCode, detail: String) -> Prepared {
    let plan = Plan::denied(PlanReason::InvalidProposal);
    Prepared::Ended(DispatchOutcome::ended(
        plan,
        ReceiptReason::from(code),
        Some(detail),
    ))
}

#[cfg(test)]
#[path = "guarded_tests.rs"]
mod tests;

//! The one way to run a call (ADR 019): a [`CallRequest`] in, one [`CallOutcome`] out, and
//! one record written by the core.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use serde_json::Value;
use tracing::Instrument;

use crate::deadline::{CallerGone, Watch};
use crate::dispatch::{Authorization, DispatchOutcome};
use crate::front::CallTracker;
use crate::gate::{PreparedCall, Stage, ToolGate};
use crate::hooks::{ClaimStatus, GrantRef, ToolExecutor};
use crate::outcome::{CallOutcome, HostError, Unknown};
use crate::runtime::{BoxedFuture, CallRuntime};
use crate::unwind::{guarded, with_causes};
use crate::{CallFacts, Caller, Deadline, Refusal, Sha256Digest};

/// The arguments of a call, as the adapter's wire delivered them.
#[derive(Debug, Clone)]
pub enum Arguments<'a> {
    /// The agent's own JSON text (preferred): parsed strictly, and every number checked
    /// for exactness before anything rounds it.
    Bytes(&'a [u8]),
    /// A value the wire's library parsed already. Integers beyond ±2^53 are still refused;
    /// fractions were rounded by whoever parsed them, which only bytes can reveal.
    Value(Value),
}

/// One call, as an adapter reads it off its wire.
///
/// ```
/// use std::time::{Duration, Instant};
/// use aml_core::CallRequest;
/// let request = CallRequest::bytes("fetch_record", br#"{"id": 7}"#)
///     .deadline(Instant::now() + Duration::from_secs(30))
///     .caller_gone(std::future::pending());
/// assert_eq!(request.tool(), "fetch_record");
/// ```
#[derive(Debug)]
pub struct CallRequest<'a> {
    tool: &'a str,
    arguments: Arguments<'a>,
    deadline: Option<Instant>,
    gone: Option<CallerGone>,
    executor: Option<Arc<dyn ToolExecutor>>,
    call_id: Option<&'a str>,
    caller: Caller,
}

impl<'a> CallRequest<'a> {
    /// A call of `tool` with the agent's argument text.
    pub fn bytes(tool: &'a str, arguments: &'a [u8]) -> Self {
        Self::new(tool, Arguments::Bytes(arguments))
    }

    /// A call of `tool` with arguments the wire's library parsed.
    pub fn value(tool: &'a str, arguments: Value) -> Self {
        Self::new(tool, Arguments::Value(arguments))
    }

    /// A call of `tool` with `arguments`.
    pub fn new(tool: &'a str, arguments: Arguments<'a>) -> Self {
        CallRequest {
            tool,
            arguments,
            deadline: None,
            gone: None,
            executor: None,
            call_id: None,
            caller: Caller::local(),
        }
    }

    /// Who makes the call (default: [`Caller::local`]): the Cedar principal, what budgets
    /// count per, and named in the call's record.
    pub fn caller(mut self, caller: Caller) -> Self {
        self.caller = caller;
        self
    }

    /// Answer by `at`: approval stops waiting (blocked, nothing claimed), and a tool still
    /// running then is answered [`Unknown`] with `still_running` (it finishes and is
    /// recorded on its own). Needs a gate with a [`CallRuntime`].
    pub fn deadline(mut self, at: Instant) -> Self {
        self.deadline = Some(at);
        self
    }

    /// Stop the call if `signal` completes before the one-use claim (the caller left); from
    /// the claim on, the call finishes regardless.
    pub fn caller_gone(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.gone = Some(CallerGone::new(signal));
        self
    }

    /// The executor for this one call (a forward to an upstream server), used when the
    /// tool's registration has none; else the boundary's.
    pub fn executor(mut self, executor: Arc<dyn ToolExecutor>) -> Self {
        self.executor = Some(executor);
        self
    }

    /// The wire's one-use id of this call (A2UI's `functionCallId`): claimed in the
    /// boundary's grant store before the plan runs, so a replay is refused
    /// (`duplicate_call`) and nothing runs twice.
    pub fn call_id(mut self, id: &'a str) -> Self {
        self.call_id = Some(id);
        self
    }

    /// The tool named.
    pub fn tool(&self) -> &str {
        self.tool
    }
}

/// The grant that stands for a one-use call id: SHA-256 of `aml-call-id/1`, the adapter and
/// the id (so it can be neither a proposal's digest nor another adapter's id), named by the id.
pub(crate) fn call_id_grant(adapter: &str, id: &str) -> GrantRef {
    let mut text = Vec::with_capacity(16 + adapter.len() + id.len());
    text.extend_from_slice(b"aml-call-id/1\n");
    text.extend_from_slice(adapter.as_bytes());
    text.push(b'\n');
    text.extend_from_slice(id.as_bytes());
    GrantRef {
        proposal_sha256: Sha256Digest::of(&text),
        approval_id: Some(id.to_owned()),
    }
}

impl ToolGate {
    /// Runs one call to its end (ADR 019): lookup, strict parse and number exactness (for
    /// bytes), schema, the one-use call id, resource mapping, plan, approval bounded by the
    /// deadline and the caller-gone signal, the one-use claim, both re-checks, the tool once
    /// with the frozen arguments, and the call's one record.
    ///
    /// Everything up to the plan happens before this returns; the future borrows nothing.
    /// Dropped before the claim, it claims nothing and the call is recorded blocked; from the
    /// claim on, the rest of the call is handed to the gate's [`CallRuntime`] when this
    /// future is dropped or its deadline passes, so the tool finishes and is recorded once.
    ///
    /// ```
    /// use aml_core::{tool_fn, ActionBoundary, CallOutcome, CallRequest, Effect, MemorySink, Policy,
    ///                ResourceRule, ToolCatalog, ToolGate, ToolRegistration};
    /// use serde_json::json;
    ///
    /// let catalog = ToolCatalog::new().with(ToolRegistration::new(
    ///     "fetch_record", Effect::Read, "Inspect a record", ResourceRule::Fixed("records".into()),
    ///     json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}),
    /// ).unwrap()).unwrap();
    /// let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
    ///     {"tool": "fetch_record", "effect": "read", "resource": "records", "requires_approval": false}]}));
    /// let sink = MemorySink::new();
    /// let boundary = ActionBoundary::builder(std::sync::Arc::new(policy))
    ///     .executor(tool_fn(|call| async move { Ok(json!({"id": call.arguments()["id"]})) }))
    ///     .sink(sink.clone())
    ///     .build();
    /// let gate = ToolGate::new(catalog, boundary).for_adapter("docs");
    ///
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// let done = rt.block_on(gate.call(CallRequest::bytes("fetch_record", br#"{"id": 42}"#)));
    /// assert!(matches!(&done, CallOutcome::Dispatched(d) if d.output() == &json!({"id": 42})));
    /// // Beyond 2^53 a double no longer holds every integer: refused, never rounded.
    /// let big = rt.block_on(gate.call(CallRequest::bytes("fetch_record", br#"{"id": 9007199254740993}"#)));
    /// assert_eq!((big.status(), big.reason()), ("refused", "inexact_number"));
    /// assert_eq!(sink.calls().len(), 2);
    /// ```
    pub fn call(&self, request: CallRequest<'_>) -> impl Future<Output = CallOutcome> + Send + 'static {
        let CallRequest {
            tool,
            arguments,
            deadline,
            gone,
            executor,
            call_id,
            caller,
        } = request;
        let start = self.start(tool, &CallFacts::of(caller), arguments, deadline);
        let gate = self.clone();
        let call_id = call_id.map(str::to_owned);
        async move {
            let (tracker, planned, registered) = match start {
                Start::Ended(outcome) => return outcome,
                Start::Planned(parts) => parts,
            };
            let executor = registered
                .or(executor)
                .or_else(|| gate.boundary().executor().cloned());
            gate.run_planned(tracker, planned, executor, deadline, gone, call_id)
                .await
        }
    }

    /// Records a call the adapter refused before it could make a request of it (a malformed
    /// envelope, a body too large to read, a malformed deadline): every call ends in one
    /// record. `tool` is what the request named, if anything.
    pub fn refuse_request(&self, tool: &str, refusal: Refusal, detail: String) -> CallOutcome {
        let tracker = CallTracker::start(self.adapter_arc(), tool, self.boundary().sink());
        tracker.finish(|r| {
            r.refusal = Some(refusal);
            r.detail = Some(detail.clone());
        });
        CallOutcome::refused(refusal, detail)
    }

    /// The synchronous part: everything up to the plan.
    fn start(
        &self,
        tool: &str,
        facts: &CallFacts,
        arguments: Arguments<'_>,
        deadline: Option<Instant>,
    ) -> Start {
        if deadline.is_some() && self.runtime().is_none() {
            let message = "this gate has no runtime to keep a deadline (ToolGate::with_runtime)".to_owned();
            let tracker = CallTracker::start(self.adapter_arc(), tool, self.boundary().sink());
            tracker.finish(|r| r.host_error = Some(message.clone()));
            return Start::Ended(CallOutcome::HostError(HostError { message }));
        }
        let now = self.runtime().map_or_else(Instant::now, |runtime| runtime.now());
        if deadline.is_some_and(|at| now >= at) {
            let detail = "the deadline had passed when the request arrived".to_owned();
            return Start::Ended(self.refuse_request(tool, Refusal::DeadlinePassed, detail));
        }
        let prepared = match arguments {
            Arguments::Bytes(bytes) => self.prepare_bytes(tool, facts, bytes),
            Arguments::Value(value) => self.prepare_exact_value(tool, facts, value),
        };
        let PreparedCall { stage, .. } = prepared;
        match stage {
            Stage::Ended(outcome) => Start::Ended(outcome.into()),
            Stage::Planned {
                tracker,
                planned,
                executor,
            } => Start::Planned((tracker, planned, executor)),
        }
    }

    async fn run_planned(
        self,
        tracker: CallTracker,
        planned: crate::Planned,
        executor: Option<Arc<dyn ToolExecutor>>,
        deadline: Option<Instant>,
        gone: Option<CallerGone>,
        call_id: Option<String>,
    ) -> CallOutcome {
        if let Some(id) = call_id {
            if let Err(ended) = self.claim_call_id(&id).await {
                finish_unplanned(tracker, &ended);
                return ended;
            }
        }
        let boundary = self.boundary();
        let span = tracker.span.clone();
        let Some(executor) = executor else {
            // Boxed: it ends at once, and inline its future would size every call's.
            let outcome =
                Box::pin(boundary.dispatch_to(planned, None, Watch::until(None), &tracker.progress)).await;
            tracker.finish_outcome(&outcome);
            return CallOutcome::of_dispatch(outcome);
        };
        let runtime = self.runtime().cloned();
        let timer = |at| {
            let runtime = runtime
                .as_ref()
                .expect("checked in start: a deadline comes with a runtime");
            Deadline::new(at, runtime.sleep_until(at))
        };
        let watch = Watch::new(deadline.map(timer), gone);
        let authorization = boundary
            .authorize_tracked(planned, watch, &tracker.progress)
            .instrument(span.clone())
            .await;
        let authorized = match authorization {
            Authorization::Authorized(authorized) => authorized,
            Authorization::Ended(outcome) => {
                tracker.finish_outcome(&outcome);
                return CallOutcome::of_dispatch(outcome);
            }
        };
        // From the claim on, the rest runs to its end and writes the record, whoever waits.
        let plan = deadline.map(|_| authorized.plan().clone());
        let rest = async move {
            let outcome = authorized
                .execute_tracked(executor.as_ref(), &tracker.progress)
                .instrument(span)
                .await;
            tracker.finish_outcome(&outcome);
            outcome
        };
        let mut rest = FinishAfterClaim {
            rest: Some(Box::pin(rest)),
            runtime: runtime.clone(),
        };
        let (Some(at), Some(plan)) = (deadline, plan) else {
            return CallOutcome::of_dispatch((&mut rest).await);
        };
        let mut timer = timer(at);
        let raced = std::future::poll_fn(|cx| {
            if let Poll::Ready(outcome) = Pin::new(&mut rest).poll(cx) {
                return Poll::Ready(Some(outcome));
            }
            timer.poll_timer(cx).map(|()| None)
        })
        .await;
        match raced {
            Some(outcome) => CallOutcome::of_dispatch(outcome),
            // `rest` is handed to the runtime as this returns.
            None => CallOutcome::Unknown(Unknown { plan, ended: None }),
        }
    }

    /// Takes up a one-use call id in the boundary's grant store.
    async fn claim_call_id(&self, id: &str) -> Result<(), CallOutcome> {
        let Some(store) = self.boundary().grants() else {
            // `replayable_approvals`: the host chose to keep no one-use state.
            return Ok(());
        };
        let grant = call_id_grant(self.adapter(), id);
        match guarded(|| store.claim_call_id(&grant)).await {
            Ok(Ok(ClaimStatus::Claimed)) => Ok(()),
            Ok(Ok(ClaimStatus::NotIssued)) => Err(CallOutcome::HostError(HostError {
                message: "the grant store keeps no one-use call ids (GrantStore::claim_call_id)".to_owned(),
            })),
            Ok(Ok(_)) => Err(CallOutcome::refused(
                Refusal::DuplicateCall,
                "the call id was already taken up; nothing ran again".to_owned(),
            )),
            Ok(Err(e)) => Err(CallOutcome::HostError(HostError {
                message: format!("the one-use call id could not be claimed: {}", with_causes(&e)),
            })),
            Err(panic) => Err(CallOutcome::HostError(HostError {
                message: format!("the one-use call id could not be claimed: {panic}"),
            })),
        }
    }
}

/// Records a call that ended after it was planned but before the boundary ran it.
fn finish_unplanned(tracker: CallTracker, outcome: &CallOutcome) {
    tracker.finish(|r| {
        r.plan = None;
        r.refusal = outcome.refusal();
        r.host_error = outcome.host_error().map(str::to_owned);
        if r.host_error.is_none() {
            r.detail = outcome.detail().map(str::to_owned);
        }
    });
}

type Planned = (CallTracker, crate::Planned, Option<Arc<dyn ToolExecutor>>);

enum Start {
    Ended(CallOutcome),
    Planned(Planned),
}

/// The rest of a call that spent its grant, polled in place; dropped unfinished, it is
/// handed to the runtime to finish (ADR 006, ADR 019).
struct FinishAfterClaim {
    rest: Option<BoxedFuture<DispatchOutcome>>,
    runtime: Option<Arc<dyn CallRuntime>>,
}

impl Future for FinishAfterClaim {
    type Output = DispatchOutcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<DispatchOutcome> {
        let Some(rest) = self.rest.as_mut() else {
            // Polled after completion: a caller bug; stay pending rather than panic.
            return Poll::Pending;
        };
        let outcome = std::task::ready!(rest.as_mut().poll(cx));
        self.rest = None;
        Poll::Ready(outcome)
    }
}

impl Drop for FinishAfterClaim {
    fn drop(&mut self) {
        if let (Some(rest), Some(runtime)) = (self.rest.take(), &self.runtime) {
            runtime.spawn(Box::pin(async move {
                rest.await;
            }));
        }
        // Without a runtime the rest is dropped here, and its tracker records the call
        // `unknown`: cut off while the tool ran.
    }
}

#[cfg(test)]
#[path = "call_tests.rs"]
mod tests;

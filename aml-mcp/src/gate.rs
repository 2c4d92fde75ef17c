//! The MCP gate: one `tools/call` in, a verdict out, with the host's [`ToolGate`] between
//! the agent and the server. Used by the client gate, the server gate and the guarded tool
//! server; the only place where a gate outcome becomes MCP.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::{
    async_trait, CallOutcome, CallRequest, Plan, Receipt, Refusal, ResultSummary, ToolCall, ToolError,
    ToolExecutor, ToolGate,
};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, MetaObject, ResultType};
use serde_json::Value;

/// What became of the call at the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultStatus {
    /// `"not_called"`: the request never left the gate.
    NotCalled,
    /// `"returned"`: the server returned a result.
    Returned,
    /// `"tool_error"`: the server returned a result with `isError` (the call was made; a
    /// side effect may have happened).
    ToolError,
    /// `"input_required"`: the server answered with an `input_required` result (protocol
    /// 2026-07-28): it asks the client for input and a retried call with `inputResponses`.
    /// The call was made; a side effect may have happened.
    InputRequired,
    /// `"unknown"`: the request left (or the tool was entered) and no result came back.
    Unknown,
}

impl ResultStatus {
    /// The report string.
    pub const fn as_str(self) -> &'static str {
        match self {
            ResultStatus::NotCalled => "not_called",
            ResultStatus::Returned => "returned",
            ResultStatus::ToolError => "tool_error",
            ResultStatus::InputRequired => "input_required",
            ResultStatus::Unknown => "unknown",
        }
    }
}

/// Why a forwarded call has no result: the request may have reached the server, so the
/// outcome is `unknown`, except after [`NotSent`](Self::NotSent) (blocked,
/// `host_dispatch_not_entered`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ForwardError {
    /// No result arrived in time.
    #[error("no result within {0:?}")]
    Timeout(Duration),
    /// The server took the call up without completing it (input required, or a task).
    #[error("the server did not complete the call ({0})")]
    NotCompleted(&'static str),
    /// The server answered with a JSON-RPC error.
    #[error("the server answered with an error ({code}): {message}")]
    Server {
        /// The JSON-RPC error code.
        code: i32,
        /// Its message.
        message: String,
    },
    /// The transport failed after the request was handed to it.
    #[error("the transport failed")]
    Transport(#[source] rmcp::ServiceError),
    /// The client cancelled the call after it was forwarded; the cancellation was passed on.
    #[error("the client cancelled the call after it was forwarded")]
    Cancelled,
    /// The server went away (it exited, closed its output or stopped reading its input)
    /// before it answered.
    #[error("the server went away before it answered: {0}")]
    UpstreamGone(String),
    /// The server's answer could not be read (not JSON-RPC, or larger than the limit).
    #[error("the server's answer could not be read: {0}")]
    Unreadable(String),
    /// The request was never sent (the server had gone before it could be): the only
    /// failure after which the call is known not to have reached the server.
    #[error("the request was not sent: {0}")]
    NotSent(String),
}

/// The `_meta` key under which gated results carry the verdict.
pub const VERDICT_META_KEY: &str = "aml.action-boundary/verdict";

/// The gate's verdict on one `tools/call`.
#[derive(Debug, Clone)]
pub struct McpVerdict {
    outcome: CallOutcome,
    status: ResultStatus,
    result: Option<CallToolResult>,
    result_digest: Option<ResultSummary>,
    /// Why the server's result is not strict JSON (its digest is then of its text).
    result_not_strict: Option<String>,
    /// Why the server's answer was not relayed (the verdict cannot be added to it safely).
    result_withheld: Option<String>,
}

impl McpVerdict {
    /// The verdict on `outcome`, with the server's (or host tool's) `result` if one came back.
    pub fn new(outcome: CallOutcome, result: Option<CallToolResult>) -> Self {
        let mut verdict = Self::from_outcome(outcome);
        if let (Some(r), ResultStatus::Returned | ResultStatus::ToolError) = (&result, verdict.status) {
            verdict.status = match r.is_error {
                Some(true) => ResultStatus::ToolError,
                _ => ResultStatus::Returned,
            };
        }
        verdict.result = result.filter(|_| verdict.result_digest.is_some());
        verdict
    }

    /// The verdict on `outcome` alone: the status comes from the tool's output (the result
    /// object as JSON: `isError`, `resultType`), for gates that relay the result as bytes.
    pub fn from_outcome(outcome: impl Into<CallOutcome>) -> Self {
        let outcome = outcome.into();
        let (status, result_digest) = match &outcome {
            CallOutcome::Dispatched(done) => {
                let output = done.output();
                let status = if output["isError"] == true {
                    ResultStatus::ToolError
                } else if output["resultType"] == "input_required" {
                    ResultStatus::InputRequired
                } else {
                    ResultStatus::Returned
                };
                // The same digest as the call record's: of the output the gate saw.
                (status, Some(done.output_summary()))
            }
            CallOutcome::Unknown(_) => (ResultStatus::Unknown, None),
            CallOutcome::Refused(_) | CallOutcome::HostError(_) | CallOutcome::Blocked(_) => {
                (ResultStatus::NotCalled, None)
            }
        };
        McpVerdict {
            outcome,
            status,
            result: None,
            result_digest,
            result_not_strict: None,
            result_withheld: None,
        }
    }

    /// For a relay whose output was the result's text (a result that is not strict JSON):
    /// the status read from the answer, and why the result is not strict JSON or was not
    /// relayed. Only for a call that was dispatched.
    pub(crate) fn with_answer_notes(
        mut self,
        status: ResultStatus,
        not_strict: Option<String>,
        withheld: Option<String>,
    ) -> Self {
        if matches!(self.outcome, CallOutcome::Dispatched(_)) {
            self.status = status;
        }
        self.result_not_strict = not_strict;
        self.result_withheld = withheld;
        self
    }

    /// Why the server's result is not strict JSON, when it is not: the verdict's
    /// `result_digest` is then the SHA-256 of the result's exact text written as one JSON
    /// string.
    pub fn result_not_strict(&self) -> Option<&str> {
        self.result_not_strict.as_deref()
    }

    /// Why the server's answer was not relayed to the client, when it was not: the call was
    /// made, but the verdict could not be added to the answer without guessing what the
    /// client would read (a member written twice, `_meta` not an object, …).
    pub fn result_withheld(&self) -> Option<&str> {
        self.result_withheld.as_deref()
    }

    /// The gate's outcome (refusal, plan, receipt, host error, detail).
    pub fn outcome(&self) -> &CallOutcome {
        &self.outcome
    }
    /// What became of the call at the server.
    pub fn status(&self) -> ResultStatus {
        self.status
    }
    /// The refusal before any plan.
    pub fn rejection(&self) -> Option<Refusal> {
        self.outcome.refusal()
    }
    /// The plan, when one was made.
    pub fn plan(&self) -> Option<&Plan> {
        self.outcome.plan()
    }
    /// The receipt, when one was made.
    pub fn receipt(&self) -> Option<&Receipt> {
        self.outcome.receipt()
    }
    /// The result's digest and size, as the call record holds them, when one came back.
    pub fn result_digest(&self) -> Option<ResultSummary> {
        self.result_digest
    }
    /// The server's result, when it returned one.
    pub fn result(&self) -> Option<&CallToolResult> {
        self.result.as_ref()
    }

    /// The verdict as JSON, as results carry it under `_meta`:
    /// `{rejection, plan, receipt, mcp_result_status}`, plus `result_digest` (`{sha256, bytes}`
    /// of the result object as compact JSON with sorted keys, the same as in the call record)
    /// when one came back, `host_error` when the host failed, and `result_not_strict` /
    /// `result_withheld` when a relayed result is not strict JSON / was not relayed (see
    /// [`result_not_strict`](Self::result_not_strict)). Never the result itself.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self.view()).unwrap_or(Value::Null)
    }

    /// [`to_value`](Self::to_value) as compact JSON text: the same text serde writes for it,
    /// written directly (a relay puts one on every answer).
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(640);
        out.push(b'{');
        if let Some(error) = self.outcome.host_error() {
            out.extend_from_slice(b"\"host_error\":");
            // Writing a string to a Vec cannot fail.
            let _ = serde_json::to_writer(&mut out, error);
            out.push(b',');
        }
        out.extend_from_slice(b"\"mcp_result_status\":\"");
        out.extend_from_slice(self.status.as_str().as_bytes());
        out.extend_from_slice(b"\",\"plan\":");
        match self.plan() {
            Some(plan) => plan.write_json(&mut out),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"receipt\":");
        match self.receipt() {
            Some(receipt) => receipt.write_json(&mut out),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"rejection\":");
        match self.rejection() {
            Some(refusal) => {
                out.push(b'"');
                out.extend_from_slice(refusal.as_str().as_bytes());
                out.push(b'"');
            }
            None => out.extend_from_slice(b"null"),
        }
        if let Some(summary) = &self.result_digest {
            out.extend_from_slice(b",\"result_digest\":{\"sha256\":\"");
            out.extend_from_slice(summary.sha256.hex().as_str().as_bytes());
            out.extend_from_slice(b"\",\"bytes\":");
            out.extend_from_slice(summary.bytes.to_string().as_bytes());
            out.push(b'}');
        }
        for (name, note) in [
            ("result_not_strict", &self.result_not_strict),
            ("result_withheld", &self.result_withheld),
        ] {
            if let Some(note) = note {
                out.extend_from_slice(b",\"");
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b"\":");
                // Writing a string to a Vec cannot fail.
                let _ = serde_json::to_writer(&mut out, note);
            }
        }
        out.push(b'}');
        // Every piece above is UTF-8.
        String::from_utf8(out).unwrap_or_default()
    }

    fn view(&self) -> VerdictView<'_> {
        VerdictView {
            host_error: self.outcome.host_error(),
            mcp_result_status: self.status.as_str(),
            plan: self.plan(),
            receipt: self.receipt(),
            rejection: self.rejection().map(Refusal::as_str),
            result_digest: self.result_digest.as_ref(),
            result_not_strict: self.result_not_strict.as_deref(),
            result_withheld: self.result_withheld.as_deref(),
        }
    }

    /// What to answer an MCP client with: the server's result for a call it returned (with
    /// the verdict under `_meta`), else an `isError` result that says why.
    pub fn into_call_result(self) -> CallToolResult {
        let meta = self.to_value();
        let explanation = self.explanation();
        let mut result = self
            .result
            .unwrap_or_else(|| CallToolResult::error(vec![ContentBlock::text(explanation)]));
        // Required on every result from protocol 2026-07-28 on; an older upstream omits it.
        result.result_type.get_or_insert(ResultType::COMPLETE);
        let mut object = result.meta.take().map(|m| m.0).unwrap_or_default();
        object.insert(VERDICT_META_KEY.to_owned(), meta);
        result.meta = Some(MetaObject(object));
        result
    }

    /// A sentence for the agent on why the call has no result (for an `isError` answer).
    pub fn explanation(&self) -> String {
        match &self.outcome {
            CallOutcome::Refused(refused) => format!("AML gate refused the call: {}", refused.refusal()),
            CallOutcome::HostError(_) => "AML gate could not prepare this call (host error).".to_owned(),
            CallOutcome::Unknown(_) => format!(
                "Tool outcome is uncertain; do not retry automatically ({}).",
                self.outcome.reason()
            ),
            CallOutcome::Blocked(blocked) => format!("AML boundary blocked this call: {}", blocked.reason()),
            // The server answered; this sentence is only for a gate that has no result to relay.
            CallOutcome::Dispatched(_) => "AML gate: the tool returned no result.".to_owned(),
        }
    }
}

/// The verdict's JSON members (in name order, as a JSON object value lists them).
#[derive(serde::Serialize)]
struct VerdictView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    host_error: Option<&'a str>,
    mcp_result_status: &'static str,
    plan: Option<&'a Plan>,
    receipt: Option<&'a Receipt>,
    rejection: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result_digest: Option<&'a ResultSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result_not_strict: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result_withheld: Option<&'a str>,
}

/// The gate for MCP: the host's [`ToolGate`] (catalog, policy, hooks, receipt sink), with
/// each call forwarded by a per-call executor.
#[derive(Debug, Clone)]
pub struct McpGate {
    gate: ToolGate,
}

impl McpGate {
    /// Gates calls with `gate`; its records name the adapter `mcp`.
    pub fn new(gate: ToolGate) -> Self {
        McpGate {
            gate: gate.for_adapter("mcp").with_runtime(aml_core::TokioRuntime),
        }
    }

    /// The host's gate.
    pub fn gate(&self) -> &ToolGate {
        &self.gate
    }

    /// Gates one call. `forward` sends the call, with the frozen arguments, to the server;
    /// it runs at most once, and only if the boundary dispatches. An `Err` from it means the
    /// request may have reached the server: the outcome is `unknown`. The arguments arrive
    /// parsed by rmcp: an integer beyond ±2^53 is still refused (`inexact_number`).
    pub async fn call<F, Fut>(&self, mut params: CallToolRequestParams, forward: F) -> McpVerdict
    where
        F: Fn(CallToolRequestParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<CallToolResult, ForwardError>> + Send,
    {
        let name = params.name.to_string();
        // Taken, not copied: `Forward` sends the frozen arguments in their place.
        let arguments = Value::Object(params.arguments.take().unwrap_or_default());
        let forward = Arc::new(Forward {
            template: params,
            send: forward,
            result: Mutex::new(None),
        });
        let request =
            CallRequest::value(&name, arguments).executor(Arc::clone(&forward) as Arc<dyn ToolExecutor>);
        let outcome = self.gate.call(request).await;
        let result = forward.result.lock().unwrap_or_else(|p| p.into_inner()).take();
        McpVerdict::new(outcome, result)
    }
}

/// The per-call executor: sends the frozen arguments in the caller's request and keeps the
/// server's typed result for the answer.
struct Forward<F> {
    template: CallToolRequestParams,
    send: F,
    result: Mutex<Option<CallToolResult>>,
}

impl<F> core::fmt::Debug for Forward<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Forward")
            .field("tool", &self.template.name)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<F, Fut> ToolExecutor for Forward<F>
where
    F: Fn(CallToolRequestParams) -> Fut + Send + Sync,
    Fut: Future<Output = Result<CallToolResult, ForwardError>> + Send,
{
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
        let mut params = self.template.clone();
        params.arguments = Some(call.into_arguments());
        let result = (self.send)(params).await.map_err(forward_failed)?;
        let output = serde_json::to_value(&result).unwrap_or(Value::Null);
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        Ok(output)
    }
}

/// The tool error of a forward that failed: not entered only when nothing was sent.
pub(crate) fn forward_failed(e: ForwardError) -> ToolError {
    match e {
        ForwardError::NotSent(_) => ToolError::not_entered("the call was not forwarded", e),
        e => ToolError::with_source("forwarding the call failed", e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aml_core::{tool_fn, ActionBoundary, Effect, Policy, ToolCatalog, ToolRegistration};
    use serde_json::json;
    use std::sync::Arc;

    fn gate() -> ToolGate {
        // "to" may be a number: the host's own mapper then fails (a host error).
        let schema = json!({"type": "object", "properties": {"to": {"type": ["string", "number"]}},
                            "required": ["to"]});
        let catalog = ToolCatalog::new()
            .with(
                ToolRegistration::new(
                    "send",
                    Effect::Send,
                    "p",
                    |s: &aml_core::ArgumentSnapshot| {
                        s.str("to")
                            .map(str::to_owned)
                            .ok_or_else(|| aml_core::MapperError::new("no address for a number"))
                    },
                    schema,
                )
                .unwrap(),
            )
            .unwrap();
        let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
            {"tool": "send", "effect": "send", "resource": "ok", "requires_approval": false},
            {"tool": "send", "effect": "send", "resource": "fails", "requires_approval": false}]}));
        ToolGate::new(
            catalog,
            ActionBoundary::builder(std::sync::Arc::new(policy)).build(),
        )
    }

    #[tokio::test]
    async fn to_json_is_the_text_serde_writes_for_every_kind_of_verdict() {
        let gate = gate();
        let tool: Arc<dyn ToolExecutor> = Arc::new(tool_fn(|call| async move {
            match call.arguments()["to"].as_str() {
                Some("fails") => Err(ToolError::new("the tool failed")),
                _ => Ok(json!({"content": [], "isError": false, "k\u{e9}y": "v\"\n"})),
            }
        }));
        let calls = [
            ("send", json!({"to": "ok"})),        // dispatched, with a result digest
            ("send", json!({"to": "fails"})),     // unknown
            ("send", json!({"to": "elsewhere"})), // denied: blocked
            ("send", json!({"to": 7})),           // host error (the host's mapper)
            ("send", json!({})),                  // refused by the schema
            ("nothing", json!({})),               // refused: unregistered
        ];
        let mut statuses = Vec::new();
        for (name, arguments) in calls {
            let request = CallRequest::value(name, arguments).executor(Arc::clone(&tool));
            let outcome = gate.call(request).await;
            let verdict = McpVerdict::from_outcome(outcome);
            statuses.push(verdict.status());
            let noted = verdict.clone().with_answer_notes(
                ResultStatus::ToolError,
                Some("AML_JSON_DUPLICATE_KEY at byte 3: \"k\"".into()),
                Some("its result's \"_meta\" is not an object".into()),
            );
            for verdict in [verdict, noted] {
                assert_eq!(verdict.to_json(), serde_json::to_string(&verdict.view()).unwrap());
                assert_eq!(
                    serde_json::from_str::<Value>(&verdict.to_json()).unwrap(),
                    verdict.to_value()
                );
            }
        }
        let not_called = ResultStatus::NotCalled;
        assert_eq!(
            statuses,
            [
                ResultStatus::Returned,
                ResultStatus::Unknown,
                not_called,
                not_called,
                not_called,
                not_called
            ]
        );
    }
}

//! The MCP gate: one `tools/call` in, a verdict out, with the boundary between the agent
//! and the server. Used by the client gate, the server gate and the proxy.

use std::future::Future;
use std::sync::{Arc, Mutex};

use aml_core::{
    tool_fn, ApprovalHook, ExecutionStatus, GrantStore, GuardedTool, GuardedToolError, InMemoryGrantStore,
    Plan, PolicySource, Receipt, ToolError,
};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, MetaObject, ResultType};
use serde_json::{json, Value};

use crate::registry::ToolRegistry;

/// Why a call was refused before any plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// `"invalid_or_unregistered_call"`: the host did not register this tool.
    InvalidOrUnregisteredCall,
    /// `"invalid_arguments"`: the arguments are outside the host's input schema.
    InvalidArguments,
}

impl Rejection {
    /// The report string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Rejection::InvalidOrUnregisteredCall => "invalid_or_unregistered_call",
            Rejection::InvalidArguments => "invalid_arguments",
        }
    }
}

/// What became of the call at the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResultStatus {
    /// `"not_called"`: the request never left the gate.
    NotCalled,
    /// `"returned"`: the server returned a result.
    Returned,
    /// `"tool_error"`: the server returned a result with `isError` (the call was made; a
    /// side effect may have happened).
    ToolError,
    /// `"unknown"`: the request left and no result came back (transport loss, timeout).
    Unknown,
}

impl ResultStatus {
    /// The report string.
    pub const fn as_str(self) -> &'static str {
        match self {
            ResultStatus::NotCalled => "not_called",
            ResultStatus::Returned => "returned",
            ResultStatus::ToolError => "tool_error",
            ResultStatus::Unknown => "unknown",
        }
    }
}

/// The gate's verdict on one `tools/call`.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// A refusal before any plan.
    pub rejection: Option<Rejection>,
    /// The plan, when one was made.
    pub plan: Option<Plan>,
    /// The receipt, when one was made.
    pub receipt: Option<Receipt>,
    /// What became of the call at the server.
    pub status: ResultStatus,
    /// The server's result, when it returned one.
    pub result: Option<CallToolResult>,
    /// Diagnostics for the host's log: the hook or transport error behind a block or an
    /// `unknown`.
    pub detail: Option<String>,
    /// A host error (failing resource mapper, unusable registration): no plan, no receipt.
    pub host_error: Option<String>,
}

impl Verdict {
    fn rejected(rejection: Rejection) -> Self {
        Verdict {
            rejection: Some(rejection),
            plan: None,
            receipt: None,
            status: ResultStatus::NotCalled,
            result: None,
            detail: None,
            host_error: None,
        }
    }

    /// The verdict as report JSON: `{rejection, plan, receipt, mcp_result_status, result?}`.
    pub fn to_value(&self) -> Value {
        let mut v = json!({
            "rejection": self.rejection.map(Rejection::as_str),
            "plan": self.plan.as_ref().map(Plan::to_value),
            "receipt": self.receipt.as_ref().map(Receipt::to_value),
            "mcp_result_status": self.status.as_str(),
        });
        if let Some(result) = &self.result {
            let mut result = serde_json::to_value(result).unwrap_or(Value::Null);
            if let Some(obj) = result.as_object_mut() {
                // Protocol bookkeeping, not the tool's answer.
                obj.remove("resultType");
            }
            v["result"] = result;
        }
        v
    }

    /// What to answer an MCP client with: the server's result for a dispatched call (with
    /// the verdict under `_meta`), else an `isError` result that says why.
    pub fn into_call_result(self) -> CallToolResult {
        let meta = self.to_value();
        let mut result = match (&self.result, self.status) {
            (Some(result), ResultStatus::Returned | ResultStatus::ToolError) => result.clone(),
            _ => CallToolResult::error(vec![ContentBlock::text(self.explanation())]),
        };
        // Required on every result from protocol 2026-07-28 on; an older upstream omits it.
        result.result_type.get_or_insert(ResultType::COMPLETE);
        let mut object = result.meta.take().map(|m| m.0).unwrap_or_default();
        object.insert(VERDICT_META_KEY.to_owned(), meta);
        result.meta = Some(MetaObject(object));
        result
    }

    fn explanation(&self) -> String {
        if let Some(r) = self.rejection {
            return format!("AML gate refused the call: {}", r.as_str());
        }
        match (&self.receipt, self.status) {
            (_, ResultStatus::Unknown) => {
                "Tool outcome is uncertain; do not retry automatically (host_dispatch_error).".to_owned()
            }
            (Some(receipt), _) => format!("AML boundary blocked this call: {}", receipt.reason()),
            (None, _) => "AML gate could not prepare this call (host error).".to_owned(),
        }
    }
}

/// The `_meta` key under which gated results carry the verdict.
pub const VERDICT_META_KEY: &str = "aml.action-boundary/verdict";

/// The gate: registered tools, the host's live policy and hooks.
#[derive(Debug, Clone)]
pub struct McpGate {
    registry: Arc<ToolRegistry>,
    policy: Arc<dyn PolicySource>,
    approval: Option<Arc<dyn ApprovalHook>>,
    grants: Option<Arc<dyn GrantStore>>,
}

impl McpGate {
    /// A gate with a fresh one-use grant store and no approval hook (approval-required
    /// rules then block with `approval_unavailable`).
    pub fn new(registry: ToolRegistry, policy: impl PolicySource + 'static) -> Self {
        McpGate {
            registry: Arc::new(registry),
            policy: Arc::new(policy),
            approval: None,
            grants: Some(Arc::new(InMemoryGrantStore::new())),
        }
    }

    /// Sets the approval hook.
    pub fn with_approval(mut self, hook: Arc<dyn ApprovalHook>) -> Self {
        self.approval = Some(hook);
        self
    }

    /// Replaces the one-use grant store.
    pub fn with_grants(mut self, store: Arc<dyn GrantStore>) -> Self {
        self.grants = Some(store);
        self
    }

    /// The registered tools.
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// Gates one call. `forward` sends the call, with the frozen arguments, to the server;
    /// it runs at most once, and only if the boundary dispatches. An `Err` from it means
    /// the request may have reached the server: the outcome is `unknown`.
    pub async fn call<F, Fut>(&self, params: CallToolRequestParams, forward: F) -> Verdict
    where
        F: FnOnce(CallToolRequestParams) -> Fut + Send + 'static,
        Fut: Future<Output = Result<CallToolResult, String>> + Send + 'static,
    {
        let Some(registered) = self.registry.get(&params.name) else {
            return Verdict::rejected(Rejection::InvalidOrUnregisteredCall);
        };
        let arguments = Value::Object(params.arguments.clone().unwrap_or_default());
        if !registered.accepts(&arguments) {
            return Verdict::rejected(Rejection::InvalidArguments);
        }
        let returned: Arc<Mutex<Option<CallToolResult>>> = Arc::default();
        let once = Arc::new(Mutex::new(Some((forward, params))));
        let slot = Arc::clone(&returned);
        let executor = tool_fn(move |call| {
            let taken = once.lock().unwrap_or_else(|p| p.into_inner()).take();
            let slot = Arc::clone(&slot);
            async move {
                let Some((forward, mut params)) = taken else {
                    return Err(ToolError::new("the gate forwards each call at most once"));
                };
                params.arguments = Some(call.into_arguments());
                let result = forward(params).await.map_err(ToolError::new)?;
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
                Ok(Value::Null)
            }
        });
        let mut builder = GuardedTool::builder(
            registered.name.clone(),
            registered.effect,
            registered.purpose.clone(),
            Arc::clone(&self.policy),
        )
        .resource_for_arc(Arc::clone(&registered.mapper))
        .executor(executor);
        builder = match &self.grants {
            Some(grants) => builder.grants_arc(Arc::clone(grants)),
            None => builder.replayable_approvals(),
        };
        if let Some(approval) = &self.approval {
            builder = builder.approval_arc(Arc::clone(approval));
        }
        let tool = match builder.build() {
            Ok(tool) => tool,
            Err(e) => return host_error(e.to_string()),
        };
        let outcome = match tool.call(&arguments).await {
            Ok(outcome) => outcome,
            Err(GuardedToolError::Mapper(e)) => return host_error(e.to_string()),
            Err(e) => return host_error(e.to_string()),
        };
        let result = returned.lock().unwrap_or_else(|p| p.into_inner()).take();
        let status = match (outcome.receipt().execution_status(), &result) {
            (ExecutionStatus::Dispatched, Some(r)) if r.is_error == Some(true) => ResultStatus::ToolError,
            (ExecutionStatus::Dispatched, _) => ResultStatus::Returned,
            (ExecutionStatus::Unknown, _) => ResultStatus::Unknown,
            _ => ResultStatus::NotCalled,
        };
        Verdict {
            rejection: None,
            plan: Some(outcome.plan().clone()),
            receipt: Some(outcome.receipt().clone()),
            status,
            result,
            detail: outcome.detail().map(str::to_owned),
            host_error: None,
        }
    }
}

fn host_error(detail: String) -> Verdict {
    Verdict {
        rejection: None,
        plan: None,
        receipt: None,
        status: ResultStatus::NotCalled,
        result: None,
        detail: None,
        host_error: Some(detail),
    }
}

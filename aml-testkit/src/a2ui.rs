//! The A2UI adapter under test: the 9 documented `aml-a2ui-function-report/1` cases, and
//! the harness that carries the 17 guarded-tool cases over A2UI v1.0 messages.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aml_a2ui::{FunctionGate, FunctionRegistry, HostCatalog, HostFunction, WireForm};
use aml_core::{async_trait, Effect, GuardedTool, LivePolicy, Plan, Policy, Receipt, Rule, Sha256Digest};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::caller_args::CallerArguments;
use crate::fixtures::{ApprovalBehavior, CallerChange, DestinationMapper, FixtureApproval, ObservingTool};
use crate::harness::{Attempt, Harness, HarnessError};
use crate::log::HostLog;
use crate::rehearsal::{BODY, PURPOSE, TEAM, TOOL};

/// The report protocol.
pub const A2UI_PROTOCOL: &str = "aml-a2ui-function-report/1";
/// The host catalog's id.
pub const CATALOG_ID: &str = "https://example.test/catalog/action.json";
/// The A2UI function bound to the documented guarded tool.
pub const FUNCTION: &str = "sendMessage";

/// The argument schema the host registers for `sendMessage`.
pub fn send_message_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"to": {"type": "string"}, "body": {"type": "string"}, "priority": {"type": "number"}},
        "required": ["to", "body"],
        "additionalProperties": false,
    })
}

/// The host catalog: `sendMessage` bound to `tool` (agent-callable, with
/// [`send_message_schema`]), or renderer-only.
pub fn host_catalog(tool: Option<&GuardedTool>) -> Result<HostCatalog, HarnessError> {
    let err = |e: &dyn std::fmt::Display| HarnessError(e.to_string());
    let description = "Send a status update to a recipient.";
    let function = match tool {
        Some(tool) => {
            let registration = tool.registration(send_message_schema()).map_err(|e| err(&e))?;
            HostFunction::agent_callable(FUNCTION, description, registration)
        }
        None => {
            HostFunction::renderer_only(FUNCTION, description, send_message_schema()).map_err(|e| err(&e))?
        }
    };
    Ok(HostCatalog::new(CATALOG_ID, "AML action boundary host functions").with_function(function))
}

/// A gate over [`host_catalog`] with `tool`'s boundary (policy and hooks).
fn gate_for(tool: &GuardedTool, catalog: HostCatalog) -> Result<FunctionGate, HarnessError> {
    FunctionGate::new(
        Arc::new(FunctionRegistry::new().with_catalog(catalog)),
        tool.boundary().clone(),
    )
    .map_err(|e| HarnessError(e.to_string()))
}

fn request(form: WireForm, call_id: &str, call: &str, catalog_id: &str, args: Value) -> Value {
    json!({"version": "v1.0", "callRendererFunction": {"functionCallId": call_id,
           "callFunction": {form.function_key(): call, "catalogId": catalog_id, "args": args}}})
}

/// Title and description of one documented A2UI case.
#[derive(Debug, Clone, Deserialize)]
pub struct CaseText {
    /// Case id.
    pub id: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: String,
}

#[derive(Deserialize)]
struct Catalogue {
    cases: Vec<CaseText>,
}

/// The documented cases' texts (data from seed `002_…`; see `cases/`).
pub fn case_texts() -> Vec<CaseText> {
    serde_json::from_str::<Catalogue>(include_str!("../cases/a2ui.json"))
        .map(|c| c.cases)
        .unwrap_or_default()
}

fn plan_json(plan: Option<Plan>) -> Value {
    plan.map_or(Value::Null, |p| p.to_value())
}

fn receipt_json(receipt: Option<Receipt>) -> Value {
    receipt.map_or(Value::Null, |r| r.to_value())
}

/// Plays one documented A2UI case and returns its report entry (the Candidate form the
/// documented report uses).
pub async fn run_case(text: &CaseText) -> Result<Value, HarnessError> {
    run_case_in(text, WireForm::Candidate).await
}

/// Plays one documented A2UI case with the request written in `form`; the answer comes
/// back in the same form.
pub async fn run_case_in(text: &CaseText, form: WireForm) -> Result<Value, HarnessError> {
    let id = text.id.as_str();
    let policy = LivePolicy::new(
        Policy::from_rules([Rule {
            tool: TOOL.to_owned(),
            effect: Effect::Send,
            resource: TEAM.to_owned(),
            requires_approval: true,
            caller: None,
        }])
        .map_err(|e| HarnessError(e.to_string()))?,
    );
    let to = if id == "changed_destination" {
        "outside@example.test"
    } else {
        TEAM
    };
    let body: Value = if id == "invalid_args" {
        json!(42)
    } else {
        json!(BODY)
    };
    let (call, catalog_id) = match id {
        "wrong_catalog" => (FUNCTION, "https://outside.test/unknown.json"),
        "unknown_function" => ("deleteLocalFile", CATALOG_ID),
        _ => (FUNCTION, CATALOG_ID),
    };
    let shared_request = Arc::new(Mutex::new(request(
        form,
        "send_1",
        call,
        catalog_id,
        json!({"to": to, "body": body}),
    )));
    let behavior = match id {
        "stale_approval" => ApprovalBehavior::Fixed(Sha256Digest::of(b"an approval for other bytes")),
        "mutated_during_approval" => {
            let req = Arc::clone(&shared_request);
            ApprovalBehavior::CallerChange(CallerChange(Arc::new(move || {
                req.lock().unwrap_or_else(|p| p.into_inner())["callRendererFunction"]["callFunction"]
                    ["args"]["body"] = json!("Mutated after plan");
            })))
        }
        _ => ApprovalBehavior::Matching,
    };
    let observing = if id == "uncertain_callback" {
        ObservingTool::failing()
    } else {
        ObservingTool::returning()
    };
    let tool = GuardedTool::builder(TOOL, Effect::Send, PURPOSE, policy)
        .resource_for(DestinationMapper)
        .approval(FixtureApproval::new(HostLog::new(), behavior))
        .executor(observing.clone())
        .build()
        .map_err(|e| HarnessError(e.to_string()))?;
    let catalog = host_catalog((id != "renderer_only").then_some(&tool))?;
    let gate = gate_for(&tool, catalog)?;

    let sent = shared_request.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let bytes = serde_json::to_vec(&sent).map_err(|e| HarnessError(e.to_string()))?;
    let outcome = gate
        .handle(&bytes)
        .await
        .map_err(|e| HarnessError(e.to_string()))?;
    let observed = observing.observed();
    let mut case = json!({
        "id": id, "title": text.title, "description": text.description,
        "request": sent,
        "response": outcome.response.to_value(),
        "invocation": outcome.invocation.as_str(),
        "aml_plan": plan_json(outcome.plan),
        "aml_receipt": receipt_json(outcome.receipt),
        "callback_count": observed.len(),
        "observed_arguments": observed,
    });
    if id == "mutated_during_approval" {
        case["request_after_approval"] = shared_request.lock().unwrap_or_else(|p| p.into_inner()).clone();
    }
    Ok(case)
}

/// Plays all 9 documented A2UI cases and returns the report, with the host catalogs used.
pub async fn report() -> Result<Value, HarnessError> {
    let mut cases = Vec::new();
    for text in case_texts() {
        cases.push(run_case(&text).await?);
    }
    let probe = GuardedTool::builder(TOOL, Effect::Send, PURPOSE, Arc::new(Policy::empty()))
        .resource_for(DestinationMapper)
        .build()
        .map_err(|e| HarnessError(e.to_string()))?;
    let catalog = |tool| host_catalog(tool).map(|c| c.definition());
    Ok(json!({
        "protocol": A2UI_PROTOCOL,
        "scope": "aml-testkit through aml-a2ui: fixture hooks only; no renderer, person or message was involved.",
        "source": format!("aml-testkit {} (Rust), aml-a2ui FunctionGate", env!("CARGO_PKG_VERSION")),
        "spec": "https://a2ui.org/specification/v1.0-a2ui/",
        "cases": cases,
        "host_catalog": catalog(Some(&probe))?,
        "host_catalog_variants": {"renderer_only": catalog(None)?},
    }))
}

/// Carries guarded-tool calls over A2UI v1.0: each call is a fresh `callRendererFunction`
/// message (bytes in) through a [`FunctionGate`], and the `rendererFunctionResponse` bytes
/// that come out are decoded for the result. The default is the current form (`@call`),
/// the one the A2UI SDKs send.
#[derive(Debug)]
pub struct A2uiHarness {
    form: WireForm,
    next_id: AtomicU64,
}

impl A2uiHarness {
    /// A harness that writes its messages in `form`.
    pub fn new(form: WireForm) -> Self {
        A2uiHarness {
            form,
            next_id: AtomicU64::new(0),
        }
    }
}

impl Default for A2uiHarness {
    fn default() -> Self {
        A2uiHarness::new(WireForm::Current)
    }
}

#[async_trait]
impl Harness for A2uiHarness {
    fn adapter(&self) -> &str {
        "a2ui"
    }

    async fn call(&self, tool: Arc<GuardedTool>, args: &CallerArguments) -> Result<Attempt, HarnessError> {
        let gate = gate_for(&tool, host_catalog(Some(&tool))?)?;
        let call_id = format!("call_{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let key = self.form.function_key();
        // The agent's message text, written once from the arguments as they are now.
        let message = args.with(|a| {
            format!(
                r#"{{"version":"v1.0","callRendererFunction":{{"functionCallId":{},"callFunction":{{"{key}":"{FUNCTION}","catalogId":"{CATALOG_ID}","args":{}}}}}}}"#,
                Value::from(call_id.as_str()),
                a.agent_json()
            )
        });
        let outcome = gate
            .handle(message.as_bytes())
            .await
            .map_err(|e| HarnessError(e.to_string()))?;
        if let Some(host_error) = outcome.host_error {
            return Ok(Attempt::HostError(host_error));
        }
        let (Some(plan), Some(receipt)) = (outcome.plan, outcome.receipt) else {
            return Err(HarnessError(format!(
                "the gate refused the call: {}",
                outcome.response.to_value()
            )));
        };
        let response: Value =
            serde_json::from_slice(&outcome.response.to_bytes()).map_err(|e| HarnessError(e.to_string()))?;
        let result = response["rendererFunctionResponse"].get("value").cloned();
        Ok(Attempt::Completed {
            plan,
            receipt,
            result,
        })
    }
}

//! The gate: one `callRendererFunction` in, one A2UI response out, in the order of the
//! protocol (envelope, catalog and function, argument schema, call-id claim, boundary).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use aml_core::{DispatchOutcome, ExecutionStatus, GuardedToolError, Plan, Receipt};

use crate::catalog::FunctionRegistry;
use crate::wire::{decode, DecodeError, RendererMessage};

/// `INVALID_FUNCTION_CALL`: the call was refused before it was taken up.
pub const INVALID_FUNCTION_CALL: &str = "INVALID_FUNCTION_CALL";
/// `ACTION_BLOCKED`: host policy or approval blocked the call.
pub const ACTION_BLOCKED: &str = "ACTION_BLOCKED";
/// `EXECUTION_FAILED`: the tool was entered and failed; its outcome is uncertain.
pub const EXECUTION_FAILED: &str = "EXECUTION_FAILED";
/// `HOST_ERROR`: the host failed while preparing the call (no plan exists).
pub const HOST_ERROR: &str = "HOST_ERROR";

/// Message for unknown catalogs, unknown functions and renderer-only functions.
pub const NOT_AVAILABLE: &str = "Function is not available for agent invocation.";
/// Message for arguments outside the host schema.
pub const SCHEMA_MISMATCH: &str = "Function arguments did not match the host schema.";
/// Message for a `functionCallId` this gate has already taken up.
pub const REPLAYED: &str = "Function call id was already used; the call was not run again.";
/// Message for a malformed message that still names its call id.
pub const MALFORMED: &str = "Message is not a valid A2UI v1.0 callRendererFunction.";
/// Message for `ACTION_BLOCKED`.
pub const BLOCKED: &str = "Host action policy or approval blocked this call.";
/// Message for `EXECUTION_FAILED`.
pub const UNCERTAIN: &str = "Tool outcome is uncertain; do not retry automatically.";
/// Message for `HOST_ERROR`.
pub const HOST_FAILED: &str = "The host failed before planning this call.";

/// Whether the call reached the boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Invocation {
    /// `"not_reached"`: refused before the call id was claimed.
    NotReached,
    /// `"claimed"`: the call id was claimed and the boundary ran.
    Claimed,
    /// `"replayed"`: the call id was already claimed; nothing ran.
    Replayed,
}

impl Invocation {
    /// The report string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Invocation::NotReached => "not_reached",
            Invocation::Claimed => "claimed",
            Invocation::Replayed => "replayed",
        }
    }
}

/// What the gate did with one message.
#[derive(Debug, Clone)]
pub struct GateOutcome {
    /// The message to send back to the agent.
    pub response: RendererMessage,
    /// Whether the boundary ran.
    pub invocation: Invocation,
    /// The plan, when the boundary ran.
    pub plan: Option<Plan>,
    /// The receipt, when the boundary ran.
    pub receipt: Option<Receipt>,
    /// A host error (failing resource mapper) behind a `HOST_ERROR` response.
    pub host_error: Option<String>,
}

impl GateOutcome {
    fn refused(function_call_id: String, message: &str, invocation: Invocation) -> Self {
        GateOutcome {
            response: RendererMessage::Error {
                function_call_id,
                code: INVALID_FUNCTION_CALL,
                message: message.to_owned(),
            },
            invocation,
            plan: None,
            receipt: None,
            host_error: None,
        }
    }
}

/// Gates agent `callRendererFunction` requests for one renderer session.
///
/// Each `functionCallId` is taken up at most once per gate: create one gate per session
/// (or surface) and share the [`FunctionRegistry`] between them.
#[derive(Debug)]
pub struct FunctionGate {
    registry: Arc<FunctionRegistry>,
    claimed_ids: Mutex<HashSet<String>>,
}

impl FunctionGate {
    /// A gate over `registry`.
    pub fn new(registry: Arc<FunctionRegistry>) -> Self {
        FunctionGate {
            registry,
            claimed_ids: Mutex::default(),
        }
    }

    /// Handles one agent-to-renderer message.
    ///
    /// `Err` only for a message that cannot be answered in A2UI because it names no
    /// `functionCallId` (malformed JSON, another message type): log it and drop it.
    pub async fn handle(&self, message: &[u8]) -> Result<GateOutcome, DecodeError> {
        let call = match decode(message) {
            Ok(call) => call,
            Err(e) => match e.function_call_id {
                Some(id) => return Ok(GateOutcome::refused(id, MALFORMED, Invocation::NotReached)),
                None => return Err(e),
            },
        };
        let id = call.function_call_id;
        let Some(function) = self.registry.lookup(&call.catalog_id, &call.call) else {
            return Ok(GateOutcome::refused(id, NOT_AVAILABLE, Invocation::NotReached));
        };
        let Some(tool) = function
            .tool()
            .filter(|_| function.allowed_callers().agent_may_call())
        else {
            return Ok(GateOutcome::refused(id, NOT_AVAILABLE, Invocation::NotReached));
        };
        // Arguments that cannot be parsed strictly skip the schema: the boundary blocks them
        // below with their canonical code, as it blocks any capture failure.
        let args = aml_core::strict::parse_str(&call.args_json).ok();
        if let Some(args) = &args {
            if !function.accepts(args) {
                return Ok(GateOutcome::refused(id, SCHEMA_MISMATCH, Invocation::NotReached));
            }
        }
        let fresh = self
            .claimed_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone());
        if !fresh {
            return Ok(GateOutcome::refused(id, REPLAYED, Invocation::Replayed));
        }
        let result = match &args {
            Some(args) => tool.call(args).await,
            None => tool.call_json(call.args_json.as_bytes()).await,
        };
        Ok(match result {
            Ok(outcome) => answered(id, outcome),
            Err(host_error) => host_failed(id, host_error),
        })
    }
}

fn answered(function_call_id: String, outcome: DispatchOutcome) -> GateOutcome {
    let response = match outcome.receipt().execution_status() {
        ExecutionStatus::Dispatched => RendererMessage::Value {
            function_call_id,
            value: outcome.output().cloned().unwrap_or_default(),
        },
        ExecutionStatus::Unknown => RendererMessage::FunctionError {
            function_call_id,
            code: EXECUTION_FAILED,
            message: UNCERTAIN,
        },
        _ => RendererMessage::FunctionError {
            function_call_id,
            code: ACTION_BLOCKED,
            message: BLOCKED,
        },
    };
    GateOutcome {
        response,
        invocation: Invocation::Claimed,
        plan: Some(outcome.plan().clone()),
        receipt: Some(outcome.receipt().clone()),
        host_error: None,
    }
}

fn host_failed(function_call_id: String, error: GuardedToolError) -> GateOutcome {
    let detail = match &error {
        GuardedToolError::Mapper(e) => e.to_string(),
        other => other.to_string(),
    };
    GateOutcome {
        response: RendererMessage::FunctionError {
            function_call_id,
            code: HOST_ERROR,
            message: HOST_FAILED,
        },
        invocation: Invocation::Claimed,
        plan: None,
        receipt: None,
        host_error: Some(detail),
    }
}

//! Error codes and messages, and the one function that puts an outcome in a call's form
//! (the tables are in the [`wire`](super) module docs).

use aml_core::ReceiptReason;
use serde_json::Value;

use super::{RendererMessage, WireForm};
use crate::reason::GateReason;

/// `INVALID_FUNCTION_CALL`: malformed message or arguments, or (Candidate form) any call
/// refused before it was taken up.
pub const INVALID_FUNCTION_CALL: &str = "INVALID_FUNCTION_CALL";
/// `UNKNOWN_FUNCTION` (current form): unknown catalog or function, or `rendererOnly`.
pub const UNKNOWN_FUNCTION: &str = "UNKNOWN_FUNCTION";
/// `DUPLICATE` (current form): the call id was already taken up.
pub const DUPLICATE: &str = "DUPLICATE";
/// `INVALID_ARGUMENTS` (Candidate form): the boundary refused the argument text.
pub const INVALID_ARGUMENTS: &str = "INVALID_ARGUMENTS";
/// `ACTION_BLOCKED`: host policy or approval blocked the call.
pub const ACTION_BLOCKED: &str = "ACTION_BLOCKED";
/// `EXECUTION_FAILED` (Candidate form): the tool was entered and failed; outcome uncertain.
pub const EXECUTION_FAILED: &str = "EXECUTION_FAILED";
/// `EXECUTION_ERROR` (current form): the tool was entered and failed; outcome uncertain.
pub const EXECUTION_ERROR: &str = "EXECUTION_ERROR";
/// `HOST_ERROR` (Candidate form): the host failed while preparing the call (no plan).
pub const HOST_ERROR: &str = "HOST_ERROR";
/// `UNKNOWN_ERROR` (current form): the host failed while preparing the call (no plan).
pub const UNKNOWN_ERROR: &str = "UNKNOWN_ERROR";
/// `MESSAGE_TOO_LARGE`: an unaddressed answer to a message over the size limit.
pub const MESSAGE_TOO_LARGE: &str = "MESSAGE_TOO_LARGE";
/// `CALL_ID_TOO_LONG`: an unaddressed answer to a call id over its limit.
pub const CALL_ID_TOO_LONG: &str = "CALL_ID_TOO_LONG";

/// Message for unknown catalogs, unknown functions and renderer-only functions.
pub const NOT_AVAILABLE: &str = "Function is not available for agent invocation.";
/// Message for arguments outside the host schema.
pub const SCHEMA_MISMATCH: &str = "Function arguments did not match the host schema.";
/// Message for a `functionCallId` this gate has already taken up.
pub const REPLAYED: &str = "Function call id was already used; the call was not run again.";
/// Message for a malformed message.
pub const MALFORMED: &str = "Message is not a valid A2UI v1.0 callRendererFunction.";
/// Message for `ACTION_BLOCKED`.
pub const BLOCKED: &str = "Host action policy or approval blocked this call.";
/// Message for an uncertain tool outcome.
pub const UNCERTAIN: &str = "Tool outcome is uncertain; do not retry automatically.";
/// Message for a host error.
pub const HOST_FAILED: &str = "The host failed before planning this call.";

/// The wire message for a gate refusal.
pub const fn refusal_message(reason: GateReason) -> &'static str {
    match reason {
        GateReason::MessageTooLarge => "Message is larger than this host accepts.",
        GateReason::CallIdTooLong => "functionCallId is longer than this host accepts.",
        GateReason::MalformedMessage => MALFORMED,
        GateReason::CatalogNotFound | GateReason::FunctionNotFound | GateReason::NotAgentCallable => {
            NOT_AVAILABLE
        }
        GateReason::ArgsMissing => "Function arguments are required and were not sent.",
        GateReason::ArgsNotObject => "Function arguments must be a JSON object.",
        GateReason::ArgsDataBinding => "Function arguments hold a data binding the host did not resolve.",
        GateReason::ArgsNestedCall => {
            "Function arguments hold a nested function call the host did not resolve."
        }
        GateReason::ArgsReservedKey => "Function arguments use a key reserved for directives ('@').",
        GateReason::BindingsUnresolved => {
            "The host could not resolve the bindings in the function arguments."
        }
        GateReason::ArgsSchemaMismatch => SCHEMA_MISMATCH,
        GateReason::ArgsInexactNumber => {
            "Function arguments hold a number this host cannot keep exactly; send it as a string."
        }
        GateReason::Replayed => REPLAYED,
        GateReason::InvalidResource => "A function argument does not name a resource this host accepts.",
        GateReason::ResourceOutsideRoot => {
            "A path in the function arguments is outside what this host serves."
        }
    }
}

/// Whether a blocked receipt refused the argument text itself (it could not be captured
/// or frozen) rather than the call: those are malformed arguments, not policy refusals.
pub fn is_argument_refusal(reason: ReceiptReason) -> bool {
    matches!(
        reason,
        ReceiptReason::NonFiniteNumber
            | ReceiptReason::UnsupportedValue
            | ReceiptReason::JsonSyntax
            | ReceiptReason::JsonInvalidUtf8
            | ReceiptReason::JsonDuplicateKey
            | ReceiptReason::JsonLoneSurrogate
            | ReceiptReason::JsonTooDeep
            | ReceiptReason::JsonTooLarge
            | ReceiptReason::InvalidProposal
            | ReceiptReason::ProposalTooLarge
    )
}

/// What the gate decided for an addressable call, before it is put in a form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// Dispatched: the tool's result.
    Value(Value),
    /// Refused by the gate before the boundary.
    Refused(GateReason),
    /// Blocked by the boundary.
    Blocked(ReceiptReason),
    /// The tool was entered and failed.
    Uncertain,
    /// The host failed before planning.
    HostError,
}

/// Puts an answer in the call's own form: the one place outcomes become wire messages.
pub(crate) fn respond(form: WireForm, function_call_id: String, answer: Answer) -> RendererMessage {
    let candidate = form == WireForm::Candidate;
    let (code, message) = match answer {
        Answer::Value(value) => {
            return RendererMessage::Value {
                function_call_id,
                value,
            }
        }
        Answer::Refused(reason) => {
            let message = refusal_message(reason).to_owned();
            if candidate {
                return RendererMessage::Error {
                    function_call_id,
                    code: INVALID_FUNCTION_CALL,
                    message,
                };
            }
            let code = match reason {
                GateReason::CatalogNotFound | GateReason::FunctionNotFound | GateReason::NotAgentCallable => {
                    UNKNOWN_FUNCTION
                }
                GateReason::Replayed => DUPLICATE,
                _ => INVALID_FUNCTION_CALL,
            };
            (code, message)
        }
        Answer::Blocked(reason) if is_argument_refusal(reason) => (
            if candidate {
                INVALID_ARGUMENTS
            } else {
                INVALID_FUNCTION_CALL
            },
            format!("Function arguments were refused before planning: {reason}."),
        ),
        Answer::Blocked(_) => (ACTION_BLOCKED, BLOCKED.to_owned()),
        Answer::Uncertain => (
            if candidate {
                EXECUTION_FAILED
            } else {
                EXECUTION_ERROR
            },
            UNCERTAIN.to_owned(),
        ),
        Answer::HostError => (
            if candidate { HOST_ERROR } else { UNKNOWN_ERROR },
            HOST_FAILED.to_owned(),
        ),
    };
    RendererMessage::FunctionError {
        function_call_id,
        code,
        message,
    }
}

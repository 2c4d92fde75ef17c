//! The A2UI v1.0 wire mapping: every field name, message shape, error code and message
//! text lives in this module, so a later revision of the spec is a change here only.
//!
//! Two forms of `callRendererFunction` say `"version": "v1.0"`, and each call is answered
//! in its own form:
//!
//! | | [`WireForm::Candidate`] | [`WireForm::Current`] |
//! |---|---|---|
//! | source | `a2ui-project/a2ui` 29b715fa (`fixtures/a2ui-v1.0/`), seed `002_…` | `a2ui-core` 0.4.0, `a2ui-agent-sdk` 0.9.0 (`fixtures/a2ui-v1.0-current/`) |
//! | function key | `call` | `@call` |
//! | `callRendererFunction.surfaceId` | refused | optional |
//! | bindings inside `args` | `{"path": …}`, `{"call": …}` | `{"@path": …}`, `{"@call": …}`, any `@key` |
//! | refused before the call is taken up | top-level `error` with `functionCallId` | `rendererFunctionResponse.error` |
//!
//! Error codes, by what happened (the outcome's [`GateReason`] or receipt reason says
//! exactly which input it was):
//!
//! | what happened | Candidate code | Current code (`a2ui-core` `RpcErrorCode`) |
//! |---|---|---|
//! | malformed message with a call id | `INVALID_FUNCTION_CALL` | `INVALID_FUNCTION_CALL` |
//! | unknown catalog or function, `rendererOnly` | `INVALID_FUNCTION_CALL` | `UNKNOWN_FUNCTION` |
//! | malformed arguments, refused by the gate | `INVALID_FUNCTION_CALL` | `INVALID_FUNCTION_CALL` |
//! | malformed arguments, refused by the boundary (`AML_JSON_*`, …) | `INVALID_ARGUMENTS` | `INVALID_FUNCTION_CALL` |
//! | call id already taken up | `INVALID_FUNCTION_CALL` | `DUPLICATE` |
//! | policy or approval refusal | `ACTION_BLOCKED` | `ACTION_BLOCKED` (the SDK has no code for it) |
//! | tool entered and failed (outcome unknown) | `EXECUTION_FAILED` | `EXECUTION_ERROR` |
//! | host error (no plan) | `HOST_ERROR` | `UNKNOWN_ERROR` |
//!
//! A message that names no usable call id (over the size limit, a call id over its limit,
//! not a `callRendererFunction`) cannot be answered in either form; hosts that must answer
//! every message send [`DecodeError::response`], a top-level `error` without a call id
//! (`MESSAGE_TOO_LARGE`, `CALL_ID_TOO_LONG`, `INVALID_FUNCTION_CALL`), which `a2ui-core`'s
//! models accept and the Candidate schema does not.

use aml_core::ObjectOnly;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::reason::GateReason;

mod codes;
pub use codes::{
    is_argument_refusal, refusal_message, ACTION_BLOCKED, BLOCKED, CALL_ID_TOO_LONG, DUPLICATE,
    EXECUTION_ERROR, EXECUTION_FAILED, HOST_ERROR, HOST_FAILED, INVALID_ARGUMENTS, INVALID_FUNCTION_CALL,
    MALFORMED, MESSAGE_TOO_LARGE, NOT_AVAILABLE, REPLAYED, SCHEMA_MISMATCH, UNCERTAIN, UNKNOWN_ERROR,
    UNKNOWN_FUNCTION,
};
pub(crate) use codes::{respond, Answer};

/// The only protocol version this module speaks.
pub const VERSION: &str = "v1.0";

/// Default [`GateLimits::max_message_bytes`]: 2 MiB, room for the strict parser's 1 MiB of
/// arguments and the envelope around them.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 2 << 20;
/// Default [`GateLimits::max_call_id_bytes`].
pub const DEFAULT_MAX_CALL_ID_BYTES: usize = 256;

/// Size limits checked before anything is parsed or kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateLimits {
    /// Longest message, in bytes; a longer one is refused unread (`message_too_large`).
    pub max_message_bytes: usize,
    /// Longest `functionCallId`, in bytes; a longer one is neither echoed nor kept
    /// (`call_id_too_long`).
    pub max_call_id_bytes: usize,
}

impl Default for GateLimits {
    fn default() -> Self {
        GateLimits {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_call_id_bytes: DEFAULT_MAX_CALL_ID_BYTES,
        }
    }
}

/// Which v1.0 form a message uses (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WireForm {
    /// `"candidate"`: function key `call`, refusals as top-level `error`.
    Candidate,
    /// `"current"`: function key `@call`, optional `surfaceId`, refusals inside
    /// `rendererFunctionResponse.error`.
    Current,
}

impl WireForm {
    /// The report string.
    pub const fn as_str(self) -> &'static str {
        match self {
            WireForm::Candidate => "candidate",
            WireForm::Current => "current",
        }
    }

    /// The key that names the function in `callFunction` (and in catalog definitions).
    pub const fn function_key(self) -> &'static str {
        match self {
            WireForm::Candidate => "call",
            WireForm::Current => "@call",
        }
    }
}

/// A decoded `callRendererFunction`. `args_json` is the agent's argument text, untouched
/// and borrowed from the message; the gate parses it strictly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRendererFunction<'a> {
    /// The form the message used.
    pub form: WireForm,
    /// `callRendererFunction.functionCallId`.
    pub function_call_id: String,
    /// `callRendererFunction.surfaceId` (current form only).
    pub surface_id: Option<String>,
    /// `callFunction.call` or `callFunction["@call"]`: the function name.
    pub call: String,
    /// `callFunction.catalogId`.
    pub catalog_id: String,
    /// `callFunction.args` as JSON text; `None` when the key is absent (`null` is text).
    pub args_json: Option<&'a str>,
}

/// Why a message could not be decoded. `function_call_id` is set when the message named a
/// usable one, so the refusal can still be addressed to the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
#[non_exhaustive]
pub struct DecodeError {
    /// `message_too_large`, `call_id_too_long` or `malformed_message`.
    pub reason: GateReason,
    /// The form to answer in (the current form when the message shows neither).
    pub form: WireForm,
    /// The call id, if one could be read and is within its limit.
    pub function_call_id: Option<String>,
    /// What was wrong.
    pub detail: String,
}

impl DecodeError {
    /// The answer to send: addressed to the call when it has an id, otherwise a top-level
    /// `error` without one (see the module docs).
    pub fn response(&self) -> RendererMessage {
        match &self.function_call_id {
            Some(id) => respond(self.form, id.clone(), Answer::Refused(self.reason)),
            None => RendererMessage::Unaddressed {
                code: match self.reason {
                    GateReason::MessageTooLarge => MESSAGE_TOO_LARGE,
                    GateReason::CallIdTooLong => CALL_ID_TOO_LONG,
                    _ => INVALID_FUNCTION_CALL,
                },
                message: refusal_message(self.reason).to_owned(),
            },
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    version: Option<String>,
    #[serde(rename = "callRendererFunction", borrow)]
    call_renderer_function: Option<&'a RawValue>,
}

/// Reads the call id and the function keys without judging anything else.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(rename = "functionCallId", borrow, default)]
    function_call_id: Option<&'a RawValue>,
    #[serde(rename = "callFunction", borrow, default)]
    call_function: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct FormProbe {
    #[serde(rename = "@call", default)]
    at_call: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    call: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call<'a> {
    #[serde(rename = "functionCallId")]
    function_call_id: String,
    #[serde(rename = "surfaceId", default, deserialize_with = "present")]
    surface_id: Option<String>,
    #[serde(rename = "callFunction", borrow)]
    call_function: ObjectOnly<FunctionCall<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionCall<'a> {
    #[serde(default, deserialize_with = "present")]
    call: Option<String>,
    #[serde(rename = "@call", default, deserialize_with = "present")]
    at_call: Option<String>,
    #[serde(rename = "catalogId")]
    catalog_id: String,
    #[serde(borrow, default, deserialize_with = "present")]
    args: Option<&'a RawValue>,
}

/// An optional key that, when present, must hold a `T` (`null` included for raw values):
/// serde's `Option` would read `null` as absent.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// Decodes one agent-to-renderer message with the default [`GateLimits`].
pub fn decode(message: &[u8]) -> Result<CallRendererFunction<'_>, DecodeError> {
    decode_with(message, GateLimits::default())
}

/// Decodes one agent-to-renderer message that must be a v1.0 `callRendererFunction`, in
/// either form, checking `limits` first.
pub fn decode_with(message: &[u8], limits: GateLimits) -> Result<CallRendererFunction<'_>, DecodeError> {
    let fail = |reason, form, id: Option<String>, detail: String| DecodeError {
        reason,
        form,
        function_call_id: id,
        detail,
    };
    let malformed = |form, id, detail| fail(GateReason::MalformedMessage, form, id, detail);
    if message.len() > limits.max_message_bytes {
        return Err(fail(
            GateReason::MessageTooLarge,
            WireForm::Current,
            None,
            format!("message is longer than {} bytes", limits.max_message_bytes),
        ));
    }
    // Objects only, at every level: serde would also read a struct from an array of its fields.
    let ObjectOnly(envelope): ObjectOnly<Envelope<'_>> =
        serde_json::from_slice(message).map_err(|e| malformed(WireForm::Current, None, e.to_string()))?;
    let raw = envelope.call_renderer_function.ok_or_else(|| {
        malformed(
            WireForm::Current,
            None,
            "the message has no callRendererFunction".into(),
        )
    })?;
    let too_long = |form, id: &str| {
        (id.len() > limits.max_call_id_bytes).then(|| {
            let detail = format!(
                "functionCallId is {} bytes, the limit is {}",
                id.len(),
                limits.max_call_id_bytes
            );
            fail(GateReason::CallIdTooLong, form, None, detail)
        })
    };
    let call: Call<'_> = match serde_json::from_str(raw.get()) {
        Ok(ObjectOnly(call)) => call,
        Err(e) => {
            // Only now read what can still be read: the call id and the form.
            let (form, id) = probe(raw.get());
            if let Some(err) = id.as_deref().and_then(|id| too_long(form, id)) {
                return Err(err);
            }
            return Err(malformed(form, id, e.to_string()));
        }
    };
    let ObjectOnly(f) = call.call_function;
    let hint = match (&f.call, &f.at_call) {
        (Some(_), None) => WireForm::Candidate,
        _ => WireForm::Current,
    };
    if let Some(err) = too_long(hint, &call.function_call_id) {
        return Err(err);
    }
    let id = Some(call.function_call_id.clone());
    if envelope.version.as_deref() != Some(VERSION) {
        let detail = format!("version must be {VERSION:?}, got {:?}", envelope.version);
        return Err(malformed(hint, id, detail));
    }
    let (form, name) = match (f.call, f.at_call) {
        (Some(name), None) => (WireForm::Candidate, name),
        (None, Some(name)) => (WireForm::Current, name),
        _ => {
            let detail = "callFunction must name the function in exactly one of `call` and `@call`";
            return Err(malformed(hint, id, detail.into()));
        }
    };
    if form == WireForm::Candidate && call.surface_id.is_some() {
        let detail = "surfaceId belongs to the `@call` form, not to the `call` form";
        return Err(malformed(form, id, detail.into()));
    }
    Ok(CallRendererFunction {
        form,
        function_call_id: call.function_call_id,
        surface_id: call.surface_id,
        call: name,
        catalog_id: f.catalog_id,
        args_json: f.args.map(RawValue::get),
    })
}

/// The form and call id of a `callRendererFunction` that did not decode, as far as they
/// can be read (the current form when the function key shows neither).
fn probe(raw: &str) -> (WireForm, Option<String>) {
    let probe = serde_json::from_str::<ObjectOnly<Probe<'_>>>(raw)
        .ok()
        .map(ObjectOnly::into_inner);
    let form = probe
        .as_ref()
        .and_then(|p| p.call_function)
        .and_then(|f| serde_json::from_str::<ObjectOnly<FormProbe>>(f.get()).ok())
        .map(ObjectOnly::into_inner)
        .map_or(WireForm::Current, |f| match (f.at_call, f.call) {
            (None, Some(_)) => WireForm::Candidate,
            _ => WireForm::Current,
        });
    let id = probe
        .and_then(|p| p.function_call_id)
        .and_then(|id| serde_json::from_str::<String>(id.get()).ok());
    (form, id)
}

/// A message the renderer host sends back to the agent.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RendererMessage {
    /// `rendererFunctionResponse` with `value`.
    Value {
        /// The call id.
        function_call_id: String,
        /// The function's result.
        value: Value,
    },
    /// `rendererFunctionResponse` with `error`: every refusal in the current form, and in
    /// the Candidate form a call that was taken up and did not succeed.
    FunctionError {
        /// The call id.
        function_call_id: String,
        /// Error code, e.g. `ACTION_BLOCKED`.
        code: &'static str,
        /// Human-readable message.
        message: String,
    },
    /// Top-level `error` with the call id: a Candidate-form call refused before it was
    /// taken up.
    Error {
        /// The call id.
        function_call_id: String,
        /// Error code, e.g. `INVALID_FUNCTION_CALL`.
        code: &'static str,
        /// Human-readable message.
        message: String,
    },
    /// Top-level `error` without a call id: a message that named no usable one.
    Unaddressed {
        /// Error code, e.g. `MESSAGE_TOO_LARGE`.
        code: &'static str,
        /// Human-readable message.
        message: String,
    },
}

impl RendererMessage {
    /// The wire JSON object.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self.wire()).unwrap_or(Value::Null)
    }

    /// The wire bytes: the members of [`to_value`](Self::to_value), written from the message
    /// itself (no copy of the tool's value) and always in one order, `version` first.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.wire()).unwrap_or_default()
    }

    fn wire(&self) -> WireMessage<'_> {
        let (response, error) = match self {
            RendererMessage::Value {
                function_call_id,
                value,
            } => (
                Some(WireResponse {
                    function_call_id,
                    value: Some(value),
                    error: None,
                }),
                None,
            ),
            RendererMessage::FunctionError {
                function_call_id,
                code,
                message,
            } => (
                Some(WireResponse {
                    function_call_id,
                    value: None,
                    error: Some(WireError::new(code, message, None)),
                }),
                None,
            ),
            RendererMessage::Error {
                function_call_id,
                code,
                message,
            } => (None, Some(WireError::new(code, message, Some(function_call_id)))),
            RendererMessage::Unaddressed { code, message } => {
                (None, Some(WireError::new(code, message, None)))
            }
        };
        WireMessage {
            version: VERSION,
            response,
            error,
        }
    }

    /// The call id the message answers, if it answers one.
    pub fn function_call_id(&self) -> Option<&str> {
        match self {
            RendererMessage::Value { function_call_id, .. }
            | RendererMessage::FunctionError { function_call_id, .. }
            | RendererMessage::Error { function_call_id, .. } => Some(function_call_id),
            RendererMessage::Unaddressed { .. } => None,
        }
    }

    /// The error code, if this is a refusal.
    pub fn error_code(&self) -> Option<&'static str> {
        match self {
            RendererMessage::Value { .. } => None,
            RendererMessage::FunctionError { code, .. }
            | RendererMessage::Error { code, .. }
            | RendererMessage::Unaddressed { code, .. } => Some(code),
        }
    }
}

/// A [`RendererMessage`] as it goes on the wire, borrowed from it.
#[derive(Serialize)]
struct WireMessage<'a> {
    version: &'static str,
    #[serde(rename = "rendererFunctionResponse", skip_serializing_if = "Option::is_none")]
    response: Option<WireResponse<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<WireError<'a>>,
}

#[derive(Serialize)]
struct WireResponse<'a> {
    #[serde(rename = "functionCallId")]
    function_call_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<WireError<'a>>,
}

#[derive(Serialize)]
struct WireError<'a> {
    code: &'static str,
    message: &'a str,
    #[serde(rename = "functionCallId", skip_serializing_if = "Option::is_none")]
    function_call_id: Option<&'a str>,
}

impl<'a> WireError<'a> {
    fn new(code: &'static str, message: &'a str, function_call_id: Option<&'a str>) -> Self {
        WireError {
            code,
            message,
            function_call_id,
        }
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;

//! The A2UI v1.0 wire mapping: every field name and message shape of the (Candidate) spec
//! lives in this module, so a later revision is a change here only.
//!
//! In: `{"version": "v1.0", "callRendererFunction": {"functionCallId", "callFunction":
//! {"call", "catalogId", "args"}}}`; unknown fields are refused. Out: a
//! `rendererFunctionResponse` with `value` or `error`, or a top-level `error` carrying the
//! `functionCallId`.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// The only protocol version this module speaks.
pub const VERSION: &str = "v1.0";

/// A decoded `callRendererFunction`. `args_json` is the agent's argument text, untouched;
/// the gate parses it strictly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRendererFunction {
    /// `callRendererFunction.functionCallId`.
    pub function_call_id: String,
    /// `callFunction.call`: the function name.
    pub call: String,
    /// `callFunction.catalogId`.
    pub catalog_id: String,
    /// `callFunction.args` as JSON text (`{}` when absent).
    pub args_json: String,
}

/// Why a message could not be decoded. `function_call_id` is set when the message named
/// one, so the refusal can still be addressed to the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a valid A2UI v1.0 callRendererFunction: {detail}")]
pub struct DecodeError {
    /// The call id, if one could be read.
    pub function_call_id: Option<String>,
    /// What was wrong.
    pub detail: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    version: Option<String>,
    #[serde(rename = "callRendererFunction", borrow)]
    call_renderer_function: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call<'a> {
    #[serde(rename = "functionCallId")]
    function_call_id: String,
    #[serde(rename = "callFunction", borrow)]
    call_function: FunctionCall<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionCall<'a> {
    call: String,
    #[serde(rename = "catalogId")]
    catalog_id: String,
    #[serde(borrow, default)]
    args: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct CallIdOnly {
    #[serde(rename = "functionCallId")]
    function_call_id: Option<String>,
}

/// Decodes one agent-to-renderer message that must be a v1.0 `callRendererFunction`.
pub fn decode(message: &[u8]) -> Result<CallRendererFunction, DecodeError> {
    let fail = |id: Option<String>, detail: String| DecodeError {
        function_call_id: id,
        detail,
    };
    let envelope: Envelope<'_> = serde_json::from_slice(message).map_err(|e| fail(None, e.to_string()))?;
    let raw = envelope
        .call_renderer_function
        .ok_or_else(|| fail(None, "the message has no callRendererFunction".into()))?;
    let call_id = serde_json::from_str::<CallIdOnly>(raw.get())
        .ok()
        .and_then(|c| c.function_call_id);
    if envelope.version.as_deref() != Some(VERSION) {
        return Err(fail(
            call_id,
            format!("version must be {VERSION:?}, got {:?}", envelope.version),
        ));
    }
    let call: Call<'_> = serde_json::from_str(raw.get()).map_err(|e| fail(call_id, e.to_string()))?;
    Ok(CallRendererFunction {
        function_call_id: call.function_call_id,
        call: call.call_function.call,
        catalog_id: call.call_function.catalog_id,
        args_json: call
            .call_function
            .args
            .map_or_else(|| "{}".to_owned(), |a| a.get().to_owned()),
    })
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
    /// `rendererFunctionResponse` with `error`: the call was taken up and did not succeed.
    FunctionError {
        /// The call id.
        function_call_id: String,
        /// Error code, e.g. `ACTION_BLOCKED`.
        code: &'static str,
        /// Human-readable message.
        message: &'static str,
    },
    /// Top-level `error`: the call was refused before it was taken up.
    Error {
        /// The call id.
        function_call_id: String,
        /// Error code, e.g. `INVALID_FUNCTION_CALL`.
        code: &'static str,
        /// Human-readable message.
        message: String,
    },
}

impl RendererMessage {
    /// The wire JSON object.
    pub fn to_value(&self) -> Value {
        match self {
            RendererMessage::Value {
                function_call_id,
                value,
            } => json!({
                "version": VERSION,
                "rendererFunctionResponse": {"functionCallId": function_call_id, "value": value},
            }),
            RendererMessage::FunctionError {
                function_call_id,
                code,
                message,
            } => json!({
                "version": VERSION,
                "rendererFunctionResponse": {
                    "functionCallId": function_call_id,
                    "error": {"code": code, "message": message},
                },
            }),
            RendererMessage::Error {
                function_call_id,
                code,
                message,
            } => json!({
                "version": VERSION,
                "error": {"code": code, "message": message, "functionCallId": function_call_id},
            }),
        }
    }

    /// The wire bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.to_value()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_documented_request() {
        let m = br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"send_1","callFunction":
            {"call":"sendMessage","catalogId":"c","args":{"to":"t","body":"b"}}}}"#;
        let call = decode(m).unwrap();
        assert_eq!(
            (
                call.function_call_id.as_str(),
                call.call.as_str(),
                call.catalog_id.as_str()
            ),
            ("send_1", "sendMessage", "c")
        );
        assert_eq!(call.args_json, r#"{"to":"t","body":"b"}"#);
    }

    #[test]
    fn refuses_unknown_fields_wrong_versions_and_other_messages() {
        let cases: [(&[u8], Option<&str>); 7] = [
            (br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","callFunction":{"call":"f","catalogId":"c"},"extra":1}}"#, Some("x")),
            (br#"{"version":"v0.9","callRendererFunction":{"functionCallId":"x","callFunction":{"call":"f","catalogId":"c"}}}"#, Some("x")),
            (br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","callFunction":{"call":"f"}}}"#, Some("x")),
            (br#"{"version":"v1.0","createSurface":{"surfaceId":"s"}}"#, None),
            (br#"{"version":"v1.0","version":"v1.0","callRendererFunction":{}}"#, None),
            (b"not json", None),
            (br#"[]"#, None),
        ];
        for (m, id) in cases {
            let err = decode(m).unwrap_err();
            assert_eq!(
                err.function_call_id.as_deref(),
                id,
                "{}",
                String::from_utf8_lossy(m)
            );
        }
    }

    #[test]
    fn absent_args_are_an_empty_object() {
        let call = decode(br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"p","callFunction":{"call":"ping","catalogId":"c"}}}"#).unwrap();
        assert_eq!(call.args_json, "{}");
    }
}

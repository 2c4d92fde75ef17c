//! `aml.v1.CallToolRequest`, written by hand so its string fields decode as bytes.
//!
//! On the wire a proto3 `string` and `bytes` field are the same (length-delimited); only
//! the decoder differs. A generated decoder refuses text that is not UTF-8 with a decode
//! error, which tonic reports as `INTERNAL` before the service sees the call. Taking the
//! bytes lets the boundary's strict parser refuse them with its own code
//! (`AML_JSON_INVALID_UTF8`), with a receipt, like every other malformed argument text.

/// A call of one tool (`aml.v1.CallToolRequest`).
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct CallToolRequest {
    /// The tool's name (UTF-8 text on the wire).
    #[prost(bytes = "vec", tag = "1")]
    pub tool: Vec<u8>,
    /// The arguments object as JSON text, exactly as the agent produced it.
    #[prost(bytes = "vec", tag = "2")]
    pub arguments_json: Vec<u8>,
}

impl CallToolRequest {
    /// A request for `tool` with `arguments_json`.
    pub fn new(tool: &str, arguments_json: &str) -> Self {
        CallToolRequest {
            tool: tool.as_bytes().to_vec(),
            arguments_json: arguments_json.as_bytes().to_vec(),
        }
    }
}

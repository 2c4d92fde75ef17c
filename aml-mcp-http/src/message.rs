//! What the transports read from a JSON-RPC message: its kind, id and progress token. The
//! message itself passes on as it is.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// The members of a message the transports route by.
#[derive(Debug, Default)]
pub(crate) struct Peek {
    /// The id as compact JSON text (`1` and `"1"` differ), if any.
    pub(crate) id: Option<String>,
    pub(crate) method: Option<String>,
    /// `params._meta.progressToken` of a request, or `params.progressToken` of a
    /// notification, as compact JSON text.
    pub(crate) progress_token: Option<String>,
    /// `result.protocolVersion` (an `initialize` answer).
    pub(crate) protocol_version: Option<String>,
    /// An `id` member that MCP does not allow (not a string or an integer: `null`, `true`,
    /// `1.5`, an object); `id` is then `None`.
    pub(crate) bad_id: bool,
    /// `params.name` of a `tools/call`: the tool, for per-tool scopes.
    pub(crate) tool: Option<String>,
}

/// A member that is present, `null` included (`Option<Value>` alone reads `null` as absent).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct Shape {
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Params>,
    #[serde(default)]
    result: Option<ResultShape>,
}

#[derive(Deserialize)]
struct Params {
    #[serde(default, rename = "progressToken")]
    progress_token: Option<Value>,
    #[serde(default)]
    name: Option<Value>,
    #[serde(default, rename = "_meta")]
    meta: Option<Meta>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default, rename = "progressToken")]
    progress_token: Option<Value>,
}

#[derive(Deserialize)]
struct ResultShape {
    #[serde(default, rename = "protocolVersion")]
    protocol_version: Option<Value>,
}

impl Peek {
    /// Reads a message; `None` if it is not a JSON object of the right shape.
    pub(crate) fn of(message: &[u8]) -> Option<Peek> {
        // serde would also read a struct from an array.
        if message.trim_ascii_start().first() != Some(&b'{') {
            return None;
        }
        let shape: Shape = serde_json::from_slice(message).ok()?;
        let text = |v: &Value| serde_json::to_string(v).unwrap_or_default();
        let params = shape.params.as_ref();
        let progress_token = params
            .and_then(|p| p.meta.as_ref().and_then(|m| m.progress_token.as_ref()))
            .or_else(|| params.and_then(|p| p.progress_token.as_ref()))
            .map(text);
        let valid = |v: &&Value| v.is_string() || v.is_i64() || v.is_u64();
        let tool = params
            .filter(|_| shape.method.as_deref() == Some("tools/call"))
            .and_then(|p| p.name.as_ref())
            .and_then(Value::as_str)
            .map(str::to_owned);
        Some(Peek {
            tool,
            id: shape.id.as_ref().filter(valid).map(text),
            bad_id: shape.id.as_ref().is_some_and(|v| !valid(&v)),
            method: shape.method,
            progress_token,
            protocol_version: shape
                .result
                .and_then(|r| r.protocol_version)
                .and_then(|v| v.as_str().map(str::to_owned)),
        })
    }

    /// A request: a method and an id.
    pub(crate) fn is_request(&self) -> bool {
        self.method.is_some() && self.id.is_some()
    }

    /// An answer: an id and no method.
    pub(crate) fn is_response(&self) -> bool {
        self.method.is_none() && self.id.is_some()
    }
}

/// The messages of a body: one object, or each member of a batch array, as their own bytes.
/// `Err` says why the body is not JSON-RPC.
pub(crate) fn split(body: &[u8]) -> Result<Vec<Bytes>, &'static str> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_slice(body).map_err(|_| "the body is not JSON")?;
            if items.is_empty() {
                return Err("an empty batch");
            }
            Ok(items.iter().map(|m| one_line(m.get().as_bytes())).collect())
        }
        Some(b'{') => {
            serde_json::from_slice::<&RawValue>(body).map_err(|_| "the body is not JSON")?;
            Ok(vec![one_line(body.trim_ascii())])
        }
        _ => Err("the body is not a JSON-RPC message (an object or a batch array)"),
    }
}

/// The message with each line break (which valid JSON has only between tokens) made a space,
/// so it is one line for stdio framing and one `data:` line for SSE.
pub(crate) fn one_line(message: &[u8]) -> Bytes {
    if !message.iter().any(|b| *b == b'\n' || *b == b'\r') {
        return Bytes::copy_from_slice(message);
    }
    message
        .iter()
        .map(|b| if *b == b'\n' || *b == b'\r' { b' ' } else { *b })
        .collect::<Vec<u8>>()
        .into()
}

/// A JSON-RPC error answer; `id` is JSON text (`null` when unknown).
pub(crate) fn error(id: Option<&str>, code: i64, message: &str) -> Bytes {
    aml_mcp::relay::jsonrpc::error_response(id.map(str::as_bytes), code, message, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peeks_and_splits_without_changing_bytes() {
        let p = Peek::of(
            br#"{"jsonrpc":"2.0","id":"7","method":"tools/call","params":{"_meta":{"progressToken":3}}}"#,
        )
        .unwrap();
        assert_eq!(p.id.as_deref(), Some("\"7\""));
        assert!(p.is_request());
        assert_eq!(p.progress_token.as_deref(), Some("3"));
        let n = Peek::of(br#"{"method":"notifications/progress","params":{"progressToken":3,"progress":1}}"#)
            .unwrap();
        assert!(!n.is_request() && !n.is_response());
        assert_eq!(n.progress_token.as_deref(), Some("3"));
        let r = Peek::of(br#"{"id":1,"result":{"protocolVersion":"2025-06-18"}}"#).unwrap();
        assert!(r.is_response());
        assert_eq!(r.protocol_version.as_deref(), Some("2025-06-18"));
        assert!(Peek::of(b"[1]").is_none());

        let batch = split(b" [ {\"id\":1,\n\"x\": 1.50}, {\"method\":\"m\"} ] ").unwrap();
        assert_eq!(&batch[0][..], b"{\"id\":1, \"x\": 1.50}");
        assert_eq!(&batch[1][..], b"{\"method\":\"m\"}");
        assert!(split(b"[]").is_err());
        assert!(split(b"{\"a\":").is_err());
        assert!(split(b"42").is_err());
    }
}

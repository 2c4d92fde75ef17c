//! Reading a 2026-07-28 message without re-encoding it: its members and where their values
//! are in the bytes, so the front can check the per-request envelope against the headers.

use std::ops::Range;

use aml_mcp::relay::jsonrpc::{range_in, Members};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::value::RawValue;

/// `_meta` key of the protocol revision a 2026-07-28 request was sent under.
pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client's capabilities (required with the version).
pub(crate) const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

fn as_string(value: &RawValue) -> Option<String> {
    serde_json::from_str::<String>(value.get()).ok()
}

/// What the stateless path reads from a client's message.
#[derive(Debug, Default)]
pub(crate) struct ClientMessage {
    pub(crate) method: Option<String>,
    /// The id's bytes, `null` included (the front refuses a request whose id is not a string
    /// or an integer).
    pub(crate) id: Option<Range<usize>>,
    /// `params._meta["io.modelcontextprotocol/protocolVersion"]`: `Some(None)` if present but
    /// not a string.
    pub(crate) meta_version: Option<Option<String>>,
    /// Whether `_meta` carries the client's capabilities (an object, each member once).
    pub(crate) has_capabilities: bool,
    /// `params.name` (or `params.uri`), as `Mcp-Name` must repeat it, for the methods that
    /// name something.
    pub(crate) name: Option<String>,
}

impl ClientMessage {
    /// Reads one message; `Err` says why it is not a JSON-RPC object the front can route
    /// (not an object, a duplicated member where the front reads).
    pub(crate) fn read(message: &str) -> Result<ClientMessage, String> {
        let top = Members::of(message)?.ok_or("the body is not one JSON-RPC object")?;
        let mut read = ClientMessage {
            method: top.get("method").and_then(as_string),
            id: top.get("id").map(|id| range_in(message.as_bytes(), id)),
            ..ClientMessage::default()
        };
        let Some(params) = top.get("params") else {
            return Ok(read);
        };
        let Some(params) = Members::of(params.get())? else {
            return Ok(read);
        };
        let name_key = match read.method.as_deref() {
            Some("tools/call" | "prompts/get") => Some("name"),
            Some("resources/read") => Some("uri"),
            _ => None,
        };
        read.name = name_key.and_then(|k| params.get(k)).and_then(as_string);
        let Some(meta) = params.get("_meta") else {
            return Ok(read);
        };
        let Some(meta) = Members::of(meta.get())? else {
            return Ok(read);
        };
        read.meta_version = meta.get(META_PROTOCOL_VERSION).map(as_string);
        read.has_capabilities = meta
            .get(META_CLIENT_CAPABILITIES)
            .is_some_and(|c| Members::parse(c).is_ok());
        Ok(read)
    }
}

/// Decodes an `Mcp-Name` (or `Mcp-Param-*`) value: as sent, or the `=?base64?…?=` form.
/// `None` for a malformed encoded value.
pub(crate) fn decode_header_value(value: &str) -> Option<String> {
    let Some(encoded) = value.strip_prefix("=?base64?").and_then(|v| v.strip_suffix("?=")) else {
        return Some(value.to_owned());
    };
    // Canonical only: padding required, no stray bits in the last symbol.
    String::from_utf8(STANDARD.decode(encoded).ok()?).ok()
}

/// Encodes a value for `Mcp-Name` (or `Mcp-Param-*`): as it is when it is printable ASCII
/// without edge spaces and not itself in the encoded form, else `=?base64?…?=`.
pub(crate) fn encode_header_value(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && value.trim() == value
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    if plain {
        return value.to_owned();
    }
    format!("=?base64?{}?=", STANDARD.encode(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &str = r#"{"jsonrpc":"2.0","id":"a\"1","method":"tools/call","params":{"name":"echo","arguments":{"id":9},"_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

    #[test]
    fn reads_the_envelope_where_the_headers_must_repeat_it() {
        let read = ClientMessage::read(CALL).unwrap();
        assert_eq!(read.method.as_deref(), Some("tools/call"));
        let id = read.id.clone().unwrap();
        assert_eq!(&CALL[id], r#""a\"1""#);
        assert_eq!(read.meta_version, Some(Some("2026-07-28".into())));
        assert!(read.has_capabilities);
        assert_eq!(read.name.as_deref(), Some("echo"));
    }

    #[test]
    fn refuses_what_two_readers_could_read_differently() {
        assert!(ClientMessage::read(r#"{"id":1,"id":2,"method":"ping"}"#).is_err());
        assert!(ClientMessage::read(
            r#"{"id":1,"method":"ping","params":{"_meta":{"progressToken":1,"progressToken":2}}}"#
        )
        .is_err());
        assert!(ClientMessage::read("[1]").is_err());
        assert!(ClientMessage::read(r#"{"id":1,"#).is_err());
        // An escaped key is the same member.
        let read = ClientMessage::read(r#"{"\u0069d":4,"method":"ping"}"#).unwrap();
        assert!(read.id.is_some());
    }

    #[test]
    fn header_values_decode_as_the_specification_encodes_them() {
        assert_eq!(decode_header_value("us-west1").as_deref(), Some("us-west1"));
        assert_eq!(
            decode_header_value("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(
            decode_header_value("=?base64?IHBhZGRlZCA=?=").as_deref(),
            Some(" padded ")
        );
        // Unpadded, stray bits in the last symbol, a bad symbol, padding inside, too much padding.
        for bad in [
            "=?base64?SGVsbG8?=",
            "=?base64?SGVsbG9=?=",
            "=?base64?S*==?=",
            "=?base64?SG==bG8=?=",
            "=?base64?S===?=",
        ] {
            assert_eq!(decode_header_value(bad), None, "{bad}");
        }
        // The specification's examples, and a round trip of each.
        for (value, encoded) in [
            ("us-west1", "us-west1"),
            ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
            (" padded ", "=?base64?IHBhZGRlZCA=?="),
            ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
            ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
        ] {
            assert_eq!(encode_header_value(value), encoded);
            assert_eq!(decode_header_value(encoded).as_deref(), Some(value));
        }
    }
}

//! Reading a 2026-07-28 message without re-encoding it: its members and where their values
//! are in the bytes, so the front can check the per-request envelope against the headers and
//! put its own id and progress token in place of the client's (and back) by splicing bytes.

use std::ops::Range;

pub(crate) use aml_mcp::relay::jsonrpc::splice;
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
    /// `params._meta.progressToken`'s bytes.
    pub(crate) progress_token: Option<Range<usize>>,
    /// `params._meta["io.modelcontextprotocol/protocolVersion"]`: `Some(None)` if present but
    /// not a string.
    pub(crate) meta_version: Option<Option<String>>,
    /// Whether `_meta` carries the client's capabilities.
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
        read.progress_token = meta.get("progressToken").map(|t| range_in(message.as_bytes(), t));
        read.meta_version = meta.get(META_PROTOCOL_VERSION).map(as_string);
        read.has_capabilities = meta.get(META_CLIENT_CAPABILITIES).is_some();
        Ok(read)
    }
}

/// Where a 2026-07-28 subscription's notifications name the request that opened it.
pub(crate) const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";

/// Where the relay's message names a request of the front's: the id of an answer, the
/// `params.progressToken` of a progress notification, or the subscription of a notification.
#[derive(Debug)]
pub(crate) enum ServerMessage {
    /// An answer (`id`, no `method`).
    Answer { id: Range<usize> },
    /// A notification with a progress token.
    Progress { token: Range<usize> },
    /// A notification of a 2026-07-28 subscription: `id` is the range of the
    /// `subscriptions/listen` request's id in its `_meta`.
    Subscription { id: Range<usize> },
    /// A request from the server (`method` and `id`).
    Request { id: Range<usize> },
    /// Anything else: a notification tied to no request the front can see.
    Other,
}

impl ServerMessage {
    /// Reads one message from the relay (which only sends JSON-RPC objects; anything else is
    /// `Other`).
    pub(crate) fn read(message: &str) -> ServerMessage {
        let Ok(Some(top)) = Members::of(message) else {
            return ServerMessage::Other;
        };
        let id = top.get("id").filter(|id| id.get() != "null");
        match (top.get("method"), id) {
            (None, Some(id)) => ServerMessage::Answer {
                id: range_in(message.as_bytes(), id),
            },
            (Some(_), Some(id)) => ServerMessage::Request {
                id: range_in(message.as_bytes(), id),
            },
            (Some(_), None) => {
                let Some(params) = top
                    .get("params")
                    .and_then(|p| Members::of(p.get()).ok().flatten())
                else {
                    return ServerMessage::Other;
                };
                let subscription = params
                    .get("_meta")
                    .and_then(|m| Members::of(m.get()).ok().flatten())
                    .and_then(|m| m.get(SUBSCRIPTION_ID_META));
                if let Some(id) = subscription {
                    return ServerMessage::Subscription {
                        id: range_in(message.as_bytes(), id),
                    };
                }
                params
                    .get("progressToken")
                    .map(|t| ServerMessage::Progress {
                        token: range_in(message.as_bytes(), t),
                    })
                    .unwrap_or(ServerMessage::Other)
            }
            (None, None) => ServerMessage::Other,
        }
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
    fn reads_ranges_and_splices_without_touching_other_bytes() {
        let read = ClientMessage::read(CALL).unwrap();
        assert!(read.method.is_some());
        let id = read.id.clone().unwrap();
        assert_eq!(&CALL[id.clone()], r#""a\"1""#);
        let token = read.progress_token.clone().unwrap();
        assert_eq!(&CALL[token.clone()], "7");
        assert_eq!(read.meta_version, Some(Some("2026-07-28".into())));
        assert!(read.has_capabilities);
        assert_eq!(read.name.as_deref(), Some("echo"));
        let out = splice(CALL.as_bytes(), &mut [(token, b"\"t-5\""), (id, b"5")]);
        let expected = CALL
            .replace(r#""id":"a\"1""#, r#""id":5"#)
            .replace(r#""progressToken":7"#, r#""progressToken":"t-5""#);
        assert_eq!(String::from_utf8(out).unwrap(), expected);

        let answer = r#"{"jsonrpc":"2.0","result":{"id":3},"id":5}"#;
        let ServerMessage::Answer { id } = ServerMessage::read(answer) else {
            panic!("an answer")
        };
        assert_eq!(&answer[id], "5");
        let progress = r#"{"method":"notifications/progress","params":{"progressToken":"t-5","progress":1}}"#;
        let ServerMessage::Progress { token } = ServerMessage::read(progress) else {
            panic!("progress")
        };
        assert_eq!(&progress[token], "\"t-5\"");
        assert!(matches!(
            ServerMessage::read(r#"{"id":1,"method":"sampling/createMessage"}"#),
            ServerMessage::Request { .. }
        ));
        assert!(matches!(
            ServerMessage::read(r#"{"method":"notifications/message","params":{}}"#),
            ServerMessage::Other
        ));
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

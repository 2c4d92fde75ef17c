//! What the transports read from a JSON-RPC message: its kind, id and progress token. The
//! message itself passes on as it is.

use std::ops::Range;

use aml_mcp::relay::jsonrpc::{id_key, range_in, Envelope, Members};
use bytes::Bytes;
use serde_json::value::RawValue;

/// A member that must be a string when present: `None` if it is another value, `Some(None)`
/// if it is absent or `null`.
fn optional_string(member: Option<&RawValue>) -> Option<Option<String>> {
    match member {
        None => Some(None),
        Some(value) if value.get() == "null" => Some(None),
        Some(value) => serde_json::from_str::<String>(value.get()).ok().map(Some),
    }
}

/// The members of a member that is an object: `Some(None)` if it is absent or another value,
/// `None` if it names a member twice.
fn object(member: Option<&RawValue>) -> Option<Option<Members<'_>>> {
    match member {
        Some(value) if value.get().starts_with('{') => Members::parse(value).ok().map(Some),
        _ => Some(None),
    }
}

/// The members of a message the transports route by.
#[derive(Debug, Default)]
pub(crate) struct Peek {
    /// The id as compact JSON text (`1` and `"1"` differ), if any.
    pub(crate) id: Option<String>,
    pub(crate) method: Option<String>,
    /// An `id` member that MCP does not allow (not a string or an integer: `null`, `true`,
    /// `1.5`, an object); `id` is then `None`.
    pub(crate) bad_id: bool,
    /// `params.name` of a `tools/call`: the tool, for per-tool scopes.
    pub(crate) tool: Option<String>,
}

impl Peek {
    /// Reads a message; `None` if it is not a JSON object of the right shape (a member the
    /// transports read of the wrong type, or a duplicated member where they read). Ids are
    /// keyed as the relay keys them ([`aml_mcp::relay::jsonrpc::key_text`]).
    pub(crate) fn of(message: &[u8]) -> Option<Peek> {
        Peek::read(message, true)
    }

    /// [`Peek::of`] for what the relay sends the client: it checked (or wrote) every answer's
    /// `result` it reads, so the front, which reads a batch's answers for their ids alone,
    /// skips it.
    pub(crate) fn of_relayed(message: &[u8]) -> Option<Peek> {
        Peek::read(message, false)
    }

    fn read(message: &[u8], check_result: bool) -> Option<Peek> {
        // Members it skips would not be checked otherwise.
        std::str::from_utf8(message).ok()?;
        let top = Envelope::parse(message).ok()?;
        if check_result {
            // A `result` is read (`protocolVersion`) by some: each member once for all.
            object(top.result)?;
        }
        let method = top.method.map(String::from);
        let params = object(top.params)?;
        let member = |name: &str| params.as_ref().and_then(|p| p.get(name));
        // The relay reads it (its progress token): a member named twice is refused here.
        object(member("_meta"))?;
        let tool = match method.as_deref() {
            Some("tools/call") => optional_string(member("name")).flatten(),
            _ => None,
        };
        Some(Peek {
            id: top.id.and_then(id_key),
            bad_id: top.id.is_some_and(|id| id_key(id).is_none()),
            method,
            tool,
        })
    }

    /// For a message [`Peek::of`] refuses that still reads as a `tools/call` (its `params`
    /// malformed: a member named twice, say): the tool it names when that can be read, else
    /// empty. The front records such a call as refused; `None` for anything else.
    pub(crate) fn unreadable_call(message: &[u8]) -> Option<String> {
        let top = Envelope::parse(message).ok()?;
        if top.method.as_deref() != Some("tools/call") {
            return None;
        }
        let tool = object(top.params)
            .flatten()
            .and_then(|params| optional_string(params.get("name")).flatten());
        Some(tool.unwrap_or_default())
    }

    /// `result.protocolVersion` of an answer (an `initialize` answer names it), if it is a
    /// string. Read apart from the envelope, which most readers need alone.
    pub(crate) fn protocol_version(message: &[u8]) -> Option<String> {
        let result = object(Envelope::parse(message).ok()?.result)??;
        optional_string(result.get("protocolVersion"))?
    }

    /// The id (keyed as [`Peek::id`]) of the request a `notifications/cancelled` cancels;
    /// `None` for another message.
    pub(crate) fn cancelled_request(message: &[u8]) -> Option<String> {
        let top = Envelope::parse(message).ok()?;
        if top.method.as_deref() != Some("notifications/cancelled") {
            return None;
        }
        id_key(Members::parse(top.params?).ok()?.get("requestId")?)
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

/// The messages of a body: one object, or each member of a batch array, as their own bytes
/// (sharing the body's where a message has no line break). `Err` says why the body is not
/// JSON-RPC.
pub(crate) fn split(body: &Bytes) -> Result<Vec<Bytes>, &'static str> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_slice(body).map_err(|_| "the body is not JSON")?;
            if items.is_empty() {
                return Err("an empty batch");
            }
            Ok(items
                .iter()
                .map(|m| one_line_of(body, range_in(body, m)))
                .collect())
        }
        Some(b'{') => {
            serde_json::from_slice::<&RawValue>(body).map_err(|_| "the body is not JSON")?;
            let start = body.len() - body.trim_ascii_start().len();
            Ok(vec![one_line_of(body, start..body.trim_ascii_end().len())])
        }
        _ => Err("the body is not a JSON-RPC message (an object or a batch array)"),
    }
}

/// [`one_line`] of `body[range]`, sharing `body`'s bytes when there is no line break.
fn one_line_of(body: &Bytes, range: Range<usize>) -> Bytes {
    match body[range.clone()].iter().any(|b| *b == b'\n' || *b == b'\r') {
        true => one_line(&body[range]),
        false => body.slice(range),
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
        let n = Peek::of(br#"{"method":"notifications/progress","params":{"progressToken":3,"progress":1}}"#)
            .unwrap();
        assert!(!n.is_request() && !n.is_response());
        let answer = br#"{"id":1,"result":{"protocolVersion":"2025-06-18"}}"#;
        assert!(Peek::of(answer).unwrap().is_response());
        assert_eq!(Peek::protocol_version(answer).as_deref(), Some("2025-06-18"));
        assert_eq!(
            Peek::protocol_version(br#"{"id":1,"result":{"protocolVersion":7}}"#),
            None
        );
        assert_eq!(
            Peek::protocol_version(br#"{"id":1,"result":{"protocolVersion":"a","protocolVersion":"b"}}"#),
            None
        );
        assert!(Peek::of(b"[1]").is_none());
        let twice = br#"{"id":6,"result":{"protocolVersion":"a","protocolVersion":"b"}}"#;
        assert!(Peek::of(twice).is_none(), "a client's answer is read whole");
        assert!(
            Peek::of_relayed(twice).is_some_and(|p| p.is_response()),
            "read for its id"
        );

        // Ids are keyed as the relay keys them: any integer, one key per string spelling.
        let big =
            Peek::of(br#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}"#).unwrap();
        assert_eq!(big.id.as_deref(), Some("123456789012345678901234567890"));
        assert!(!big.bad_id);
        let escaped = Peek::of(br#"{"id":"\u0061","method":"ping"}"#).unwrap();
        assert_eq!(escaped.id.as_deref(), Some("\"a\""));
        for bad in [
            &br#"{"id":null,"method":"m"}"#[..],
            br#"{"id":1.5,"method":"m"}"#,
            br#"{"id":{},"method":"m"}"#,
        ] {
            let p = Peek::of(bad).unwrap();
            assert!(p.bad_id && p.id.is_none(), "{}", String::from_utf8_lossy(bad));
        }
        // A member read twice, or of the wrong type, is not routed.
        assert!(Peek::of(br#"{"id":1,"id":2,"method":"m"}"#).is_none());
        assert!(Peek::of(br#"{"id":1,"method":"tools/call","params":{"name":"a","name":"b"}}"#).is_none());
        assert!(Peek::of(br#"{"id":1,"method":7}"#).is_none());
        assert!(Peek::of(br#"{"id":1,"method":"m","params":{"_meta":{"a":1,"a":2}}}"#).is_none());
        let cancel = br#"{"method":"notifications/cancelled","params":{"requestId":"\u0061"}}"#;
        assert_eq!(Peek::cancelled_request(cancel).as_deref(), Some("\"a\""));
        assert_eq!(
            Peek::cancelled_request(br#"{"method":"notifications/cancelled","params":{}}"#),
            None
        );
        assert_eq!(
            Peek::cancelled_request(br#"{"method":"n","params":{"requestId":1}}"#),
            None
        );
        let call = Peek::of(br#"{"id":1,"method":"tools/call","params":{"name":"t"}}"#).unwrap();
        assert_eq!(call.tool.as_deref(), Some("t"));

        let batch = split(&Bytes::from_static(
            b" [ {\"id\":1,\n\"x\": 1.50}, {\"method\":\"m\"} ] ",
        ))
        .unwrap();
        assert_eq!(&batch[0][..], b"{\"id\":1, \"x\": 1.50}");
        assert_eq!(&batch[1][..], b"{\"method\":\"m\"}");
        assert!(split(&Bytes::from_static(b"[]")).is_err());
        assert!(split(&Bytes::from_static(b"{\"a\":")).is_err());
        assert!(split(&Bytes::from_static(b"42")).is_err());
        let one = split(&Bytes::from_static(b" {\"id\":1} \n")).unwrap();
        assert_eq!(&one[0][..], b"{\"id\":1}");
    }
}

//! Just enough JSON-RPC 2.0 to route MCP messages without re-encoding them: the envelope's
//! members as raw text (so whatever the relay does not act on keeps its bytes), byte ranges
//! to splice, and the error answers the relay gives itself.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// `-32700`: the message is not JSON the relay accepts.
pub const PARSE_ERROR: i64 = -32700;
/// `-32600`: not a valid JSON-RPC request.
pub const INVALID_REQUEST: i64 = -32600;
/// `-32602`: invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// `-32000`: the upstream server is gone (the code MCP SDKs use for a closed connection).
pub const UPSTREAM_GONE: i64 = -32000;
/// `-32001`: the upstream server did not answer in time (the code MCP SDKs use for a
/// request timeout).
pub const UPSTREAM_TIMEOUT: i64 = -32001;
/// `-32003`: the host does not relay this request from the server (sampling, elicitation).
pub const REFUSED_BY_HOST: i64 = -32003;

/// The members of one JSON-RPC message, as raw text borrowed from it: the one reader of the
/// envelope for stdio, the HTTP front and the upstream client. A member named twice is an
/// error; members it does not name are skipped.
///
/// ```
/// use aml_mcp::relay::jsonrpc::Envelope;
///
/// let env = Envelope::parse(br#"{"jsonrpc":"2.0","id":7,"method":"ping","x":[1]}"#).unwrap();
/// assert_eq!((env.id.map(|id| id.get()), env.method.as_deref()), (Some("7"), Some("ping")));
/// assert!(Envelope::parse(br#"{"id":1,"id":2}"#).is_err());
/// assert!(Envelope::parse(br#"[{"id":1}]"#).is_err(), "an object only");
/// ```
#[derive(Debug, Default, Deserialize)]
#[non_exhaustive]
pub struct Envelope<'a> {
    /// `jsonrpc`, if present.
    #[serde(borrow, default, deserialize_with = "present")]
    pub jsonrpc: Option<&'a RawValue>,
    /// `id`, if present (`null` included).
    #[serde(borrow, default, deserialize_with = "present")]
    pub id: Option<&'a RawValue>,
    /// `method`, if present and not `null` (another value than a string is an error).
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    /// `params`, if present.
    #[serde(borrow, default, deserialize_with = "present")]
    pub params: Option<&'a RawValue>,
    /// `result`, if present.
    #[serde(borrow, default, deserialize_with = "present")]
    pub result: Option<&'a RawValue>,
    /// `error`, if present.
    #[serde(borrow, default, deserialize_with = "present")]
    pub error: Option<&'a RawValue>,
}

/// A member that is present, even as `null` (which `Option` alone would read as absent).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// What kind of message an envelope is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Request,
    Notification,
    Response,
}

impl<'a> Envelope<'a> {
    /// Parses a message's members (the values stay raw text).
    /// A JSON object only: serde would also read the envelope from an array of its members.
    pub fn parse(message: &'a [u8]) -> serde_json::Result<Self> {
        serde_json::from_slice(message).map(aml_core::ObjectOnly::into_inner)
    }

    /// The kind of message, or why it is not a valid one.
    pub(crate) fn kind(&self) -> Result<Kind, &'static str> {
        if self.jsonrpc.map(RawValue::get) != Some("\"2.0\"") {
            return Err("\"jsonrpc\" must be \"2.0\"");
        }
        if let Some(id) = self.id {
            if !is_valid_id(id) {
                return Err("\"id\" must be a string or an integer");
            }
        }
        match (&self.method, self.id, self.result.is_some(), self.error.is_some()) {
            (Some(_), Some(_), false, false) => Ok(Kind::Request),
            (Some(_), None, false, false) => Ok(Kind::Notification),
            (None, Some(_), true, false) | (None, Some(_), false, true) => Ok(Kind::Response),
            (None, None, _, _) => Err("a message needs a \"method\" or an \"id\""),
            _ => Err("a message is a request, a notification or a response, not a mix"),
        }
    }

    /// The id, when it is a valid one.
    pub(crate) fn valid_id(&self) -> Option<&'a RawValue> {
        self.id.filter(|id| is_valid_id(id))
    }
}

/// MCP ids are strings or integers.
pub(crate) fn is_valid_id(id: &RawValue) -> bool {
    let text = id.get().as_bytes();
    match text.first() {
        Some(b'"') => true,
        Some(b'-') => text.len() > 1 && text[1..].iter().all(u8::is_ascii_digit),
        Some(_) => text.iter().all(u8::is_ascii_digit),
        None => false,
    }
}

/// A JSON value's text as a lookup key: one key for every spelling of a string (`"a"` and
/// `"\u0061"`), other values as written. Ids and progress tokens are matched by it, on stdio
/// and over HTTP alike.
///
/// ```
/// use aml_mcp::relay::jsonrpc::key_text;
/// assert_eq!(key_text(br#""\u0061""#), key_text(br#""a""#));
/// assert_ne!(key_text(b"1"), key_text(br#""1""#));
/// ```
pub fn key_text(raw: &[u8]) -> String {
    // Integers and strings without escapes are already in the one form.
    if !raw.contains(&b'\\') {
        if let Ok(text) = std::str::from_utf8(raw) {
            return text.to_owned();
        }
    }
    serde_json::from_slice::<Value>(raw)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned())
}

/// A message's id as a lookup key ([`key_text`]), or `None` if it is not an MCP id (a
/// string or an integer, of any size).
pub fn id_key(id: &RawValue) -> Option<String> {
    is_valid_id(id).then(|| key_text(id.get().as_bytes()))
}

/// Where `inner` (a value parsed out of `outer`) lies in `outer`.
pub fn range_in(outer: &[u8], inner: &RawValue) -> Range<usize> {
    let start = inner.get().as_ptr() as usize - outer.as_ptr() as usize;
    start..start + inner.get().len()
}

/// `message` with each range replaced (the ranges must not overlap; they are sorted here).
pub fn splice(message: &[u8], edits: &mut [(Range<usize>, &[u8])]) -> Vec<u8> {
    edits.sort_by_key(|(range, _)| range.start);
    let extra: usize = edits.iter().map(|(_, with)| with.len()).sum();
    let mut out = Vec::with_capacity(message.len() + extra);
    let mut at = 0;
    for (range, with) in edits.iter() {
        out.extend_from_slice(&message[at..range.start]);
        out.extend_from_slice(with);
        at = range.end;
    }
    out.extend_from_slice(&message[at..]);
    out
}

/// A JSON-RPC error answer. `id` is the raw id text (`null` when none could be read).
pub fn error_response(id: Option<&[u8]>, code: i64, message: &str, data: Option<&Value>) -> Bytes {
    let mut out = Vec::with_capacity(96 + message.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.unwrap_or(b"null"));
    out.extend_from_slice(b",\"error\":{\"code\":");
    out.extend_from_slice(code.to_string().as_bytes());
    out.extend_from_slice(b",\"message\":");
    out.extend_from_slice(json_string(message).as_bytes());
    if let Some(data) = data {
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(data.to_string().as_bytes());
    }
    out.extend_from_slice(b"}}");
    Bytes::from(out)
}

/// A JSON-RPC result answer with a result written by the relay.
pub(crate) fn result_response(id: &[u8], result: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(40 + id.len() + result.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id);
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result);
    out.push(b'}');
    Bytes::from(out)
}

/// `s` as a JSON string.
pub(crate) fn json_string(s: &str) -> String {
    // Writing a string cannot fail.
    serde_json::to_string(s).unwrap_or_default()
}

/// The members of a JSON object in their order, values as raw text borrowed from the
/// message (so [`range_in`] finds them); duplicate names are an error (two parsers could each
/// read a different one).
#[derive(Debug)]
pub struct Members<'a>(pub(crate) Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Members<'a> {
    /// The members of `object`.
    pub fn parse(object: &'a RawValue) -> serde_json::Result<Self> {
        serde_json::from_str(object.get())
    }

    /// The members of `text` if it is an object (`Ok(None)` if it is another JSON value);
    /// `Err` says why it is not JSON, or names a duplicated member.
    pub fn of(text: &'a str) -> Result<Option<Self>, String> {
        if text.trim_start().as_bytes().first() != Some(&b'{') {
            return Ok(None);
        }
        serde_json::from_str(text).map(Some).map_err(|e| e.to_string())
    }

    /// The value of member `name`.
    pub fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Collect;
        impl<'de> Visitor<'de> for Collect {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members: Vec<(Cow<'de, str>, &'de RawValue)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<Cow<'de, str>, &'de RawValue>()? {
                    if members.iter().any(|(k, _)| *k == key) {
                        return Err(serde::de::Error::custom(format!("duplicate member {key:?}")));
                    }
                    members.push((key, value));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Collect)
    }
}

/// Reads the top-level `"id"` of a message that could not be parsed whole (cut off, too
/// large, or broken after the id), without trusting the rest.
pub(crate) fn scan_id(message: &[u8]) -> Option<Bytes> {
    let id = scan_member(message, b"\"id\"")?;
    let raw: Box<RawValue> = serde_json::from_slice(id).ok()?;
    is_valid_id(&raw).then(|| Bytes::copy_from_slice(id))
}

/// Reads the top-level `"method"` of a message that could not be parsed whole, the same
/// way: `None` unless every member before it, and it, could be read.
pub(crate) fn scan_method(message: &[u8]) -> Option<String> {
    serde_json::from_slice(scan_member(message, b"\"method\"")?).ok()
}

/// The text of the top-level member named `key` (as written, with its quotes).
fn scan_member<'m>(message: &'m [u8], key: &[u8]) -> Option<&'m [u8]> {
    let mut s = Scanner {
        bytes: message,
        at: 0,
    };
    s.ws();
    s.eat(b'{')?;
    loop {
        s.ws();
        let name = s.string()?;
        s.ws();
        s.eat(b':')?;
        s.ws();
        let start = s.at;
        s.value()?;
        if name == key {
            return Some(&message[start..s.at]);
        }
        s.ws();
        match s.next()? {
            b',' => continue,
            _ => return None,
        }
    }
}

struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn next(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }
    fn ws(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }
    fn eat(&mut self, b: u8) -> Option<()> {
        (self.next()? == b).then_some(())
    }
    /// A string, returned with its quotes.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        self.eat(b'"')?;
        loop {
            match self.next()? {
                b'"' => return Some(&self.bytes[start..self.at]),
                b'\\' => {
                    self.next()?;
                }
                _ => {}
            }
        }
    }
    /// Skips one value (nested values by counting brackets outside strings).
    fn value(&mut self) -> Option<()> {
        match *self.bytes.get(self.at)? {
            b'"' => self.string().map(drop),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *self.bytes.get(self.at)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.at += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                let start = self.at;
                while matches!(self.bytes.get(self.at), Some(b) if !matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'))
                {
                    self.at += 1;
                }
                (self.at > start && self.at < self.bytes.len()).then_some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_invalid_messages() {
        let kind = |m: &str| Envelope::parse(m.as_bytes()).unwrap().kind();
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Ok(Kind::Request)
        );
        assert_eq!(kind(r#"{"jsonrpc":"2.0","method":"n"}"#), Ok(Kind::Notification));
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Ok(Kind::Response)
        );
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","id":-3,"error":{}}"#),
            Ok(Kind::Response)
        );
        assert!(kind(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).is_err());
        assert!(kind(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#).is_err());
        assert!(kind(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#).is_err());
        assert!(kind(r#"{"jsonrpc":"2.0","id":1}"#).is_err());
        assert!(Envelope::parse(br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#).is_err());
    }

    #[test]
    fn splices_keep_every_other_byte() {
        let m = br#"{"id": 7 , "method":"x","params":{"a":1.50}}"#;
        let env = Envelope::parse(m).unwrap();
        let id = range_in(m, env.id.unwrap());
        assert_eq!(&m[id.clone()], b"7");
        let out = splice(m, &mut [(id, b"\"z\"")]);
        assert_eq!(out, br#"{"id": "z" , "method":"x","params":{"a":1.50}}"#);
    }

    #[test]
    fn ids_are_read_from_broken_or_cut_messages() {
        assert_eq!(
            scan_id(br#"{"jsonrpc":"2.0","id":42,"result":{"x":[1,"#).as_deref(),
            Some(&b"42"[..])
        );
        assert_eq!(
            scan_id(br#"{"method":"a","params":{"s":"}\"{","n":[{}]},"id":"k\"1"}"#).as_deref(),
            Some(&br#""k\"1""#[..])
        );
        assert_eq!(scan_id(br#"{"result":{"x":"#), None);
        assert_eq!(scan_id(br#"{"id":null}"#), None);
        assert_eq!(scan_id(b"garbage"), None);
    }

    #[test]
    fn members_keep_order_and_refuse_duplicates() {
        let raw: &RawValue = serde_json::from_str(r#"{"b":1,"a":[2],"_meta":{}}"#).unwrap();
        let members = Members::parse(raw).unwrap();
        let names: Vec<&str> = members.0.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(names, ["b", "a", "_meta"]);
        assert_eq!(members.get("a").unwrap().get(), "[2]");
        let dup: &RawValue = serde_json::from_str(r#"{"a":1,"a":2}"#).unwrap();
        assert!(Members::parse(dup).is_err());
        let err = error_response(Some(b"3"), PARSE_ERROR, "bad \"x\"", None);
        assert_eq!(
            &err[..],
            br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32700,"message":"bad \"x\""}}"#
        );
    }
}

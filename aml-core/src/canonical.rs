//! Canonical JSON, byte-identical to the JavaScript reference.
//!
//! The reference rebuilds each object with `Object.keys(v).sort()` and writes it with
//! `JSON.stringify`. That is RFC 8785 except for key order: ECMAScript enumerates
//! *array-index* keys (`"0"` … `"4294967294"` in canonical decimal form) first, in numeric
//! order, and only then the other keys in UTF-16 code-unit order. RFC 8785 crates sort every
//! key by UTF-16 code units, so they disagree with the reference on objects such as
//! `{"10": 1, "9": 2}`; this module implements the reference's order itself.
//!
//! ```
//! use aml_core::canonical::to_canonical_string;
//! let v = serde_json::json!({"b": [1.0, 1e21, 1e-7, -0.0], "a": "\u{2028}\n", "10": 0, "9": 0});
//! assert_eq!(
//!     to_canonical_string(&v).unwrap(),
//!     "{\"9\":0,\"10\":0,\"a\":\"\u{2028}\\n\",\"b\":[1,1e+21,1e-7,0]}"
//! );
//! ```

use core::cmp::Ordering;
use core::fmt;

use serde_json::{Map, Value};

use crate::reason::JsonErrorCode;
use crate::Sha256Digest;

/// Nesting depth (arrays plus objects) beyond which values are refused, here and in
/// [`crate::strict`].
pub const MAX_DEPTH: usize = 64;

/// A value the canonical writer refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {detail}")]
pub struct CanonicalError {
    code: JsonErrorCode,
    detail: String,
}

impl CanonicalError {
    pub(crate) fn new(code: JsonErrorCode, detail: impl Into<String>) -> Self {
        CanonicalError {
            code,
            detail: detail.into(),
        }
    }

    /// The stable code (`AML_CANONICAL_JSON_NON_FINITE_NUMBER`, …).
    pub fn code(&self) -> JsonErrorCode {
        self.code
    }

    /// A human-readable description of what was refused.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

/// Appends the canonical form of `value` to `out`.
///
/// On error `out` may hold a partial write; callers discard it.
pub fn write_canonical(value: &Value, out: &mut String) -> Result<(), CanonicalError> {
    write_value(value, out, 0)
}

/// Appends the canonical form of the object `map` to `out`.
pub fn write_canonical_map(map: &Map<String, Value>, out: &mut String) -> Result<(), CanonicalError> {
    write_object(map, out, 0)
}

/// The canonical form of `value` as a string.
pub fn to_canonical_string(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::with_capacity(256);
    write_canonical(value, &mut out)?;
    Ok(out)
}

/// The canonical bytes of `value` and their SHA-256 digest.
pub fn canonical_digest(value: &Value) -> Result<(String, Sha256Digest), CanonicalError> {
    let out = to_canonical_string(value)?;
    let digest = Sha256Digest::of(out.as_bytes());
    Ok((out, digest))
}

fn write_value(value: &Value, out: &mut String, depth: usize) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out)?,
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            check_depth(depth)?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out, depth + 1)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            check_depth(depth)?;
            write_object(map, out, depth)?;
        }
    }
    Ok(())
}

fn check_depth(depth: usize) -> Result<(), CanonicalError> {
    if depth >= MAX_DEPTH {
        return Err(CanonicalError::new(
            JsonErrorCode::TooDeep,
            format!("nesting deeper than {MAX_DEPTH}"),
        ));
    }
    Ok(())
}

fn write_object(map: &Map<String, Value>, out: &mut String, depth: usize) -> Result<(), CanonicalError> {
    out.push('{');
    if iteration_order_is_canonical(map) {
        for (i, (k, v)) in map.iter().enumerate() {
            write_member(i, k, v, out, depth)?;
        }
    } else if map.len() <= SMALL_OBJECT {
        // Most objects are small: sort them on the stack.
        let mut entries = [SortKey::EMPTY; SMALL_OBJECT];
        for (slot, (k, v)) in entries.iter_mut().zip(map) {
            *slot = SortKey::of(k, v);
        }
        write_sorted(&mut entries[..map.len()], out, depth)?;
    } else {
        let mut entries: Vec<SortKey<'_>> = map.iter().map(|(k, v)| SortKey::of(k, v)).collect();
        write_sorted(&mut entries, out, depth)?;
    }
    out.push('}');
    Ok(())
}

const SMALL_OBJECT: usize = 16;

/// A member with its key's array index, read once rather than at every comparison.
#[derive(Clone, Copy)]
struct SortKey<'a> {
    index: Option<u32>,
    key: &'a str,
    value: &'a Value,
}

impl<'a> SortKey<'a> {
    const EMPTY: SortKey<'static> = SortKey {
        index: None,
        key: "",
        value: &Value::Null,
    };

    fn of(key: &'a str, value: &'a Value) -> Self {
        SortKey {
            index: array_index(key),
            key,
            value,
        }
    }
}

fn write_sorted(entries: &mut [SortKey<'_>], out: &mut String, depth: usize) -> Result<(), CanonicalError> {
    entries.sort_unstable_by(|a, b| compare_indexed((a.index, a.key), (b.index, b.key)));
    for (i, entry) in entries.iter().enumerate() {
        write_member(i, entry.key, entry.value, out, depth)?;
    }
    Ok(())
}

fn write_member(
    i: usize,
    key: &str,
    value: &Value,
    out: &mut String,
    depth: usize,
) -> Result<(), CanonicalError> {
    if i > 0 {
        out.push(',');
    }
    write_string(key, out);
    out.push(':');
    write_value(value, out, depth + 1)
}

/// Fast path: the map already iterates in canonical order when its keys ascend by bytes
/// and none is an array index or holds a character where UTF-8 and UTF-16 order differ
/// (U+E000 and above, UTF-8 lead byte 0xEE or higher).
fn iteration_order_is_canonical(map: &Map<String, Value>) -> bool {
    let mut prev: Option<&str> = None;
    for key in map.keys() {
        if key.bytes().any(|b| b >= 0xEE) || array_index(key).is_some() {
            return false;
        }
        if let Some(p) = prev {
            if p.as_bytes() >= key.as_bytes() {
                return false;
            }
        }
        prev = Some(key);
    }
    true
}

/// Orders two object keys as ECMAScript enumerates a rebuilt, sorted object: array-index
/// keys first in numeric order, then the rest by UTF-16 code units.
///
/// ```
/// use aml_core::canonical::compare_keys;
/// use std::cmp::Ordering::Less;
/// assert_eq!(compare_keys("9", "10"), Less);
/// assert_eq!(compare_keys("10", "-1"), Less);
/// assert_eq!(compare_keys("\u{1F600}", "\u{FFFF}"), Less);
/// ```
pub fn compare_keys(a: &str, b: &str) -> Ordering {
    compare_indexed((array_index(a), a), (array_index(b), b))
}

/// [`compare_keys`] on keys whose array index was already read.
fn compare_indexed((a_index, a): (Option<u32>, &str), (b_index, b): (Option<u32>, &str)) -> Ordering {
    match (a_index, b_index) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => compare_utf16(a, b),
    }
}

/// Orders by UTF-16 code units. UTF-8 bytes order as code points do, and code points order
/// as UTF-16 units do except U+E000..=U+FFFF against a supplementary one (lead byte 0xF0
/// and up), so bytes decide unless such a character is where the keys first differ.
fn compare_utf16(a: &str, b: &str) -> Ordering {
    let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let high = |s: &str| s.as_bytes().get(common).is_some_and(|&b| b >= 0xF0);
    if !high(a) && !high(b) {
        return a.as_bytes().cmp(b.as_bytes());
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// `Some(n)` when `key` is an ECMAScript array index: the canonical decimal form of an
/// integer `0 <= n <= 2^32 - 2`.
pub fn array_index(key: &str) -> Option<u32> {
    let bytes = key.as_bytes();
    if bytes.is_empty() || bytes.len() > 10 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if bytes.len() > 1 && bytes[0] == b'0' {
        return None;
    }
    let n: u64 = key.parse().ok()?;
    (n <= 4_294_967_294).then_some(n as u32)
}

fn write_number(n: &serde_json::Number, out: &mut String) -> Result<(), CanonicalError> {
    if let Some(u) = n.as_u64() {
        if u <= MAX_SAFE_INTEGER {
            write_integer(u, out);
            return Ok(());
        }
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= MAX_SAFE_INTEGER {
            out.push('-');
            write_integer(i.unsigned_abs(), out);
            return Ok(());
        }
    }
    let x = n.as_f64().ok_or_else(|| {
        CanonicalError::new(
            JsonErrorCode::UnsupportedValue,
            format!("number {n} has no double value"),
        )
    })?;
    write_f64(x, out)
}

/// 2^53: every integer up to here is exact in a double and written as plain digits.
const MAX_SAFE_INTEGER: u64 = 1 << 53;

fn write_integer(mut u: u64, out: &mut String) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// Writes `x` as ECMAScript `Number.prototype.toString` does; `-0` is written `0`.
pub(crate) fn write_f64(x: f64, out: &mut String) -> Result<(), CanonicalError> {
    if !x.is_finite() {
        return Err(CanonicalError::new(
            JsonErrorCode::NonFiniteNumber,
            format!("{x} is not a finite number"),
        ));
    }
    if x == 0.0 {
        out.push('0');
        return Ok(());
    }
    let mut buf = ryu_js::Buffer::new();
    out.push_str(buf.format_finite(x));
    Ok(())
}

/// Bytes that `JSON.stringify` escapes: `"`, `\` and U+0000–U+001F.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Whether any byte of `word` is in [`NEEDS_ESCAPE`]: below 0x20, `"` or `\`. Each test
/// is exact for the word as a whole (the classic has-zero-byte and has-less-than tricks).
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES * 0x80;
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x & HIGH != 0;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGH != 0;
    below_space || zero_in(word ^ (ONES * b'"' as u64)) || zero_in(word ^ (ONES * b'\\' as u64))
}

/// Writes `s` as `JSON.stringify` does: escape `"`, `\` and U+0000–U+001F only.
pub(crate) fn write_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    // Whole 8-byte words without a byte to escape are skipped at once (most text has none).
    let clean = bytes
        .chunks_exact(8)
        .take_while(|word| !word_needs_escape(u64::from_le_bytes((*word).try_into().unwrap_or([0; 8]))))
        .count()
        * 8;
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate().skip(clean) {
        if !NEEDS_ESCAPE[b as usize] {
            continue;
        }
        // Escaped bytes are ASCII, so `start..i` lies on character boundaries.
        out.push_str(&s[start..i]);
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                out.push_str("\\u00");
                out.push(char::from(HEX[(b >> 4) as usize]));
                out.push(char::from(HEX[(b & 0xf) as usize]));
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Displays a value in canonical form, or `<CODE>` when it cannot be written.
#[derive(Debug)]
pub struct Canonical<'a>(pub &'a Value);

impl fmt::Display for Canonical<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match to_canonical_string(self.0) {
            Ok(s) => f.write_str(&s),
            Err(e) => write!(f, "<{}>", e.code()),
        }
    }
}

#[cfg(test)]
#[path = "canonical_tests.rs"]
mod tests;

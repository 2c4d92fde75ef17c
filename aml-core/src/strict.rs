//! A strict JSON parser for text that arrives from agents.
//!
//! It refuses everything that would let two parsers disagree about what was approved:
//!
//! | input | code |
//! |---|---|
//! | longer than [`Limits::max_bytes`] (checked before parsing) | `AML_JSON_TOO_LARGE` |
//! | bytes that are not UTF-8 | `AML_JSON_INVALID_UTF8` |
//! | not JSON (RFC 8259), or trailing text | `AML_JSON_SYNTAX` |
//! | an object naming one key twice (serde_json keeps the last) | `AML_JSON_DUPLICATE_KEY` |
//! | a `\u` escape that leaves a surrogate unpaired | `AML_JSON_LONE_SURROGATE` |
//! | a number beyond the range of a double (`1e400`): `JSON.parse` makes it an infinity, which the reference refuses with this same code | `AML_CANONICAL_JSON_NON_FINITE_NUMBER` |
//! | arrays and objects nested deeper than [`Limits::max_depth`] | `AML_JSON_TOO_DEEP` |
//!
//! The parser keeps every value the way `JSON.parse` would read it, which rounds a number
//! literal that no double holds exactly (`9007199254740993` becomes `9007199254740992`).
//! Gateways that forward what was approved use [`first_inexact_number`] to refuse such input
//! instead of rounding it.
//!
//! ```
//! use aml_core::{strict, JsonErrorCode};
//! assert_eq!(strict::parse_str(r#"{"to":"a","n":1}"#).unwrap()["n"], 1);
//! let err = strict::parse_str(r#"{"to":"a","to":"b"}"#).unwrap_err();
//! assert_eq!(err.code(), JsonErrorCode::DuplicateKey);
//! assert_eq!(err.offset(), 10);
//! ```

use serde_json::{Map, Number, Value};

use crate::canonical::MAX_DEPTH;
use crate::reason::JsonErrorCode;

/// Default input limit: 1 MiB.
pub const DEFAULT_MAX_BYTES: usize = 1 << 20;

/// Size and nesting limits for [`parse_slice_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest accepted input, in bytes.
    pub max_bytes: usize,
    /// Deepest accepted nesting of arrays and objects (at most [`MAX_DEPTH`], which is what
    /// the canonical writer accepts).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: DEFAULT_MAX_BYTES,
            max_depth: MAX_DEPTH,
        }
    }
}

/// Why the strict parser refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} at byte {offset}: {detail}")]
pub struct ParseError {
    code: JsonErrorCode,
    offset: usize,
    detail: &'static str,
}

impl ParseError {
    /// The stable code.
    pub fn code(&self) -> JsonErrorCode {
        self.code
    }
    /// Byte offset into the input where the problem was found.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// A short description.
    pub fn detail(&self) -> &'static str {
        self.detail
    }
}

/// Parses `text` with the default [`Limits`].
pub fn parse_str(text: &str) -> Result<Value, ParseError> {
    parse_slice_with(text.as_bytes(), Limits::default())
}

/// Parses `bytes` with the default [`Limits`].
pub fn parse_slice(bytes: &[u8]) -> Result<Value, ParseError> {
    parse_slice_with(bytes, Limits::default())
}

/// Parses `bytes` with explicit limits.
pub fn parse_slice_with(bytes: &[u8], limits: Limits) -> Result<Value, ParseError> {
    if bytes.len() > limits.max_bytes {
        return Err(err(
            JsonErrorCode::TooLarge,
            limits.max_bytes,
            "input longer than the byte limit",
        ));
    }
    if let Err(e) = core::str::from_utf8(bytes) {
        return Err(err(
            JsonErrorCode::InvalidUtf8,
            e.valid_up_to(),
            "input is not utf-8",
        ));
    }
    let mut p = Parser {
        bytes,
        pos: 0,
        max_depth: limits.max_depth.min(MAX_DEPTH),
    };
    p.skip_ws();
    let value = p.value(0)?;
    p.skip_ws();
    if p.pos != bytes.len() {
        return Err(p.fail(JsonErrorCode::Syntax, "unexpected text after the value"));
    }
    Ok(value)
}

/// A number literal the canonical form would not carry as written: its nearest double renders
/// as another decimal value, or it is an integer beyond ±2^53, where doubles stop holding every
/// integer (so `100000000000000000000000` would reach a tool as `1e+23`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the number {literal} at byte {offset} is not kept exactly by the canonical form ({})", self.why())]
pub struct InexactNumber {
    offset: usize,
    literal: String,
    nearest: String,
    /// An integer beyond ±2^53 (whether or not its rendering keeps its decimal value).
    large_integer: bool,
}

impl InexactNumber {
    /// Byte offset of the literal in the input.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// The literal as written.
    pub fn literal(&self) -> &str {
        &self.literal
    }
    /// What it would become: the ECMAScript rendering of the nearest double.
    pub fn nearest(&self) -> &str {
        &self.nearest
    }
    fn why(&self) -> String {
        if self.large_integer {
            format!(
                "an integer beyond ±2^53, which it writes as the double {}",
                self.nearest
            )
        } else {
            format!("it would become {}", self.nearest)
        }
    }
}

/// Whether the JSON number literal `text` denotes exactly the decimal value that the
/// ECMAScript rendering of its nearest double denotes (so canonicalizing it keeps its value).
/// `1.50`, `1e2` and `-0` are exact; `9007199254740993`, `0.1000000000000000055511` and
/// `1e-400` are not.
///
/// ```
/// use aml_core::strict::is_exact_number;
/// assert!(is_exact_number("9007199254740992"));
/// assert!(!is_exact_number("9007199254740993"));
/// assert!(is_exact_number("2.50e1"));
/// ```
pub fn is_exact_number(text: &str) -> bool {
    nearest_if_inexact(text).is_none()
}

/// The first number literal in `json` that is not [exact](is_exact_number) or is an integer
/// beyond ±2^53 (9007199254740992), scanning the text as written (strings are skipped). Meant
/// for text the strict parser accepts, by gateways that must not forward a number other than
/// the one they were sent: past 2^53 a double no longer holds every integer, so even an
/// integer whose rendering keeps its decimal value (`100000000000000000000000` as `1e+23`)
/// would reach a tool as a double.
///
/// ```
/// use aml_core::strict::first_inexact_number;
/// let inexact = first_inexact_number(br#"{"id": 12345678901234567891, "n": 1}"#).unwrap();
/// assert_eq!(inexact.literal(), "12345678901234567891");
/// assert_eq!(inexact.nearest(), "12345678901234567000");
/// assert!(first_inexact_number(br#"{"id": "12345678901234567891", "n": 1.5}"#).is_none());
/// let large = first_inexact_number(b"[100000000000000000000000]").unwrap();
/// assert_eq!(large.nearest(), "1e+23");
/// assert!(first_inexact_number(b"[9007199254740992, 1e23, -0.5]").is_none());
/// ```
pub fn first_inexact_number(json: &[u8]) -> Option<InexactNumber> {
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => {
                i += 1;
                while i < json.len() && json[i] != b'"' {
                    i += if json[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < json.len() && matches!(json[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                    i += 1;
                }
                let literal = core::str::from_utf8(&json[start..i]).unwrap_or_default();
                let large_integer = is_integer_beyond_2_53(literal);
                let nearest = match nearest_if_inexact(literal) {
                    Some(nearest) => Some(nearest),
                    None if large_integer => Some(rendered(literal).unwrap_or_else(no_double)),
                    None => None,
                };
                if let Some(nearest) = nearest {
                    return Some(InexactNumber {
                        offset: start,
                        literal: literal.to_owned(),
                        nearest,
                        large_integer,
                    });
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// Whether `text` is an integer literal (digits, an optional minus) of magnitude over 2^53.
fn is_integer_beyond_2_53(text: &str) -> bool {
    const TWO_53: &str = "9007199254740992";
    let digits = text.strip_prefix('-').unwrap_or(text).trim_start_matches('0');
    digits.bytes().all(|b| b.is_ascii_digit())
        && (digits.len() > TWO_53.len() || (digits.len() == TWO_53.len() && digits > TWO_53))
}

/// The ECMAScript rendering of `text`'s nearest double; `None` when no double holds it.
fn rendered(text: &str) -> Option<String> {
    let mut out = String::new();
    let x = text.parse::<f64>().ok()?;
    crate::canonical::write_f64(x, &mut out).ok()?;
    Some(out)
}

/// What [`InexactNumber::nearest`] says of a number no double holds (beyond ±1.8e308).
fn no_double() -> String {
    "a value JSON cannot carry".to_owned()
}

/// The ECMAScript rendering of `text`'s nearest double, when it denotes another value.
fn nearest_if_inexact(text: &str) -> Option<String> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    // Every integer of up to 15 digits is a double exactly.
    if digits.len() <= 15 && digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let Some(nearest) = rendered(text) else {
        return Some(no_double());
    };
    (decimal_value(text) != decimal_value(&nearest)).then_some(nearest)
}

/// A decimal literal as (negative, significant digits, power of ten), zero as `(false, "", 0)`.
fn decimal_value(text: &str) -> (bool, String, i64) {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, "0"),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let exp_digits = exponent.trim_start_matches(['+', '-']).trim_start_matches('0');
    // Past 18 digits the exponent only matters for a non-zero mantissa, which no double holds.
    let magnitude: i64 = if exp_digits.len() > 18 {
        i64::MAX / 4
    } else {
        exp_digits.parse().unwrap_or(0)
    };
    let mut power = if exponent.starts_with('-') {
        -magnitude
    } else {
        magnitude
    };
    power -= frac.len() as i64;
    let all: String = int.chars().chain(frac.chars()).collect();
    let significant = all.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    if trimmed.is_empty() {
        return (false, String::new(), 0);
    }
    power += (significant.len() - trimmed.len()) as i64;
    (negative, trimmed.to_owned(), power)
}

fn err(code: JsonErrorCode, offset: usize, detail: &'static str) -> ParseError {
    ParseError { code, offset, detail }
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    max_depth: usize,
}

impl Parser<'_> {
    fn fail(&self, code: JsonErrorCode, detail: &'static str) -> ParseError {
        err(code, self.pos, detail)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect(&mut self, b: u8, detail: &'static str) -> Result<(), ParseError> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.fail(JsonErrorCode::Syntax, detail))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.fail(JsonErrorCode::Syntax, "expected a value")),
            None => Err(self.fail(JsonErrorCode::Syntax, "unexpected end of input")),
        }
    }

    fn literal(&mut self, word: &[u8], value: Value) -> Result<Value, ParseError> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.fail(JsonErrorCode::Syntax, "invalid literal"))
        }
    }

    fn enter(&self, depth: usize) -> Result<usize, ParseError> {
        if depth >= self.max_depth {
            return Err(self.fail(JsonErrorCode::TooDeep, "nesting deeper than the limit"));
        }
        Ok(depth + 1)
    }

    fn array(&mut self, depth: usize) -> Result<Value, ParseError> {
        let depth = self.enter(depth)?;
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.fail(JsonErrorCode::Syntax, "expected ',' or ']'")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, ParseError> {
        let depth = self.enter(depth)?;
        self.pos += 1;
        let mut map = Map::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.fail(JsonErrorCode::Syntax, "expected a string key"));
            }
            let key_at = self.pos;
            let key = self.string()?;
            self.skip_ws();
            self.expect(b':', "expected ':'")?;
            self.skip_ws();
            let value = self.value(depth)?;
            if map.insert(key, value).is_some() {
                return Err(err(JsonErrorCode::DuplicateKey, key_at, "duplicate object key"));
            }
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.fail(JsonErrorCode::Syntax, "expected ',' or '}'")),
            }
        }
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.pos += 1; // opening quote
        let mut out = String::new();
        let mut run = self.pos;
        loop {
            let Some(b) = self.peek() else {
                return Err(self.fail(JsonErrorCode::Syntax, "unterminated string"));
            };
            match b {
                b'"' => {
                    out.push_str(self.text(run));
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    out.push_str(self.text(run));
                    self.pos += 1;
                    self.escape(&mut out)?;
                    run = self.pos;
                }
                0x00..=0x1f => return Err(self.fail(JsonErrorCode::Syntax, "control character in string")),
                _ => self.pos += 1,
            }
        }
    }

    /// The input from `start` to the cursor; both sit on UTF-8 boundaries (ASCII bytes).
    fn text(&self, start: usize) -> &str {
        core::str::from_utf8(&self.bytes[start..self.pos]).unwrap_or_default()
    }

    fn escape(&mut self, out: &mut String) -> Result<(), ParseError> {
        let Some(b) = self.peek() else {
            return Err(self.fail(JsonErrorCode::Syntax, "unterminated escape"));
        };
        self.pos += 1;
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode_escape(out),
            _ => return Err(err(JsonErrorCode::Syntax, self.pos - 1, "invalid escape")),
        };
        out.push(c);
        Ok(())
    }

    fn unicode_escape(&mut self, out: &mut String) -> Result<(), ParseError> {
        let at = self.pos - 2;
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if !self.bytes[self.pos..].starts_with(b"\\u") {
                    return Err(err(
                        JsonErrorCode::LoneSurrogate,
                        at,
                        "high surrogate without a low surrogate",
                    ));
                }
                self.pos += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(err(
                        JsonErrorCode::LoneSurrogate,
                        at,
                        "high surrogate without a low surrogate",
                    ));
                }
                0x10000 + ((u32::from(first) - 0xD800) << 10) + (u32::from(second) - 0xDC00)
            }
            0xDC00..=0xDFFF => {
                return Err(err(
                    JsonErrorCode::LoneSurrogate,
                    at,
                    "low surrogate without a high surrogate",
                ))
            }
            other => u32::from(other),
        };
        match char::from_u32(code) {
            Some(c) => {
                out.push(c);
                Ok(())
            }
            None => Err(err(JsonErrorCode::LoneSurrogate, at, "invalid code point")),
        }
    }

    fn hex4(&mut self) -> Result<u16, ParseError> {
        let digits = self.bytes.get(self.pos..self.pos + 4);
        let parsed = digits
            .filter(|d| d.iter().all(u8::is_ascii_hexdigit))
            .and_then(|d| core::str::from_utf8(d).ok())
            .and_then(|d| u16::from_str_radix(d, 16).ok());
        match parsed {
            Some(v) => {
                self.pos += 4;
                Ok(v)
            }
            None => Err(self.fail(JsonErrorCode::Syntax, "\\u needs four hex digits")),
        }
    }

    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.fail(JsonErrorCode::Syntax, "expected a digit")),
        }
        let mut integral = true;
        if self.peek() == Some(b'.') {
            integral = false;
            self.pos += 1;
            self.require_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            integral = false;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.require_digits()?;
        }
        let text = self.text(start);
        if integral {
            if let Ok(v) = text.parse::<u64>() {
                return Ok(Value::Number(v.into()));
            }
            if let Ok(v) = text.parse::<i64>() {
                return Ok(Value::Number(v.into()));
            }
        }
        let x: f64 = text
            .parse()
            .map_err(|_| err(JsonErrorCode::Syntax, start, "invalid number"))?;
        Number::from_f64(x).map(Value::Number).ok_or_else(|| {
            err(
                JsonErrorCode::NonFiniteNumber,
                start,
                "number beyond the range of a double",
            )
        })
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    fn require_digits(&mut self) -> Result<(), ParseError> {
        let before = self.pos;
        self.digits();
        if self.pos == before {
            return Err(self.fail(JsonErrorCode::Syntax, "expected a digit"));
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "strict_tests.rs"]
mod tests;

//! Proposals (`aml-proposed-action/1`): validation and freezing.
//!
//! A [`FrozenProposal`] is built only by freezing: its canonical bytes and their digest are
//! computed together and never change afterwards, so what is approved, claimed and
//! dispatched is the same bytes.

use std::ops::Range;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::canonical::{write_canonical_map, write_string};
use crate::reason::PlanReason;
use crate::{Effect, Sha256Digest};

/// The proposal protocol string.
pub const PROPOSAL_PROTOCOL: &str = "aml-proposed-action/1";
/// The protocol string of a proposal with two or more resources (`resources`, an array, in
/// place of `resource`; ADR 023). A one-resource proposal is always [`PROPOSAL_PROTOCOL`].
pub const MULTI_RESOURCE_PROTOCOL: &str = "aml-proposed-action/2";
/// Most resources in one proposal.
pub const MAX_RESOURCES: usize = 256;
/// Longest `tool`, `resource` or `purpose`, in UTF-16 code units.
pub const MAX_FIELD_UTF16: usize = 256;
/// Largest canonical proposal, in bytes of UTF-8.
pub const MAX_PROPOSAL_BYTES: usize = 65_536;

/// Why a proposal could not be frozen. The plan reports it as `deny` with a `null` digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct ProposalRefusal {
    reason: PlanReason,
    detail: String,
}

impl ProposalRefusal {
    fn invalid(detail: impl Into<String>) -> Self {
        ProposalRefusal {
            reason: PlanReason::InvalidProposal,
            detail: detail.into(),
        }
    }

    pub(crate) fn invalid_arguments() -> Self {
        Self::invalid("arguments must be a JSON object")
    }

    /// [`PlanReason::InvalidProposal`] or [`PlanReason::ProposalTooLarge`].
    pub fn reason(&self) -> PlanReason {
        self.reason
    }

    /// What exactly was wrong.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

/// The host-owned parts of a proposal plus the captured arguments, before freezing.
#[derive(Debug, Clone, Copy)]
pub struct ProposalParts<'a> {
    /// Tool identity, owned by the host.
    pub tool: &'a str,
    /// Declared effect.
    pub effect: Effect,
    /// The real destination the host mapped the arguments to.
    pub resource: &'a str,
    /// Host-written purpose text.
    pub purpose: &'a str,
    /// The captured arguments.
    pub arguments: &'a Map<String, Value>,
}

/// A validated proposal whose canonical bytes and SHA-256 digest are fixed.
///
/// Cloning is cheap (the contents are shared).
///
/// ```
/// use aml_core::FrozenProposal;
/// let p = FrozenProposal::from_value(&serde_json::json!({
///     "protocol": "aml-proposed-action/1", "tool": "send_message", "effect": "send",
///     "resource": "team@example.test", "purpose": "Send a status update",
///     "arguments": {"to": "team@example.test", "body": "Build passed."}
/// })).unwrap();
/// assert_eq!(p.arguments_json(), r#"{"body":"Build passed.","to":"team@example.test"}"#);
/// assert_eq!(
///     p.digest().to_string(),
///     "f416748534da5982a029d03d6db48adf00b4138e0785d38857f0b1734923776c"
/// );
/// ```
#[derive(Clone)]
pub struct FrozenProposal(Arc<Frozen>);

struct Frozen {
    canonical: String,
    digest: Sha256Digest,
    arguments: Range<usize>,
    effect: Effect,
    tool: Box<str>,
    // One resource, or the canonical JSON array of several (see `FrozenProposal::resource`).
    resource: Box<str>,
    resources: Box<[Box<str>]>,
    purpose: Box<str>,
}

impl core::fmt::Debug for FrozenProposal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FrozenProposal")
            .field("digest", &self.0.digest)
            .field("canonical", &self.0.canonical)
            .finish()
    }
}

impl FrozenProposal {
    /// Validates a proposal object exactly as the reference does and freezes it.
    ///
    /// The object must have exactly the six keys `protocol`, `tool`, `effect`, `resource`,
    /// `purpose` and `arguments`; or, with protocol [`MULTI_RESOURCE_PROTOCOL`], `resources`
    /// (two or more strings) in place of `resource`.
    pub fn from_value(value: &Value) -> Result<Self, ProposalRefusal> {
        let obj = value
            .as_object()
            .ok_or_else(|| ProposalRefusal::invalid("a proposal must be a JSON object"))?;
        if obj.len() != 6 {
            return Err(ProposalRefusal::invalid(format!(
                "a proposal has exactly six keys, found {}",
                obj.len()
            )));
        }
        // A scan of the six members rather than a SipHash lookup per key (serde_json's map is
        // an IndexMap in builds with Cedar).
        let member = |key: &str| obj.iter().find(|(name, _)| *name == key).map(|(_, value)| value);
        let text = |key: &str| match member(key) {
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(_) => Err(ProposalRefusal::invalid(format!("{key} must be a string"))),
            None => Err(ProposalRefusal::invalid(format!("{key} is missing"))),
        };
        let protocol = text("protocol")?;
        let several = match protocol {
            PROPOSAL_PROTOCOL => None,
            MULTI_RESOURCE_PROTOCOL => Some(resource_list(member("resources"))?),
            _ => {
                return Err(ProposalRefusal::invalid(format!(
                    "protocol must be {PROPOSAL_PROTOCOL} or {MULTI_RESOURCE_PROTOCOL}"
                )))
            }
        };
        let tool = text("tool")?;
        let effect_text = text("effect")?;
        let resource = match &several {
            None => text("resource")?,
            Some(list) => list[0],
        };
        let purpose = text("purpose")?;
        let arguments = match member("arguments") {
            Some(Value::Object(map)) => map,
            Some(_) => return Err(ProposalRefusal::invalid("arguments must be a JSON object")),
            None => return Err(ProposalRefusal::invalid("arguments is missing")),
        };
        check_field("tool", tool)?;
        let effect: Effect = effect_text
            .parse()
            .map_err(|_| ProposalRefusal::invalid(format!("unknown effect {effect_text:?}")))?;
        // Resource and purpose are checked by freezing, in the reference's order.
        let parts = ProposalParts {
            tool,
            effect,
            resource,
            purpose,
            arguments,
        };
        match several {
            None => Self::freeze(parts),
            Some(list) => Self::freeze_many(parts, &list[1..]),
        }
    }

    /// Validates host-built parts and freezes them.
    pub fn freeze(parts: ProposalParts<'_>) -> Result<Self, ProposalRefusal> {
        Self::freeze_many(parts, &[])
    }

    /// Validates host-built parts with several resources and freezes them: `parts.resource`
    /// is the first, `more` the others, in order. With none in `more` this is
    /// [`freeze`](Self::freeze) (`aml-proposed-action/1`); with some, the proposal is
    /// [`MULTI_RESOURCE_PROTOCOL`] with `"resources": [first, ...more]`, so the digest binds
    /// every one.
    ///
    /// ```
    /// use aml_core::{Effect, FrozenProposal, ProposalParts};
    /// let arguments = serde_json::Map::new();
    /// let parts = ProposalParts { tool: "move_file", effect: Effect::Write,
    ///     resource: "docs/a.txt", purpose: "Move a file", arguments: &arguments };
    /// let moved = FrozenProposal::freeze_many(parts, &["out/a.md"]).unwrap();
    /// assert_eq!(moved.resources().collect::<Vec<_>>(), ["docs/a.txt", "out/a.md"]);
    /// assert_eq!(moved.resource(), r#"["docs/a.txt","out/a.md"]"#);
    /// assert!(moved.canonical_json().contains(r#""protocol":"aml-proposed-action/2""#));
    /// ```
    pub fn freeze_many(parts: ProposalParts<'_>, more: &[&str]) -> Result<Self, ProposalRefusal> {
        check_field("tool", parts.tool)?;
        check_field("resource", parts.resource)?;
        for resource in more {
            check_field("resource", resource)?;
        }
        if more.len() >= MAX_RESOURCES {
            return Err(ProposalRefusal::invalid(format!(
                "a proposal names at most {MAX_RESOURCES} resources, this one {}",
                more.len() + 1
            )));
        }
        check_field("purpose", parts.purpose)?;
        Self::freeze_checked(parts, more)
    }

    fn freeze_checked(parts: ProposalParts<'_>, more: &[&str]) -> Result<Self, ProposalRefusal> {
        // Keys in canonical order: arguments, effect, protocol, purpose, resource, tool.
        let mut out = String::with_capacity(256);
        out.push_str("{\"arguments\":");
        let start = out.len();
        write_canonical_map(parts.arguments, &mut out)
            .map_err(|e| ProposalRefusal::invalid(format!("arguments: {e}")))?;
        let arguments = start..out.len();
        out.push_str(",\"effect\":\"");
        out.push_str(parts.effect.as_str());
        out.push_str("\",\"protocol\":\"");
        out.push_str(if more.is_empty() {
            PROPOSAL_PROTOCOL
        } else {
            MULTI_RESOURCE_PROTOCOL
        });
        out.push_str("\",\"purpose\":");
        write_string(parts.purpose, &mut out);
        let resource: Box<str> = if more.is_empty() {
            out.push_str(",\"resource\":");
            write_string(parts.resource, &mut out);
            parts.resource.into()
        } else {
            out.push_str(",\"resources\":");
            let start = out.len();
            out.push('[');
            for (i, r) in std::iter::once(&parts.resource).chain(more).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(r, &mut out);
            }
            out.push(']');
            out[start..].into()
        };
        out.push_str(",\"tool\":");
        write_string(parts.tool, &mut out);
        out.push('}');
        if out.len() > MAX_PROPOSAL_BYTES {
            return Err(ProposalRefusal {
                reason: PlanReason::ProposalTooLarge,
                detail: format!(
                    "canonical proposal is {} bytes, more than {MAX_PROPOSAL_BYTES}",
                    out.len()
                ),
            });
        }
        let digest = Sha256Digest::of(out.as_bytes());
        let canonical = out;
        Ok(FrozenProposal(Arc::new(Frozen {
            canonical,
            digest,
            arguments,
            effect: parts.effect,
            tool: parts.tool.into(),
            resource,
            resources: std::iter::once(parts.resource)
                .chain(more.iter().copied())
                .map(Box::from)
                .collect(),
            purpose: parts.purpose.into(),
        })))
    }

    /// SHA-256 of [`canonical_json`](Self::canonical_json).
    pub fn digest(&self) -> Sha256Digest {
        self.0.digest
    }
    /// The canonical proposal text that was hashed.
    pub fn canonical_json(&self) -> &str {
        &self.0.canonical
    }
    /// The canonical text of the arguments alone (a slice of the hashed bytes).
    pub fn arguments_json(&self) -> &str {
        &self.0.canonical[self.0.arguments.clone()]
    }
    /// A fresh copy of the frozen arguments, parsed from the hashed bytes.
    pub fn arguments(&self) -> Map<String, Value> {
        match crate::strict::parse_str(self.arguments_json()) {
            Ok(Value::Object(map)) => map,
            // The canonical writer produced this object; it always parses back.
            _ => Map::new(),
        }
    }
    /// A fresh copy of the whole frozen proposal object.
    pub fn to_value(&self) -> Value {
        crate::strict::parse_str(self.canonical_json()).unwrap_or(Value::Null)
    }
    /// Tool identity.
    pub fn tool(&self) -> &str {
        &self.0.tool
    }
    /// Declared effect.
    pub fn effect(&self) -> Effect {
        self.0.effect
    }
    /// The mapped destination: the one resource, or for a proposal with several (see
    /// [`freeze_many`](Self::freeze_many)) the canonical JSON array of them, as hashed. Records
    /// and approval prompts show this text.
    pub fn resource(&self) -> &str {
        &self.0.resource
    }
    /// Every mapped destination, in order (one for an `aml-proposed-action/1` proposal).
    pub fn resources(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.0.resources.iter().map(|r| &**r)
    }
    /// Host purpose text.
    pub fn purpose(&self) -> &str {
        &self.0.purpose
    }
}

impl PartialEq for FrozenProposal {
    fn eq(&self, other: &Self) -> bool {
        self.0.canonical == other.0.canonical
    }
}
impl Eq for FrozenProposal {}

/// The `resources` of an `aml-proposed-action/2` object: an array of two or more strings.
fn resource_list(value: Option<&Value>) -> Result<Vec<&str>, ProposalRefusal> {
    let Some(value) = value else {
        return Err(ProposalRefusal::invalid("resources is missing"));
    };
    let Some(items) = value.as_array().filter(|items| items.len() >= 2) else {
        return Err(ProposalRefusal::invalid(format!(
            "resources must be an array of two or more strings ({MULTI_RESOURCE_PROTOCOL})"
        )));
    };
    items
        .iter()
        .map(|item| {
            item.as_str()
                .ok_or_else(|| ProposalRefusal::invalid("every resource must be a string"))
        })
        .collect()
}

fn check_field(name: &str, value: &str) -> Result<(), ProposalRefusal> {
    if is_blank(value) {
        return Err(ProposalRefusal::invalid(format!("{name} is blank")));
    }
    let units = utf16_len(value);
    if units > MAX_FIELD_UTF16 {
        return Err(ProposalRefusal::invalid(format!(
            "{name} is {units} UTF-16 code units, more than {MAX_FIELD_UTF16}"
        )));
    }
    Ok(())
}

fn utf16_len(s: &str) -> usize {
    // ASCII fast path: one code unit per byte.
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().map(char::len_utf16).sum()
    }
}

/// Whether ECMAScript `s.trim()` would leave nothing.
pub fn is_blank(s: &str) -> bool {
    s.chars().all(is_ecmascript_whitespace)
}

/// ECMAScript *WhiteSpace* or *LineTerminator*: what `String.prototype.trim` strips.
///
/// Unlike [`char::is_whitespace`], this includes U+FEFF and excludes U+0085.
pub fn is_ecmascript_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{9}' | '\u{a}' | '\u{b}' | '\u{c}' | '\u{d}' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200a}' | '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}' | '\u{feff}'
    )
}

#[cfg(test)]
#[path = "proposal_tests.rs"]
mod tests;

//! Where a catalog tool's policy resources come from, and how their values are normalized
//! before they are decided and hashed.
//!
//! Normalization is lexical: the gate reads the text of an argument, never the filesystem or
//! the network, so it cannot see a server's symbolic links or its DNS.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::guarded::{ArgumentSnapshot, MapperError, ResourceMapper};
use crate::Refusal;

/// Where a tool's policy resource comes from.
///
/// In a catalog document: `{"argument": "path"}` (the argument's text as it is),
/// `{"fixed": "queue:ops"}`, or a [`ResourceMapping`]: typed and normalized
/// (`{"argument": "path", "as": "path", "root": "/srv/files"}`), several arguments
/// (`{"arguments": ["source", "destination"], ...}`), or each item of an array argument
/// (`{"argument": "paths", "each": true, ...}`).
///
/// ```
/// use aml_core::{ArgumentSnapshot, ResourceMapper, ResourceRule};
/// let rule: ResourceRule = serde_json::from_str(
///     r#"{"arguments": ["source", "destination"], "as": "path", "root": "/srv/files"}"#).unwrap();
/// let call = serde_json::json!({"source": "/srv/files/docs//a.txt", "destination": "./out/a.md"});
/// let snapshot = ArgumentSnapshot::from(call.as_object().cloned().unwrap());
/// assert_eq!(rule.resources_for(&snapshot).unwrap(), ["docs/a.txt", "out/a.md"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResourceRule {
    /// The value of one string argument (e.g. `to`, `path`), as it is; a call without it, or
    /// with another type there, is refused (`invalid_resource`).
    Argument(String),
    /// A fixed resource, for tools whose destination is not in their arguments.
    Fixed(String),
    /// Typed, normalized and possibly several resources.
    Mapped(ResourceMapping),
}

/// Typed resources taken from one or more arguments (see [`ResourceRule`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceMapping {
    arguments: Vec<String>,
    each: bool,
    kind: ResourceKind,
}

/// What a mapped resource value is, and so how it is normalized.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResourceKind {
    /// Text, as it is (`"as": "string"`, the default).
    Text,
    /// A path under `root` (`"as": "path"`): made relative to the root, `.` and repeated `/`
    /// collapsed, `..` resolved; a path that leaves the root, holds a NUL or starts with `~`
    /// is refused.
    Path {
        /// The lexically normalized absolute root, without a trailing `/` (`/` itself kept).
        root: String,
    },
    /// An absolute URL with a host (`"as": "url"`): scheme and host lower-cased, the
    /// default port dropped, the path normalized (RFC 3986 §6); userinfo is refused.
    Url,
    /// An email address (`"as": "email"`): the domain lower-cased, the local part kept.
    Email,
}

impl ResourceMapping {
    /// Resources from `arguments` (each a string, or with `each` an array of strings), of
    /// kind `kind`. At least one argument must be named.
    pub fn new(arguments: Vec<String>, each: bool, kind: ResourceKind) -> Result<Self, String> {
        if arguments.is_empty() {
            return Err("a resource mapping names at least one argument".into());
        }
        if let ResourceKind::Path { root } = &kind {
            let normalized = normalize_root(root)?;
            return Ok(ResourceMapping {
                arguments,
                each,
                kind: ResourceKind::Path { root: normalized },
            });
        }
        Ok(ResourceMapping {
            arguments,
            each,
            kind,
        })
    }

    /// The arguments the resources come from, in order.
    pub fn arguments(&self) -> &[String] {
        &self.arguments
    }

    /// What the values are.
    pub fn kind(&self) -> &ResourceKind {
        &self.kind
    }

    /// The normalized resources of `arguments`, in order: each named argument's value (or
    /// each item of it, with `each`). A missing or mistyped argument, an empty array, or a
    /// value its kind refuses is a refusal ([`Refusal::InvalidResource`],
    /// [`Refusal::ResourceOutsideRoot`]).
    pub fn resources_in(&self, arguments: &Map<String, Value>) -> Result<Vec<String>, MapperError> {
        let mut out = Vec::new();
        for name in &self.arguments {
            let value = arguments
                .get(name)
                .ok_or_else(|| invalid(format!("argument {name:?} is missing")))?;
            match (self.each, value) {
                (false, Value::String(text)) => out.push(self.kind.normalize(name, text)?),
                (true, Value::Array(items)) if !items.is_empty() => {
                    for item in items {
                        let text = item.as_str().ok_or_else(|| {
                            invalid(format!("every item of argument {name:?} must be a string"))
                        })?;
                        out.push(self.kind.normalize(name, text)?);
                    }
                }
                (true, Value::Array(_)) => {
                    return Err(invalid(format!(
                        "argument {name:?} names no resource (an empty array)"
                    )))
                }
                (true, _) => return Err(invalid(format!("argument {name:?} must be an array of strings"))),
                (false, _) => return Err(invalid(format!("argument {name:?} must be a string"))),
            }
        }
        Ok(out)
    }
}

impl ResourceKind {
    fn normalize(&self, argument: &str, text: &str) -> Result<String, MapperError> {
        match self {
            ResourceKind::Text => Ok(text.to_owned()),
            ResourceKind::Path { root } => normalize_path(root, text).map_err(|e| e.at(argument)),
            ResourceKind::Url => normalize_url(text).map_err(|e| e.at(argument)),
            ResourceKind::Email => normalize_email(text).map_err(|e| e.at(argument)),
        }
    }
}

impl ResourceRule {
    /// The resources of `arguments` under this rule, in order (one for
    /// [`Argument`](Self::Argument) and [`Fixed`](Self::Fixed)).
    pub fn resources_in(&self, arguments: &Map<String, Value>) -> Result<Vec<String>, MapperError> {
        match self {
            // The short form of `"as": "string"` (ADR 035): the caller's omission is a refusal.
            ResourceRule::Argument(name) => match arguments.get(name) {
                Some(Value::String(text)) => Ok(vec![text.clone()]),
                Some(_) => Err(invalid(format!("argument {name:?} must be a string"))),
                None => Err(invalid(format!("argument {name:?} is missing"))),
            },
            ResourceRule::Fixed(resource) => Ok(vec![resource.clone()]),
            ResourceRule::Mapped(mapping) => mapping.resources_in(arguments),
        }
    }

    /// The arguments this rule reads (none for a fixed resource).
    pub fn arguments(&self) -> &[String] {
        match self {
            ResourceRule::Argument(name) => std::slice::from_ref(name),
            ResourceRule::Fixed(_) => &[],
            ResourceRule::Mapped(mapping) => mapping.arguments(),
        }
    }
}

impl ResourceMapper for ResourceRule {
    fn resource_for(&self, snapshot: &ArgumentSnapshot) -> Result<String, MapperError> {
        let resources = self.resources_for(snapshot)?;
        match resources.as_slice() {
            [one] => Ok(one.clone()),
            several => serde_json::to_string(several).map_err(|e| MapperError::new(e.to_string())),
        }
    }

    fn resources_for(&self, snapshot: &ArgumentSnapshot) -> Result<Vec<String>, MapperError> {
        self.resources_in(snapshot.as_map())
    }
}

fn invalid(detail: String) -> MapperError {
    MapperError::refused(Refusal::InvalidResource, detail)
}

/// A value its kind refuses, before the argument's name is known.
struct Refused(Refusal, String);

impl Refused {
    fn invalid(detail: impl Into<String>) -> Self {
        Refused(Refusal::InvalidResource, detail.into())
    }
    fn at(self, argument: &str) -> MapperError {
        MapperError::refused(self.0, format!("argument {argument:?}: {}", self.1))
    }
}

/// The components of a `/`-separated path with `.` and empty ones dropped and `..` resolved;
/// `None` when a `..` climbs above the start.
fn components(path: &str) -> Option<Vec<&str>> {
    let mut kept = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                kept.pop()?;
            }
            _ => kept.push(part),
        }
    }
    Some(kept)
}

fn normalize_root(root: &str) -> Result<String, String> {
    if !root.starts_with('/') || root.contains('\0') {
        return Err(format!(
            "a path root must be an absolute path without NUL, not {root:?}"
        ));
    }
    let parts = components(root).ok_or_else(|| format!("the path root {root:?} climbs above /"))?;
    Ok(format!("/{}", parts.join("/")))
}

fn normalize_path(root: &str, text: &str) -> Result<String, Refused> {
    if text.contains('\0') {
        return Err(Refused::invalid("a path must not hold a NUL"));
    }
    if text.is_empty() {
        return Err(Refused::invalid("a path must not be empty"));
    }
    // Servers expand a leading `~` to a home directory the gate cannot know.
    if text.starts_with('~') {
        return Err(Refused::invalid("a path must not start with \"~\""));
    }
    let outside = || {
        Refused(
            Refusal::ResourceOutsideRoot,
            format!("the path is outside the root {root:?}"),
        )
    };
    let relative = match text.strip_prefix('/') {
        Some(absolute) => {
            let parts = components(absolute).ok_or_else(outside)?;
            let root_parts = components(root).unwrap_or_default();
            if !parts.starts_with(&root_parts) {
                return Err(outside());
            }
            parts[root_parts.len()..].to_vec()
        }
        None => components(text).ok_or_else(|| {
            Refused(
                Refusal::ResourceOutsideRoot,
                format!("a \"..\" climbs out of the root {root:?}"),
            )
        })?,
    };
    Ok(if relative.is_empty() {
        ".".to_owned()
    } else {
        relative.join("/")
    })
}

fn normalize_url(text: &str) -> Result<String, Refused> {
    let uri = fluent_uri::Uri::parse(text).map_err(|e| Refused::invalid(format!("not a URL: {e}")))?;
    let authority = uri
        .authority()
        .ok_or_else(|| Refused::invalid("a URL must have a host (scheme://host/...)"))?;
    if authority.userinfo().is_some() {
        return Err(Refused::invalid("a URL must not carry userinfo (user:password@)"));
    }
    if authority.host().is_empty() {
        return Err(Refused::invalid("a URL must have a host (scheme://host/...)"));
    }
    Ok(uri.normalize().as_str().to_owned())
}

fn normalize_email(text: &str) -> Result<String, Refused> {
    // Exactly one `@`: a quoted local part holding one is refused rather than guessed at.
    let malformed = || Refused::invalid("not an email address (local@domain, one @)");
    let (local, domain) = text.split_once('@').ok_or_else(malformed)?;
    let bad = |s: &str| s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control() || c == '@');
    if bad(local) || bad(domain) {
        return Err(malformed());
    }
    Ok(format!("{local}@{}", domain.to_lowercase()))
}

/// The catalog document's form of a rule: one object, checked whole.
#[derive(Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
struct RuleDocument {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fixed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    argument: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arguments: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    each: bool,
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    root: Option<String>,
}

impl TryFrom<RuleDocument> for ResourceRule {
    type Error = String;
    fn try_from(doc: RuleDocument) -> Result<Self, String> {
        let typed = doc.each || doc.kind.is_some() || doc.root.is_some();
        let arguments = match (doc.fixed, doc.argument, doc.arguments) {
            (Some(fixed), None, None) if !typed => return Ok(ResourceRule::Fixed(fixed)),
            (Some(_), None, None) => return Err("a fixed resource takes no \"as\", \"root\" or \"each\"".into()),
            (None, Some(argument), None) if !typed => return Ok(ResourceRule::Argument(argument)),
            (None, Some(argument), None) => vec![argument],
            (None, None, Some(arguments)) => arguments,
            _ => {
                return Err(
                    "a resource is exactly one of {\"fixed\": ...}, {\"argument\": ...} or {\"arguments\": [...]}"
                        .into(),
                )
            }
        };
        let kind = match (doc.kind.as_deref().unwrap_or("string"), doc.root) {
            ("path", Some(root)) => ResourceKind::Path { root },
            ("path", None) => return Err("a resource \"as\": \"path\" needs a \"root\"".into()),
            (_, Some(_)) => return Err("\"root\" goes only with \"as\": \"path\"".into()),
            ("string", None) => ResourceKind::Text,
            ("url", None) => ResourceKind::Url,
            ("email", None) => ResourceKind::Email,
            (other, None) => {
                return Err(format!(
                    "unknown resource kind {other:?} (\"string\", \"path\", \"url\" or \"email\")"
                ))
            }
        };
        Ok(ResourceRule::Mapped(ResourceMapping::new(
            arguments, doc.each, kind,
        )?))
    }
}

impl From<&ResourceRule> for RuleDocument {
    fn from(rule: &ResourceRule) -> Self {
        match rule {
            ResourceRule::Fixed(fixed) => RuleDocument {
                fixed: Some(fixed.clone()),
                ..Default::default()
            },
            ResourceRule::Argument(argument) => RuleDocument {
                argument: Some(argument.clone()),
                ..Default::default()
            },
            ResourceRule::Mapped(mapping) => {
                let (kind, root) = match &mapping.kind {
                    ResourceKind::Text => ("string", None),
                    ResourceKind::Path { root } => ("path", Some(root.clone())),
                    ResourceKind::Url => ("url", None),
                    ResourceKind::Email => ("email", None),
                };
                RuleDocument {
                    arguments: Some(mapping.arguments.clone()),
                    each: mapping.each,
                    kind: Some(kind.to_owned()),
                    root,
                    ..Default::default()
                }
            }
        }
    }
}

impl<'de> Deserialize<'de> for ResourceRule {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let crate::ObjectOnly(doc) = crate::ObjectOnly::<RuleDocument>::deserialize(deserializer)?;
        ResourceRule::try_from(doc).map_err(serde::de::Error::custom)
    }
}

impl Serialize for ResourceRule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        RuleDocument::from(self).serialize(serializer)
    }
}

#[cfg(test)]
#[path = "resource_tests.rs"]
mod tests;

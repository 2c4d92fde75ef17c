//! 2026-07-28's `Mcp-Param-*` headers: a tool's input schema may mark a property with
//! `"x-mcp-header": "Region"`, and a `tools/call` over HTTP then repeats that argument as
//! `Mcp-Param-Region`, so intermediaries can route on it without reading the body.
//!
//! The gate is both ends of that contract. Its front *checks* them: a header must agree with
//! the body the gate gates, or the request is refused with `-32020`, since an intermediary may
//! have routed on the header. Its HTTP upstream client *sends* them, computed from the body it
//! forwards, as a server that declares them requires. Both learn each tool's declarations from
//! the `tools/list` answers they carry. A tool never seen in a listing has no known
//! declarations: nothing is checked or sent for it (ADR 015).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::envelope::{decode_header_value, encode_header_value};

/// The prefix of the header an `x-mcp-header` token names.
const PREFIX: &str = "mcp-param-";

/// One declared header: where its argument is, and what type the schema gives it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Binding {
    header: HeaderName,
    /// The `properties` keys from the schema's root to the argument.
    path: Vec<String>,
    integer: bool,
}

/// The schema keywords whose values are sub-schemas: an annotation under any of them is off
/// the plain `properties` chain, so a client cannot know where to read its value.
const ONE_SCHEMA: &[&str] = &[
    "items",
    "contains",
    "unevaluatedItems",
    "additionalProperties",
    "propertyNames",
    "unevaluatedProperties",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
const LIST_OF_SCHEMAS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];
const MAP_OF_SCHEMAS: &[&str] = &["patternProperties", "dependentSchemas", "$defs", "definitions"];

/// The declarations of `schema`, or why they are invalid (an invalid declaration makes the
/// tool one a conforming client drops, so none of its declarations is enforced).
pub(crate) fn bindings(schema: &Value) -> Result<Vec<Binding>, String> {
    let mut found = Vec::new();
    // (path from the root by `properties` keys, or None once off that chain; the schema)
    let mut stack: Vec<(Option<Vec<String>>, &Value)> = vec![(Some(Vec::new()), schema)];
    while let Some((path, at)) = stack.pop() {
        let Some(object) = at.as_object() else { continue };
        if let Some(token) = object.get("x-mcp-header") {
            found.push((path.clone(), token, object.get("type")));
        }
        if let Some(Value::Object(properties)) = object.get("properties") {
            for (key, child) in properties {
                let child_path = path.clone().map(|mut p| {
                    p.push(key.clone());
                    p
                });
                stack.push((child_path, child));
            }
        }
        for key in ONE_SCHEMA {
            if let Some(child) = object.get(*key) {
                stack.push((None, child));
            }
        }
        for key in LIST_OF_SCHEMAS {
            if let Some(Value::Array(children)) = object.get(*key) {
                stack.extend(children.iter().map(|c| (None, c)));
            }
        }
        for key in MAP_OF_SCHEMAS {
            if let Some(Value::Object(children)) = object.get(*key) {
                stack.extend(children.values().map(|c| (None, c)));
            }
        }
    }
    let mut out: Vec<Binding> = Vec::new();
    for (path, token, kind) in found {
        let path = path
            .filter(|p| !p.is_empty())
            .ok_or("an x-mcp-header sits where no plain chain of `properties` reaches it")?;
        let where_ = path.join(".");
        let token = token
            .as_str()
            .filter(|t| is_token(t))
            .ok_or_else(|| format!("property {where_:?}: x-mcp-header must be an HTTP token"))?;
        let integer = match kind.and_then(Value::as_str) {
            Some("integer") => true,
            Some("string" | "boolean") => false,
            _ => {
                return Err(format!(
                "property {where_:?}: x-mcp-header is allowed on string, integer and boolean properties only"
            ))
            }
        };
        let header = HeaderName::try_from(format!("{PREFIX}{}", token.to_ascii_lowercase()))
            .map_err(|_| format!("property {where_:?}: {token:?} makes no header name"))?;
        if out.iter().any(|b| b.header == header) {
            return Err(format!("x-mcp-header {token:?} is declared twice"));
        }
        out.push(Binding {
            header,
            path,
            integer,
        });
    }
    Ok(out)
}

/// An RFC 9110 token: the characters an HTTP field name may have.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The value at `path` in `arguments`: `None` when absent or `null`.
fn value_at<'a>(arguments: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut at = arguments;
    for key in path {
        at = at.as_object()?.get(key)?;
    }
    (!at.is_null()).then_some(at)
}

/// How a client writes `value` into its header: strings as they are, booleans as
/// `true`/`false`, numbers as their JSON text; `None` for what has no header form.
fn render(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The headers a `tools/call` with `arguments` carries for `bindings`.
pub(crate) fn mirror(bindings: &[Binding], arguments: &Value) -> Vec<(HeaderName, HeaderValue)> {
    bindings
        .iter()
        .filter_map(|b| {
            let rendered = render(value_at(arguments, &b.path)?)?;
            let value = HeaderValue::try_from(encode_header_value(&rendered)).ok()?;
            Some((b.header.clone(), value))
        })
        .collect()
}

/// Whether `headers` agree with `arguments` for `bindings`: each declared header present
/// exactly when its argument is, once, and equal to it (integers compared as numbers).
pub(crate) fn check(bindings: &[Binding], arguments: &Value, headers: &HeaderMap) -> Result<(), String> {
    for binding in bindings {
        let name = &binding.header;
        let mut sent = headers.get_all(name).iter();
        let first = sent.next();
        if sent.next().is_some() {
            return Err(format!("the {name} header appears more than once"));
        }
        let argument = binding.path.join(".");
        let value = value_at(arguments, &binding.path);
        let (raw, rendered) = match (first, value, value.and_then(render)) {
            // Absent, or with no header form (an object): a client sends no header for it.
            (None, None, _) | (None, Some(_), None) => continue,
            (Some(_), None, _) => {
                return Err(format!(
                    "the {name} header is sent but the argument {argument:?} is absent"
                ))
            }
            (None, Some(_), Some(_)) => {
                return Err(format!(
                    "the {name} header is missing but the argument {argument:?} is present"
                ))
            }
            (Some(raw), Some(_), rendered) => (raw, rendered),
        };
        let decoded = raw
            .to_str()
            .ok()
            .and_then(decode_header_value)
            .ok_or_else(|| format!("the {name} header is not a valid value"))?;
        let agrees = match rendered {
            None => false,
            Some(rendered) if binding.integer => same_integer(&decoded, &rendered) || decoded == rendered,
            Some(rendered) => decoded == rendered,
        };
        if !agrees {
            return Err(format!(
                "the {name} header does not match the argument {argument:?}"
            ));
        }
    }
    Ok(())
}

/// Whether two decimal texts are the same whole number (`42`, `42.0`), exactly.
fn same_integer(a: &str, b: &str) -> bool {
    fn whole(text: &str) -> Option<(bool, &str)> {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (int, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        let valid =
            !int.is_empty() && int.bytes().all(|c| c.is_ascii_digit()) && fraction.bytes().all(|c| c == b'0');
        if !valid || (digits.contains('.') && fraction.is_empty()) {
            return None;
        }
        let int = int.trim_start_matches('0');
        Some((negative && !int.is_empty(), int))
    }
    matches!((whole(a), whole(b)), (Some(x), Some(y)) if x == y)
}

/// `params.arguments` of a request (`null` when it has none).
pub(crate) fn arguments_of(message: &[u8]) -> Value {
    #[derive(serde::Deserialize)]
    struct Request {
        params: Params,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(default)]
        arguments: Value,
    }
    serde_json::from_slice::<Request>(message)
        .map(|r| r.params.arguments)
        .unwrap_or_default()
}

/// Each listed tool's declarations, learned from the `tools/list` answers that pass.
#[derive(Debug, Default)]
pub(crate) struct ToolHeaders(Mutex<HashMap<String, Arc<[Binding]>>>);

impl ToolHeaders {
    /// Learns from one `tools/list` answer (its JSON-RPC bytes); anything else is ignored.
    pub(crate) fn learn(&self, answer: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Answer {
            result: Listing,
        }
        #[derive(serde::Deserialize)]
        struct Listing {
            tools: Vec<Tool>,
        }
        #[derive(serde::Deserialize)]
        struct Tool {
            name: String,
            #[serde(rename = "inputSchema", default)]
            input_schema: Value,
        }
        let Ok(answer) = serde_json::from_slice::<Answer>(answer) else {
            return;
        };
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for tool in answer.result.tools {
            match bindings(&tool.input_schema) {
                Ok(found) => {
                    known.insert(tool.name, found.into());
                }
                Err(why) => {
                    tracing::warn!(target: "aml_mcp_http", tool = %tool.name, "its Mcp-Param headers are not enforced: {why}");
                    known.insert(tool.name, Arc::from(Vec::new()));
                }
            }
        }
    }

    /// What `tool` declares, if a listing named it and it declares anything.
    pub(crate) fn of(&self, tool: &str) -> Option<Arc<[Binding]>> {
        let known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        known.get(tool).filter(|b| !b.is_empty()).cloned()
    }
}

#[cfg(test)]
#[path = "param_headers_tests.rs"]
mod tests;

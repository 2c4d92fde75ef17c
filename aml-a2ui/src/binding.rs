//! Data bindings and nested function calls inside `args`.
//!
//! A renderer resolves `{"@path": "/user/email"}` against its data model and runs
//! `{"@call": …}` before the function sees its arguments. The gate freezes and approves the
//! arguments as sent, so what the tool would run is not what was approved: the gate refuses
//! such arguments, unless the host registers a [`BindingResolver`], which turns them into
//! literal values before the proposal is frozen. The resolved arguments are then checked
//! against the host schema, frozen, approved, and exactly they reach the tool.
//!
//! What counts as a binding (at any depth inside an argument value; the current form also
//! checks the argument names themselves):
//!
//! | form | data binding | nested call | also refused |
//! |---|---|---|---|
//! | current (`@call`) | an object with `@path` | an object with `@call` | any other key starting with one `@` (`@@` escapes) |
//! | Candidate (`call`) | an object with `path` | an object with `call` | — |

use aml_core::async_trait;
use serde_json::{Map, Value};

use crate::reason::GateReason;
use crate::wire::WireForm;

/// A call whose arguments hold data bindings or nested calls, for the host to resolve.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct BindingRequest<'a> {
    /// The form the call used (which keys are bindings).
    pub form: WireForm,
    /// The surface whose data model the agent meant (current form; `None` for the root
    /// context).
    pub surface_id: Option<&'a str>,
    /// The catalog.
    pub catalog_id: &'a str,
    /// The function.
    pub function: &'a str,
    /// The arguments as the agent sent them.
    pub args: &'a Map<String, Value>,
}

/// The host would not or could not resolve a call's bindings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bindings not resolved: {0}")]
pub struct BindingError(String);

impl BindingError {
    /// An error with a message for the host's log.
    pub fn new(message: impl Into<String>) -> Self {
        BindingError(message.into())
    }
}

/// Turns a call's data bindings and nested calls into literal values before the gate
/// freezes the proposal. Called only for arguments that hold one; whatever it returns is
/// what is checked, approved and run, so it must not return bindings of its own.
///
/// ```
/// use aml_a2ui::{BindingError, BindingRequest, BindingResolver};
/// use aml_core::async_trait;
/// use serde_json::{Map, Value};
///
/// /// Resolves `{"@path": "/user/email"}` from a fixed data model; refuses anything else.
/// #[derive(Debug)]
/// struct UserEmail(String);
///
/// #[async_trait]
/// impl BindingResolver for UserEmail {
///     async fn resolve(&self, request: &BindingRequest<'_>) -> Result<Map<String, Value>, BindingError> {
///         let mut args = request.args.clone();
///         for value in args.values_mut() {
///             match value.get("@path").and_then(Value::as_str) {
///                 Some("/user/email") => *value = Value::from(self.0.as_str()),
///                 Some(other) => return Err(BindingError::new(format!("no data at {other}"))),
///                 None => {}
///             }
///         }
///         Ok(args)
///     }
/// }
/// ```
#[async_trait]
pub trait BindingResolver: Send + Sync + core::fmt::Debug {
    /// The call's arguments with every binding and nested call replaced by a literal value.
    async fn resolve(&self, request: &BindingRequest<'_>) -> Result<Map<String, Value>, BindingError>;
}

/// The first binding, nested call or reserved key in `args`, as a reason and the JSON
/// pointer where it was found.
pub fn find_unresolved(form: WireForm, args: &Map<String, Value>) -> Option<(GateReason, String)> {
    if form == WireForm::Current {
        if let Some(found) = in_object(form, args, "") {
            return Some(found);
        }
    }
    args.iter()
        .find_map(|(k, v)| in_value(form, v, &format!("/{}", escape(k))))
}

fn in_value(form: WireForm, value: &Value, at: &str) -> Option<(GateReason, String)> {
    match value {
        Value::Object(map) => in_object(form, map, at).or_else(|| {
            map.iter()
                .find_map(|(k, v)| in_value(form, v, &format!("{at}/{}", escape(k))))
        }),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| in_value(form, v, &format!("{at}/{i}"))),
        _ => None,
    }
}

/// Whether this object's own keys make it a binding, a call or a directive.
fn in_object(form: WireForm, map: &Map<String, Value>, at: &str) -> Option<(GateReason, String)> {
    let (path, call) = match form {
        WireForm::Candidate => ("path", "call"),
        WireForm::Current => ("@path", "@call"),
    };
    let reason = if map.contains_key(path) {
        GateReason::ArgsDataBinding
    } else if map.contains_key(call) {
        GateReason::ArgsNestedCall
    } else if form == WireForm::Current && map.keys().any(|k| k.starts_with('@') && !k.starts_with("@@")) {
        GateReason::ArgsReservedKey
    } else {
        return None;
    };
    Some((
        reason,
        if at.is_empty() {
            "/".to_owned()
        } else {
            at.to_owned()
        },
    ))
}

/// RFC 6901 escaping of one pointer segment.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn found(form: WireForm, args: Value) -> Option<(GateReason, String)> {
        find_unresolved(form, args.as_object().unwrap())
    }

    #[test]
    fn current_form_bindings_calls_and_directives_are_found_at_any_depth() {
        use GateReason::*;
        let cur = WireForm::Current;
        assert_eq!(
            found(cur, json!({"to": {"@path": "/u"}})),
            Some((ArgsDataBinding, "/to".into()))
        );
        assert_eq!(
            found(cur, json!({"to": [1, {"x": {"@call": "f", "args": {}}}]})),
            Some((ArgsNestedCall, "/to/1/x".into()))
        );
        assert_eq!(
            found(cur, json!({"o": {"@if": 1}})),
            Some((ArgsReservedKey, "/o".into()))
        );
        assert_eq!(
            found(cur, json!({"@path": "/u"})),
            Some((ArgsDataBinding, "/".into()))
        );
        assert_eq!(
            found(cur, json!({"a/b": {"@path": "/u"}})),
            Some((ArgsDataBinding, "/a~1b".into()))
        );
        // Literals: `@@` escapes, Candidate-form keys are plain keys here.
        assert_eq!(
            found(cur, json!({"o": {"@@x": 1, "path": "/tmp", "call": "mom"}})),
            None
        );
    }

    #[test]
    fn candidate_form_bindings_are_its_own_keys_and_argument_names_are_free() {
        use GateReason::*;
        let cand = WireForm::Candidate;
        assert_eq!(
            found(cand, json!({"to": {"path": "/u"}})),
            Some((ArgsDataBinding, "/to".into()))
        );
        assert_eq!(
            found(cand, json!({"to": {"call": "f"}})),
            Some((ArgsNestedCall, "/to".into()))
        );
        assert_eq!(
            found(cand, json!({"path": "/tmp", "call": "x", "o": {"@path": 1}})),
            None
        );
    }
}

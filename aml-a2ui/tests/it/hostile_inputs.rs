//! Every hostile input of issue 20 gets its own documented code (the outcome's
//! [`MessageOutcome::code`]), an answer in the call's own form that validates against that
//! form's vendored schemas, and never a panic.

use std::sync::{Arc, Mutex};

use aml_a2ui::{
    BindingError, BindingRequest, BindingResolver, FunctionGate, FunctionRegistry, GateLimits, HostCatalog,
    HostFunction, MessageOutcome, WireForm,
};
use aml_core::{
    async_trait, tool_fn, ActionBoundary, ArgumentSnapshot, Effect, MapperError, MemorySink, Policy, Refusal,
    ToolError, ToolRegistration,
};
use jsonschema::{Registry, Validator};
use serde_json::{json, Map, Value};

const CATALOG: &str = "https://example.test/catalog/action.json";
const BASE: &str = "https://a2ui.org/specification/v1_0/";

fn fixture(path: &str) -> Value {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(path);
    serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap()
}

/// What the tool received, call by call.
type Seen = Arc<Mutex<Vec<Value>>>;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Send,
    Crash,
    Ping,
}

fn policy() -> Arc<Policy> {
    Arc::new(Policy::from_value(
        &json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_message", "effect": "send", "resource": "team@example.test", "requires_approval": false},
        {"tool": "send_then_crash", "effect": "send", "resource": "team@example.test", "requires_approval": false},
        {"tool": "ping", "effect": "read", "resource": "ping", "requires_approval": false}]}),
    ))
}

fn send_schema() -> Value {
    json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {},
        "priority": {"type": "number"}}, "required": ["to", "body"], "additionalProperties": false})
}

fn tool(kind: Kind, seen: &Seen) -> ToolRegistration {
    let registration = match kind {
        Kind::Ping => ToolRegistration::new(
            "ping",
            Effect::Read,
            "Ping",
            |_: &ArgumentSnapshot| Ok("ping".to_owned()),
            json!({"type": "object"}),
        ),
        _ => ToolRegistration::new(
            if kind == Kind::Crash {
                "send_then_crash"
            } else {
                "send_message"
            },
            Effect::Send,
            "Send a status update",
            |a: &ArgumentSnapshot| match a.str("to") {
                Some("mapper@fails.test") => Err(MapperError::new("directory lookup failed")),
                Some(to) => Ok(to.to_owned()),
                None => Err(MapperError::new("no to")),
            },
            send_schema(),
        ),
    };
    let seen = Arc::clone(seen);
    let executor = tool_fn(move |call| {
        let seen = Arc::clone(&seen);
        async move {
            seen.lock().unwrap().push(Value::Object(call.arguments().clone()));
            if kind == Kind::Crash {
                return Err(ToolError::new("tool crashed after entry"));
            }
            Ok(json!({"sent": true}))
        }
    });
    registration.unwrap().with_executor(Arc::new(executor))
}

fn catalog(seen: &Seen) -> HostCatalog {
    HostCatalog::new(CATALOG, "hostile")
        .with_function(HostFunction::agent_callable(
            "sendMessage",
            "Send",
            tool(Kind::Send, seen),
        ))
        .with_function(HostFunction::agent_callable(
            "crashy",
            "Send, then crash",
            tool(Kind::Crash, seen),
        ))
        .with_function(
            HostFunction::agent_callable("ping", "Ping", tool(Kind::Ping, seen)).with_optional_args(),
        )
        .with_function(
            HostFunction::renderer_only("copyToClipboard", "Copy", json!({"type": "object"})).unwrap(),
        )
}

fn gate_with(seen: &Seen, boundary: ActionBoundary) -> FunctionGate {
    let registry = Arc::new(FunctionRegistry::new().with_catalog(catalog(seen)));
    FunctionGate::new(registry, boundary).unwrap()
}

fn gate(seen: &Seen) -> FunctionGate {
    gate_with(seen, ActionBoundary::builder(policy()).build())
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// A message in `form` whose `callFunction` body after the function key is `rest`.
fn message(form: WireForm, id: &str, function: &str, rest: &str) -> Vec<u8> {
    format!(
        r#"{{"version":"v1.0","callRendererFunction":{{"functionCallId":"{id}","callFunction":{{"{}":"{function}","catalogId":"{CATALOG}"{rest}}}}}}}"#,
        form.function_key()
    )
    .into_bytes()
}

fn args(text: &str) -> String {
    format!(r#","args":{text}"#)
}

/// The answer validators: Candidate `renderer_to_agent.json`, and for the current form
/// `rendererFunctionResponse` as `a2ui-core`'s generated `common_types.json` defines it.
struct Schemas {
    candidate: Validator,
    current: Validator,
}

impl Schemas {
    fn new(seen: &Seen) -> Self {
        let registry = |dir: &str, form| {
            Registry::new()
                .extend([
                    (
                        format!("{BASE}common_types.json"),
                        fixture(&format!("{dir}/json/common_types.json")),
                    ),
                    (format!("{BASE}catalog.json"), catalog(seen).definition_in(form)),
                ])
                .unwrap()
                .prepare()
                .unwrap()
        };
        let candidate = jsonschema::options()
            .with_registry(&registry("a2ui-v1.0", WireForm::Candidate))
            .build(&fixture("a2ui-v1.0/json/renderer_to_agent.json"))
            .unwrap();
        let current = jsonschema::options()
            .with_registry(&registry("a2ui-v1.0-current", WireForm::Current))
            .build(&json!({"type": "object", "properties": {"version": {"const": "v1.0"},
                "rendererFunctionResponse": {"$ref": format!("{BASE}common_types.json#/$defs/FunctionResponse")}},
                "required": ["version", "rendererFunctionResponse"], "additionalProperties": false}))
            .unwrap();
        Schemas { candidate, current }
    }

    fn check(&self, outcome: &MessageOutcome) {
        let answer = outcome.response.to_value();
        let v = match outcome.form {
            WireForm::Candidate => &self.candidate,
            _ => &self.current,
        };
        let errors: Vec<String> = v.iter_errors(&answer).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{answer}\n{errors:#?}");
    }
}

#[test]
fn the_answer_validators_can_fail() {
    let seen = Seen::default();
    let s = Schemas::new(&seen);
    let top_level = json!({"version": "v1.0", "error": {"code": "X", "message": "m", "functionCallId": "i"}});
    assert!(s.candidate.is_valid(&top_level));
    assert!(!s.current.is_valid(&top_level));
    let no_id = json!({"version": "v1.0", "rendererFunctionResponse": {"value": 1}});
    assert!(!s.candidate.is_valid(&no_id) && !s.current.is_valid(&no_id));
    let extra = json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "i",
        "error": {"code": "X", "message": "m", "reason": "r"}}});
    assert!(!s.candidate.is_valid(&extra) && !s.current.is_valid(&extra));
}

fn deep(depth: usize) -> String {
    format!(
        r#"{{"to":"team@example.test","body":{}1{}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

#[test]
fn each_hostile_input_gets_its_own_code_in_both_forms() {
    let mib = 1 << 20;
    let big_body = format!(r#"{{"to":"team@example.test","body":"{}"}}"#, "x".repeat(mib));
    // (name, function, callFunction rest, code, wire code in the Candidate form, in the current form)
    let cases: Vec<(&str, &str, String, &str, &str, &str)> = vec![
        (
            "args over 1 MiB",
            "sendMessage",
            args(&big_body),
            "AML_JSON_TOO_LARGE",
            "INVALID_ARGUMENTS",
            "INVALID_FUNCTION_CALL",
        ),
        (
            "args deeper than 64",
            "sendMessage",
            args(&deep(70)),
            "AML_JSON_TOO_DEEP",
            "INVALID_ARGUMENTS",
            "INVALID_FUNCTION_CALL",
        ),
        (
            "args far deeper than 64",
            "sendMessage",
            args(&deep(5000)),
            "AML_JSON_TOO_DEEP",
            "INVALID_ARGUMENTS",
            "INVALID_FUNCTION_CALL",
        ),
        // Nesting that fills the message limit: no parser on the way may recurse per level
        // (the argument text is then also over the strict parser's 1 MiB).
        (
            "args as deep as the message allows",
            "sendMessage",
            args(&deep((1 << 20) - 512)),
            "AML_JSON_TOO_LARGE",
            "INVALID_ARGUMENTS",
            "INVALID_FUNCTION_CALL",
        ),
        (
            "duplicate keys",
            "sendMessage",
            args(r#"{"to":"team@example.test","to":"x","body":"b"}"#),
            "AML_JSON_DUPLICATE_KEY",
            "INVALID_ARGUMENTS",
            "INVALID_FUNCTION_CALL",
        ),
        (
            "lone surrogate",
            "sendMessage",
            args(r#"{"to":"team@example.test","body":"\ud800"}"#),
            "AML_JSON_LONE_SURROGATE",
            "INVALID_ARGUMENTS",
            "INVALID_FUNCTION_CALL",
        ),
        (
            "1e999",
            "sendMessage",
            args(r#"{"to":"team@example.test","body":"b","priority":1e999}"#),
            "AML_CANONICAL_JSON_NON_FINITE_NUMBER",
            "INVALID_ARGUMENTS",
            "INVALID_FUNCTION_CALL",
        ),
        (
            "args null",
            "sendMessage",
            args("null"),
            "args_not_object",
            "INVALID_FUNCTION_CALL",
            "INVALID_FUNCTION_CALL",
        ),
        (
            "args an array",
            "sendMessage",
            args("[1]"),
            "args_not_object",
            "INVALID_FUNCTION_CALL",
            "INVALID_FUNCTION_CALL",
        ),
        (
            "args missing",
            "sendMessage",
            String::new(),
            "args_missing",
            "INVALID_FUNCTION_CALL",
            "INVALID_FUNCTION_CALL",
        ),
        (
            "schema mismatch",
            "sendMessage",
            args(r#"{"to":5,"body":"b"}"#),
            "args_schema_mismatch",
            "INVALID_FUNCTION_CALL",
            "INVALID_FUNCTION_CALL",
        ),
        (
            // Beyond 2^53 a double no longer holds every integer: refused, never rounded.
            "integer beyond 2^53",
            "sendMessage",
            args(r#"{"to":"team@example.test","body":"b","priority":9007199254740993}"#),
            "args_inexact_number",
            "INVALID_FUNCTION_CALL",
            "INVALID_FUNCTION_CALL",
        ),
        (
            "unknown field",
            "sendMessage",
            format!(r#"{},"returnType":"any""#, args("{}")),
            "malformed_message",
            "INVALID_FUNCTION_CALL",
            "INVALID_FUNCTION_CALL",
        ),
        (
            "unknown function",
            "deleteEverything",
            args("{}"),
            "function_not_found",
            "INVALID_FUNCTION_CALL",
            "UNKNOWN_FUNCTION",
        ),
        (
            "renderer-only function",
            "copyToClipboard",
            args("{}"),
            "not_agent_callable",
            "INVALID_FUNCTION_CALL",
            "UNKNOWN_FUNCTION",
        ),
        (
            "no policy rule",
            "sendMessage",
            args(r#"{"to":"outside@example.test","body":"b"}"#),
            "no_exact_rule",
            "ACTION_BLOCKED",
            "ACTION_BLOCKED",
        ),
        (
            "host error",
            "sendMessage",
            args(r#"{"to":"mapper@fails.test","body":"b"}"#),
            "host_error",
            "HOST_ERROR",
            "UNKNOWN_ERROR",
        ),
        (
            "tool failed after entry",
            "crashy",
            args(r#"{"to":"team@example.test","body":"b"}"#),
            "host_dispatch_error",
            "EXECUTION_FAILED",
            "EXECUTION_ERROR",
        ),
    ];
    let seen = Seen::default();
    let schemas = Schemas::new(&seen);
    for form in [WireForm::Candidate, WireForm::Current] {
        let gate = gate(&seen);
        for (i, (name, function, rest, code, candidate_code, current_code)) in cases.iter().enumerate() {
            let outcome = block_on(gate.handle(&message(form, &format!("h{i}"), function, rest)))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(outcome.code(), *code, "{name} ({form:?})");
            let wire = if form == WireForm::Candidate {
                candidate_code
            } else {
                current_code
            };
            assert_eq!(outcome.response.error_code(), Some(*wire), "{name} ({form:?})");
            assert_eq!(
                outcome.response.function_call_id(),
                Some(format!("h{i}").as_str())
            );
            schemas.check(&outcome);
        }
        // Of all these, only the crashing tool was entered.
        assert_eq!(seen.lock().unwrap().len(), 1, "{form:?}");
        seen.lock().unwrap().clear();
    }
}

#[test]
fn the_reason_for_a_malformed_message_is_kept_in_the_outcome() {
    let seen = Seen::default();
    let m = message(
        WireForm::Current,
        "m1",
        "sendMessage",
        r#","args":{},"@path":"/x""#,
    );
    let sink = MemorySink::new();
    let gate = gate_with(
        &seen,
        ActionBoundary::builder(policy()).sink(sink.clone()).build(),
    );
    let outcome = block_on(gate.handle(&m)).unwrap();
    assert_eq!(outcome.code(), "malformed_message");
    let detail = &outcome.refusal.as_ref().unwrap().detail;
    assert!(detail.contains("unknown field `@path`"), "{detail}");
    // The host's receipt stream keeps it too.
    let record = &sink.calls()[0];
    assert_eq!(
        (record.adapter.as_str(), record.refusal),
        ("a2ui", Some(Refusal::MalformedRequest))
    );
    assert_eq!(
        record.detail.as_deref(),
        Some(format!("malformed_message: {detail}").as_str())
    );
}

#[test]
fn absent_args_run_as_an_empty_object_only_where_the_catalog_allows_it() {
    let seen = Seen::default();
    let gate = gate(&seen);
    for form in [WireForm::Candidate, WireForm::Current] {
        let id = format!("p-{}", form.as_str());
        let outcome = block_on(gate.handle(&message(form, &id, "ping", ""))).unwrap();
        assert_eq!(outcome.code(), "host_dispatch_returned", "{form:?}");
    }
    assert_eq!(*seen.lock().unwrap(), [json!({}), json!({})]);
    let def = catalog(&seen).definition_in(WireForm::Current);
    assert_eq!(def["functions"]["ping"]["allOf"][1]["required"], json!(["@call"]));
    assert_eq!(
        def["functions"]["sendMessage"]["allOf"][1]["required"],
        json!(["@call", "args"])
    );
}

#[test]
fn size_limits_apply_before_parsing_each_with_its_own_code() {
    let seen = Seen::default();
    let gate = gate(&seen);
    // 50 MiB: refused unread, nothing to address the answer to.
    let mut huge = message(
        WireForm::Current,
        "big",
        "sendMessage",
        &args(r#"{"to":"a","body":""}"#),
    );
    huge.splice(20..20, std::iter::repeat_n(b' ', 50 << 20));
    let err = block_on(gate.handle(&huge)).unwrap_err();
    assert_eq!(err.reason.as_str(), "message_too_large");
    assert_eq!(err.response().to_value()["error"]["code"], "MESSAGE_TOO_LARGE");
    // A 10 MiB call id is over the message limit first.
    let id = "i".repeat(10 << 20);
    let err = block_on(gate.handle(&message(WireForm::Current, &id, "ping", ""))).unwrap_err();
    assert_eq!(err.reason.as_str(), "message_too_large");
    // Within the message limit, the call id has its own: neither echoed nor kept.
    let id = "i".repeat(300);
    for form in [WireForm::Candidate, WireForm::Current] {
        let err = block_on(gate.handle(&message(form, &id, "ping", ""))).unwrap_err();
        assert_eq!(err.reason.as_str(), "call_id_too_long");
        assert_eq!(err.function_call_id, None);
        let answer = err.response().to_value();
        assert_eq!(answer["error"]["code"], "CALL_ID_TOO_LONG");
        assert!(!answer.to_string().contains(&id));
    }
    assert!(seen.lock().unwrap().is_empty());
    // Limits are the host's to set.
    let strict = gate_with(&seen, ActionBoundary::builder(policy()).build()).with_limits(GateLimits {
        max_message_bytes: 256,
        max_call_id_bytes: 4,
    });
    let err = block_on(strict.handle(&message(WireForm::Current, "12345", "ping", ""))).unwrap_err();
    assert_eq!(err.reason.as_str(), "call_id_too_long");
}

#[test]
fn bindings_and_nested_calls_are_refused_in_each_forms_own_keys() {
    let seen = Seen::default();
    let schemas = Schemas::new(&seen);
    let gate = gate(&seen);
    let cases = [
        (
            WireForm::Current,
            r#"{"to":{"@path":"/user/email"},"body":"b"}"#,
            "args_data_binding",
        ),
        (
            WireForm::Current,
            r#"{"to":"team@example.test","body":{"@call":"formatString","args":{}}}"#,
            "args_nested_call",
        ),
        (
            WireForm::Current,
            r#"{"to":"team@example.test","body":[{"@if":true}]}"#,
            "args_reserved_key",
        ),
        (
            WireForm::Candidate,
            r#"{"to":{"path":"/user/email"},"body":"b"}"#,
            "args_data_binding",
        ),
        (
            WireForm::Candidate,
            r#"{"to":"team@example.test","body":{"call":"formatString"}}"#,
            "args_nested_call",
        ),
    ];
    for (i, (form, a, code)) in cases.into_iter().enumerate() {
        let outcome =
            block_on(gate.handle(&message(form, &format!("b{i}"), "sendMessage", &args(a)))).unwrap();
        assert_eq!(outcome.code(), code, "{a}");
        assert_eq!(outcome.invocation.as_str(), "not_reached");
        schemas.check(&outcome);
    }
    // Literal objects of the other form are literals here, and run as sent.
    let literal = r#"{"to":"team@example.test","body":{"path":"/tmp/report","@@note":"x"}}"#;
    let outcome =
        block_on(gate.handle(&message(WireForm::Current, "lit", "sendMessage", &args(literal)))).unwrap();
    assert_eq!(outcome.code(), "host_dispatch_returned");
    assert_eq!(
        seen.lock().unwrap()[0]["body"],
        json!({"path": "/tmp/report", "@@note": "x"})
    );
}

/// Resolves `/user/email` from a fixed data model; refuses other paths; can be told to
/// leave a binding in place.
#[derive(Debug)]
struct DataModel {
    leave_binding: bool,
    requests: Mutex<Vec<(Option<String>, String)>>,
}

#[async_trait]
impl BindingResolver for DataModel {
    async fn resolve(&self, request: &BindingRequest<'_>) -> Result<Map<String, Value>, BindingError> {
        self.requests
            .lock()
            .unwrap()
            .push((request.surface_id.map(str::to_owned), request.function.to_owned()));
        if self.leave_binding {
            return Ok(request.args.clone());
        }
        let mut args = request.args.clone();
        for value in args.values_mut() {
            match value.get("@path").and_then(Value::as_str) {
                Some("/user/email") => *value = json!("team@example.test"),
                Some(other) => return Err(BindingError::new(format!("nothing at {other}"))),
                None => {}
            }
        }
        Ok(args)
    }
}

#[test]
fn a_host_resolver_turns_bindings_into_the_literals_that_are_frozen_and_run() {
    let seen = Seen::default();
    let resolver = Arc::new(DataModel {
        leave_binding: false,
        requests: Mutex::default(),
    });
    let gate = gate(&seen).with_binding_resolver(resolver.clone());
    let with_surface = |id: &str, a: &str| {
        format!(
            r#"{{"version":"v1.0","callRendererFunction":{{"surfaceId":"main","functionCallId":"{id}","callFunction":{{"@call":"sendMessage","catalogId":"{CATALOG}","args":{a}}}}}}}"#
        )
        .into_bytes()
    };
    let ok = block_on(gate.handle(&with_surface(
        "r1",
        r#"{"to":{"@path":"/user/email"},"body":"b"}"#,
    )))
    .unwrap();
    assert_eq!(ok.code(), "host_dispatch_returned");
    assert_eq!(
        *seen.lock().unwrap(),
        [json!({"to": "team@example.test", "body": "b"})]
    );
    // The plan's digest is of the resolved arguments: the same as sending them literally.
    let literal =
        block_on(gate.handle(&with_surface("r2", r#"{"to":"team@example.test","body":"b"}"#))).unwrap();
    assert_eq!(
        ok.plan.unwrap().proposal_sha256(),
        literal.plan.unwrap().proposal_sha256()
    );
    assert_eq!(
        resolver.requests.lock().unwrap()[0],
        (Some("main".into()), "sendMessage".into())
    );

    let refused =
        block_on(gate.handle(&with_surface("r3", r#"{"to":{"@path":"/nope"},"body":"b"}"#))).unwrap();
    assert_eq!(refused.code(), "bindings_unresolved");
    assert!(refused.refusal.unwrap().detail.contains("nothing at /nope"));
    let lazy = gate_with_lazy_resolver(&seen);
    let left = block_on(lazy.handle(&with_surface(
        "r4",
        r#"{"to":{"@path":"/user/email"},"body":"b"}"#,
    )))
    .unwrap();
    assert_eq!(left.code(), "bindings_unresolved");
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "only the two resolved or literal calls ran"
    );
}

fn gate_with_lazy_resolver(seen: &Seen) -> FunctionGate {
    gate(seen).with_binding_resolver(Arc::new(DataModel {
        leave_binding: true,
        requests: Mutex::default(),
    }))
}

#[test]
fn a_call_id_is_taken_up_once_across_both_forms() {
    let seen = Seen::default();
    let gate = gate(&seen);
    let ok = args(r#"{"to":"team@example.test","body":"b"}"#);
    assert_eq!(
        block_on(gate.handle(&message(WireForm::Current, "once", "sendMessage", &ok)))
            .unwrap()
            .code(),
        "host_dispatch_returned"
    );
    for form in [WireForm::Current, WireForm::Candidate] {
        let again = block_on(gate.handle(&message(form, "once", "sendMessage", &ok))).unwrap();
        assert_eq!(again.code(), "replayed");
        assert_eq!(again.invocation.as_str(), "replayed");
    }
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[test]
fn call_ids_are_claimed_in_the_boundarys_grant_store_one_session_at_a_time() {
    #[derive(Debug, Default)]
    struct Claims(Mutex<Vec<aml_core::GrantRef>>);
    #[async_trait]
    impl aml_core::GrantStore for Claims {
        async fn claim(
            &self,
            grant: &aml_core::GrantRef,
        ) -> Result<aml_core::ClaimStatus, aml_core::ClaimError> {
            let mut seen = self.0.lock().unwrap();
            let fresh = !seen.contains(grant);
            seen.push(grant.clone());
            Ok(if fresh {
                aml_core::ClaimStatus::Claimed
            } else {
                aml_core::ClaimStatus::AlreadyClaimed
            })
        }
    }
    let store = Arc::new(Claims::default());
    let boundary = ActionBoundary::builder(policy())
        .grants_arc(store.clone())
        .build();
    let seen = Seen::default();
    // Two sessions of one host share its boundary, and so its grant store.
    let (first, second) = (gate_with(&seen, boundary.clone()), gate_with(&seen, boundary));
    let ok = args(r#"{"to":"team@example.test","body":"b"}"#);
    let call = |gate: &FunctionGate| {
        block_on(gate.handle(&message(WireForm::Current, "c1", "sendMessage", &ok))).unwrap()
    };
    assert_eq!(call(&first).code(), "host_dispatch_returned");
    assert_eq!(call(&first).code(), "replayed");
    assert_eq!(
        call(&second).code(),
        "host_dispatch_returned",
        "another session's c1"
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
    // Every claim went to the host's store, each naming its call id.
    let claims = store.0.lock().unwrap();
    assert_eq!(claims.len(), 3);
    assert!(claims
        .iter()
        .all(|g| g.approval_id.as_deref().is_some_and(|id| id.ends_with("/c1"))));
}

#[test]
fn garbage_never_panics_and_always_gets_an_answer() {
    let seen = Seen::default();
    let gate = gate(&seen);
    let base = message(
        WireForm::Current,
        "g",
        "sendMessage",
        &args(r#"{"to":"team@example.test","body":"b"}"#),
    );
    // Every prefix and every single-byte corruption of a valid message.
    let mut inputs: Vec<Vec<u8>> = (0..base.len()).map(|n| base[..n].to_vec()).collect();
    for i in 0..base.len() {
        for b in [b'"', b'{', b'}', b'\\', 0xff, b'@', b'1'] {
            let mut m = base.clone();
            m[i] = b;
            inputs.push(m);
        }
    }
    for (n, m) in inputs.iter().enumerate() {
        let answer = match block_on(gate.handle(m)) {
            Ok(outcome) => outcome.response.to_value(),
            Err(e) => e.response().to_value(),
        };
        assert_eq!(answer["version"], "v1.0", "{n}");
        assert!(answer.get("error").is_some() || answer.get("rendererFunctionResponse").is_some());
    }
}

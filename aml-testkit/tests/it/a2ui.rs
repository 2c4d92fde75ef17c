//! The A2UI adapter against the documented report and the A2UI v1.0 schemas of both forms
//! (Candidate: `fixtures/a2ui-v1.0/`; current, as `a2ui-core` 0.4.0 generates them:
//! `fixtures/a2ui-v1.0-current/`; `$ref`s resolved offline).

use std::path::PathBuf;
use std::sync::Arc;

use aml_a2ui::{wire, FunctionGate, FunctionRegistry, WireForm};
use aml_core::{tool_fn, ArgumentSnapshot, Effect, GuardedTool, MapperError, Policy};
use aml_testkit::a2ui::{case_texts, host_catalog, report, run_case, run_case_in, A2uiHarness};
use aml_testkit::compare::{compare_report, CaseVerdict};
use aml_testkit::matrix::{fixture, guarded_tool_verdicts, A2UI_FIXTURE};
use jsonschema::{Registry, Validator};
use serde_json::{json, Value};

const BASE: &str = "https://a2ui.org/specification/v1_0/";

fn fixture_file(dir: &str, path: &str) -> Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(dir);
    aml_core::strict::parse_str(&std::fs::read_to_string(dir.join(path)).unwrap()).unwrap()
}

fn spec_file(path: &str) -> Value {
    fixture_file("a2ui-v1.0", path)
}

/// A validator for `schema` with the common types of `dir` and `catalog` registered under
/// their `$id`s (the catalog as `catalog.json`).
fn validator_in(dir: &str, schema: &Value, catalog: Value) -> Validator {
    let registry = Registry::new()
        .extend([
            (
                format!("{BASE}common_types.json"),
                fixture_file(dir, "json/common_types.json"),
            ),
            (format!("{BASE}catalog.json"), catalog),
        ])
        .unwrap()
        .prepare()
        .unwrap();
    jsonschema::options()
        .with_registry(&registry)
        .build(schema)
        .unwrap()
}

/// A validator for one official Candidate schema.
fn validator(schema: &str, catalog: Value) -> Validator {
    validator_in("a2ui-v1.0", &spec_file(&format!("json/{schema}")), catalog)
}

/// Current-form answers: no `renderer_to_agent.json` is published for this form, so the
/// message is `rendererFunctionResponse` as the generated `common_types.json` defines it.
fn current_answer_validator(catalog: Value) -> Validator {
    let schema = json!({"type": "object", "properties": {"version": {"const": "v1.0"},
        "rendererFunctionResponse": {"$ref": format!("{BASE}common_types.json#/$defs/FunctionResponse")}},
        "required": ["version", "rendererFunctionResponse"], "additionalProperties": false});
    validator_in("a2ui-v1.0-current", &schema, catalog)
}

fn current_catalog() -> Value {
    host_catalog(None).unwrap().definition_in(WireForm::Current)
}

fn assert_valid(v: &Validator, instance: &Value) {
    let errors: Vec<String> = v.iter_errors(instance).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{instance}\n{errors:#?}");
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn the_nine_documented_cases_match_the_fixture() {
    let verdicts = compare_report(&fixture(A2UI_FIXTURE), &block_on(report()).unwrap());
    assert_eq!(verdicts.len(), 9);
    for (id, v) in verdicts {
        assert_eq!(v, CaseVerdict::Pass, "{id}");
    }
}

#[test]
fn the_seventeen_guarded_tool_cases_run_over_a2ui_messages_in_both_forms() {
    for form in [WireForm::Current, WireForm::Candidate] {
        let verdicts = block_on(guarded_tool_verdicts(&A2uiHarness::new(form)));
        assert_eq!(verdicts.len(), 17);
        for (id, v) in verdicts {
            // `mapper_mutated` is the one documented static substitution (fixtures/README.md).
            let expected = if id == "mapper_mutated" {
                CaseVerdict::PassStatic
            } else {
                CaseVerdict::Pass
            };
            assert_eq!(v, expected, "{id} ({form:?})");
        }
    }
}

#[test]
fn the_nine_documented_cases_in_the_current_form_differ_only_in_the_answer_shape() {
    let answers = current_answer_validator(current_catalog());
    let requests = validator_in(
        "a2ui-v1.0-current",
        &fixture_file("a2ui-v1.0-current", "json/agent_to_renderer.json"),
        current_catalog(),
    );
    let texts = case_texts();
    assert_eq!(texts.len(), 9);
    for text in &texts {
        let candidate = block_on(run_case(text)).unwrap();
        let current = block_on(run_case_in(text, WireForm::Current)).unwrap();
        let id = text.id.as_str();
        for key in [
            "invocation",
            "aml_plan",
            "aml_receipt",
            "callback_count",
            "observed_arguments",
        ] {
            assert_eq!(candidate[key], current[key], "{id}: {key}");
        }
        let answer = &current["response"];
        assert_valid(&answers, answer);
        let rfr = &answer["rendererFunctionResponse"];
        assert_eq!(rfr["functionCallId"], "send_1");
        let expected = match id {
            "approved_exact" | "mutated_during_approval" => Value::Null,
            "renderer_only" | "wrong_catalog" | "unknown_function" => json!("UNKNOWN_FUNCTION"),
            "invalid_args" => json!("INVALID_FUNCTION_CALL"),
            "changed_destination" | "stale_approval" => json!("ACTION_BLOCKED"),
            "uncertain_callback" => json!("EXECUTION_ERROR"),
            other => panic!("unexpected case {other}"),
        };
        assert_eq!(rfr["error"]["code"], expected, "{id}");
        if expected.is_null() {
            assert_eq!(
                rfr["value"],
                candidate["response"]["rendererFunctionResponse"]["value"]
            );
        }
        // The request as the SDK's generated schema reads it, with the host catalog: valid
        // except where the catalog does not describe it (as in the Candidate form).
        let described = !matches!(id, "unknown_function" | "invalid_args");
        assert_eq!(requests.is_valid(&current["request"]), described, "{id}");
        // The checker tells the forms apart: `call` is not the current form.
        assert!(!requests.is_valid(&candidate["request"]), "{id}");
    }
}

#[test]
fn every_response_in_the_report_validates_against_renderer_to_agent() {
    let report = block_on(report()).unwrap();
    let v = validator("renderer_to_agent.json", report["host_catalog"].clone());
    for case in report["cases"].as_array().unwrap() {
        assert_valid(&v, &case["response"]);
    }
    // The schema is really applied: a response without its call id is refused.
    assert!(!v.is_valid(&json!({"version": "v1.0", "rendererFunctionResponse": {"value": 1}})));
}

#[test]
fn host_catalogs_validate_against_catalog_definition() {
    let report = block_on(report()).unwrap();
    let v = validator("catalog_definition.json", report["host_catalog"].clone());
    assert_valid(&v, &report["host_catalog"]);
    assert_valid(&v, &report["host_catalog_variants"]["renderer_only"]);
    // The checker can fail: an agent-callable function without an explicit
    // requiresUserActivation=false is refused by the official schema.
    let mut bad = report["host_catalog"].clone();
    bad["functions"]["sendMessage"]
        .as_object_mut()
        .unwrap()
        .remove("requiresUserActivation");
    assert!(!v.is_valid(&bad));
}

#[test]
fn documented_requests_validate_against_agent_to_renderer_with_the_host_catalog() {
    let report = block_on(report()).unwrap();
    let v = validator("agent_to_renderer.json", report["host_catalog"].clone());
    for case in report["cases"].as_array().unwrap() {
        let valid = v.is_valid(&case["request"]);
        // Requests for other catalogs or functions, or with a non-string body, are exactly
        // the ones the host catalog does not describe.
        let expected = !matches!(case["id"].as_str().unwrap(), "unknown_function" | "invalid_args");
        assert_eq!(valid, expected, "{}", case["id"]);
    }
}

#[test]
fn official_call_function_cases_agree_with_the_decoder_where_it_decides() {
    let cases = spec_file("test-cases/call_function_message.json");
    let v = validator(
        "agent_to_renderer.json",
        spec_file("test-cases/testing_catalog.json"),
    );
    let mut structural = 0;
    for test in cases["tests"].as_array().unwrap() {
        let expected = test["valid"].as_bool().unwrap();
        assert_eq!(v.is_valid(&test["data"]), expected, "{}", test["description"]);
        // The decoder checks the envelope; argument shapes are the host catalog's business
        // (the last official case is about a function the testing catalog does not define).
        let decoded = wire::decode(test["data"].to_string().as_bytes()).is_ok();
        if test["description"].as_str().unwrap().contains("Invalid args") {
            assert!(decoded);
        } else {
            structural += 1;
            assert_eq!(decoded, expected, "{}", test["description"]);
        }
    }
    assert_eq!(structural, 6);
}

fn gate_with(mapper_fails: bool) -> FunctionGate {
    let policy = Arc::new(Policy::from_value(
        &json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_message", "effect": "send", "resource": "team@example.test", "requires_approval": false}]}),
    ));
    let tool = GuardedTool::builder("send_message", Effect::Send, "Send a status update", policy)
        .resource_for(move |a: &ArgumentSnapshot| {
            if mapper_fails {
                return Err(MapperError::new("directory lookup failed"));
            }
            a.str("to")
                .map(str::to_owned)
                .ok_or_else(|| MapperError::new("no to"))
        })
        .executor(tool_fn(|_| async { Ok(json!({"sent": true})) }))
        .build()
        .unwrap();
    FunctionGate::new(
        Arc::new(FunctionRegistry::new().with_catalog(host_catalog(Some(&tool)).unwrap())),
        tool.boundary().clone(),
    )
    .unwrap()
}

fn message(id: &str, args: &str) -> Vec<u8> {
    format!(
        r#"{{"version":"v1.0","callRendererFunction":{{"functionCallId":"{id}","callFunction":{{"call":"sendMessage","catalogId":"https://example.test/catalog/action.json","args":{args}}}}}}}"#
    )
    .into_bytes()
}

#[test]
fn replays_malformed_input_and_host_errors_get_valid_clear_answers() {
    let gate = gate_with(false);
    let catalog = block_on(report()).unwrap()["host_catalog"].clone();
    let v = validator("renderer_to_agent.json", catalog);
    let ok = message("c1", r#"{"to":"team@example.test","body":"hi"}"#);
    let first = block_on(gate.handle(&ok)).unwrap();
    assert_eq!(
        first.response.to_value()["rendererFunctionResponse"]["value"],
        json!({"sent": true})
    );
    let replay = block_on(gate.handle(&ok)).unwrap();
    assert_eq!(replay.invocation.as_str(), "replayed");
    assert!(replay.receipt.is_none());
    let dup = block_on(gate.handle(&message(
        "c2",
        r#"{"to":"team@example.test","to":"x","body":"hi"}"#,
    )))
    .unwrap();
    assert_eq!(
        dup.receipt.as_ref().unwrap().reason().as_str(),
        "AML_JSON_DUPLICATE_KEY"
    );
    let overflow = block_on(gate.handle(&message(
        "c3",
        r#"{"to":"team@example.test","body":"b","priority":1e999}"#,
    )))
    .unwrap();
    assert_eq!(
        overflow.receipt.as_ref().unwrap().reason().as_str(),
        "AML_CANONICAL_JSON_NON_FINITE_NUMBER"
    );
    let unknown_field = br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"c4","callFunction":{"call":"sendMessage","catalogId":"c"},"surfaceId":"s"}}"#;
    let malformed = block_on(gate.handle(unknown_field)).unwrap();
    assert_eq!(malformed.response.to_value()["error"]["functionCallId"], "c4");
    let host = block_on(gate_with(true).handle(&ok)).unwrap();
    assert_eq!(host.host_error.as_deref(), Some("directory lookup failed"));
    for out in [first, replay, dup, overflow, malformed, host] {
        assert_valid(&v, &out.response.to_value());
    }
    // Nothing to address an answer to: an error for the host, never a panic.
    for bad in [
        &b"{"[..],
        b"[]",
        br#"{"version":"v1.0","createSurface":{"surfaceId":"s"}}"#,
    ] {
        assert!(block_on(gate.handle(bad)).is_err());
    }
}

use super::*;
use aml_core::ReceiptReason;
use serde_json::json;

#[test]
fn decodes_the_candidate_request() {
    let m = br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"send_1","callFunction":
        {"call":"sendMessage","catalogId":"c","args":{"to":"t","body":"b"}}}}"#;
    let call = decode(m).unwrap();
    assert_eq!(call.form, WireForm::Candidate);
    assert_eq!(
        (
            call.function_call_id.as_str(),
            call.call.as_str(),
            call.catalog_id.as_str()
        ),
        ("send_1", "sendMessage", "c")
    );
    assert_eq!(call.args_json, Some(r#"{"to":"t","body":"b"}"#));
    assert_eq!(call.surface_id, None);
}

#[test]
fn decodes_the_current_request_with_a_surface() {
    let m = br#"{"version":"v1.0","callRendererFunction":{"surfaceId":"main","functionCallId":"c1",
        "callFunction":{"@call":"sendMessage","catalogId":"c","args":{"to":"t"}}}}"#;
    let call = decode(m).unwrap();
    assert_eq!(call.form, WireForm::Current);
    assert_eq!(call.call, "sendMessage");
    assert_eq!(call.surface_id.as_deref(), Some("main"));
    assert_eq!(call.args_json, Some(r#"{"to":"t"}"#));
}

#[test]
fn absent_and_null_args_are_told_apart() {
    let absent = decode(br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"p","callFunction":{"call":"ping","catalogId":"c"}}}"#).unwrap();
    assert_eq!(absent.args_json, None);
    let null = decode(br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"p","callFunction":{"@call":"ping","catalogId":"c","args":null}}}"#).unwrap();
    assert_eq!(null.args_json, Some("null"));
}

#[test]
fn refusals_keep_the_call_id_the_form_and_the_reason() {
    let cases: [(&[u8], Option<&str>, WireForm); 12] = [
        (br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","callFunction":{"call":"f","catalogId":"c"},"extra":1}}"#, Some("x"), WireForm::Candidate),
        (br#"{"version":"v0.9","callRendererFunction":{"functionCallId":"x","callFunction":{"call":"f","catalogId":"c"}}}"#, Some("x"), WireForm::Candidate),
        (br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","callFunction":{"call":"f"}}}"#, Some("x"), WireForm::Candidate),
        (br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","surfaceId":"s","callFunction":{"call":"f","catalogId":"c"}}}"#, Some("x"), WireForm::Candidate),
        (br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","callFunction":{"call":"f","@call":"f","catalogId":"c"}}}"#, Some("x"), WireForm::Current),
        (br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","callFunction":{"@call":null,"catalogId":"c"}}}"#, Some("x"), WireForm::Current),
        (br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","surfaceId":null,"callFunction":{"@call":"f","catalogId":"c"}}}"#, Some("x"), WireForm::Current),
        (br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","callFunction":{"catalogId":"c"}}}"#, Some("x"), WireForm::Current),
        (br#"{"version":"v1.0","createSurface":{"surfaceId":"s"}}"#, None, WireForm::Current),
        (br#"{"version":"v1.0","version":"v1.0","callRendererFunction":{}}"#, None, WireForm::Current),
        (b"not json", None, WireForm::Current),
        (br#"[]"#, None, WireForm::Current),
    ];
    for (m, id, form) in cases {
        let err = decode(m).unwrap_err();
        let text = String::from_utf8_lossy(m);
        assert_eq!(err.reason, GateReason::MalformedMessage, "{text}");
        assert_eq!(err.function_call_id.as_deref(), id, "{text}");
        assert_eq!(err.form, form, "{text}");
        assert!(!err.detail.is_empty());
    }
}

/// Fuzzing finding: serde reads a struct from an array of its fields, so a message, a
/// `callRendererFunction` or a `callFunction` written as an array decoded as a call.
#[test]
fn messages_written_as_arrays_are_refused_at_every_level() {
    let object = br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","callFunction":{"call":"f","catalogId":"c"}}}"#;
    assert_eq!(decode(object).unwrap().call, "f");
    let cases: [&[u8]; 4] = [
        br#"["v1.0",{"functionCallId":"x","callFunction":{"call":"f","catalogId":"c"}}]"#,
        br#"{"version":"v1.0","callRendererFunction":["x",null,{"call":"f","catalogId":"c"}]}"#,
        br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","callFunction":["f",null,"c",null]}}"#,
        br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","callFunction":["f",null,"c"]}}"#,
    ];
    for m in cases {
        let text = String::from_utf8_lossy(m);
        let err = decode(m).unwrap_err();
        assert_eq!(err.reason, GateReason::MalformedMessage, "{text}");
        assert!(err.detail.contains("a JSON object"), "{text}: {}", err.detail);
    }
    // An array in place of the call object yields no call id either.
    let err = decode(cases[1]).unwrap_err();
    assert_eq!(err.function_call_id, None);
}

#[test]
fn the_reason_for_a_malformed_call_is_kept() {
    let m = br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"x","callFunction":{"call":"f","catalogId":"c","@path":"/a"}}}"#;
    let err = decode(m).unwrap_err();
    assert!(err.detail.contains("unknown field `@path`"), "{}", err.detail);
}

#[test]
fn limits_apply_before_parsing_and_a_long_id_is_not_kept() {
    let limits = GateLimits {
        max_message_bytes: 64,
        max_call_id_bytes: 8,
    };
    let too_large = [b' '; 65];
    let err = decode_with(&too_large, limits).unwrap_err();
    assert_eq!(err.reason, GateReason::MessageTooLarge);
    let long_id = br#"{"version":"v1.0","callRendererFunction":{"functionCallId":"123456789"}}"#;
    let err = decode_with(
        long_id,
        GateLimits {
            max_message_bytes: 1024,
            ..limits
        },
    )
    .unwrap_err();
    assert_eq!(err.reason, GateReason::CallIdTooLong);
    assert_eq!(err.function_call_id, None);
    assert!(!err.response().to_value().to_string().contains("123456789"));
    assert_eq!(err.response().error_code(), Some(CALL_ID_TOO_LONG));
}

#[test]
fn each_answer_takes_the_shape_and_code_of_its_form() {
    use Answer::*;
    let cases = [
        (
            Refused(GateReason::FunctionNotFound),
            "error",
            INVALID_FUNCTION_CALL,
            UNKNOWN_FUNCTION,
        ),
        (
            Refused(GateReason::ArgsNotObject),
            "error",
            INVALID_FUNCTION_CALL,
            INVALID_FUNCTION_CALL,
        ),
        (
            Refused(GateReason::Replayed),
            "error",
            INVALID_FUNCTION_CALL,
            DUPLICATE,
        ),
        (
            Blocked(ReceiptReason::JsonDuplicateKey),
            "rfr",
            INVALID_ARGUMENTS,
            INVALID_FUNCTION_CALL,
        ),
        (
            Blocked(ReceiptReason::NoExactRule),
            "rfr",
            ACTION_BLOCKED,
            ACTION_BLOCKED,
        ),
        (Uncertain, "rfr", EXECUTION_FAILED, EXECUTION_ERROR),
        (HostError, "rfr", HOST_ERROR, UNKNOWN_ERROR),
    ];
    for (answer, candidate_shape, candidate_code, current_code) in cases {
        let cand = respond(WireForm::Candidate, "i".into(), answer.clone()).to_value();
        let cur = respond(WireForm::Current, "i".into(), answer.clone()).to_value();
        let cand_error = match candidate_shape {
            "error" => &cand["error"],
            _ => &cand["rendererFunctionResponse"]["error"],
        };
        assert_eq!(cand_error["code"], candidate_code, "{answer:?}");
        assert_eq!(
            cur["rendererFunctionResponse"]["error"]["code"], current_code,
            "{answer:?}"
        );
        assert_eq!(cur["rendererFunctionResponse"]["functionCallId"], "i");
        assert!(cur.get("error").is_none());
    }
    let value = respond(WireForm::Current, "v".into(), Value(json!(1))).to_value();
    assert_eq!(value["rendererFunctionResponse"]["value"], 1);
}

#[test]
fn argument_refusals_are_exactly_the_capture_and_freeze_reasons() {
    let argument: Vec<&str> = ReceiptReason::ALL
        .iter()
        .filter(|r| is_argument_refusal(**r))
        .map(|r| r.as_str())
        .collect();
    assert_eq!(
        argument,
        [
            "invalid_proposal",
            "proposal_too_large",
            "AML_CANONICAL_JSON_NON_FINITE_NUMBER",
            "AML_CANONICAL_JSON_UNSUPPORTED_VALUE",
            "AML_JSON_SYNTAX",
            "AML_JSON_INVALID_UTF8",
            "AML_JSON_DUPLICATE_KEY",
            "AML_JSON_LONE_SURROGATE",
            "AML_JSON_TOO_DEEP",
            "AML_JSON_TOO_LARGE",
        ]
    );
}

#[test]
fn every_refusal_has_its_own_message_unless_the_seed_fixes_one() {
    let mut seen = std::collections::HashMap::new();
    for r in GateReason::ALL {
        if let Some(other) = seen.insert(refusal_message(*r), *r) {
            // The documented cases give unknown catalogs, unknown and renderer-only
            // functions one message, so that an agent cannot probe the catalog.
            let shared = [
                GateReason::CatalogNotFound,
                GateReason::FunctionNotFound,
                GateReason::NotAgentCallable,
            ];
            assert!(shared.contains(r) && shared.contains(&other), "{r} {other}");
        }
    }
}

#[test]
fn the_bytes_are_the_value_written_version_first_whatever_map_order_serde_json_keeps() {
    let output = json!({"z": [1.5, null], "a": "\u{2028}\"", "n": 9007199254740991u64});
    let messages = [
        RendererMessage::Value {
            function_call_id: "v\"1".into(),
            value: output,
        },
        RendererMessage::Value {
            function_call_id: "null".into(),
            value: Value::Null,
        },
        RendererMessage::FunctionError {
            function_call_id: "f".into(),
            code: "blocked",
            message: "no\nrule".into(),
        },
        RendererMessage::Error {
            function_call_id: "e".into(),
            code: "INVALID_ARGS",
            message: "bad".into(),
        },
        RendererMessage::Unaddressed {
            code: "INVALID_MESSAGE",
            message: "not json".into(),
        },
    ];
    for message in messages {
        let bytes = message.to_bytes();
        assert!(
            bytes.starts_with(br#"{"version":"v1.0","#),
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        let parsed = aml_core::strict::parse_slice(&bytes).unwrap();
        assert_eq!(parsed, message.to_value());
    }
    let expected =
        json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "null", "value": null}});
    let null = RendererMessage::Value {
        function_call_id: "null".into(),
        value: Value::Null,
    };
    assert_eq!(null.to_value(), expected);
}

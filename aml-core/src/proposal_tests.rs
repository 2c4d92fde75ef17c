use super::*;
use serde_json::json;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/upstream-conformance/vectors.json"
    );
    crate::strict::parse_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn base() -> Value {
    json!({
        "protocol": "aml-proposed-action/1", "tool": "send_message", "effect": "send",
        "resource": "team@example.test", "purpose": "Send a status update",
        "arguments": {"to": "team@example.test", "body": "Build passed."}
    })
}

fn refusal(v: &Value) -> PlanReason {
    FrozenProposal::from_value(v).unwrap_err().reason()
}

#[test]
fn all_six_upstream_vectors_hash_to_the_published_digest() {
    let v = vectors();
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6);
    for case in cases {
        let frozen = FrozenProposal::from_value(&case["proposal"]).unwrap();
        assert_eq!(
            frozen.digest().to_string(),
            case["proposal_sha256"].as_str().unwrap(),
            "{}",
            case["name"]
        );
        assert_eq!(
            Sha256Digest::of(frozen.canonical_json().as_bytes()),
            frozen.digest()
        );
    }
}

#[test]
fn freeze_from_parts_equals_freeze_from_value() {
    let args = base()["arguments"].as_object().unwrap().clone();
    let parts = ProposalParts {
        tool: "send_message",
        effect: Effect::Send,
        resource: "team@example.test",
        purpose: "Send a status update",
        arguments: &args,
    };
    let a = FrozenProposal::freeze(parts).unwrap();
    let b = FrozenProposal::from_value(&base()).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.to_value(), base());
    assert_eq!(Value::Object(a.arguments()), base()["arguments"]);
    assert_eq!(
        (a.tool(), a.effect(), a.resource()),
        ("send_message", Effect::Send, "team@example.test")
    );
}

#[test]
fn extra_or_missing_keys_are_invalid() {
    let mut extra = base();
    extra["extra"] = json!(true);
    assert_eq!(refusal(&extra), PlanReason::InvalidProposal);
    let mut missing = base();
    missing.as_object_mut().unwrap().remove("purpose");
    assert_eq!(refusal(&missing), PlanReason::InvalidProposal);
    let mut swapped = base();
    swapped.as_object_mut().unwrap().remove("purpose");
    swapped["Purpose"] = json!("x");
    assert_eq!(refusal(&swapped), PlanReason::InvalidProposal);
    assert_eq!(refusal(&json!([])), PlanReason::InvalidProposal);
}

#[test]
fn wrong_types_protocol_and_effect_are_invalid() {
    for (key, bad) in [
        ("protocol", json!("aml-proposed-action/2")),
        ("tool", json!(7)),
        ("effect", json!("SEND")),
        ("effect", json!("execute")),
        ("resource", json!(null)),
        ("arguments", json!([1])),
        ("arguments", json!("{}")),
    ] {
        let mut v = base();
        v[key] = bad.clone();
        assert_eq!(refusal(&v), PlanReason::InvalidProposal, "{key}={bad}");
    }
}

#[test]
fn blank_means_blank_after_ecmascript_trim() {
    for blank in [
        "",
        " ",
        "\t\n\r",
        "\u{feff}",
        "\u{a0}\u{2028}\u{3000}",
        "\u{b}\u{c}",
    ] {
        let mut v = base();
        v["tool"] = json!(blank);
        assert_eq!(refusal(&v), PlanReason::InvalidProposal, "{blank:?}");
    }
    // U+0085 and U+200B are not ECMAScript white space: the value is not blank.
    for not_blank in ["\u{85}", "\u{200b}", " x "] {
        let mut v = base();
        v["purpose"] = json!(not_blank);
        assert!(FrozenProposal::from_value(&v).is_ok(), "{not_blank:?}");
    }
}

#[test]
fn length_is_counted_in_utf16_code_units() {
    let mut v = base();
    v["resource"] = json!("a".repeat(256));
    assert!(FrozenProposal::from_value(&v).is_ok());
    v["resource"] = json!("a".repeat(257));
    assert_eq!(refusal(&v), PlanReason::InvalidProposal);
    // 128 emoji are 256 code units (but 512 bytes, 128 chars): accepted.
    v["resource"] = json!("😀".repeat(128));
    assert!(FrozenProposal::from_value(&v).is_ok());
    v["resource"] = json!(format!("{}a", "😀".repeat(128)));
    assert_eq!(refusal(&v), PlanReason::InvalidProposal);
}

#[test]
fn canonical_size_limit_is_65536_bytes() {
    let empty = {
        let mut v = base();
        v["arguments"] = json!({"b": ""});
        FrozenProposal::from_value(&v).unwrap().canonical_json().len()
    };
    let mut v = base();
    v["arguments"] = json!({"b": "x".repeat(MAX_PROPOSAL_BYTES - empty)});
    assert_eq!(
        FrozenProposal::from_value(&v).unwrap().canonical_json().len(),
        MAX_PROPOSAL_BYTES
    );
    v["arguments"] = json!({"b": "x".repeat(MAX_PROPOSAL_BYTES - empty + 1)});
    assert_eq!(refusal(&v), PlanReason::ProposalTooLarge);
    // Validation errors come before the size check.
    v["effect"] = json!("nope");
    assert_eq!(refusal(&v), PlanReason::InvalidProposal);
}

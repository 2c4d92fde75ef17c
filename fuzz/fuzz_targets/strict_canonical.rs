//! Strict parse and canonicalize: never panics; the canonical text re-parses to the same
//! value; canonicalizing twice is the identity; the digest of the text is the digest a plan
//! of a proposal carrying the value as its arguments has.
#![no_main]

use aml_core::canonical::{canonical_digest, to_canonical_string};
use aml_core::{plan, strict, FrozenProposal, Policy, Sha256Digest};
use aml_fuzz::same;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let _ = strict::first_inexact_number(data);
    let Ok(value) = strict::parse_slice(data) else {
        return;
    };
    let canonical = to_canonical_string(&value).expect("a strictly parsed value canonicalizes");
    let again = strict::parse_str(&canonical).expect("canonical text re-parses");
    assert!(
        same(&value, &again),
        "the canonical text changed the value: {canonical}"
    );
    assert_eq!(
        to_canonical_string(&again).unwrap(),
        canonical,
        "canonicalizing twice changed it"
    );
    let (text, digest) = canonical_digest(&value).unwrap();
    assert_eq!(text, canonical);
    assert_eq!(digest, Sha256Digest::of(canonical.as_bytes()));

    // The same value as a proposal's arguments: the frozen bytes and the plan's digest.
    if !value.is_object() {
        return;
    }
    let proposal = json!({"protocol": "aml-proposed-action/1", "tool": "t", "effect": "write",
        "resource": "r", "purpose": "p", "arguments": value});
    let frozen = match FrozenProposal::from_value(&proposal) {
        Ok(frozen) => frozen,
        // One level deeper than the value itself: only a value at the depth limit may fail.
        Err(refusal) if depth(&value) >= aml_core::canonical::MAX_DEPTH - 1 => {
            assert_eq!(refusal.reason(), aml_core::PlanReason::InvalidProposal);
            return;
        }
        Err(refusal) => panic!("a valid proposal was refused: {}", refusal.detail()),
    };
    assert_eq!(frozen.arguments_json(), canonical);
    let whole = to_canonical_string(&proposal).unwrap();
    assert_eq!(frozen.canonical_json(), whole);
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "t", "effect": "write", "resource": "r", "requires_approval": true}]}));
    let planned = plan(&proposal, &policy);
    assert_eq!(
        planned.plan().proposal_sha256(),
        Some(Sha256Digest::of(whole.as_bytes()))
    );
    assert_eq!(planned.plan().decision(), aml_core::Decision::RequiresApproval);
    let _: Value = planned.plan().to_value();
});

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

//! Policy load: never panics; a malformed document denies everything with `invalid_policy`;
//! a loaded one round-trips through its own JSON with the same digest, and every rule's
//! tuple, asked for by the rule's caller (the host's own agent when it names none), decides
//! as an independent count of the rules that apply to that caller says (one rule: its
//! decision; two or more: `ambiguous_policy`; none: `no_exact_rule`).
#![no_main]

use aml_core::{Caller, Decision, Effect, PlanReason, Policy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let policy = Policy::from_json_slice(data);
    if policy.error().is_some() {
        assert!(policy.rules().is_empty());
        assert_eq!(policy.digest(), None);
        assert_eq!(policy.to_value(), None);
        assert_eq!(
            policy.decide("t", Effect::Read, "r"),
            (Decision::Deny, PlanReason::InvalidPolicy)
        );
        return;
    }
    let value = policy.to_value().expect("a loaded policy has a document");
    let again = Policy::from_value(&value);
    assert!(again.error().is_none(), "its own document does not load: {value}");
    assert_eq!(again.rules(), policy.rules());
    assert_eq!(again.digest(), policy.digest());
    assert!(policy.digest().is_some());
    for rule in policy.rules() {
        let caller = match &rule.caller {
            Some(id) => Caller::new(id.as_str()).expect("a loaded rule names a valid caller"),
            None => Caller::local(),
        };
        // A rule for everyone and a rule for this caller both apply to its calls.
        let same: Vec<_> = policy
            .rules()
            .iter()
            .filter(|r| r.tool == rule.tool && r.effect == rule.effect && r.resource == rule.resource)
            .filter(|r| r.caller.as_deref().is_none_or(|id| id == caller.id()))
            .collect();
        let expected = match same.len() {
            1 if rule.requires_approval => (Decision::RequiresApproval, PlanReason::ExactRule),
            1 => (Decision::Allow, PlanReason::ExactRule),
            _ => (Decision::Deny, PlanReason::AmbiguousPolicy),
        };
        assert_eq!(policy.decide_for(&rule.tool, rule.effect, &rule.resource, &caller), expected);
        // Exact matching: one character more is another resource.
        let other = format!("{}\u{0}", rule.resource);
        if !policy
            .rules()
            .iter()
            .any(|r| r.tool == rule.tool && r.resource == other)
        {
            assert_eq!(
                policy.decide_for(&rule.tool, rule.effect, &other, &caller),
                (Decision::Deny, PlanReason::NoExactRule)
            );
        }
        let without = policy
            .without(&rule.tool, rule.effect, &rule.resource)
            .expect("a rule matched");
        assert_eq!(
            without.decide_for(&rule.tool, rule.effect, &rule.resource, &caller),
            (Decision::Deny, PlanReason::NoExactRule)
        );
    }
});

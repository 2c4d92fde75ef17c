use super::*;

fn rule(tool: &str, effect: &str, resource: &str, approval: bool) -> Value {
    json!({"tool": tool, "effect": effect, "resource": resource, "requires_approval": approval})
}

fn doc(rules: Vec<Value>) -> Value {
    json!({"protocol": "aml-action-policy/1", "rules": rules})
}

#[test]
fn exact_match_has_no_wildcards_prefixes_or_case_folding() {
    let p = Policy::from_value(&doc(vec![
        rule("send_message", "send", "team@example.test", true),
        rule("fetch_record", "read", "record:42", false),
    ]));
    assert_eq!(
        p.decide("fetch_record", Effect::Read, "record:42"),
        (Decision::Allow, PlanReason::ExactRule)
    );
    for (tool, effect, resource) in [
        ("send_message", Effect::Send, "team@example.test "),
        ("send_message", Effect::Send, "TEAM@example.test"),
        ("send_message", Effect::Write, "team@example.test"),
        ("send_message", Effect::Send, "team@"),
        ("send_messag", Effect::Send, "team@example.test"),
        ("fetch_record", Effect::Read, "*"),
    ] {
        assert_eq!(
            p.decide(tool, effect, resource),
            (Decision::Deny, PlanReason::NoExactRule)
        );
    }
}

#[test]
fn ambiguity_is_only_about_the_proposals_own_tuple() {
    let p = Policy::from_value(&doc(vec![
        rule("send_message", "send", "team@example.test", true),
        rule("send_message", "send", "team@example.test", true),
        rule("send_message", "send", "other@example.test", false),
    ]));
    assert_eq!(
        p.decide("send_message", Effect::Send, "team@example.test"),
        (Decision::Deny, PlanReason::AmbiguousPolicy)
    );
    assert_eq!(
        p.decide("send_message", Effect::Send, "other@example.test"),
        (Decision::Allow, PlanReason::ExactRule)
    );
}

#[test]
fn any_malformed_rule_makes_the_whole_policy_invalid() {
    let good = rule("a", "read", "r", false);
    let bad_rules = [
        json!({"tool": "a", "effect": "read", "resource": "r"}),
        json!({"tool": "a", "effect": "read", "resource": "r", "requires_approval": "yes"}),
        json!({"tool": "a", "effect": "exec", "resource": "r", "requires_approval": false}),
        json!({"tool": " ", "effect": "read", "resource": "r", "requires_approval": false}),
        json!({"tool": "a", "effect": "read", "resource": "\u{feff}", "requires_approval": false}),
        json!({"tool": "a", "effect": "read", "resource": "r", "requires_approval": false, "x": 1}),
        json!("rule"),
    ];
    for bad in bad_rules {
        let p = Policy::from_value(&doc(vec![good.clone(), bad.clone()]));
        assert!(p.error().is_some(), "{bad}");
        assert_eq!(
            p.decide("a", Effect::Read, "r"),
            (Decision::Deny, PlanReason::InvalidPolicy)
        );
        assert!(Policy::try_from_value(&doc(vec![bad])).is_err());
    }
    for bad_doc in [
        json!({"protocol": "aml-action-policy/2", "rules": []}),
        json!({"rules": []}),
        json!({"protocol": "aml-action-policy/1", "rules": {}}),
        json!({"protocol": "aml-action-policy/1", "rules": [], "extra": 1}),
        json!(null),
    ] {
        assert_eq!(
            Policy::from_value(&bad_doc).decide("a", Effect::Read, "r").1,
            PlanReason::InvalidPolicy
        );
    }
}

#[test]
fn documents_round_trip() {
    let d = doc(vec![rule("a", "pay", "acct:1", true)]);
    assert_eq!(Policy::try_from_value(&d).unwrap().to_value().unwrap(), d);
    assert_eq!(Policy::from_value(&json!(1)).to_value(), None);
}

#[test]
fn from_rules_refuses_blank_fields() {
    let blank = Rule {
        tool: "\t".into(),
        effect: Effect::Read,
        resource: "r".into(),
        requires_approval: false,
        caller: None,
    };
    assert!(Policy::from_rules([blank]).is_err());
}

#[test]
fn live_policy_revocation_is_seen_by_later_reads() {
    let live = LivePolicy::new(Policy::from_value(&doc(vec![rule("a", "read", "r", true)])));
    let before = live.current();
    assert!(live.revoke("a", Effect::Read, "r"));
    assert!(!live.revoke("a", Effect::Read, "r"));
    assert_eq!(
        before.decide("a", Effect::Read, "r").0,
        Decision::RequiresApproval
    );
    assert_eq!(live.current().decide("a", Effect::Read, "r").0, Decision::Deny);
    live.replace(Policy::from_value(&json!("broken")));
    assert_eq!(
        live.current().decide("a", Effect::Read, "r").1,
        PlanReason::InvalidPolicy
    );
}

#[test]
fn a_thousand_rules_index_exactly() {
    let rules: Vec<Value> = (0..1000)
        .map(|i| {
            rule(
                "send_message",
                "send",
                &format!("user{i}@example.test"),
                i % 2 == 0,
            )
        })
        .collect();
    let p = Policy::from_value(&doc(rules));
    assert_eq!(p.rules().len(), 1000);
    assert_eq!(
        p.decide("send_message", Effect::Send, "user998@example.test").0,
        Decision::RequiresApproval
    );
    assert_eq!(
        p.decide("send_message", Effect::Send, "user999@example.test").0,
        Decision::Allow
    );
    assert_eq!(
        p.decide("send_message", Effect::Send, "user1000@example.test").0,
        Decision::Deny
    );
}

#[test]
fn a_policy_file_fails_closed_and_its_digest_ignores_formatting() {
    let text = br#"{"protocol": "aml-action-policy/1", "rules": [
        {"tool": "t", "effect": "read", "resource": "r", "requires_approval": false}]}"#;
    let compact = br#"{"rules":[{"requires_approval":false,"resource":"r","effect":"read","tool":"t"}],"protocol":"aml-action-policy/1"}"#;
    let policy = Policy::from_json_slice(text);
    assert!(policy.error().is_none());
    assert_eq!(policy.digest(), Policy::from_json_slice(compact).digest());
    assert!(policy.digest().is_some());
    for bad in [
        &b"{"[..],
        br#"{"protocol": "aml-action-policy/1", "rules": [], "rules": []}"#,
        b"[]",
    ] {
        let bad = Policy::from_json_slice(bad);
        assert!(bad.error().is_some());
        assert_eq!(bad.digest(), None);
        assert_eq!(
            bad.decide("t", Effect::Read, "r"),
            (Decision::Deny, PlanReason::InvalidPolicy)
        );
    }
}

#[test]
fn an_exact_rule_may_name_its_caller() {
    use crate::Caller;
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "deploy", "effect": "write", "resource": "prod", "requires_approval": false, "caller": "ci-bot"},
        {"tool": "deploy", "effect": "write", "resource": "prod", "requires_approval": true, "caller": "alice"},
        {"tool": "deploy", "effect": "write", "resource": "staging", "requires_approval": false},
        {"tool": "deploy", "effect": "write", "resource": "staging", "requires_approval": true, "caller": "alice"}]}));
    assert!(policy.error().is_none(), "{:?}", policy.error());
    let by = |caller: &str, resource| {
        policy.decide_for("deploy", Effect::Write, resource, &Caller::new(caller).unwrap())
    };
    assert_eq!(by("ci-bot", "prod"), (Decision::Allow, PlanReason::ExactRule));
    assert_eq!(
        by("alice", "prod"),
        (Decision::RequiresApproval, PlanReason::ExactRule)
    );
    assert_eq!(by("mallory", "prod"), (Decision::Deny, PlanReason::NoExactRule));
    assert_eq!(by("local", "prod"), (Decision::Deny, PlanReason::NoExactRule));
    assert_eq!(by("ci-bot", "staging"), (Decision::Allow, PlanReason::ExactRule));
    // A rule for alice and one for everyone both match alice's call: ambiguous, denied.
    assert_eq!(
        by("alice", "staging"),
        (Decision::Deny, PlanReason::AmbiguousPolicy)
    );
    // The caller is part of the document (and of its digest), and only when given.
    let document = policy.to_value().unwrap();
    assert_eq!(document["rules"][0]["caller"], "ci-bot");
    assert!(document["rules"][2].get("caller").is_none());
    let plain = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "deploy", "effect": "write", "resource": "prod", "requires_approval": false}]}));
    let named = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "deploy", "effect": "write", "resource": "prod", "requires_approval": false, "caller": "ci-bot"}]}));
    assert_ne!(plain.digest(), named.digest());
    // A bad caller makes the document invalid, as any bad rule does.
    for bad in [json!(""), json!("a\nb"), json!(7)] {
        let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
            {"tool": "t", "effect": "read", "resource": "r", "requires_approval": false, "caller": bad}]}));
        assert!(policy.error().is_some(), "{bad}");
    }
    let extra = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "t", "effect": "read", "resource": "r", "requires_approval": false, "callers": ["a"]}]}));
    assert!(extra.error().is_some(), "an unknown member is refused");
}

//! The prefilter against Cedar itself: `like` matching agrees with Cedar's on every small
//! pattern and text, and a policy set evaluated through the prefilter decides every call as
//! the whole set does, with the same determining policies and the same errors.

use cedar_policy::{
    Authorizer, Context, Entities, EntityId, EntityTypeName, EntityUid, PolicySet, Request,
    RestrictedExpression,
};
use std::str::FromStr;

use super::*;

fn uid(kind: &str, id: &str) -> EntityUid {
    EntityUid::from_type_name_and_id(EntityTypeName::from_str(kind).unwrap(), EntityId::new(id))
}

/// What Cedar answers for `set` and a call on `resource`: the decision, the determining
/// policies and the failing ones, sorted.
fn cedar(set: &PolicySet, resource: &str, effect: &str) -> (bool, Vec<String>, Vec<String>) {
    let context = Context::from_pairs([
        (
            "resource".to_owned(),
            RestrictedExpression::new_string(resource.to_owned()),
        ),
        (
            "effect".to_owned(),
            RestrictedExpression::new_string(effect.to_owned()),
        ),
    ])
    .unwrap();
    let request = Request::new(
        uid("Caller", "local"),
        uid("Action", "send"),
        uid("Resource", resource),
        context,
        None,
    )
    .unwrap();
    let response = Authorizer::new().is_authorized(&request, set, &Entities::empty());
    let mut reasons: Vec<String> = response.diagnostics().reason().map(ToString::to_string).collect();
    let mut errors: Vec<String> = response.diagnostics().errors().map(|e| e.to_string()).collect();
    reasons.sort();
    errors.sort();
    (
        response.decision() == cedar_policy::Decision::Allow,
        reasons,
        errors,
    )
}

fn policies(text: &str) -> Vec<Policy> {
    PolicySet::from_str(text).unwrap().policies().cloned().collect()
}

/// Every pattern over `a`, `b` and `*` up to 4 long, as Cedar source and as pieces.
fn patterns() -> Vec<String> {
    let mut all = vec![String::new()];
    for _ in 0..4 {
        let longer: Vec<String> = all
            .iter()
            .flat_map(|p| ["a", "b", "*"].map(|c| format!("{p}{c}")))
            .collect();
        all.extend(longer);
    }
    all.sort();
    all.dedup();
    all
}

fn texts() -> Vec<String> {
    let mut all = vec![String::new()];
    for _ in 0..4 {
        let longer: Vec<String> = all
            .iter()
            .flat_map(|t| ["a", "b"].map(|c| format!("{t}{c}")))
            .collect();
        all.extend(longer);
    }
    all.sort();
    all.dedup();
    all
}

#[test]
fn like_matches_as_cedar_does_for_every_small_pattern_and_text() {
    let texts = texts();
    for pattern in patterns() {
        let set = PolicySet::from_str(&format!(
            "permit(principal, action, resource) when {{ context.resource like \"{pattern}\" }};"
        ))
        .unwrap();
        let policy = set.policies().next().unwrap();
        let Some(ResourceTest::Like(pieces)) = opening_test(policy) else {
            panic!("{pattern:?} not read as a like test");
        };
        for text in &texts {
            let expected = cedar(&set, text, "send").0;
            assert_eq!(matches(&pieces, text), expected, "{pattern:?} like {text:?}");
        }
    }
}

#[test]
fn only_an_opening_resource_test_is_read() {
    let read = |text: &str| opening_test(&policies(text)[0]);
    assert_eq!(
        read("permit(principal, action, resource) when { context.resource == \"x\" && context.effect == \"send\" };"),
        Some(ResourceTest::Equals("x".into()))
    );
    assert_eq!(
        read("permit(principal, action, resource) when { \"x\" == context.resource };"),
        Some(ResourceTest::Equals("x".into()))
    );
    for unread in [
        // Not the first conjunct: the first may fail (an error) before it.
        "permit(principal, action, resource) when { context.effect == \"send\" && context.resource == \"x\" };",
        "permit(principal, action, resource) unless { context.resource == \"x\" };",
        "permit(principal, action, resource) when { context.resource == \"x\" || context.resource == \"y\" };",
        "permit(principal, action, resource) when { context.resource != \"x\" };",
        "permit(principal, action, resource) when { context.other == \"x\" };",
        "permit(principal, action, resource);",
    ] {
        assert_eq!(read(unread), None, "{unread}");
    }
}

#[test]
fn the_prefiltered_set_decides_every_call_as_the_whole_set_does() {
    // Enough resource tests to be filtered, permits and forbids, an approval's id, a policy
    // that errors (a missing attribute) behind and before a resource test, and unread ones.
    let mut text = String::new();
    for i in 0..6 {
        text.push_str(&format!(
            "@id(\"eq{i}\") permit(principal, action, resource) when {{ context.resource == \"r{i}\" && context.effect == \"send\" }};\n"
        ));
        text.push_str(&format!(
            "@id(\"like{i}\") permit(principal, action, resource) when {{ context.resource like \"r{i}*\" && context.effect == \"read\" }};\n"
        ));
    }
    text.push_str(
        "@id(\"no_r3\") forbid(principal, action, resource) when { context.resource == \"r3\" };\n",
    );
    text.push_str(
        "@id(\"no_x\") forbid(principal, action, resource) when { context.resource like \"*x*\" };\n",
    );
    text.push_str("@id(\"err_after\") permit(principal, action, resource) when { context.resource == \"r5\" && context.missing == 1 };\n");
    text.push_str("@id(\"err_first\") forbid(principal, action, resource) when { context.missing == 1 && context.resource == \"r4\" };\n");
    text.push_str(
        "@id(\"any\") permit(principal, action, resource) when { context.effect == \"delete\" };\n",
    );
    let prefiltered = Prefiltered::new(policies(&text)).unwrap();
    assert!(
        !prefiltered.like.is_empty() && !prefiltered.equals.is_empty(),
        "filtered"
    );
    let resources = ["r0", "r1", "r3", "r4", "r5", "r55", "r1x", "x", "", "R0", "r"];
    for resource in resources {
        for effect in ["send", "read", "delete"] {
            let whole = cedar(prefiltered.whole(), resource, effect);
            let filtered = cedar(&prefiltered.for_resource(resource), resource, effect);
            assert_eq!(filtered, whole, "{resource:?} {effect:?}");
        }
    }
}

#[test]
fn a_set_with_few_resource_tests_is_evaluated_whole() {
    let prefiltered = Prefiltered::new(policies(
        "permit(principal, action, resource) when { context.resource == \"a\" };\npermit(principal, action, resource);",
    ))
    .unwrap();
    assert!(matches!(prefiltered.for_resource("b"), Cow::Borrowed(_)));
    assert_eq!(prefiltered.always.len(), 2);
}

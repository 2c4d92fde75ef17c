//! Which of a tool's Cedar policies can apply to one resource, decided before Cedar runs.
//!
//! A policy whose first condition is `when { context.resource == "R" && … }` (or
//! `"R" == context.resource`, or `context.resource like "P" && …`) cannot apply to a call on
//! any other resource: Cedar evaluates a policy's conditions in order, `&&` from the left,
//! and stops at the first false one, so such a policy is false for that call without an
//! error (the gate's `context.resource` is always a string). Leaving it out of the set Cedar
//! evaluates therefore changes neither the decision, nor the policies that determined it, nor
//! the errors (which fail closed). Every other policy is always evaluated.

use std::borrow::Cow;
use std::collections::HashMap;

use cedar_policy::{Policy, PolicySet};
use serde_json::Value;

/// Below this many policies with a resource test, Cedar evaluates the whole set (building a
/// smaller one would cost more than it saves).
const WORTH_FILTERING: usize = 8;

/// At most this many policies in all are copied into the sets made at load time for each
/// tested resource (a policy without a test is in every one of them).
const PREBUILT: usize = 50_000;

/// A `like` pattern: literal runs and wildcards.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Any,
}

/// How a policy's first conjunct tests `context.resource`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ResourceTest {
    Equals(String),
    Like(Vec<Piece>),
}

/// One tool's policies, indexed by the resource test that opens them.
#[derive(Debug)]
pub(crate) struct Prefiltered {
    whole: PolicySet,
    always: Vec<Policy>,
    /// The policies without a resource test, as a set.
    always_set: PolicySet,
    /// By the resource they test for: those policies, and (within [`PREBUILT`]) they with
    /// `always` as a set.
    equals: crate::policy::LookupMap<String, (Vec<Policy>, Option<PolicySet>)>,
    like: Vec<(Vec<Piece>, Policy)>,
}

impl Prefiltered {
    pub(crate) fn new(policies: Vec<Policy>) -> Result<Self, String> {
        let whole = PolicySet::from_policies(policies.iter().cloned())
            .map_err(|e| format!("indexing the policies: {e}"))?;
        let (mut always, mut equals, mut like) =
            (Vec::new(), HashMap::<String, Vec<Policy>>::new(), Vec::new());
        for policy in policies {
            match opening_test(&policy) {
                Some(ResourceTest::Equals(value)) => equals.entry(value).or_default().push(policy),
                Some(ResourceTest::Like(pattern)) => like.push((pattern, policy)),
                None => always.push(policy),
            }
        }
        let filtered = equals.values().map(Vec::len).sum::<usize>() + like.len();
        if filtered < WORTH_FILTERING {
            always.extend(equals.into_values().flatten());
            always.extend(like.into_iter().map(|(_, p)| p));
            equals = HashMap::new();
            like = Vec::new();
        }
        let set = |policies: Vec<Policy>| {
            PolicySet::from_policies(policies).map_err(|e| format!("indexing the policies: {e}"))
        };
        let always_set = set(always.clone())?;
        let copies = equals.values().map(|p| always.len() + p.len()).sum::<usize>();
        let mut with_sets =
            crate::policy::LookupMap::with_capacity_and_hasher(equals.len(), Default::default());
        for (resource, policies) in equals {
            let both = match copies <= PREBUILT {
                true => Some(set(always.iter().chain(&policies).cloned().collect())?),
                false => None,
            };
            with_sets.insert(resource, (policies, both));
        }
        Ok(Prefiltered {
            whole,
            always,
            always_set,
            equals: with_sets,
            like,
        })
    }

    /// Every policy.
    pub(crate) fn whole(&self) -> &PolicySet {
        &self.whole
    }

    /// The policies that may apply to a call on `resource`.
    pub(crate) fn for_resource(&self, resource: &str) -> Cow<'_, PolicySet> {
        if self.equals.is_empty() && self.like.is_empty() {
            return Cow::Borrowed(&self.whole);
        }
        let equal = self.equals.get(resource);
        let mut alike = self
            .like
            .iter()
            .filter(|(pattern, _)| matches(pattern, resource))
            .map(|(_, p)| p)
            .peekable();
        if alike.peek().is_none() {
            // The usual case: a set made at load time.
            match equal {
                None => return Cow::Borrowed(&self.always_set),
                Some((_, Some(set))) => return Cow::Borrowed(set),
                Some((_, None)) => {}
            }
        }
        let equal = equal.into_iter().flat_map(|(policies, _)| policies);
        let chosen = self.always.iter().chain(equal).chain(alike).cloned();
        match PolicySet::from_policies(chosen) {
            Ok(set) => Cow::Owned(set),
            // Never expected (the ids were unique in the whole set); evaluating every policy
            // is always correct.
            Err(_) => Cow::Borrowed(&self.whole),
        }
    }
}

/// The resource test a policy opens with, if it opens with one this module reads.
fn opening_test(policy: &Policy) -> Option<ResourceTest> {
    let json = policy.to_json().ok()?;
    let first = json.get("conditions")?.as_array()?.first()?;
    if first.get("kind")?.as_str()? != "when" {
        return None;
    }
    let mut expr = first.get("body")?;
    // The leftmost operand of a chain of `&&`s is evaluated first.
    while let Some(and) = expr.get("&&") {
        expr = and.get("left")?;
    }
    if let Some(eq) = expr.get("==") {
        let (left, right) = (eq.get("left")?, eq.get("right")?);
        let value = match (is_context_resource(left), is_context_resource(right)) {
            (true, false) => right,
            (false, true) => left,
            _ => return None,
        };
        return Some(ResourceTest::Equals(value.get("Value")?.as_str()?.to_owned()));
    }
    let like = expr.get("like")?;
    if !is_context_resource(like.get("left")?) {
        return None;
    }
    let mut pieces: Vec<Piece> = Vec::new();
    for piece in like.get("pattern")?.as_array()? {
        match (piece, pieces.last_mut()) {
            (Value::String(s), _) if s == "Wildcard" => pieces.push(Piece::Any),
            // Adjacent literals (the JSON form may split them) are one run.
            (Value::Object(o), Some(Piece::Text(run))) => run.push_str(o.get("Literal")?.as_str()?),
            (Value::Object(o), _) => pieces.push(Piece::Text(o.get("Literal")?.as_str()?.to_owned())),
            _ => return None,
        }
    }
    Some(ResourceTest::Like(pieces))
}

/// `context.resource`.
fn is_context_resource(expr: &Value) -> bool {
    expr.get(".").is_some_and(|get| {
        get.get("attr").and_then(Value::as_str) == Some("resource")
            && get.get("left").and_then(|l| l.get("Var")).and_then(Value::as_str) == Some("context")
    })
}

/// Cedar's `like`: the literal runs in order, each wildcard any run of characters.
fn matches(pattern: &[Piece], text: &str) -> bool {
    let mut rest = text;
    let mut pieces = pattern.iter().peekable();
    // Before the first wildcard, the text must start with the literal.
    while let Some(Piece::Text(literal)) = pieces.peek() {
        match rest.strip_prefix(literal.as_str()) {
            Some(after) => rest = after,
            None => return false,
        }
        pieces.next();
    }
    if pieces.peek().is_none() {
        return rest.is_empty();
    }
    // Literals between wildcards: leftmost match each (greedy is never needed for `*` only);
    // the last literal, if the pattern ends with one, must end the text.
    let rest_pieces: Vec<&Piece> = pieces.collect();
    let last_text = match rest_pieces.last() {
        Some(Piece::Text(t)) => Some(t.as_str()),
        _ => None,
    };
    let middle = match last_text {
        Some(_) => &rest_pieces[..rest_pieces.len() - 1],
        None => &rest_pieces[..],
    };
    for piece in middle {
        if let Piece::Text(literal) = piece {
            match rest.find(literal.as_str()) {
                Some(at) => rest = &rest[at + literal.len()..],
                None => return false,
            }
        }
    }
    match last_text {
        Some(last) => rest.ends_with(last),
        None => true,
    }
}

#[cfg(test)]
#[path = "cedar_prefilter_tests.rs"]
mod tests;

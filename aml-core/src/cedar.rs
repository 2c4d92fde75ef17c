//! Cedar policies (feature `cedar`): the entity model of docs/POLICY.md, checked when the
//! file loads, and evaluated once per resource of a call.
//!
//! Principal `Caller::"<caller>"` (`local` on stdio), action `Action::"<tool>"`, resource
//! `Resource::"<resource>"`, context `{effect, tool, resource, arguments, usage}` (`usage`
//! only when the host's ledger gave it). A `permit` annotated `@approval("required")`
//! asks for approval, any other permit allows; a `forbid`, no permit, or a policy that fails
//! to evaluate denies.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use cedar_policy::{
    ActionConstraint, Authorizer, Context, Decision as CedarDecision, Entities, EntityId, EntityTypeName,
    EntityUid, PolicyId, PolicySet, PrincipalConstraint, Request, ResourceConstraint, RestrictedExpression,
    Schema, ValidationMode, Validator,
};
use miette::Diagnostic;
use serde_json::{Map, Value};

use crate::cedar_prefilter::Prefiltered;
use crate::reason::PlanReason;
use crate::{CallFacts, Decision, Effect, Sha256Digest, Usage};

/// Largest Cedar policy file, in bytes.
pub(crate) const MAX_CEDAR_BYTES: usize = 1 << 20;
/// Largest policy statement, in bytes; deepest `(`/`[`/`{` nesting; most `if`s in one
/// statement. Cedar's parser and evaluator recurse: past these a policy could overflow a
/// thread's stack (measured: 200 nested parentheses on a 2 MiB stack), which would abort
/// the gate instead of refusing the file.
const MAX_STATEMENT_BYTES: usize = 16 << 10;
const MAX_NESTING: usize = 32;
const MAX_IFS: usize = 64;
const ANNOTATIONS: [&str; 2] = ["id", "approval"];

/// What a Cedar evaluation decided, and the policies that determined it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Evaluated {
    pub(crate) decision: Decision,
    pub(crate) reason: PlanReason,
    pub(crate) policies: Vec<String>,
}

/// A loaded, checked Cedar policy set, indexed by the tool its policies name.
#[derive(Debug)]
pub(crate) struct CedarPolicy {
    /// Per tool named in an action scope: its policies and those for every action.
    by_tool: crate::policy::LookupMap<String, Prefiltered>,
    /// The policies whose action scope is unconstrained.
    any_action: Prefiltered,
    /// Permits annotated `@approval("required")`.
    approval: HashSet<PolicyId>,
    schema: Option<Schema>,
    digest: Sha256Digest,
    authorizer: Authorizer,
    caller_type: EntityTypeName,
    /// Whether some policy may read `context.usage` (its text names `usage`: a superset,
    /// which costs only a ledger read).
    reads_usage: bool,
    action_type: EntityTypeName,
    resource_type: EntityTypeName,
}

fn type_name(name: &str) -> Result<EntityTypeName, String> {
    EntityTypeName::from_str(name).map_err(|e| format!("entity type {name}: {e}"))
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// The first labelled place of a diagnostic, as ` (line N)`, or nothing.
fn at_line(diagnostic: &dyn Diagnostic, text: &str) -> String {
    diagnostic
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|label| format!(" (line {})", line_of(text, label.offset())))
        .unwrap_or_default()
}

impl CedarPolicy {
    /// Parses and checks `text`, with `schema` (Cedar schema syntax) when the host gave one.
    pub(crate) fn load(text: &str, schema: Option<&str>) -> Result<Self, String> {
        if text.len() > MAX_CEDAR_BYTES {
            return Err(format!(
                "a Cedar policy file is at most {MAX_CEDAR_BYTES} bytes; this one is {}",
                text.len()
            ));
        }
        check_shape(text)?;
        let parsed = PolicySet::from_str(text).map_err(|e| {
            let first = e
                .iter()
                .next()
                .map(|p| p.to_string())
                .unwrap_or_else(|| e.to_string());
            format!("Cedar syntax error{}: {first}", at_line(&e, text))
        })?;
        if parsed.templates().next().is_some() {
            return Err(
                "Cedar templates (policies with ?principal or ?resource slots) are not supported".into(),
            );
        }
        let mut named = PolicySet::new();
        let mut approval = HashSet::new();
        let mut cursor = 0;
        // The parser numbers policies in file order: policy0, policy1, …
        let mut policies: Vec<_> = parsed.policies().collect();
        policies.sort_by_key(|p| {
            let id = p.id().to_string();
            id.strip_prefix("policy")
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(usize::MAX)
        });
        for policy in policies {
            let source = policy.to_string();
            // Cedar keeps each policy's own text; found, it gives the line.
            let start = match text.get(cursor..).and_then(|rest| rest.find(&source)) {
                Some(at) => {
                    cursor += at + source.len();
                    cursor - source.len()
                }
                None => cursor,
            };
            let line = line_of(text, start);
            let id = policy.annotation("id").unwrap_or(policy.id().as_ref()).to_owned();
            let here = format!("policy {id:?} (line {line})");
            for (key, value) in policy.annotations() {
                if !ANNOTATIONS.contains(&key) {
                    return Err(format!(
                        "{here}: unknown annotation @{key} (the known ones are @id and @approval)"
                    ));
                }
                if key == "approval" && value != "required" {
                    return Err(format!("{here}: @approval takes \"required\", not {value:?}"));
                }
            }
            let forbid = policy.effect() == cedar_policy::Effect::Forbid;
            if forbid && policy.annotation("approval").is_some() {
                return Err(format!("{here}: @approval goes on a permit, not a forbid"));
            }
            check_scope(&here, policy)?;
            let renamed = policy.new_id(PolicyId::new(&id));
            if policy.annotation("approval").is_some() {
                approval.insert(renamed.id().clone());
            }
            named
                .add(renamed)
                .map_err(|e| format!("{here}: {e} (two policies share this id)"))?;
        }
        let schema = match schema {
            None => None,
            Some(schema_text) => Some(validate(&named, schema_text)?),
        };
        let mut policy = Self::index(named, approval, schema, Sha256Digest::of(text.as_bytes()))?;
        policy.reads_usage = text.contains("usage");
        Ok(policy)
    }

    fn index(
        set: PolicySet,
        approval: HashSet<PolicyId>,
        schema: Option<Schema>,
        digest: Sha256Digest,
    ) -> Result<Self, String> {
        let mut any_action = Vec::new();
        let mut by_tool: HashMap<String, Vec<cedar_policy::Policy>> = HashMap::new();
        for policy in set.policies() {
            match policy.action_constraint() {
                ActionConstraint::Any => any_action.push(policy.clone()),
                ActionConstraint::Eq(uid) => by_tool
                    .entry(uid.id().unescaped().to_owned())
                    .or_default()
                    .push(policy.clone()),
                ActionConstraint::In(uids) => {
                    for uid in uids {
                        by_tool
                            .entry(uid.id().unescaped().to_owned())
                            .or_default()
                            .push(policy.clone());
                    }
                }
            }
        }
        let to_set = Prefiltered::new;
        let mut indexed =
            crate::policy::LookupMap::with_capacity_and_hasher(by_tool.len(), Default::default());
        for (tool, mut own) in by_tool {
            own.extend(any_action.iter().cloned());
            indexed.insert(tool, to_set(own)?);
        }
        Ok(CedarPolicy {
            by_tool: indexed,
            any_action: to_set(any_action)?,
            approval,
            schema,
            digest,
            authorizer: Authorizer::new(),
            caller_type: type_name("Caller")?,
            reads_usage: false,
            action_type: type_name("Action")?,
            resource_type: type_name("Resource")?,
        })
    }

    /// SHA-256 of the policy file's text.
    pub(crate) fn digest(&self) -> Sha256Digest {
        self.digest
    }

    /// Whether some policy may read `context.usage`.
    pub(crate) fn reads_usage(&self) -> bool {
        self.reads_usage
    }

    /// Whether any permit's action scope admits `tool` (what a listing shows).
    pub(crate) fn may_allow(&self, tool: &str) -> bool {
        let set = self.by_tool.get(tool).unwrap_or(&self.any_action);
        set.whole()
            .policies()
            .any(|p| p.effect() == cedar_policy::Effect::Permit)
    }

    /// Decides one resource of a call.
    pub(crate) fn evaluate(
        &self,
        tool: &str,
        effect: Effect,
        resource: &str,
        arguments: &Map<String, Value>,
        facts: &CallFacts,
    ) -> Evaluated {
        let denied = |reason, policies| Evaluated {
            decision: Decision::Deny,
            reason,
            policies,
        };
        let set = self.by_tool.get(tool).unwrap_or(&self.any_action);
        let action = EntityUid::from_type_name_and_id(self.action_type.clone(), EntityId::new(tool));
        let target = EntityUid::from_type_name_and_id(self.resource_type.clone(), EntityId::new(resource));
        let usage = facts.usage.map(usage_record).transpose();
        let request = record(arguments)
            .and_then(|arguments| Ok((arguments, usage?)))
            .and_then(|(arguments, usage)| {
                Context::from_pairs(
                    [
                        (
                            "effect".to_owned(),
                            RestrictedExpression::new_string(effect.as_str().to_owned()),
                        ),
                        (
                            "tool".to_owned(),
                            RestrictedExpression::new_string(tool.to_owned()),
                        ),
                        (
                            "resource".to_owned(),
                            RestrictedExpression::new_string(resource.to_owned()),
                        ),
                        ("arguments".to_owned(), arguments),
                    ]
                    .into_iter()
                    .chain(usage.map(|usage| ("usage".to_owned(), usage))),
                )
                .map_err(|e| e.to_string())
            })
            .and_then(|context| {
                let caller = EntityUid::from_type_name_and_id(
                    self.caller_type.clone(),
                    EntityId::new(facts.caller.id()),
                );
                Request::new(caller, action, target, context, self.schema.as_ref()).map_err(|e| e.to_string())
            });
        let Ok(request) = request else {
            return denied(PlanReason::PolicyError, Vec::new());
        };
        let set = set.for_resource(resource);
        let response = self.authorizer.is_authorized(&request, &set, &Entities::empty());
        let diagnostics = response.diagnostics();
        // A policy that fails to evaluate might have been a forbid: fail closed.
        let mut failed: Vec<String> = diagnostics.errors().map(|e| policy_of(e).to_owned()).collect();
        if !failed.is_empty() {
            failed.sort();
            return denied(PlanReason::PolicyError, failed);
        }
        let mut policies: Vec<String> = diagnostics.reason().map(|id| id.to_string()).collect();
        policies.sort();
        match response.decision() {
            CedarDecision::Allow => {
                let asks = diagnostics.reason().any(|id| self.approval.contains(id));
                Evaluated {
                    decision: if asks {
                        Decision::RequiresApproval
                    } else {
                        Decision::Allow
                    },
                    reason: PlanReason::PolicyPermit,
                    policies,
                }
            }
            CedarDecision::Deny if policies.is_empty() => denied(PlanReason::NoPermit, policies),
            CedarDecision::Deny => denied(PlanReason::PolicyForbid, policies),
        }
    }
}

fn policy_of(error: &cedar_policy::AuthorizationError) -> &str {
    match error {
        cedar_policy::AuthorizationError::PolicyEvaluationError(e) => e.policy_id().as_ref(),
    }
}

/// Refuses, before Cedar parses it, text deep or long enough to overflow a stack: each
/// statement (up to a `;` outside brackets) is at most [`MAX_STATEMENT_BYTES`], nests at most
/// [`MAX_NESTING`] brackets and holds at most [`MAX_IFS`] `if`s. String literals and `//`
/// comments are skipped.
fn check_shape(text: &str) -> Result<(), String> {
    let bytes = text.as_bytes();
    let (mut i, mut start, mut depth, mut ifs) = (0, 0, 0usize, 0usize);
    let refuse = |at: usize, what: String| Err(format!("line {}: {what}", line_of(text, at)));
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return refuse(i, format!("brackets nest deeper than {MAX_NESTING}"));
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b';' if depth == 0 => {
                (start, ifs) = (i + 1, 0);
            }
            b'i' if bytes.get(i + 1) == Some(&b'f')
                && !bytes
                    .get(i + 2)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_')) =>
            {
                ifs += 1;
                if ifs > MAX_IFS {
                    return refuse(i, format!("a policy holds more than {MAX_IFS} `if` expressions"));
                }
            }
            _ => {}
        }
        if i.saturating_sub(start) > MAX_STATEMENT_BYTES {
            return refuse(
                start,
                format!("a policy is longer than {MAX_STATEMENT_BYTES} bytes"),
            );
        }
        i += 1;
    }
    Ok(())
}

/// The scope may name only the model's entity types.
fn check_scope(here: &str, policy: &cedar_policy::Policy) -> Result<(), String> {
    let wrong = |expected: &str, found: &EntityTypeName| {
        (found.to_string() != expected).then(|| {
            format!("{here}: unknown entity type {found} (the entity types are Caller, Action and Resource)")
        })
    };
    let principal = match policy.principal_constraint() {
        PrincipalConstraint::Any => None,
        PrincipalConstraint::In(uid) | PrincipalConstraint::Eq(uid) => wrong("Caller", uid.type_name()),
        PrincipalConstraint::Is(t) => wrong("Caller", &t),
        PrincipalConstraint::IsIn(t, uid) => wrong("Caller", &t).or_else(|| wrong("Caller", uid.type_name())),
    };
    let action = match policy.action_constraint() {
        ActionConstraint::Any => None,
        ActionConstraint::Eq(uid) => wrong("Action", uid.type_name()),
        ActionConstraint::In(uids) => uids.iter().find_map(|uid| wrong("Action", uid.type_name())),
    };
    let resource = match policy.resource_constraint() {
        ResourceConstraint::Any => None,
        ResourceConstraint::In(uid) | ResourceConstraint::Eq(uid) => wrong("Resource", uid.type_name()),
        ResourceConstraint::Is(t) => wrong("Resource", &t),
        ResourceConstraint::IsIn(t, uid) => {
            wrong("Resource", &t).or_else(|| wrong("Resource", uid.type_name()))
        }
    };
    match principal.or(action).or(resource) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

fn validate(set: &PolicySet, schema_text: &str) -> Result<Schema, String> {
    let (schema, _warnings) = Schema::from_cedarschema_str(schema_text)
        .map_err(|e| format!("Cedar schema error{}: {e}", at_line(&e, schema_text)))?;
    let result = Validator::new(schema.clone()).validate(set, ValidationMode::Strict);
    let first = result.validation_errors().next().map(|error| {
        format!(
            "policy {:?} does not match the schema: {error}",
            error.policy_id().to_string()
        )
    });
    match first {
        None => Ok(schema),
        Some(error) => Err(error),
    }
}

/// `context.usage`: `{minute, hour, day}` as Longs (saturated: a count past `i64::MAX` is
/// beyond any budget anyway).
fn usage_record(usage: Usage) -> Result<RestrictedExpression, String> {
    let long = |n: u64| RestrictedExpression::new_long(i64::try_from(n).unwrap_or(i64::MAX));
    RestrictedExpression::new_record([
        ("minute".to_owned(), long(usage.minute)),
        ("hour".to_owned(), long(usage.hour)),
        ("day".to_owned(), long(usage.day)),
    ])
    .map_err(|e| e.to_string())
}

/// The frozen arguments as a Cedar record, built value by value so that no argument can be
/// read as an entity reference or an extension call (`__entity`, `__extn` in Cedar's JSON
/// form). Integers are Longs; other numbers are their canonical JSON text; `null` members and
/// items are left out; arrays are sets.
fn record(arguments: &Map<String, Value>) -> Result<RestrictedExpression, String> {
    let mut members = Vec::with_capacity(arguments.len());
    for (key, value) in arguments {
        if let Some(expression) = expression(value)? {
            members.push((key.clone(), expression));
        }
    }
    RestrictedExpression::new_record(members).map_err(|e| e.to_string())
}

fn expression(value: &Value) -> Result<Option<RestrictedExpression>, String> {
    Ok(Some(match value {
        Value::Null => return Ok(None),
        Value::Bool(b) => RestrictedExpression::new_bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => RestrictedExpression::new_long(i),
            None => RestrictedExpression::new_string(
                crate::canonical::to_canonical_string(value).map_err(|e| e.to_string())?,
            ),
        },
        Value::String(s) => RestrictedExpression::new_string(s.clone()),
        Value::Array(items) => {
            let mut set = Vec::with_capacity(items.len());
            for item in items {
                set.extend(expression(item)?);
            }
            RestrictedExpression::new_set(set)
        }
        Value::Object(members) => record(members)?,
    }))
}

#[cfg(test)]
#[path = "cedar_tests.rs"]
mod tests;

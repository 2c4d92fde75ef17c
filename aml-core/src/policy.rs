//! Host policy (`aml-action-policy/1`): validation, an exact-match index, and a live source.

use std::collections::HashMap;

/// A map that is built from the host's policy and only looked up with a call's names: the
/// keys are the host's, so a fast seeded hash does (not SipHash's guard against chosen keys).
pub(crate) type LookupMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::{Arc, RwLock};

use serde_json::{json, Value};

use crate::reason::PlanReason;
use crate::{Decision, Effect};

/// The policy protocol string.
pub const POLICY_PROTOCOL: &str = "aml-action-policy/1";

/// One exact host rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Rule {
    /// Tool identity.
    pub tool: String,
    /// Declared effect.
    pub effect: Effect,
    /// Exact destination.
    pub resource: String,
    /// Whether a digest-bound approval and a one-use claim are needed.
    pub requires_approval: bool,
    /// The caller the rule is for (`None`: every caller). A rule for one caller and a rule
    /// for every caller that both match a call are ambiguous, as two rules for everyone are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
}

/// Why a policy document is malformed. A malformed policy denies every proposal with
/// `invalid_policy`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid policy: {0}")]
pub struct PolicyError(String);

/// The rules for one `(tool, resource, effect)`: whether each needs approval, and whom it
/// is for (`None`: every caller).
type Slot = Vec<(Option<String>, bool)>;

/// A validated set of exact rules, indexed by `(tool, resource, effect)`; or, when the
/// document was malformed, a policy that denies everything with `invalid_policy`.
///
/// ```
/// use aml_core::{Decision, Effect, Policy, PlanReason};
/// let policy = Policy::from_value(&serde_json::json!({
///     "protocol": "aml-action-policy/1",
///     "rules": [{"tool": "send_message", "effect": "send",
///                "resource": "team@example.test", "requires_approval": true}]
/// }));
/// assert_eq!(
///     policy.decide("send_message", Effect::Send, "team@example.test"),
///     (Decision::RequiresApproval, PlanReason::ExactRule)
/// );
/// assert_eq!(
///     policy.decide("send_message", Effect::Send, "Team@example.test"),
///     (Decision::Deny, PlanReason::NoExactRule)
/// );
/// ```
#[derive(Debug, Clone)]
pub struct Policy {
    state: Result<Index, PolicyError>,
    /// A Cedar policy set, when the host wrote one; the index is then empty.
    #[cfg(feature = "cedar")]
    cedar: Option<Arc<crate::cedar::CedarPolicy>>,
}

/// A policy's decision on one proposal, with the Cedar policies that determined it (none
/// for exact rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDecision {
    /// The decision.
    pub decision: Decision,
    /// Why.
    pub reason: PlanReason,
    /// The ids of the Cedar policies that determined it, sorted (empty for exact rules).
    pub policies: Vec<String>,
}

#[derive(Debug, Clone, Default)]
struct Index {
    rules: Vec<Rule>,
    by_tool: LookupMap<String, LookupMap<String, [Slot; 5]>>,
}

impl Index {
    fn build(rules: Vec<Rule>) -> Self {
        let mut by_tool: LookupMap<String, LookupMap<String, [Slot; 5]>> = LookupMap::default();
        for rule in &rules {
            let slots = by_tool
                .entry(rule.tool.clone())
                .or_default()
                .entry(rule.resource.clone())
                .or_default();
            slots[effect_slot(rule.effect)].push((rule.caller.clone(), rule.requires_approval));
        }
        Index { rules, by_tool }
    }
}

fn effect_slot(effect: Effect) -> usize {
    match effect {
        Effect::Read => 0,
        Effect::Write => 1,
        Effect::Send => 2,
        Effect::Pay => 3,
        Effect::Delete => 4,
    }
}

impl Policy {
    /// The decision for a frozen proposal: each of its resources is decided, and the
    /// strictest wins (the first resource denied denies the whole call with its reason; else
    /// one that needs approval asks for it). A one-resource proposal is decided as
    /// [`decide`](Self::decide) decides it.
    ///
    /// ```
    /// use aml_core::{Decision, Effect, FrozenProposal, Policy, PlanReason, ProposalParts};
    /// let policy = Policy::from_value(&serde_json::json!({"protocol": "aml-action-policy/1", "rules": [
    ///     {"tool": "move_file", "effect": "write", "resource": "out/a", "requires_approval": true},
    ///     {"tool": "move_file", "effect": "write", "resource": "docs/a", "requires_approval": false}]}));
    /// let arguments = serde_json::Map::new();
    /// let parts = |first| ProposalParts { tool: "move_file", effect: Effect::Write, resource: first,
    ///     purpose: "Move a file", arguments: &arguments };
    /// let asks = FrozenProposal::freeze_many(parts("docs/a"), &["out/a"]).unwrap();
    /// assert_eq!(policy.decide_proposal(&asks), (Decision::RequiresApproval, PlanReason::ExactRule));
    /// let denied = FrozenProposal::freeze_many(parts("docs/a"), &["secret"]).unwrap();
    /// assert_eq!(policy.decide_proposal(&denied), (Decision::Deny, PlanReason::NoExactRule));
    /// ```
    pub fn decide_proposal(&self, proposal: &crate::FrozenProposal) -> (Decision, PlanReason) {
        let decided = self.evaluate(proposal);
        (decided.decision, decided.reason)
    }

    /// Whether this policy may read `context.usage` (a Cedar policy set whose text names
    /// `usage`): the boundary then reads the caller's usage before planning and counts each
    /// call atomically with that check ([`crate::UsageLedger`]).
    pub fn reads_usage(&self) -> bool {
        #[cfg(feature = "cedar")]
        if let Some(cedar) = &self.cedar {
            return cedar.reads_usage();
        }
        false
    }

    /// Like [`decide_proposal`](Self::decide_proposal), with the Cedar policies that
    /// determined the decision (the denying ones of the first resource denied, else those
    /// of every resource).
    pub fn evaluate(&self, proposal: &crate::FrozenProposal) -> PolicyDecision {
        self.evaluate_for(proposal, &crate::CallFacts::default())
    }

    /// Like [`evaluate`](Self::evaluate), for a call with `facts`: the caller is the Cedar
    /// principal, and the usage (when given) is `context.usage`. Exact rules read neither.
    ///
    /// ```
    /// use aml_core::{CallFacts, Caller, Decision, Effect, FrozenProposal, Policy, ProposalParts, Usage};
    /// let policy = Policy::from_cedar(r#"
    ///     permit(principal == Caller::"ci", action == Action::"send", resource)
    ///     when { context.usage.hour < 20 };
    ///     @approval("required")
    ///     permit(principal == Caller::"ci", action == Action::"send", resource)
    ///     when { context.usage.hour >= 20 };
    /// "#, None);
    /// let arguments = serde_json::Map::new();
    /// let proposal = FrozenProposal::freeze(ProposalParts { tool: "send", effect: Effect::Send,
    ///     resource: "team", purpose: "Send", arguments: &arguments }).unwrap();
    /// let ci = |hour| CallFacts::of(Caller::new("ci").unwrap()).with_usage(Usage { minute: 0, hour, day: hour });
    /// assert_eq!(policy.evaluate_for(&proposal, &ci(19)).decision, Decision::Allow);
    /// assert_eq!(policy.evaluate_for(&proposal, &ci(20)).decision, Decision::RequiresApproval);
    /// // Another caller, or none: no permit.
    /// assert_eq!(policy.evaluate(&proposal).decision, Decision::Deny);
    /// assert!(policy.reads_usage());
    /// ```
    pub fn evaluate_for(&self, proposal: &crate::FrozenProposal, facts: &crate::CallFacts) -> PolicyDecision {
        #[cfg(feature = "cedar")]
        if let Some(cedar) = &self.cedar {
            return evaluate_cedar(cedar, proposal, facts);
        }
        let mut strictest = (Decision::Allow, PlanReason::ExactRule);
        for resource in proposal.resources() {
            let decided = self.decide_for(proposal.tool(), proposal.effect(), resource, &facts.caller);
            match decided.0 {
                Decision::Deny => {
                    strictest = decided;
                    break;
                }
                Decision::RequiresApproval => strictest = decided,
                Decision::Allow => {}
            }
        }
        PolicyDecision {
            decision: strictest.0,
            reason: strictest.1,
            policies: Vec::new(),
        }
    }

    /// Whether some rule or permit could allow a call of `tool` with `effect` (what a tool
    /// listing shows): an exact rule for the pair, or a Cedar permit whose action scope
    /// admits the tool.
    pub fn may_allow(&self, tool: &str, effect: Effect) -> bool {
        #[cfg(feature = "cedar")]
        if let Some(cedar) = &self.cedar {
            return self.state.is_ok() && cedar.may_allow(tool);
        }
        self.rules().iter().any(|r| r.tool == tool && r.effect == effect)
    }

    /// Reads a Cedar policy set (feature `cedar`; see docs/POLICY.md for the entity model),
    /// checked against `schema` (Cedar schema syntax) when given. A file that does not parse,
    /// uses an unknown annotation or entity type, or breaks the schema gives a policy that
    /// denies everything with `invalid_policy` and says why, naming the policy and line.
    ///
    /// ```
    /// use aml_core::{Decision, Effect, Policy, PlanReason};
    /// let policy = Policy::from_cedar(r#"
    ///     @id("read-docs")
    ///     permit(principal, action == Action::"read_text_file", resource)
    ///     when { context.resource like "docs/*" };
    /// "#, None);
    /// assert!(policy.error().is_none());
    /// assert_eq!(policy.decide("read_text_file", Effect::Read, "docs/new.txt"),
    ///     (Decision::Allow, PlanReason::PolicyPermit));
    /// assert_eq!(policy.decide("read_text_file", Effect::Read, "secret.txt"),
    ///     (Decision::Deny, PlanReason::NoPermit));
    /// let typo = Policy::from_cedar("@aproval(\"required\") permit(principal, action, resource);", None);
    /// assert!(typo.error().unwrap().to_string().contains("unknown annotation @aproval"));
    /// ```
    #[cfg(feature = "cedar")]
    pub fn from_cedar(text: &str, schema: Option<&str>) -> Self {
        match crate::cedar::CedarPolicy::load(text, schema) {
            Ok(cedar) => Policy {
                state: Ok(Index::default()),
                cedar: Some(Arc::new(cedar)),
            },
            Err(why) => Self::invalid(why),
        }
    }

    /// Reads a policy file: Cedar when its name ends in `.cedar` (with `NAME.cedarschema`
    /// beside it as its schema, when that file exists), else an `aml-action-policy/1` JSON
    /// document. A file that cannot be read is an error; one that reads but is not a valid
    /// policy gives a policy that denies everything and says why ([`error`](Self::error)).
    ///
    /// ```
    /// let dir = std::env::temp_dir().join(format!("aml-core-read-file-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("policy.cedar");
    /// std::fs::write(&path, "permit(principal, action, resource) when { context.resource like \"docs/*\" };").unwrap();
    /// let policy = aml_core::Policy::read_file(&path).unwrap();
    /// assert!(policy.is_cedar() && policy.error().is_none());
    /// assert!(aml_core::Policy::read_file(&dir.join("missing.json")).is_err());
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn read_file(path: &std::path::Path) -> Result<Self, String> {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
        };
        let bytes = read(path)?;
        if path.extension().and_then(|e| e.to_str()) != Some("cedar") {
            return Ok(Self::from_json_slice(&bytes));
        }
        #[cfg(feature = "cedar")]
        {
            let schema_path = path.with_extension("cedarschema");
            let schema = match std::fs::read(&schema_path) {
                Ok(schema) => Some(schema),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(format!("cannot read {}: {e}", schema_path.display())),
            };
            let (Ok(text), Ok(schema)) = (
                String::from_utf8(bytes),
                schema.map(String::from_utf8).transpose(),
            ) else {
                return Ok(Self::invalid("a Cedar policy or schema file must be UTF-8"));
            };
            let policy = Self::from_cedar(&text, schema.as_deref());
            // Name the file a schema error is in: the schema beside the policy, not the policy.
            if let Some(PolicyError(why)) = policy.error() {
                if why.starts_with("Cedar schema error") {
                    return Ok(Self::invalid(format!("{}: {why}", schema_path.display())));
                }
            }
            Ok(policy)
        }
        #[cfg(not(feature = "cedar"))]
        {
            let _ = bytes;
            Ok(Self::invalid(
                "a .cedar policy needs aml-core built with its `cedar` feature",
            ))
        }
    }

    /// The policy a host's own configuration document names in one member: the
    /// `aml-action-policy/1` document itself (a JSON object), or the path of a policy file (a
    /// string, relative to `base`, read as [`read_file`](Self::read_file) reads it: a `.cedar`
    /// file is Cedar). A file that cannot be read or a policy that is not valid is an error,
    /// for hosts that refuse to start on one.
    ///
    /// ```
    /// use aml_core::Policy;
    /// let inline = serde_json::json!({"protocol": "aml-action-policy/1", "rules": []});
    /// assert!(Policy::from_config(&inline, std::path::Path::new(".")).is_ok());
    /// let missing = serde_json::json!("no-such-policy.cedar");
    /// assert!(Policy::from_config(&missing, std::path::Path::new("/nowhere")).is_err());
    /// assert!(Policy::from_config(&serde_json::json!(7), std::path::Path::new(".")).is_err());
    /// ```
    pub fn from_config(value: &Value, base: &std::path::Path) -> Result<Self, String> {
        let policy = match value {
            Value::Object(_) => Self::from_value(value),
            Value::String(path) => Self::read_file(&base.join(path))?,
            _ => return Err("a policy is a policy document (an object) or the path of a policy file".into()),
        };
        match policy.error() {
            Some(e) => Err(e.to_string()),
            None => Ok(policy),
        }
    }

    /// Whether this is a Cedar policy set.
    pub fn is_cedar(&self) -> bool {
        #[cfg(feature = "cedar")]
        if self.cedar.is_some() {
            return true;
        }
        false
    }

    /// Builds a policy from a document. A malformed document gives a policy that denies
    /// everything with `invalid_policy`; [`Policy::error`] says why.
    pub fn from_value(document: &Value) -> Self {
        Policy {
            state: parse_document(document).map(Index::build),
            #[cfg(feature = "cedar")]
            cedar: None,
        }
    }

    /// Builds a policy from the JSON text of a document (a policy file), parsed strictly
    /// ([`crate::strict`]). Text that is not a valid policy — not JSON, duplicate keys, a
    /// malformed rule — gives a policy that denies everything with `invalid_policy` and says
    /// why: a host that reloads its policy fails closed on a bad file.
    ///
    /// ```
    /// use aml_core::Policy;
    /// let typo = Policy::from_json_slice(br#"{"protocol": "aml-action-policy/1", "rules": [}"#);
    /// assert!(typo.error().is_some());
    /// assert_eq!(typo.decide("t", aml_core::Effect::Read, "r").1, aml_core::PlanReason::InvalidPolicy);
    /// ```
    pub fn from_json_slice(text: &[u8]) -> Self {
        match crate::strict::parse_slice(text) {
            Ok(document) => Self::from_value(&document),
            Err(e) => Policy {
                state: Err(PolicyError(format!("not a JSON document: {e}"))),
                #[cfg(feature = "cedar")]
                cedar: None,
            },
        }
    }

    /// The SHA-256 of the document's canonical JSON (the same digest for the same rules in
    /// the same order, however the file is formatted), or `None` for a malformed policy: what
    /// a host logs to say which policy is in force.
    pub fn digest(&self) -> Option<crate::Sha256Digest> {
        #[cfg(feature = "cedar")]
        if let Some(cedar) = &self.cedar {
            return Some(cedar.digest());
        }
        let canonical = crate::canonical::to_canonical_string(&self.to_value()?).ok()?;
        Some(crate::Sha256Digest::of(canonical.as_bytes()))
    }

    /// Builds a policy from a document, or says why it is malformed.
    pub fn try_from_value(document: &Value) -> Result<Self, PolicyError> {
        let policy = Self::from_value(document);
        match policy.state {
            Err(e) => Err(e),
            Ok(_) => Ok(policy),
        }
    }

    /// Builds a policy from rules, validating each.
    pub fn from_rules(rules: impl IntoIterator<Item = Rule>) -> Result<Self, PolicyError> {
        let rules: Vec<Rule> = rules.into_iter().collect();
        for (i, rule) in rules.iter().enumerate() {
            for (name, text) in [("tool", &rule.tool), ("resource", &rule.resource)] {
                if crate::proposal::is_blank(text) {
                    return Err(PolicyError(format!("rule {i}: {name} is blank")));
                }
            }
            if let Some(caller) = &rule.caller {
                check_caller(caller).map_err(|e| PolicyError(format!("rule {i}: {e}")))?;
            }
        }
        Ok(Policy {
            state: Ok(Index::build(rules)),
            #[cfg(feature = "cedar")]
            cedar: None,
        })
    }

    /// A policy that denies everything with `invalid_policy`, for a host whose policy source
    /// failed (a file that cannot be read, tools that do not load): `why` is what
    /// [`Policy::error`] reports. Failing closed this way, rather than keeping an older
    /// policy, means a broken revocation never keeps the rule it meant to remove.
    ///
    /// ```
    /// use aml_core::{Effect, PlanReason, Policy};
    /// let failed = Policy::invalid("cannot read policy.json: permission denied");
    /// assert_eq!(failed.decide("t", Effect::Read, "r").1, PlanReason::InvalidPolicy);
    /// assert!(failed.error().unwrap().to_string().contains("permission denied"));
    /// ```
    pub fn invalid(why: impl Into<String>) -> Self {
        Policy {
            state: Err(PolicyError(why.into())),
            #[cfg(feature = "cedar")]
            cedar: None,
        }
    }

    /// A valid policy with no rules: every proposal is `no_exact_rule`.
    pub fn empty() -> Self {
        Policy {
            state: Ok(Index::default()),
            #[cfg(feature = "cedar")]
            cedar: None,
        }
    }

    /// Why the document was malformed, if it was.
    pub fn error(&self) -> Option<&PolicyError> {
        self.state.as_ref().err()
    }

    /// The rules, in document order (empty for a malformed policy).
    pub fn rules(&self) -> &[Rule] {
        self.state.as_ref().map(|i| i.rules.as_slice()).unwrap_or(&[])
    }

    /// The policy document, or `None` for a malformed policy (and for a Cedar policy set,
    /// which is text, not a JSON document).
    pub fn to_value(&self) -> Option<Value> {
        if self.is_cedar() {
            return None;
        }
        let index = self.state.as_ref().ok()?;
        Some(json!({ "protocol": POLICY_PROTOCOL, "rules": index.rules }))
    }

    /// Exact lookup of one `(tool, effect, resource)` tuple, for the host's own agent
    /// ([`Caller::local`](crate::Caller::local)).
    pub fn decide(&self, tool: &str, effect: Effect, resource: &str) -> (Decision, PlanReason) {
        self.decide_for(tool, effect, resource, &crate::Caller::local())
    }

    /// Exact lookup of one `(tool, effect, resource)` tuple for a call by `caller`: the rules
    /// for every caller and those for `caller` apply; none is `no_exact_rule`, more than one
    /// `ambiguous_policy`.
    ///
    /// ```
    /// use aml_core::{Caller, Decision, Effect, Policy, PlanReason};
    /// let policy = Policy::from_value(&serde_json::json!({"protocol": "aml-action-policy/1", "rules": [
    ///     {"tool": "deploy", "effect": "write", "resource": "prod", "requires_approval": false, "caller": "ci-bot"},
    ///     {"tool": "deploy", "effect": "write", "resource": "staging", "requires_approval": true}]}));
    /// let ci = Caller::new("ci-bot").unwrap();
    /// assert_eq!(policy.decide_for("deploy", Effect::Write, "prod", &ci), (Decision::Allow, PlanReason::ExactRule));
    /// assert_eq!(policy.decide("deploy", Effect::Write, "prod"), (Decision::Deny, PlanReason::NoExactRule));
    /// assert_eq!(policy.decide("deploy", Effect::Write, "staging"), (Decision::RequiresApproval, PlanReason::ExactRule));
    /// ```
    pub fn decide_for(
        &self,
        tool: &str,
        effect: Effect,
        resource: &str,
        caller: &crate::Caller,
    ) -> (Decision, PlanReason) {
        #[cfg(feature = "cedar")]
        if let Some(cedar) = &self.cedar {
            let facts = crate::CallFacts::of(caller.clone());
            let decided = cedar.evaluate(tool, effect, resource, &serde_json::Map::new(), &facts);
            return (decided.decision, decided.reason);
        }
        let index = match &self.state {
            Ok(index) => index,
            Err(_) => return (Decision::Deny, PlanReason::InvalidPolicy),
        };
        let slot = index
            .by_tool
            .get(tool)
            .and_then(|by_resource| by_resource.get(resource))
            .map(|slots| &slots[effect_slot(effect)]);
        let mut applying = slot
            .into_iter()
            .flatten()
            .filter(|(whom, _)| whom.as_deref().is_none_or(|w| w == caller.id()));
        match (applying.next(), applying.next()) {
            (None, _) => (Decision::Deny, PlanReason::NoExactRule),
            (Some(_), Some(_)) => (Decision::Deny, PlanReason::AmbiguousPolicy),
            (Some((_, true)), None) => (Decision::RequiresApproval, PlanReason::ExactRule),
            (Some((_, false)), None) => (Decision::Allow, PlanReason::ExactRule),
        }
    }

    /// A copy without the rules matching `(tool, effect, resource)`; `None` if none matched.
    pub fn without(&self, tool: &str, effect: Effect, resource: &str) -> Option<Policy> {
        if self.is_cedar() {
            return None;
        }
        let index = self.state.as_ref().ok()?;
        let kept: Vec<Rule> = index
            .rules
            .iter()
            .filter(|r| !(r.tool == tool && r.effect == effect && r.resource == resource))
            .cloned()
            .collect();
        (kept.len() != index.rules.len()).then(|| Policy {
            state: Ok(Index::build(kept)),
            #[cfg(feature = "cedar")]
            cedar: None,
        })
    }
}

/// Each resource decided with the frozen arguments in the context; the strictest wins.
#[cfg(feature = "cedar")]
fn evaluate_cedar(
    cedar: &crate::cedar::CedarPolicy,
    proposal: &crate::FrozenProposal,
    facts: &crate::CallFacts,
) -> PolicyDecision {
    let arguments = proposal.arguments();
    let mut decided = PolicyDecision {
        decision: Decision::Allow,
        reason: PlanReason::PolicyPermit,
        policies: Vec::new(),
    };
    for resource in proposal.resources() {
        let one = cedar.evaluate(proposal.tool(), proposal.effect(), resource, &arguments, facts);
        if one.decision == Decision::Deny {
            return PolicyDecision {
                decision: one.decision,
                reason: one.reason,
                policies: one.policies,
            };
        }
        if one.decision == Decision::RequiresApproval {
            decided.decision = Decision::RequiresApproval;
        }
        decided.policies.extend(one.policies);
    }
    decided.policies.sort();
    decided.policies.dedup();
    decided
}

fn parse_document(document: &Value) -> Result<Vec<Rule>, PolicyError> {
    let obj = document
        .as_object()
        .ok_or_else(|| PolicyError("a policy must be a JSON object".into()))?;
    if obj.len() != 2 || obj.get("protocol") != Some(&json!(POLICY_PROTOCOL)) {
        return Err(PolicyError(format!(
            "a policy is exactly {{\"protocol\": \"{POLICY_PROTOCOL}\", \"rules\": [...]}}"
        )));
    }
    let rules = obj
        .get("rules")
        .and_then(Value::as_array)
        .ok_or_else(|| PolicyError("rules must be an array".into()))?;
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| parse_rule(r).map_err(|why| PolicyError(format!("rule {i}: {why}"))))
        .collect()
}

fn parse_rule(rule: &Value) -> Result<Rule, String> {
    let obj = rule.as_object().ok_or("a rule must be a JSON object")?;
    let with_caller = obj.contains_key("caller");
    if obj.len() != 4 + usize::from(with_caller) {
        return Err(
            "a rule has exactly tool, effect, resource and requires_approval, and may name a caller".into(),
        );
    }
    let text = |key: &str| match obj.get(key) {
        Some(Value::String(s)) if !crate::proposal::is_blank(s) => Ok(s.clone()),
        _ => Err(format!("{key} must be a non-blank string")),
    };
    let tool = text("tool")?;
    let resource = text("resource")?;
    let effect = text("effect")?.parse::<Effect>().map_err(|e| e.to_string())?;
    let requires_approval = obj
        .get("requires_approval")
        .and_then(Value::as_bool)
        .ok_or("requires_approval must be a boolean")?;
    let caller = match with_caller {
        false => None,
        true => Some(check_caller(&text("caller")?)?),
    };
    Ok(Rule {
        tool,
        effect,
        resource,
        requires_approval,
        caller,
    })
}

/// A rule's caller: a caller id ([`crate::Caller::new`]'s rules).
fn check_caller(id: &str) -> Result<String, String> {
    crate::Caller::new(id)
        .map(|caller| caller.id().to_owned())
        .map_err(|e| format!("caller: {e}"))
}

/// Where the boundary reads the host's current policy: at planning, again after approval,
/// and again after the one-use claim.
///
/// ```
/// use std::sync::Arc;
/// use aml_core::{Policy, PolicySource};
///
/// /// A host that reloads its policy from its own configuration service.
/// #[derive(Debug)]
/// struct ConfigService { current: Arc<Policy> }
///
/// impl PolicySource for ConfigService {
///     fn current(&self) -> Arc<Policy> {
///         Arc::clone(&self.current)
///     }
/// }
/// let source = ConfigService { current: Arc::new(Policy::empty()) };
/// assert!(source.current().rules().is_empty());
/// ```
pub trait PolicySource: Send + Sync + core::fmt::Debug {
    /// The policy in force now.
    fn current(&self) -> Arc<Policy>;
}

/// A fixed policy.
impl PolicySource for Arc<Policy> {
    fn current(&self) -> Arc<Policy> {
        Arc::clone(self)
    }
}

/// A shared source.
impl PolicySource for Arc<dyn PolicySource> {
    fn current(&self) -> Arc<Policy> {
        (**self).current()
    }
}

/// A host-owned policy that can be replaced or narrowed while calls are in flight; the
/// boundary's re-checks see every change.
///
/// ```
/// use aml_core::{Effect, LivePolicy, Policy, PolicySource, Rule};
/// let live = LivePolicy::new(Policy::from_rules([Rule {
///     tool: "send_message".into(), effect: Effect::Send,
///     resource: "team@example.test".into(), requires_approval: true, caller: None,
/// }]).unwrap());
/// assert!(live.revoke("send_message", Effect::Send, "team@example.test"));
/// assert!(live.current().rules().is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct LivePolicy(Arc<RwLock<Arc<Policy>>>);

impl LivePolicy {
    /// Starts from `policy`.
    pub fn new(policy: Policy) -> Self {
        LivePolicy(Arc::new(RwLock::new(Arc::new(policy))))
    }

    /// Replaces the whole policy.
    pub fn replace(&self, policy: Policy) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(policy);
    }

    /// Removes every rule for `(tool, effect, resource)`; whether one was removed.
    pub fn revoke(&self, tool: &str, effect: Effect, resource: &str) -> bool {
        let mut guard = self.0.write().unwrap_or_else(|p| p.into_inner());
        match guard.without(tool, effect, resource) {
            Some(narrowed) => {
                *guard = Arc::new(narrowed);
                true
            }
            None => false,
        }
    }
}

impl PolicySource for LivePolicy {
    fn current(&self) -> Arc<Policy> {
        Arc::clone(&self.0.read().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;

//! Plans (`aml-action-plan/1`): the decision computed before any hook runs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::proposal::{FrozenProposal, ProposalRefusal};
use crate::reason::PlanReason;
use crate::usage::Facts;
use crate::{CallFacts, Decision, ObjectOnly, Policy, Sha256Digest};

/// The plan protocol string.
pub const PLAN_PROTOCOL: &str = "aml-action-plan/1";

/// A plan, as it goes on the wire.
///
/// ```
/// use aml_core::{plan, Decision, FrozenProposal, Policy, PlanReason};
/// let policy = Policy::empty();
/// let planned = plan(&serde_json::json!({"not": "a proposal"}), &policy);
/// assert_eq!(planned.plan().decision(), Decision::Deny);
/// assert_eq!(planned.plan().reason(), PlanReason::InvalidProposal);
/// assert_eq!(planned.plan().proposal_sha256(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ObjectOnly<WirePlan>", into = "WirePlan")]
pub struct Plan {
    proposal_sha256: Option<Sha256Digest>,
    decision: Decision,
    reason: PlanReason,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WirePlan {
    // Borrowed when written (no allocation per receipt), owned when read.
    protocol: std::borrow::Cow<'static, str>,
    proposal_sha256: Option<Sha256Digest>,
    decision: Decision,
    reason: PlanReason,
}

impl From<Plan> for WirePlan {
    fn from(p: Plan) -> Self {
        WirePlan {
            protocol: std::borrow::Cow::Borrowed(PLAN_PROTOCOL),
            proposal_sha256: p.proposal_sha256,
            decision: p.decision,
            reason: p.reason,
        }
    }
}

impl TryFrom<ObjectOnly<WirePlan>> for Plan {
    type Error = String;
    fn try_from(ObjectOnly(w): ObjectOnly<WirePlan>) -> Result<Self, String> {
        if w.protocol != PLAN_PROTOCOL {
            return Err(format!("plan protocol must be {PLAN_PROTOCOL}"));
        }
        let consistent = (w.decision != Decision::Deny) == w.reason.permits();
        if !consistent || w.proposal_sha256.is_some() != w.reason.carries_digest() {
            return Err(format!("plan {:?}/{} is not consistent", w.decision, w.reason));
        }
        Ok(Plan {
            proposal_sha256: w.proposal_sha256,
            decision: w.decision,
            reason: w.reason,
        })
    }
}

/// What the policy decided for a call that shadow mode let through
/// ([`ActionBoundaryBuilder::shadow`](crate::ActionBoundaryBuilder::shadow)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WouldBlock {
    /// The policy's decision: `deny` or `requires_approval`.
    pub decision: Decision,
    /// The policy's reason.
    pub reason: PlanReason,
}

impl Plan {
    /// The plan shadow mode dispatches under: allowed, reason `shadow_mode`.
    pub(crate) fn shadowing(digest: Sha256Digest) -> Self {
        Plan {
            proposal_sha256: Some(digest),
            decision: Decision::Allow,
            reason: PlanReason::ShadowMode,
        }
    }

    pub(crate) fn denied(reason: PlanReason) -> Self {
        Plan {
            proposal_sha256: None,
            decision: Decision::Deny,
            reason,
        }
    }

    /// The digest of the frozen proposal; `None` for invalid, oversized, ambiguous and
    /// invalid-policy plans.
    pub fn proposal_sha256(&self) -> Option<Sha256Digest> {
        self.proposal_sha256
    }
    /// The decision.
    pub fn decision(&self) -> Decision {
        self.decision
    }
    /// The reason.
    pub fn reason(&self) -> PlanReason {
        self.reason
    }
    /// The wire object.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
    /// Appends the wire object as compact JSON: the text serde writes, without its
    /// per-byte escaping (every member is a protocol token or hex digits). For adapters that
    /// put the plan on every answer.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"protocol\":\"");
        out.extend_from_slice(PLAN_PROTOCOL.as_bytes());
        out.extend_from_slice(b"\",\"proposal_sha256\":");
        crate::digest::write_optional_hex(self.proposal_sha256, out);
        out.extend_from_slice(b",\"decision\":\"");
        out.extend_from_slice(self.decision.as_str().as_bytes());
        out.extend_from_slice(b"\",\"reason\":\"");
        out.extend_from_slice(self.reason.as_str().as_bytes());
        out.extend_from_slice(b"\"}");
    }
}

/// A plan together with the frozen proposal it was computed for. Only planning creates
/// one, and only dispatch consumes it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub(crate) plan: Plan,
    pub(crate) proposal: Option<FrozenProposal>,
    pub(crate) refusal: Option<ProposalRefusal>,
    pub(crate) policies: Vec<String>,
    /// What the plan was decided on beside the proposal; the re-checks decide on the same.
    pub(crate) facts: Facts,
}

impl Planned {
    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    /// The frozen proposal, unless the proposal itself was refused.
    pub fn proposal(&self) -> Option<&FrozenProposal> {
        self.proposal.as_ref()
    }
    /// Why the proposal was refused, if it was.
    pub fn refusal(&self) -> Option<&ProposalRefusal> {
        self.refusal.as_ref()
    }
    /// The ids of the Cedar policies that determined the plan (empty for exact rules).
    pub fn policies(&self) -> &[String] {
        &self.policies
    }
    /// The caller and usage the plan was decided on.
    pub fn facts(&self) -> &CallFacts {
        self.facts.get()
    }
}

/// Validates, freezes and plans a proposal object against `policy`.
pub fn plan(proposal: &Value, policy: &Policy) -> Planned {
    match FrozenProposal::from_value(proposal) {
        Ok(frozen) => plan_frozen(frozen, policy),
        Err(refusal) => refused(refusal),
    }
}

pub(crate) fn refused(refusal: ProposalRefusal) -> Planned {
    Planned {
        plan: Plan::denied(refusal.reason()),
        proposal: None,
        refusal: Some(refusal),
        policies: Vec::new(),
        facts: Facts::default(),
    }
}

/// A plan denied with `reason` for a frozen proposal, without asking the policy (its facts
/// could not be read).
pub(crate) fn denied_for(frozen: FrozenProposal, reason: PlanReason, facts: CallFacts) -> Planned {
    Planned {
        plan: Plan {
            proposal_sha256: reason.carries_digest().then(|| frozen.digest()),
            decision: Decision::Deny,
            reason,
        },
        proposal: Some(frozen),
        refusal: None,
        policies: Vec::new(),
        facts: Facts::new(facts),
    }
}

/// Plans an already frozen proposal against `policy`.
pub fn plan_frozen(frozen: FrozenProposal, policy: &Policy) -> Planned {
    plan_frozen_for(frozen, policy, CallFacts::default())
}

/// Plans an already frozen proposal against `policy`, for a call with `facts`.
pub fn plan_frozen_for(frozen: FrozenProposal, policy: &Policy, facts: CallFacts) -> Planned {
    let decided = policy.evaluate_for(&frozen, &facts);
    Planned {
        plan: Plan {
            proposal_sha256: decided.reason.carries_digest().then(|| frozen.digest()),
            decision: decided.decision,
            reason: decided.reason,
        },
        proposal: Some(frozen),
        refusal: None,
        policies: decided.policies,
        facts: Facts::new(facts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn proposal(resource: &str) -> Value {
        json!({"protocol": "aml-proposed-action/1", "tool": "t", "effect": "write",
               "resource": resource, "purpose": "p", "arguments": {}})
    }

    #[test]
    fn write_json_writes_what_serde_writes() {
        for &reason in PlanReason::ALL {
            for &decision in Decision::ALL {
                for digest in [None, Some(Sha256Digest::of(b"p"))] {
                    let plan = Plan {
                        proposal_sha256: digest,
                        decision,
                        reason,
                    };
                    let mut out = Vec::new();
                    plan.write_json(&mut out);
                    assert_eq!(
                        String::from_utf8(out).unwrap(),
                        serde_json::to_string(&plan).unwrap()
                    );
                }
            }
        }
    }

    #[test]
    fn every_plan_reason_is_reachable() {
        let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
            {"tool": "t", "effect": "write", "resource": "r", "requires_approval": false},
            {"tool": "t", "effect": "write", "resource": "dup", "requires_approval": false},
            {"tool": "t", "effect": "write", "resource": "dup", "requires_approval": true}
        ]}));
        let big = json!({"protocol": "aml-proposed-action/1", "tool": "t", "effect": "write",
                         "resource": "r", "purpose": "p", "arguments": {"x": "y".repeat(70_000)}});
        let invalid = Policy::from_value(&json!({}));
        let cedar = Policy::from_cedar(
            r#"permit(principal, action, resource == Resource::"r");
               forbid(principal, action, resource == Resource::"f");
               permit(principal, action, resource == Resource::"e") when { context.arguments.x > 1 };"#,
            None,
        );
        let cases = [
            (
                plan(&proposal("r"), &cedar),
                PlanReason::PolicyPermit,
                Decision::Allow,
            ),
            (
                plan(&proposal("f"), &cedar),
                PlanReason::PolicyForbid,
                Decision::Deny,
            ),
            (plan(&proposal("x"), &cedar), PlanReason::NoPermit, Decision::Deny),
            (
                plan(&proposal("e"), &cedar),
                PlanReason::PolicyError,
                Decision::Deny,
            ),
            (
                plan(&proposal("r"), &policy),
                PlanReason::ExactRule,
                Decision::Allow,
            ),
            (
                plan(&proposal("x"), &policy),
                PlanReason::NoExactRule,
                Decision::Deny,
            ),
            (
                plan(&proposal("dup"), &policy),
                PlanReason::AmbiguousPolicy,
                Decision::Deny,
            ),
            (
                plan(&proposal("r"), &invalid),
                PlanReason::InvalidPolicy,
                Decision::Deny,
            ),
            (
                plan(&proposal(""), &policy),
                PlanReason::InvalidProposal,
                Decision::Deny,
            ),
            (plan(&big, &policy), PlanReason::ProposalTooLarge, Decision::Deny),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (planned, reason, decision) in cases {
            seen.insert(planned.plan().reason());
            assert_eq!(planned.plan().reason(), reason);
            assert_eq!(planned.plan().decision(), decision);
            assert_eq!(
                planned.plan().proposal_sha256().is_some(),
                reason.carries_digest()
            );
        }
        // `shadow_mode` is the dispatch's, never planning's (shadow_tests.rs reaches it).
        let planned: std::collections::BTreeSet<_> = PlanReason::ALL
            .iter()
            .copied()
            .filter(|r| *r != PlanReason::ShadowMode)
            .collect();
        assert_eq!(seen, planned);
    }

    #[test]
    fn proposal_errors_come_before_policy_errors() {
        let invalid = Policy::from_value(&json!({}));
        assert_eq!(
            plan(&proposal(" "), &invalid).plan().reason(),
            PlanReason::InvalidProposal
        );
    }

    #[test]
    fn wire_form_round_trips_and_is_validated() {
        let planned = plan(&proposal("x"), &Policy::empty());
        let wire = planned.plan().to_value();
        assert_eq!(wire["protocol"], "aml-action-plan/1");
        assert_eq!(
            serde_json::from_value::<Plan>(wire.clone()).unwrap(),
            *planned.plan()
        );
        let mut forged = wire.clone();
        forged["decision"] = json!("allow");
        assert!(serde_json::from_value::<Plan>(forged).is_err());
        let mut nulled = wire;
        nulled["proposal_sha256"] = Value::Null;
        assert!(serde_json::from_value::<Plan>(nulled).is_err());
    }
}

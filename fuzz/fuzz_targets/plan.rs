//! Plan: an arbitrary proposal and arbitrary policy bytes (split at the first 0xFF byte).
//! Never panics; the plan agrees with freezing the proposal and with the policy's own
//! decision for the frozen tuple; its wire form reads back as the same plan.
#![no_main]

use aml_core::{plan, strict, Decision, FrozenProposal, Plan, PlanReason, Policy};
use aml_fuzz::split_ff;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (proposal, policy) = split_ff(data);
    let policy = Policy::from_json_slice(policy);
    let Ok(proposal) = strict::parse_slice(proposal) else {
        return;
    };
    let planned = plan(&proposal, &policy);
    let p = planned.plan();
    let wire = p.to_value();
    let back: Plan = serde_json::from_value(wire.clone()).expect("a plan's wire form reads back");
    assert_eq!(&back, p);
    match FrozenProposal::from_value(&proposal) {
        Err(refusal) => {
            assert_eq!((p.decision(), p.reason()), (Decision::Deny, refusal.reason()));
            assert_eq!(p.proposal_sha256(), None);
            assert!(planned.proposal().is_none());
        }
        Ok(frozen) => {
            assert_eq!(
                planned.proposal().map(FrozenProposal::digest),
                Some(frozen.digest())
            );
            let (decision, reason) = policy.decide(frozen.tool(), frozen.effect(), frozen.resource());
            assert_eq!((p.decision(), p.reason()), (decision, reason));
            // Only exact_rule and no_exact_rule plans carry the digest, as the reference's do.
            let carries = matches!(reason, PlanReason::ExactRule | PlanReason::NoExactRule);
            assert_eq!(p.proposal_sha256(), carries.then(|| frozen.digest()));
            if policy.error().is_some() {
                assert_eq!(p.reason(), PlanReason::InvalidPolicy);
            }
            // Freezing is deterministic and the canonical text re-parses to the proposal.
            let again =
                FrozenProposal::from_value(&strict::parse_str(frozen.canonical_json()).unwrap()).unwrap();
            assert_eq!(again.digest(), frozen.digest());
        }
    }
});

//! Plans and receipts between their protocol form and the `aml.v1` messages.

use aml_core::{Plan, Receipt};

use crate::fields::{self, Field};
use crate::pb;

fn digest_text(digest: Option<aml_core::Sha256Digest>) -> String {
    // The hex form on the stack, then one allocation of its exact size (no formatter).
    digest.map(|d| d.hex().as_str().to_owned()).unwrap_or_default()
}

/// `aml-action-plan/1` as a message (`proposal_sha256` empty for null).
pub fn plan_message(plan: &Plan) -> pb::Plan {
    pb::Plan {
        protocol: aml_core::PLAN_PROTOCOL.to_owned(),
        proposal_sha256: digest_text(plan.proposal_sha256()),
        decision: plan.decision().as_str().to_owned(),
        reason: plan.reason().as_str().to_owned(),
    }
}

/// `aml-action-dispatch/1` as a message (`proposal_sha256` empty for null).
pub fn receipt_message(receipt: &Receipt) -> pb::Receipt {
    pb::Receipt {
        protocol: aml_core::RECEIPT_PROTOCOL.to_owned(),
        proposal_sha256: digest_text(receipt.proposal_sha256()),
        policy_decision: receipt.policy_decision().as_str().to_owned(),
        execution_status: receipt.execution_status().as_str().to_owned(),
        reason: receipt.reason().as_str().to_owned(),
    }
}

/// A plan message back as a validated [`Plan`]: read by the core as the JSON object
/// `{"protocol", "proposal_sha256", "decision", "reason"}` would be.
pub fn plan_from_message(m: &pb::Plan) -> Result<Plan, serde_json::Error> {
    fields::read([
        ("protocol", Field::Text(&m.protocol)),
        ("proposal_sha256", Field::digest(&m.proposal_sha256)),
        ("decision", Field::Text(&m.decision)),
        ("reason", Field::Text(&m.reason)),
    ])
}

/// A receipt message back as a validated [`Receipt`]: read by the core as the JSON object of
/// its five fields would be.
pub fn receipt_from_message(m: &pb::Receipt) -> Result<Receipt, serde_json::Error> {
    fields::read([
        ("protocol", Field::Text(&m.protocol)),
        ("proposal_sha256", Field::digest(&m.proposal_sha256)),
        ("policy_decision", Field::Text(&m.policy_decision)),
        ("execution_status", Field::Text(&m.execution_status)),
        ("reason", Field::Text(&m.reason)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn digest_json(text: &str) -> Value {
        if text.is_empty() {
            Value::Null
        } else {
            json!(text)
        }
    }

    /// The messages read as JSON objects: what `*_from_message` must agree with.
    fn plan_via_json(m: &pb::Plan) -> Option<Plan> {
        serde_json::from_value(json!({
            "protocol": m.protocol, "proposal_sha256": digest_json(&m.proposal_sha256),
            "decision": m.decision, "reason": m.reason,
        }))
        .ok()
    }

    fn receipt_via_json(m: &pb::Receipt) -> Option<Receipt> {
        serde_json::from_value(json!({
            "protocol": m.protocol, "proposal_sha256": digest_json(&m.proposal_sha256),
            "policy_decision": m.policy_decision, "execution_status": m.execution_status,
            "reason": m.reason,
        }))
        .ok()
    }

    #[test]
    fn messages_are_validated_exactly_as_their_json_objects() {
        let digest = "a".repeat(64);
        let (upper, not_hex) = ("A".repeat(64), "g".repeat(64));
        let texts = [
            "",
            "aml-action-plan/1",
            "aml-action-dispatch/1",
            "aml-action-plan/2",
            "allow",
            "deny",
            "requires_approval",
            "Allow",
            "exact_rule",
            "no_exact_rule",
            "invalid_proposal",
            "dispatched",
            "blocked",
            "unknown",
            "host_dispatch_returned",
            "no_exact_rule ",
            "null",
            "\u{0}",
            "a",
            &digest,
            &upper,
            &not_hex,
        ];
        let mut checked = (0, 0);
        // Every field of a plan with a digest and one without varied over the texts while the
        // others stay valid.
        let plans = [
            pb::Plan {
                protocol: "aml-action-plan/1".into(),
                proposal_sha256: digest.clone(),
                decision: "allow".into(),
                reason: "exact_rule".into(),
            },
            pb::Plan {
                protocol: "aml-action-plan/1".into(),
                proposal_sha256: String::new(),
                decision: "deny".into(),
                reason: "invalid_proposal".into(),
            },
        ];
        for (plan, field, text) in plans
            .iter()
            .flat_map(|p| (0..4).map(move |f| (p, f)))
            .flat_map(|(p, f)| texts.map(|t| (p, f, t)))
        {
            let mut m = plan.clone();
            *[
                &mut m.protocol,
                &mut m.proposal_sha256,
                &mut m.decision,
                &mut m.reason,
            ][field] = text.to_owned();
            assert_eq!(plan_from_message(&m).ok(), plan_via_json(&m), "{m:?}");
            checked.0 += usize::from(plan_via_json(&m).is_some());
        }
        let receipts = [
            pb::Receipt {
                protocol: "aml-action-dispatch/1".into(),
                proposal_sha256: digest.clone(),
                policy_decision: "allow".into(),
                execution_status: "dispatched".into(),
                reason: "host_dispatch_returned".into(),
            },
            pb::Receipt {
                protocol: "aml-action-dispatch/1".into(),
                proposal_sha256: String::new(),
                policy_decision: "deny".into(),
                execution_status: "blocked".into(),
                reason: "no_exact_rule".into(),
            },
        ];
        for (receipt, field, text) in receipts
            .iter()
            .flat_map(|r| (0..5).map(move |f| (r, f)))
            .flat_map(|(r, f)| texts.map(|t| (r, f, t)))
        {
            let mut m = receipt.clone();
            *[
                &mut m.protocol,
                &mut m.proposal_sha256,
                &mut m.policy_decision,
                &mut m.execution_status,
                &mut m.reason,
            ][field] = text.to_owned();
            assert_eq!(receipt_from_message(&m).ok(), receipt_via_json(&m), "{m:?}");
            checked.1 += usize::from(receipt_via_json(&m).is_some());
        }
        // Both kinds of answer were seen: accepted and refused.
        assert!(checked.0 >= 2 && checked.0 < 8 * texts.len(), "{checked:?}");
        assert!(checked.1 >= 2 && checked.1 < 10 * texts.len(), "{checked:?}");
    }

    #[test]
    fn messages_carry_the_protocol_forms_exactly() {
        let plans = [
            serde_json::from_value(json!({"protocol": "aml-action-plan/1",
                "proposal_sha256": null, "decision": "deny", "reason": "invalid_proposal"}))
            .unwrap(),
            serde_json::from_value(json!({"protocol": "aml-action-plan/1",
                "proposal_sha256": "a".repeat(64), "decision": "allow", "reason": "exact_rule"}))
            .unwrap(),
        ];
        for plan in plans {
            let m = plan_message(&plan);
            let v = plan.to_value();
            assert_eq!(m.protocol, v["protocol"]);
            assert_eq!(m.decision, v["decision"]);
            assert_eq!(m.reason, v["reason"]);
            assert_eq!(digest_json(&m.proposal_sha256), v["proposal_sha256"]);
            assert_eq!(plan_from_message(&m).unwrap(), plan);
            let receipt: Receipt = serde_json::from_value(json!({"protocol": "aml-action-dispatch/1",
                "proposal_sha256": v["proposal_sha256"], "policy_decision": v["decision"],
                "execution_status": "blocked", "reason": "no_exact_rule"}))
            .unwrap();
            let m = receipt_message(&receipt);
            let v = receipt.to_value();
            assert_eq!(m.protocol, v["protocol"]);
            assert_eq!(m.policy_decision, v["policy_decision"]);
            assert_eq!(m.execution_status, v["execution_status"]);
            assert_eq!(m.reason, v["reason"]);
            assert_eq!(digest_json(&m.proposal_sha256), v["proposal_sha256"]);
            assert_eq!(receipt_from_message(&m).unwrap(), receipt);
        }
    }
}

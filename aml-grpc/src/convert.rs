//! Plans and receipts between their protocol form and the `aml.v1` messages.

use aml_core::{Plan, Receipt};
use serde_json::{json, Value};

use crate::pb;

fn digest_text(digest: Option<aml_core::Sha256Digest>) -> String {
    // The hex form on the stack, then one allocation of its exact size (no formatter).
    digest.map(|d| d.hex().as_str().to_owned()).unwrap_or_default()
}

fn digest_json(text: &str) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        json!(text)
    }
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

/// A plan message back as a validated [`Plan`].
pub fn plan_from_message(m: &pb::Plan) -> Result<Plan, serde_json::Error> {
    serde_json::from_value(json!({
        "protocol": m.protocol, "proposal_sha256": digest_json(&m.proposal_sha256),
        "decision": m.decision, "reason": m.reason,
    }))
}

/// A receipt message back as a validated [`Receipt`].
pub fn receipt_from_message(m: &pb::Receipt) -> Result<Receipt, serde_json::Error> {
    serde_json::from_value(json!({
        "protocol": m.protocol, "proposal_sha256": digest_json(&m.proposal_sha256),
        "policy_decision": m.policy_decision, "execution_status": m.execution_status, "reason": m.reason,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

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

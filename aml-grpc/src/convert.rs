//! Plans and receipts between their protocol form and the `aml.v1` messages.

use aml_core::{Plan, Receipt};
use serde_json::{json, Value};

use crate::pb;

fn digest_text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
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
    let v = plan.to_value();
    pb::Plan {
        protocol: text(&v["protocol"]),
        proposal_sha256: digest_text(&v["proposal_sha256"]),
        decision: text(&v["decision"]),
        reason: text(&v["reason"]),
    }
}

/// `aml-action-dispatch/1` as a message (`proposal_sha256` empty for null).
pub fn receipt_message(receipt: &Receipt) -> pb::Receipt {
    let v = receipt.to_value();
    pb::Receipt {
        protocol: text(&v["protocol"]),
        proposal_sha256: digest_text(&v["proposal_sha256"]),
        policy_decision: text(&v["policy_decision"]),
        execution_status: text(&v["execution_status"]),
        reason: text(&v["reason"]),
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

//! Receipts (`aml-action-dispatch/1`): what the boundary honestly did.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::reason::ReceiptReason;
use crate::{Decision, ExecutionStatus, ObjectOnly, Sha256Digest};

/// The receipt protocol string.
pub const RECEIPT_PROTOCOL: &str = "aml-action-dispatch/1";

/// A dispatch receipt. It has no `Default` and no setters; only the boundary builds one,
/// and deserializing one checks that its status agrees with its reason.
///
/// ```
/// use aml_core::Receipt;
/// let r: Receipt = serde_json::from_value(serde_json::json!({
///     "protocol": "aml-action-dispatch/1", "proposal_sha256": null,
///     "policy_decision": "deny", "execution_status": "blocked", "reason": "invalid_proposal"
/// })).unwrap();
/// assert_eq!(r.reason().as_str(), "invalid_proposal");
///
/// let lie = serde_json::from_value::<Receipt>(serde_json::json!({
///     "protocol": "aml-action-dispatch/1", "proposal_sha256": null,
///     "policy_decision": "deny", "execution_status": "dispatched", "reason": "invalid_proposal"
/// }));
/// assert!(lie.is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ObjectOnly<WireReceipt>", into = "WireReceipt")]
pub struct Receipt {
    proposal_sha256: Option<Sha256Digest>,
    policy_decision: Decision,
    reason: ReceiptReason,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireReceipt {
    // Borrowed when written (no allocation per receipt), owned when read.
    protocol: std::borrow::Cow<'static, str>,
    proposal_sha256: Option<Sha256Digest>,
    policy_decision: Decision,
    execution_status: ExecutionStatus,
    reason: ReceiptReason,
}

impl From<Receipt> for WireReceipt {
    fn from(r: Receipt) -> Self {
        WireReceipt {
            protocol: std::borrow::Cow::Borrowed(RECEIPT_PROTOCOL),
            proposal_sha256: r.proposal_sha256,
            policy_decision: r.policy_decision,
            execution_status: r.execution_status(),
            reason: r.reason,
        }
    }
}

impl TryFrom<ObjectOnly<WireReceipt>> for Receipt {
    type Error = String;
    fn try_from(ObjectOnly(w): ObjectOnly<WireReceipt>) -> Result<Self, String> {
        if w.protocol != RECEIPT_PROTOCOL {
            return Err(format!("receipt protocol must be {RECEIPT_PROTOCOL}"));
        }
        if w.reason.execution_status() != w.execution_status {
            return Err(format!(
                "a receipt with reason {} cannot be {}",
                w.reason, w.execution_status
            ));
        }
        if w.execution_status != ExecutionStatus::Blocked && w.policy_decision == Decision::Deny {
            return Err("a denied proposal cannot have been dispatched".into());
        }
        Ok(Receipt {
            proposal_sha256: w.proposal_sha256,
            policy_decision: w.policy_decision,
            reason: w.reason,
        })
    }
}

impl Receipt {
    pub(crate) fn new(
        proposal_sha256: Option<Sha256Digest>,
        policy_decision: Decision,
        reason: ReceiptReason,
    ) -> Self {
        Receipt {
            proposal_sha256,
            policy_decision,
            reason,
        }
    }

    /// Digest of the frozen proposal, or `None` where the plan carried none.
    pub fn proposal_sha256(&self) -> Option<Sha256Digest> {
        self.proposal_sha256
    }
    /// The plan's decision.
    pub fn policy_decision(&self) -> Decision {
        self.policy_decision
    }
    /// `blocked`, `dispatched` or `unknown`, fixed by the reason.
    pub fn execution_status(&self) -> ExecutionStatus {
        self.reason.execution_status()
    }
    /// Why.
    pub fn reason(&self) -> ReceiptReason {
        self.reason
    }
    /// The wire object.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
    /// Appends the wire object as compact JSON: the text serde writes, without its
    /// per-byte escaping (every member is a protocol token or hex digits). For adapters that
    /// put the receipt on every answer.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"protocol\":\"");
        out.extend_from_slice(RECEIPT_PROTOCOL.as_bytes());
        out.extend_from_slice(b"\",\"proposal_sha256\":");
        crate::digest::write_optional_hex(self.proposal_sha256, out);
        out.extend_from_slice(b",\"policy_decision\":\"");
        out.extend_from_slice(self.policy_decision.as_str().as_bytes());
        out.extend_from_slice(b"\",\"execution_status\":\"");
        out.extend_from_slice(self.execution_status().as_str().as_bytes());
        out.extend_from_slice(b"\",\"reason\":\"");
        out.extend_from_slice(self.reason.as_str().as_bytes());
        out.extend_from_slice(b"\"}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_json_writes_what_serde_writes() {
        for reason in ReceiptReason::ALL {
            for &decision in Decision::ALL {
                for digest in [None, Some(Sha256Digest::of(b"p"))] {
                    let receipt = Receipt::new(digest, decision, *reason);
                    let mut out = Vec::new();
                    receipt.write_json(&mut out);
                    assert_eq!(
                        String::from_utf8(out).unwrap(),
                        serde_json::to_string(&receipt).unwrap()
                    );
                }
            }
        }
    }
}

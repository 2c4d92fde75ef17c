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
    protocol: String,
    proposal_sha256: Option<Sha256Digest>,
    policy_decision: Decision,
    execution_status: ExecutionStatus,
    reason: ReceiptReason,
}

impl From<Receipt> for WireReceipt {
    fn from(r: Receipt) -> Self {
        WireReceipt {
            protocol: RECEIPT_PROTOCOL.to_owned(),
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
}

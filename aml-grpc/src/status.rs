//! Outcomes as gRPC statuses clients can act on, each with a `google.rpc.ErrorInfo`.

use std::collections::HashMap;

use aml_core::{DispatchOutcome, Plan, Receipt, ReceiptReason};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `ErrorInfo.domain` of every status this service returns.
pub const DOMAIN: &str = "aml.action-boundary";

/// The status code for a receipt reason. `Ok` only for `host_dispatch_returned`.
///
/// Nothing maps to `UNAVAILABLE` or `ABORTED`: client retry policies retry those, and a
/// blocked or uncertain call must not be retried automatically.
pub const fn code_for(reason: ReceiptReason) -> Code {
    use ReceiptReason::*;
    match reason {
        HostDispatchReturned => Code::Ok,
        HostDispatchError => Code::Unknown,
        NoExactRule | ApprovalUnavailable | ApprovalError | ApprovalMissingOrMismatched => {
            Code::PermissionDenied
        }
        ApprovalReusedOrExpired
        | PolicyChanged
        | ApprovalConsumeError
        | AmbiguousPolicy
        | InvalidPolicy
        | MissingHostDispatch => Code::FailedPrecondition,
        // Proposal and argument refusals (invalid_proposal, proposal_too_large, AML_*).
        _ => Code::InvalidArgument,
    }
}

/// A status with an `ErrorInfo` of `reason` and `metadata`.
pub(crate) fn status(code: Code, message: String, reason: &str, metadata: HashMap<String, String>) -> Status {
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason, DOMAIN, metadata),
    )
}

/// The error status for a boundary outcome that did not dispatch.
pub(crate) fn outcome_status(outcome: &DispatchOutcome) -> Status {
    let reason = outcome.receipt().reason();
    let mut metadata = HashMap::from([
        ("plan".to_owned(), outcome.plan().to_value().to_string()),
        ("receipt".to_owned(), outcome.receipt().to_value().to_string()),
    ]);
    if let Some(detail) = outcome.detail() {
        metadata.insert("detail".to_owned(), detail.to_owned());
    }
    let (code, message) = if outcome.deadline_passed() {
        (
            Code::DeadlineExceeded,
            "the deadline passed before dispatch; nothing was dispatched".to_owned(),
        )
    } else if reason == ReceiptReason::HostDispatchError {
        (
            Code::Unknown,
            "tool outcome is uncertain; do not retry automatically".to_owned(),
        )
    } else {
        (
            code_for(reason),
            format!("the action boundary blocked this call: {reason}"),
        )
    };
    status(code, message, reason.as_str(), metadata)
}

/// What a client can read back from a status: the plan and receipt, when one was made.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusReport {
    /// `ErrorInfo.reason`: a receipt reason, or `invalid_or_unregistered_call`,
    /// `invalid_arguments`, `deadline_exceeded`, `host_error`.
    pub reason: String,
    /// The plan, when one was made.
    pub plan: Option<Plan>,
    /// The receipt, when one was made.
    pub receipt: Option<Receipt>,
    /// `ErrorInfo.metadata["detail"]`.
    pub detail: Option<String>,
}

/// Reads the `ErrorInfo` this service attaches, if the status carries one of its domain.
pub fn report_of(status: &Status) -> Option<StatusReport> {
    let details = status.get_error_details();
    let info = details.error_info().filter(|i| i.domain == DOMAIN)?;
    let text = |key: &str| info.metadata.get(key).map(String::as_str);
    Some(StatusReport {
        reason: info.reason.clone(),
        plan: text("plan").and_then(|t| serde_json::from_str(t).ok()),
        receipt: text("receipt").and_then(|t| serde_json::from_str(t).ok()),
        detail: info.metadata.get("detail").cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_reason_maps_to_a_retried_code() {
        for reason in ReceiptReason::ALL {
            let code = code_for(*reason);
            assert!(!matches!(code, Code::Unavailable | Code::Aborted), "{reason}");
            assert_eq!(code == Code::Ok, *reason == ReceiptReason::HostDispatchReturned);
        }
        assert_eq!(code_for(ReceiptReason::NoExactRule), Code::PermissionDenied);
        assert_eq!(code_for(ReceiptReason::NonFiniteNumber), Code::InvalidArgument);
        assert_eq!(
            code_for(ReceiptReason::ApprovalReusedOrExpired),
            Code::FailedPrecondition
        );
        assert_eq!(code_for(ReceiptReason::HostDispatchError), Code::Unknown);
    }
}

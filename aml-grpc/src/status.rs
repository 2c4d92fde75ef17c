//! Outcomes as gRPC statuses clients can act on, each with a `google.rpc.ErrorInfo`.
//!
//! [`code_for`] is the one place a gate outcome becomes a status code.

use std::collections::HashMap;

use aml_core::{CallOutcome, Plan, Receipt, ReceiptReason, Refusal};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `ErrorInfo.domain` of every status this service returns.
pub const DOMAIN: &str = "aml.action-boundary";

/// The most bytes of diagnostic text (`ErrorInfo.metadata["detail"]`) a status carries.
///
/// Statuses travel in HTTP/2 trailers, which clients cap (grpcio at 8 KiB by default, and
/// it reports `RESOURCE_EXHAUSTED` above 16 KiB); a tool's whole error text would not fit.
/// The full text is in the host's call record.
pub const DETAIL_LIMIT: usize = 1024;

/// Why the service ended a call itself, outside the boundary's own refusals and receipts
/// (`ErrorInfo.reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServiceReason {
    /// `"host_error"`: the host failed while preparing the call (a failing resource mapper);
    /// no plan, no receipt, the tool was not entered.
    HostError,
    /// `"request_too_large"`: the request message is larger than the server accepts; it was
    /// not read.
    RequestTooLarge,
    /// `"invalid_grpc_timeout"`: the `grpc-timeout` header is not 1 to 8 digits and a unit.
    InvalidTimeout,
    /// `"deadline_exceeded"`: the caller's deadline had passed (or nearly) when the request
    /// arrived; nothing was planned.
    DeadlineExceeded,
    /// `"dispatch_in_progress"`: the deadline passed while the tool was running. The tool
    /// finishes and its receipt goes to the host's record; the caller cannot know the
    /// outcome, so it must not retry automatically.
    DispatchInProgress,
}

impl ServiceReason {
    /// The workspace-wide refusal a refusal with this reason is recorded as (`None` for the
    /// reasons that are not refusals before planning).
    pub const fn refusal(self) -> Option<aml_core::Refusal> {
        match self {
            ServiceReason::RequestTooLarge => Some(aml_core::Refusal::RequestTooLarge),
            ServiceReason::InvalidTimeout => Some(aml_core::Refusal::MalformedRequest),
            ServiceReason::DeadlineExceeded => Some(aml_core::Refusal::DeadlinePassed),
            ServiceReason::HostError | ServiceReason::DispatchInProgress => None,
        }
    }

    /// Every value.
    pub const ALL: &'static [ServiceReason] = &[
        ServiceReason::HostError,
        ServiceReason::RequestTooLarge,
        ServiceReason::InvalidTimeout,
        ServiceReason::DeadlineExceeded,
        ServiceReason::DispatchInProgress,
    ];

    /// The exact wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            ServiceReason::HostError => "host_error",
            ServiceReason::RequestTooLarge => "request_too_large",
            ServiceReason::InvalidTimeout => "invalid_grpc_timeout",
            ServiceReason::DeadlineExceeded => "deadline_exceeded",
            ServiceReason::DispatchInProgress => "dispatch_in_progress",
        }
    }

    /// The status code it is sent with.
    pub const fn code(self) -> Code {
        match self {
            ServiceReason::HostError => Code::Internal,
            ServiceReason::RequestTooLarge => Code::ResourceExhausted,
            ServiceReason::InvalidTimeout => Code::InvalidArgument,
            ServiceReason::DeadlineExceeded | ServiceReason::DispatchInProgress => Code::DeadlineExceeded,
        }
    }
}

impl core::fmt::Display for ServiceReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The status code of a receipt reason. `Ok` only for a dispatched call.
///
/// Client retry policies retry `UNAVAILABLE` and `ABORTED`, so only
/// `host_dispatch_not_entered` maps to one (`UNAVAILABLE`): nothing of the call reached the
/// tool, so a retry is a new call (asked again where approval is required). No other blocked
/// or uncertain call may be retried automatically. A blocked call whose deadline passed is
/// `DEADLINE_EXCEEDED` instead (see [`status_for`]).
pub const fn receipt_code(reason: ReceiptReason) -> Code {
    use ReceiptReason::*;
    match reason {
        HostDispatchReturned => Code::Ok,
        HostDispatchError => Code::Unknown,
        HostDispatchNotEntered => Code::Unavailable,
        NoExactRule
        | NoPermit
        | PolicyForbid
        | ApprovalUnavailable
        | ApprovalError
        | ApprovalMissingOrMismatched => Code::PermissionDenied,
        ApprovalReusedOrExpired
        | PolicyChanged
        | ApprovalConsumeError
        | AmbiguousPolicy
        | InvalidPolicy
        | PolicyError
        | MissingHostDispatch => Code::FailedPrecondition,
        // Proposal and argument refusals (invalid_proposal, proposal_too_large, AML_*), and
        // any blocking reason the protocol adds: the tool was not entered.
        other if matches!(other.execution_status(), aml_core::ExecutionStatus::Blocked) => {
            Code::InvalidArgument
        }
        // Not blocked and not known here: "not run" is the one claim this cannot make.
        _ => Code::Unknown,
    }
}

/// The status code of a call's outcome: every refusal before planning is
/// `INVALID_ARGUMENT` (a passed deadline `DEADLINE_EXCEEDED`), a host error `INTERNAL`, a tool
/// still running at the deadline `DEADLINE_EXCEEDED`, and receipts by [`receipt_code`].
pub fn code_for(outcome: &CallOutcome) -> Code {
    match outcome {
        CallOutcome::Refused(r) if r.refusal() == Refusal::DeadlinePassed => Code::DeadlineExceeded,
        CallOutcome::Refused(_) => Code::InvalidArgument,
        CallOutcome::HostError(_) => Code::Internal,
        CallOutcome::Blocked(b) if b.deadline_passed() => Code::DeadlineExceeded,
        CallOutcome::Blocked(b) => receipt_code(b.reason()),
        CallOutcome::Dispatched(_) => Code::Ok,
        CallOutcome::Unknown(u) if u.still_running() => Code::DeadlineExceeded,
        CallOutcome::Unknown(_) => Code::Unknown,
    }
}

/// The status of a call's outcome, with its `ErrorInfo`: the reason, the plan and receipt
/// when made, and the detail (capped at [`DETAIL_LIMIT`]).
pub fn status_for(outcome: &CallOutcome) -> Status {
    let (reason, message) = match outcome {
        CallOutcome::Refused(r) if r.refusal() == Refusal::DeadlinePassed => (
            ServiceReason::DeadlineExceeded.as_str(),
            "the deadline passed before planning; nothing was planned",
        ),
        CallOutcome::Refused(r) => (r.refusal().as_str(), "the host refused this call before planning"),
        CallOutcome::HostError(_) => (
            ServiceReason::HostError.as_str(),
            "the host failed before planning this call",
        ),
        CallOutcome::Blocked(b) if b.deadline_passed() => (
            b.reason().as_str(),
            "the deadline passed before the one-use claim; the tool was not entered",
        ),
        CallOutcome::Blocked(b) if b.reason() == ReceiptReason::HostDispatchNotEntered => (
            b.reason().as_str(),
            "the tool could not be reached; nothing of the call was sent",
        ),
        CallOutcome::Blocked(b) => (b.reason().as_str(), "the action boundary blocked this call"),
        CallOutcome::Unknown(u) if u.still_running() => (
            ServiceReason::DispatchInProgress.as_str(),
            "the deadline passed while the tool was running; its receipt is in the host's record: do not retry automatically",
        ),
        CallOutcome::Unknown(_) => (
            ReceiptReason::HostDispatchError.as_str(),
            "the tool was entered and failed; its outcome is uncertain: do not retry automatically",
        ),
        CallOutcome::Dispatched(_) => ("host_dispatch_returned", "the tool returned"),
    };
    let mut metadata = HashMap::new();
    if let Some(plan) = outcome.plan() {
        metadata.insert("plan".to_owned(), plan.to_value().to_string());
    }
    if let Some(receipt) = outcome.receipt() {
        metadata.insert("receipt".to_owned(), receipt.to_value().to_string());
    }
    let detail = match outcome {
        CallOutcome::Unknown(u) if u.still_running() => {
            Some("the tool was entered and had not returned by the deadline")
        }
        _ => outcome.detail(),
    };
    if let Some(detail) = detail {
        insert_detail(&mut metadata, detail);
    }
    with_info(code_for(outcome), message, reason, metadata)
}

/// The status of a call the service ended itself, with `detail` (capped) and, when one was
/// made, the plan.
pub fn service_status(reason: ServiceReason, message: &str, detail: &str, plan: Option<&Plan>) -> Status {
    let mut metadata = HashMap::new();
    insert_detail(&mut metadata, detail);
    if let Some(plan) = plan {
        metadata.insert("plan".to_owned(), plan.to_value().to_string());
    }
    with_info(reason.code(), message, reason.as_str(), metadata)
}

/// A refusal before the gate that carries a core refusal reason (e.g. a tool name that is
/// not UTF-8 is `invalid_or_unregistered_call`): `INVALID_ARGUMENT` with its `ErrorInfo`.
pub fn refusal_status(refusal: aml_core::Refusal, detail: &str) -> Status {
    let mut metadata = HashMap::new();
    insert_detail(&mut metadata, detail);
    with_info(
        Code::InvalidArgument,
        "the host refused this call before planning",
        refusal.as_str(),
        metadata,
    )
}

fn with_info(code: Code, message: &str, reason: &str, metadata: HashMap<String, String>) -> Status {
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason, DOMAIN, metadata),
    )
}

fn insert_detail(metadata: &mut HashMap<String, String>, detail: &str) {
    let (text, truncated) = cap(detail, DETAIL_LIMIT);
    metadata.insert("detail".to_owned(), text.to_owned());
    if truncated {
        metadata.insert("detail_truncated".to_owned(), "true".to_owned());
    }
}

/// The longest prefix of `text` of at most `limit` bytes that ends on a character boundary.
fn cap(text: &str, limit: usize) -> (&str, bool) {
    if text.len() <= limit {
        return (text, false);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// What a client can read back from a status of this service.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StatusReport {
    /// `ErrorInfo.reason`: a receipt reason, a refusal (`invalid_or_unregistered_call`,
    /// `invalid_arguments`), or a [`ServiceReason`].
    pub reason: String,
    /// The plan, when one was made.
    pub plan: Option<Plan>,
    /// The receipt, when one was made.
    pub receipt: Option<Receipt>,
    /// `ErrorInfo.metadata["detail"]`: diagnostics, at most [`DETAIL_LIMIT`] bytes.
    pub detail: Option<String>,
    /// Whether the detail was cut to [`DETAIL_LIMIT`] (the host's record has all of it).
    pub detail_truncated: bool,
}

impl StatusReport {
    /// Whether the server says the tool was certainly not entered: the receipt is
    /// `blocked`, or the call was refused before planning. `false` for an `unknown` receipt
    /// and for [`ServiceReason::DispatchInProgress`].
    pub fn not_run(&self) -> bool {
        if let Some(receipt) = &self.receipt {
            return receipt.execution_status() == aml_core::ExecutionStatus::Blocked;
        }
        let ended_by_service = [
            ServiceReason::HostError,
            ServiceReason::RequestTooLarge,
            ServiceReason::InvalidTimeout,
            ServiceReason::DeadlineExceeded,
        ];
        Refusal::ALL.iter().any(|r| r.as_str() == self.reason)
            || ended_by_service.iter().any(|r| r.as_str() == self.reason)
    }
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
        detail_truncated: text("detail_truncated") == Some("true"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_call_that_never_reached_the_tool_maps_to_a_retried_code() {
        for reason in ReceiptReason::ALL {
            let code = receipt_code(*reason);
            let retried = matches!(code, Code::Unavailable | Code::Aborted);
            assert_eq!(
                retried,
                *reason == ReceiptReason::HostDispatchNotEntered,
                "{reason}"
            );
            assert_eq!(code == Code::Ok, *reason == ReceiptReason::HostDispatchReturned);
        }
        for reason in ServiceReason::ALL {
            assert!(!matches!(
                reason.code(),
                Code::Unavailable | Code::Aborted | Code::Ok
            ));
        }
        assert_eq!(receipt_code(ReceiptReason::NoExactRule), Code::PermissionDenied);
        assert_eq!(
            receipt_code(ReceiptReason::ApprovalReusedOrExpired),
            Code::FailedPrecondition
        );
    }

    #[test]
    fn details_are_capped_on_a_character_boundary_and_marked() {
        let long = "é".repeat(DETAIL_LIMIT);
        let status = service_status(ServiceReason::HostError, "m", &long, None);
        let report = report_of(&status).unwrap();
        let detail = report.detail.unwrap();
        assert!(detail.len() <= DETAIL_LIMIT && detail.len() >= DETAIL_LIMIT - 1);
        assert!(long.starts_with(&detail));
        assert!(report.detail_truncated);
        let short = report_of(&service_status(ServiceReason::HostError, "m", "short", None)).unwrap();
        assert_eq!(short.detail.as_deref(), Some("short"));
        assert!(!short.detail_truncated);
    }
}

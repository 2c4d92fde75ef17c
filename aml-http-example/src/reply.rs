//! The wire out: the JSON body of every answer to a call (`aml-http-tool-reply/1`), and
//! [`status_code`], the one place a gate outcome becomes an HTTP status code.

use aml_core::{CallOutcome, Plan, Receipt, ReceiptReason, Refusal};
use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `protocol` of every reply.
pub const REPLY_PROTOCOL: &str = "aml-http-tool-reply/1";

/// The most bytes of diagnostic text (`detail`) a reply carries; the host's call record has
/// all of it.
pub const DETAIL_LIMIT: usize = 1024;

/// How a call ended, as the reply's `status` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReplyStatus {
    /// `"dispatched"`: the tool returned; `result` is its output.
    Dispatched,
    /// `"blocked"`: planned and blocked (policy, approval, grant, arguments); the tool was
    /// not entered.
    Blocked,
    /// `"unknown"`: the tool was entered and failed, or had not returned by the deadline.
    /// A side effect may have happened: do not retry automatically.
    Unknown,
    /// `"refused"`: refused before any plan (unknown tool, arguments outside the schema, a
    /// request this adapter could not read); the tool was not entered.
    Refused,
    /// `"host_error"`: the host failed while preparing the call (a failing resource mapper);
    /// the tool was not entered.
    HostError,
}

impl ReplyStatus {
    /// Every value.
    pub const ALL: &'static [ReplyStatus] = &[
        ReplyStatus::Dispatched,
        ReplyStatus::Blocked,
        ReplyStatus::Unknown,
        ReplyStatus::Refused,
        ReplyStatus::HostError,
    ];

    /// The exact wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReplyStatus::Dispatched => "dispatched",
            ReplyStatus::Blocked => "blocked",
            ReplyStatus::Unknown => "unknown",
            ReplyStatus::Refused => "refused",
            ReplyStatus::HostError => "host_error",
        }
    }

    /// Whether the tool was certainly not entered.
    pub const fn not_run(self) -> bool {
        matches!(
            self,
            ReplyStatus::Blocked | ReplyStatus::Refused | ReplyStatus::HostError
        )
    }
}

impl core::fmt::Display for ReplyStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why this adapter ended a call itself, where neither a core refusal nor a receipt reason
/// says it (the reply's `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AdapterReason {
    /// `"host_error"`: the host failed while preparing the call; no plan, no receipt.
    HostError,
    /// `"dispatch_in_progress"`: the call's deadline passed while the tool was running. The
    /// tool finishes and its receipt goes to the host's record; the caller cannot know the
    /// outcome.
    DispatchInProgress,
}

impl AdapterReason {
    /// Every value.
    pub const ALL: &'static [AdapterReason] = &[AdapterReason::HostError, AdapterReason::DispatchInProgress];

    /// The exact wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            AdapterReason::HostError => "host_error",
            AdapterReason::DispatchInProgress => "dispatch_in_progress",
        }
    }
}

impl core::fmt::Display for AdapterReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The JSON body of every answer to `POST /tools/{name}`.
///
/// `reason` is a core [`Refusal`] (status `refused`), a [`ReceiptReason`] (`blocked`,
/// `dispatched`, `unknown`) or an [`AdapterReason`]. `plan` and `receipt` are the
/// boundary's own wire objects when it made them; `result` is the tool's output, present
/// only when `status` is `dispatched`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct CallReply {
    /// Always [`REPLY_PROTOCOL`].
    pub protocol: String,
    /// The tool the request named.
    pub tool: String,
    /// How the call ended.
    pub status: ReplyStatus,
    /// Why, as an exact wire string.
    pub reason: String,
    /// The plan, when one was made.
    pub plan: Option<Plan>,
    /// The receipt, when one was made.
    pub receipt: Option<Receipt>,
    /// The tool's output, when it returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Diagnostics (a host error's message, a schema violation's location, what was wrong
    /// with the request), at most [`DETAIL_LIMIT`] bytes.
    pub detail: Option<String>,
    /// Whether `detail` was cut to [`DETAIL_LIMIT`].
    #[serde(default)]
    pub detail_truncated: bool,
    /// Whether the call was blocked because its deadline passed before the one-use claim.
    #[serde(default)]
    pub deadline_passed: bool,
}

impl CallReply {
    /// The reply for the outcome of a call of `tool`.
    pub fn of(tool: &str, outcome: &CallOutcome) -> Self {
        let status = match outcome {
            CallOutcome::Refused(_) => ReplyStatus::Refused,
            CallOutcome::HostError(_) => ReplyStatus::HostError,
            CallOutcome::Blocked(_) => ReplyStatus::Blocked,
            CallOutcome::Dispatched(_) => ReplyStatus::Dispatched,
            CallOutcome::Unknown(_) => ReplyStatus::Unknown,
        };
        let (detail, deadline_passed) = match outcome {
            CallOutcome::Unknown(u) if u.still_running() => (
                Some(
                    "the tool was entered and had not returned by the deadline; its receipt goes to \
                     the host's record: do not retry automatically",
                ),
                false,
            ),
            CallOutcome::Blocked(b) => (b.detail(), b.deadline_passed()),
            other => (other.detail(), false),
        };
        let mut reply = CallReply {
            protocol: REPLY_PROTOCOL.to_owned(),
            tool: tool.to_owned(),
            status,
            reason: outcome.reason().to_owned(),
            plan: outcome.plan().cloned(),
            receipt: outcome.receipt().cloned(),
            result: outcome.output().cloned(),
            detail: None,
            detail_truncated: false,
            deadline_passed,
        };
        if let Some(detail) = detail {
            reply.set_detail(detail);
        }
        reply
    }

    /// The HTTP status code this reply is sent with ([`status_code`]).
    pub fn status_code(&self) -> StatusCode {
        status_code(self.status, &self.reason)
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    fn set_detail(&mut self, detail: &str) {
        let (text, truncated) = cap(detail, DETAIL_LIMIT);
        self.detail = Some(text.to_owned());
        self.detail_truncated = truncated;
    }
}

/// The HTTP status code of a call that ended with `status` for `reason` (the reply's own
/// fields): the one place an outcome becomes a status code.
///
/// Every 4xx and the 500 of a host error mean the tool was not entered; 200 that it
/// returned; 502 that it was entered and failed, and 504 that it had not returned by the
/// deadline (`dispatch_in_progress`): outcome unknown. No outcome maps to 503 or 429, which
/// clients retry.
pub fn status_code(status: ReplyStatus, reason: &str) -> StatusCode {
    use ReceiptReason::*;
    match status {
        ReplyStatus::Dispatched => StatusCode::OK,
        ReplyStatus::Unknown if reason == AdapterReason::DispatchInProgress.as_str() => {
            StatusCode::GATEWAY_TIMEOUT
        }
        ReplyStatus::Unknown => StatusCode::BAD_GATEWAY,
        ReplyStatus::HostError => StatusCode::INTERNAL_SERVER_ERROR,
        ReplyStatus::Refused => match reason.parse::<Refusal>() {
            Ok(Refusal::InvalidOrUnregisteredCall) => StatusCode::NOT_FOUND,
            Ok(
                Refusal::InvalidArguments
                | Refusal::InexactNumber
                | Refusal::InvalidResource
                | Refusal::ResourceOutsideRoot,
            ) => StatusCode::UNPROCESSABLE_ENTITY,
            Ok(Refusal::RequestTooLarge) => StatusCode::PAYLOAD_TOO_LARGE,
            Ok(Refusal::DeadlinePassed) => StatusCode::REQUEST_TIMEOUT,
            Ok(Refusal::DuplicateCall) => StatusCode::CONFLICT,
            // malformed_request, and every other refusal before planning: not run.
            _ => StatusCode::BAD_REQUEST,
        },
        ReplyStatus::Blocked => match reason.parse::<ReceiptReason>() {
            Ok(NoExactRule | ApprovalUnavailable | ApprovalError | ApprovalMissingOrMismatched) => {
                StatusCode::FORBIDDEN
            }
            Ok(
                ApprovalReusedOrExpired
                | PolicyChanged
                | ApprovalConsumeError
                | AmbiguousPolicy
                | InvalidPolicy
                | MissingHostDispatch,
            ) => StatusCode::CONFLICT,
            Ok(JsonSyntax | JsonInvalidUtf8 | JsonDuplicateKey | JsonLoneSurrogate | JsonTooDeep) => {
                StatusCode::BAD_REQUEST
            }
            Ok(JsonTooLarge | ProposalTooLarge) => StatusCode::PAYLOAD_TOO_LARGE,
            Ok(InvalidProposal | NonFiniteNumber | UnsupportedValue) => StatusCode::UNPROCESSABLE_ENTITY,
            // A blocking reason the protocol adds later: still not run.
            _ => StatusCode::FORBIDDEN,
        },
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

#[cfg(test)]
mod tests {
    use super::*;
    use aml_core::ExecutionStatus;

    #[test]
    fn wire_strings_equal_the_serde_form() {
        for status in ReplyStatus::ALL {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        for reason in AdapterReason::ALL {
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
        }
    }

    #[test]
    fn only_entered_calls_map_to_codes_other_than_4xx_and_500() {
        for reason in ReceiptReason::ALL {
            let (status, entered) = match reason.execution_status() {
                ExecutionStatus::Dispatched => (ReplyStatus::Dispatched, true),
                ExecutionStatus::Unknown => (ReplyStatus::Unknown, true),
                _ => (ReplyStatus::Blocked, false),
            };
            let code = status_code(status, reason.as_str());
            assert_eq!(code.is_client_error(), !entered, "{reason}: {code}");
            assert!(
                !matches!(code.as_u16(), 429 | 503),
                "{reason}: {code} is a code clients retry"
            );
        }
        for refusal in Refusal::ALL {
            assert!(
                status_code(ReplyStatus::Refused, refusal.as_str()).is_client_error(),
                "{refusal}"
            );
        }
        assert_eq!(
            status_code(ReplyStatus::HostError, "host_error"),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            status_code(ReplyStatus::Unknown, "dispatch_in_progress"),
            StatusCode::GATEWAY_TIMEOUT
        );
        assert_eq!(
            status_code(ReplyStatus::Blocked, "approval_reused_or_expired"),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status_code(ReplyStatus::Refused, "inexact_number"),
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }

    #[test]
    fn details_are_capped_on_a_character_boundary() {
        let long = "é".repeat(DETAIL_LIMIT);
        let (text, truncated) = cap(&long, DETAIL_LIMIT);
        assert!(truncated && text.len() <= DETAIL_LIMIT && long.starts_with(text));
        assert_eq!(cap("short", DETAIL_LIMIT), ("short", false));
    }
}

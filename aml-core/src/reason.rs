//! Reasons: why a plan decided what it did, and why a receipt ended where it did.

use crate::wire::wire_enum;

wire_enum! {
    /// Why a plan reached its decision (`aml-action-plan/1` `reason`).
    pub enum PlanReason {
        /// `"exact_rule"`: exactly one host rule matches `(tool, effect, resource)`.
        ExactRule = "exact_rule",
        /// `"no_exact_rule"`: no host rule matches; the proposal is denied.
        NoExactRule = "no_exact_rule",
        /// `"ambiguous_policy"`: two or more rules match this proposal's own tuple.
        AmbiguousPolicy = "ambiguous_policy",
        /// `"invalid_policy"`: the host policy document is malformed; everything is denied.
        InvalidPolicy = "invalid_policy",
        /// `"invalid_proposal"`: the proposal breaks the `aml-proposed-action/1` rules.
        InvalidProposal = "invalid_proposal",
        /// `"proposal_too_large"`: the canonical proposal exceeds 65,536 bytes.
        ProposalTooLarge = "proposal_too_large",
        /// `"policy_permit"`: a Cedar `permit` applies and no `forbid` does (the decision is
        /// `requires_approval` when a determining permit is annotated `@approval("required")`).
        PolicyPermit = "policy_permit",
        /// `"policy_forbid"`: a Cedar `forbid` applies; the proposal is denied.
        PolicyForbid = "policy_forbid",
        /// `"no_permit"`: no Cedar `permit` applies; the proposal is denied.
        NoPermit = "no_permit",
        /// `"policy_error"`: a Cedar policy failed to evaluate for this proposal (it might
        /// have been a `forbid`); the proposal is denied.
        PolicyError = "policy_error",
        /// `"shadow_mode"`: the boundary runs in shadow mode and lets through a call its
        /// policy would have blocked or sent for approval; the call's record says what the
        /// policy decided (`would_block`).
        ShadowMode = "shadow_mode",
    }
}

impl PlanReason {
    /// Whether a plan with this reason carries a proposal digest.
    ///
    /// Invalid, oversized, ambiguous and invalid-policy plans carry `null`, as the reference does.
    pub const fn carries_digest(self) -> bool {
        matches!(
            self,
            PlanReason::ExactRule
                | PlanReason::NoExactRule
                | PlanReason::PolicyPermit
                | PlanReason::PolicyForbid
                | PlanReason::NoPermit
                | PlanReason::PolicyError
                | PlanReason::ShadowMode
        )
    }

    /// Whether a plan with this reason may allow (or ask for approval); every other reason
    /// denies.
    pub const fn permits(self) -> bool {
        matches!(
            self,
            PlanReason::ExactRule | PlanReason::PolicyPermit | PlanReason::ShadowMode
        )
    }
}

wire_enum! {
    /// Stable codes for JSON the boundary refuses to capture or parse.
    ///
    /// The two `AML_CANONICAL_JSON_*` codes are the reference's; the `AML_JSON_*` codes
    /// belong to this workspace's strict wire parser ([`crate::strict`]).
    pub enum JsonErrorCode {
        /// `"AML_CANONICAL_JSON_NON_FINITE_NUMBER"`: NaN or an infinity, including a number
        /// literal beyond the range of a double (`1e999`), which `JSON.parse` turns into an
        /// infinity that the reference then refuses with this code.
        NonFiniteNumber = "AML_CANONICAL_JSON_NON_FINITE_NUMBER",
        /// `"AML_CANONICAL_JSON_UNSUPPORTED_VALUE"`: a value JSON cannot carry (a non-string
        /// map key, bytes that are not UTF-8, an integer wider than 64 bits, …).
        UnsupportedValue = "AML_CANONICAL_JSON_UNSUPPORTED_VALUE",
        /// `"AML_JSON_SYNTAX"`: the text is not JSON.
        Syntax = "AML_JSON_SYNTAX",
        /// `"AML_JSON_INVALID_UTF8"`: the bytes are not UTF-8.
        InvalidUtf8 = "AML_JSON_INVALID_UTF8",
        /// `"AML_JSON_DUPLICATE_KEY"`: an object names the same key twice.
        DuplicateKey = "AML_JSON_DUPLICATE_KEY",
        /// `"AML_JSON_LONE_SURROGATE"`: a `\u` escape leaves a surrogate unpaired.
        LoneSurrogate = "AML_JSON_LONE_SURROGATE",
        /// `"AML_JSON_TOO_DEEP"`: arrays and objects nest deeper than the limit.
        TooDeep = "AML_JSON_TOO_DEEP",
        /// `"AML_JSON_TOO_LARGE"`: the input is longer than the byte limit.
        TooLarge = "AML_JSON_TOO_LARGE",
    }
}

wire_enum! {
    /// Why a receipt ended where it did (`aml-action-dispatch/1` `reason`).
    ///
    /// Blocked plans carry their plan reason; arguments refused at capture carry the
    /// [`JsonErrorCode`] string.
    pub enum ReceiptReason {
        /// `"no_exact_rule"`
        NoExactRule = "no_exact_rule",
        /// `"ambiguous_policy"`
        AmbiguousPolicy = "ambiguous_policy",
        /// `"invalid_policy"`
        InvalidPolicy = "invalid_policy",
        /// `"invalid_proposal"`
        InvalidProposal = "invalid_proposal",
        /// `"proposal_too_large"`
        ProposalTooLarge = "proposal_too_large",
        /// `"missing_host_dispatch"`: the host registered no tool callback.
        MissingHostDispatch = "missing_host_dispatch",
        /// `"approval_unavailable"`: approval is required and the host has no approval hook.
        ApprovalUnavailable = "approval_unavailable",
        /// `"approval_error"`: the approval hook failed (or panicked).
        ApprovalError = "approval_error",
        /// `"approval_missing_or_mismatched"`: not approved, or approved for another digest.
        ApprovalMissingOrMismatched = "approval_missing_or_mismatched",
        /// `"policy_changed"`: a policy re-check after approval or after the claim disagrees.
        PolicyChanged = "policy_changed",
        /// `"approval_consume_error"`: the one-use claim failed; the grant may be spent.
        ApprovalConsumeError = "approval_consume_error",
        /// `"approval_reused_or_expired"`: the one-use grant was already spent or expired.
        ApprovalReusedOrExpired = "approval_reused_or_expired",
        /// `"host_dispatch_returned"`: the tool callback returned.
        HostDispatchReturned = "host_dispatch_returned",
        /// `"host_dispatch_error"`: the tool callback failed after entry; outcome unknown.
        HostDispatchError = "host_dispatch_error",
        /// `"host_dispatch_not_entered"`: the tool callback failed before any of the call
        /// reached the tool (it said so: [`crate::ToolError::not_entered`]); blocked, and a
        /// claimed grant stays spent.
        HostDispatchNotEntered = "host_dispatch_not_entered",
        /// `"policy_forbid"`: a Cedar `forbid` denied the plan.
        PolicyForbid = "policy_forbid",
        /// `"no_permit"`: no Cedar `permit` applied.
        NoPermit = "no_permit",
        /// `"policy_error"`: a Cedar policy failed to evaluate; denied.
        PolicyError = "policy_error",
        /// `"AML_CANONICAL_JSON_NON_FINITE_NUMBER"`
        NonFiniteNumber = "AML_CANONICAL_JSON_NON_FINITE_NUMBER",
        /// `"AML_CANONICAL_JSON_UNSUPPORTED_VALUE"`
        UnsupportedValue = "AML_CANONICAL_JSON_UNSUPPORTED_VALUE",
        /// `"AML_JSON_SYNTAX"`
        JsonSyntax = "AML_JSON_SYNTAX",
        /// `"AML_JSON_INVALID_UTF8"`
        JsonInvalidUtf8 = "AML_JSON_INVALID_UTF8",
        /// `"AML_JSON_DUPLICATE_KEY"`
        JsonDuplicateKey = "AML_JSON_DUPLICATE_KEY",
        /// `"AML_JSON_LONE_SURROGATE"`
        JsonLoneSurrogate = "AML_JSON_LONE_SURROGATE",
        /// `"AML_JSON_TOO_DEEP"`
        JsonTooDeep = "AML_JSON_TOO_DEEP",
        /// `"AML_JSON_TOO_LARGE"`
        JsonTooLarge = "AML_JSON_TOO_LARGE",
    }
}

wire_enum! {
    /// Why a front door refused a call before any plan was made (no proposal, no digest).
    ///
    /// Adapters carry these strings on their wire (MCP verdicts, gRPC `ErrorInfo.reason`,
    /// call records); the tool was never entered.
    pub enum Refusal {
        /// `"invalid_or_unregistered_call"`: the host registered no tool by that name.
        InvalidOrUnregisteredCall = "invalid_or_unregistered_call",
        /// `"invalid_arguments"`: the arguments are outside the tool's host input schema (or
        /// not a JSON object, or hold what the adapter refuses to pass, such as unresolved
        /// data bindings).
        InvalidArguments = "invalid_arguments",
        /// `"malformed_request"`: the adapter could not read the request on its wire.
        MalformedRequest = "malformed_request",
        /// `"request_too_large"`: the request is larger than the adapter accepts; it was not
        /// read.
        RequestTooLarge = "request_too_large",
        /// `"deadline_passed"`: the caller's deadline had passed when the request arrived.
        DeadlinePassed = "deadline_passed",
        /// `"duplicate_call"`: the request reused a call id the adapter already took up;
        /// nothing ran again.
        DuplicateCall = "duplicate_call",
        /// `"inexact_number"`: a number literal in the call is not kept exactly by the
        /// canonical form (an integer beyond ±2^53, or more digits than a double keeps), so
        /// the call is refused rather than changed on its way to the tool.
        InexactNumber = "inexact_number",
        /// `"upstream_gone"`: the server a gateway forwards to has exited; nothing was sent.
        UpstreamGone = "upstream_gone",
        /// `"server_request_refused"`: a request from a server to the client (sampling,
        /// elicitation) that the host's settings do not relay; it never reached the client.
        ServerRequestRefused = "server_request_refused",
        /// `"tool_definition_changed"`: the host pinned the server's definition of this tool
        /// and the server now advertises another (or none, or the gateway could not read
        /// it); the detail names both digests. Nothing is sent until the host re-pins it.
        ToolDefinitionChanged = "tool_definition_changed",
        /// `"invalid_resource"`: an argument the tool's resource comes from is
        /// missing, mistyped, or not a value of its kind (a path with a NUL, a URL with
        /// userinfo, an address without a domain); nothing was planned.
        InvalidResource = "invalid_resource",
        /// `"resource_outside_root"`: a path resource leaves the tool's root (an absolute
        /// path elsewhere, or a `..` that climbs out); nothing was planned.
        ResourceOutsideRoot = "resource_outside_root",
    }
}

impl ReceiptReason {
    /// The execution status a receipt with this reason must have.
    pub const fn execution_status(self) -> crate::ExecutionStatus {
        use crate::ExecutionStatus::*;
        match self {
            ReceiptReason::HostDispatchReturned => Dispatched,
            ReceiptReason::HostDispatchError => Unknown,
            _ => Blocked,
        }
    }
}

impl From<JsonErrorCode> for ReceiptReason {
    fn from(code: JsonErrorCode) -> Self {
        match code {
            JsonErrorCode::NonFiniteNumber => ReceiptReason::NonFiniteNumber,
            JsonErrorCode::UnsupportedValue => ReceiptReason::UnsupportedValue,
            JsonErrorCode::Syntax => ReceiptReason::JsonSyntax,
            JsonErrorCode::InvalidUtf8 => ReceiptReason::JsonInvalidUtf8,
            JsonErrorCode::DuplicateKey => ReceiptReason::JsonDuplicateKey,
            JsonErrorCode::LoneSurrogate => ReceiptReason::JsonLoneSurrogate,
            JsonErrorCode::TooDeep => ReceiptReason::JsonTooDeep,
            JsonErrorCode::TooLarge => ReceiptReason::JsonTooLarge,
        }
    }
}

/// The receipt reason for a plan that blocks, or `None` for `exact_rule` and
/// `policy_permit` (a matching rule does not block by itself).
pub(crate) const fn blocking_reason(plan: PlanReason) -> Option<ReceiptReason> {
    match plan {
        PlanReason::ExactRule | PlanReason::PolicyPermit | PlanReason::ShadowMode => None,
        PlanReason::NoExactRule => Some(ReceiptReason::NoExactRule),
        PlanReason::PolicyForbid => Some(ReceiptReason::PolicyForbid),
        PlanReason::NoPermit => Some(ReceiptReason::NoPermit),
        PlanReason::PolicyError => Some(ReceiptReason::PolicyError),
        PlanReason::AmbiguousPolicy => Some(ReceiptReason::AmbiguousPolicy),
        PlanReason::InvalidPolicy => Some(ReceiptReason::InvalidPolicy),
        PlanReason::InvalidProposal => Some(ReceiptReason::InvalidProposal),
        PlanReason::ProposalTooLarge => Some(ReceiptReason::ProposalTooLarge),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason strings of the protocol's contract (docs/PROTOCOL.md: the plan's reasons and
    /// "Dispatch order and receipt reasons"), copied from it.
    const DESIGN_RECEIPT_REASONS: &[&str] = &[
        "no_exact_rule",
        "ambiguous_policy",
        "invalid_policy",
        "invalid_proposal",
        "proposal_too_large",
        "missing_host_dispatch",
        "approval_unavailable",
        "approval_error",
        "approval_missing_or_mismatched",
        "policy_changed",
        "approval_consume_error",
        "approval_reused_or_expired",
        "host_dispatch_returned",
        "host_dispatch_error",
        "AML_CANONICAL_JSON_NON_FINITE_NUMBER",
        "AML_CANONICAL_JSON_UNSUPPORTED_VALUE",
    ];

    #[test]
    fn every_design_reason_parses_and_serializes_identically() {
        for s in DESIGN_RECEIPT_REASONS {
            let r: ReceiptReason = s.parse().unwrap();
            assert_eq!(r.as_str(), *s);
            assert_eq!(serde_json::to_value(r).unwrap(), serde_json::json!(s));
        }
    }

    #[test]
    fn serde_form_equals_as_str_for_every_value() {
        for r in ReceiptReason::ALL {
            let back: ReceiptReason = serde_json::from_value(serde_json::to_value(r).unwrap()).unwrap();
            assert_eq!(back, *r);
        }
        for r in PlanReason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), serde_json::json!(r.as_str()));
        }
    }

    #[test]
    fn every_json_code_has_a_receipt_reason_with_the_same_string() {
        for code in JsonErrorCode::ALL {
            assert_eq!(ReceiptReason::from(*code).as_str(), code.as_str());
        }
    }

    #[test]
    fn only_the_two_dispatch_reasons_are_not_blocked() {
        use crate::ExecutionStatus::*;
        for r in ReceiptReason::ALL {
            let expected = match r.as_str() {
                "host_dispatch_returned" => Dispatched,
                "host_dispatch_error" => Unknown,
                _ => Blocked,
            };
            assert_eq!(r.execution_status(), expected, "{r}");
        }
    }

    #[test]
    fn blocking_plan_reasons_keep_their_string_in_the_receipt() {
        for p in PlanReason::ALL {
            match blocking_reason(*p) {
                None => assert!(p.permits(), "{p}"),
                Some(r) => assert_eq!(r.as_str(), p.as_str()),
            }
        }
    }
}

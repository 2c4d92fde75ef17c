//! Why the gate refused a message before the boundary ran: one code per kind of bad input,
//! kept in the outcome the host logs (the boundary's own refusals are receipt reasons).

use serde::Serialize;

/// Why the gate refused a message before planning. Every variant's doc names its wire
/// string; [`crate::wire`] maps each one to an A2UI error code and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GateReason {
    /// `"message_too_large"`: the message is longer than
    /// [`GateLimits::max_message_bytes`](crate::GateLimits); it was not parsed.
    MessageTooLarge,
    /// `"call_id_too_long"`: `functionCallId` is longer than
    /// [`GateLimits::max_call_id_bytes`](crate::GateLimits); it is neither echoed nor kept.
    CallIdTooLong,
    /// `"malformed_message"`: not a v1.0 `callRendererFunction` in either form (unknown or
    /// missing fields, another version, another message type, not JSON).
    MalformedMessage,
    /// `"catalog_not_found"`: no host catalog has this `catalogId`.
    CatalogNotFound,
    /// `"function_not_found"`: the catalog has no function of this name.
    FunctionNotFound,
    /// `"not_agent_callable"`: the function is `rendererOnly`.
    NotAgentCallable,
    /// `"args_missing"`: `args` is absent and the catalog requires it.
    ArgsMissing,
    /// `"args_not_object"`: `args` is present but not a JSON object (`null` included).
    ArgsNotObject,
    /// `"args_data_binding"`: a data binding (`{"@path": …}`, Candidate `{"path": …}`)
    /// inside `args`, and no [`BindingResolver`](crate::BindingResolver) resolved it.
    ArgsDataBinding,
    /// `"args_nested_call"`: a nested function call (`{"@call": …}`, Candidate
    /// `{"call": …}`) inside `args`, and no resolver resolved it.
    ArgsNestedCall,
    /// `"args_reserved_key"`: an object key inside `args` starts with a single `@`, which
    /// the current form reserves for directives.
    ArgsReservedKey,
    /// `"bindings_unresolved"`: the host's [`BindingResolver`](crate::BindingResolver)
    /// refused, or returned something other than literal arguments.
    BindingsUnresolved,
    /// `"args_schema_mismatch"`: the arguments do not match the function's host schema.
    ArgsSchemaMismatch,
    /// `"args_inexact_number"`: a number in `args` is not kept exactly by the canonical form
    /// (an integer beyond ±2^53, or more digits than a double keeps); refused, never rounded.
    ArgsInexactNumber,
    /// `"replayed"`: this gate already took up this `functionCallId`; nothing ran.
    Replayed,
    /// `"invalid_resource"`: an argument the function's typed resource comes from is
    /// missing, mistyped or not a value of its kind (see `aml_core::ResourceRule`).
    InvalidResource,
    /// `"resource_outside_root"`: a path resource leaves the function's root.
    ResourceOutsideRoot,
}

impl GateReason {
    /// Every value, in declaration order.
    pub const ALL: &'static [GateReason] = &[
        GateReason::MessageTooLarge,
        GateReason::CallIdTooLong,
        GateReason::MalformedMessage,
        GateReason::CatalogNotFound,
        GateReason::FunctionNotFound,
        GateReason::NotAgentCallable,
        GateReason::ArgsMissing,
        GateReason::ArgsNotObject,
        GateReason::ArgsDataBinding,
        GateReason::ArgsNestedCall,
        GateReason::ArgsReservedKey,
        GateReason::BindingsUnresolved,
        GateReason::ArgsSchemaMismatch,
        GateReason::ArgsInexactNumber,
        GateReason::Replayed,
        GateReason::InvalidResource,
        GateReason::ResourceOutsideRoot,
    ];

    /// The exact wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            GateReason::MessageTooLarge => "message_too_large",
            GateReason::CallIdTooLong => "call_id_too_long",
            GateReason::MalformedMessage => "malformed_message",
            GateReason::CatalogNotFound => "catalog_not_found",
            GateReason::FunctionNotFound => "function_not_found",
            GateReason::NotAgentCallable => "not_agent_callable",
            GateReason::ArgsMissing => "args_missing",
            GateReason::ArgsNotObject => "args_not_object",
            GateReason::ArgsDataBinding => "args_data_binding",
            GateReason::ArgsNestedCall => "args_nested_call",
            GateReason::ArgsReservedKey => "args_reserved_key",
            GateReason::BindingsUnresolved => "bindings_unresolved",
            GateReason::ArgsSchemaMismatch => "args_schema_mismatch",
            GateReason::ArgsInexactNumber => "args_inexact_number",
            GateReason::Replayed => "replayed",
            GateReason::InvalidResource => "invalid_resource",
            GateReason::ResourceOutsideRoot => "resource_outside_root",
        }
    }
}

impl GateReason {
    /// The workspace-wide refusal this reason is a case of, as call records carry it.
    pub const fn refusal(self) -> aml_core::Refusal {
        use aml_core::Refusal;
        match self {
            GateReason::MessageTooLarge => Refusal::RequestTooLarge,
            GateReason::CallIdTooLong | GateReason::MalformedMessage => Refusal::MalformedRequest,
            GateReason::CatalogNotFound | GateReason::FunctionNotFound | GateReason::NotAgentCallable => {
                Refusal::InvalidOrUnregisteredCall
            }
            GateReason::Replayed => Refusal::DuplicateCall,
            GateReason::ArgsInexactNumber => Refusal::InexactNumber,
            GateReason::InvalidResource => Refusal::InvalidResource,
            GateReason::ResourceOutsideRoot => Refusal::ResourceOutsideRoot,
            GateReason::ArgsMissing
            | GateReason::ArgsNotObject
            | GateReason::ArgsDataBinding
            | GateReason::ArgsNestedCall
            | GateReason::ArgsReservedKey
            | GateReason::BindingsUnresolved
            | GateReason::ArgsSchemaMismatch => Refusal::InvalidArguments,
        }
    }
}

impl core::fmt::Display for GateReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_form_is_as_str_and_every_string_is_distinct() {
        let mut seen = std::collections::HashSet::new();
        for r in GateReason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
            assert_eq!(r.to_string(), r.as_str());
            assert!(seen.insert(r.as_str()), "{r}");
        }
        assert_eq!(seen.len(), 17);
    }
}

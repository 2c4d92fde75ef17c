//! Wire vocabularies: closed sets of strings that travel in plans and receipts.

/// Declares a `Copy` enum whose variants each map to one exact wire string.
///
/// Generates `as_str`, `ALL`, `Display`, `FromStr`, and serde impls that use exactly
/// those strings, so the wire form and `as_str` cannot drift apart.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The exact wire string.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire,)+ }
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::core::str::FromStr for $name {
            type Err = $crate::wire::UnknownWireValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($wire => Ok($name::$variant),)+
                    _ => Err($crate::wire::UnknownWireValue {
                        vocabulary: stringify!($name),
                        value: s.to_owned(),
                    }),
                }
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(d)?;
                text.parse().map_err(::serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use wire_enum;

/// A string that is not a member of the expected wire vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {vocabulary} value {value:?}")]
pub struct UnknownWireValue {
    /// The vocabulary (enum) that was expected.
    pub vocabulary: &'static str,
    /// The string that was found.
    pub value: String,
}

wire_enum! {
    /// The effect a host declares for a tool. A declaration, not a classification.
    pub enum Effect {
        /// `"read"`
        Read = "read",
        /// `"write"`
        Write = "write",
        /// `"send"`
        Send = "send",
        /// `"pay"`
        Pay = "pay",
        /// `"delete"`
        Delete = "delete",
    }
}

wire_enum! {
    /// A policy decision for one proposal.
    pub enum Decision {
        /// `"allow"`: an exact rule lets the call run without approval.
        Allow = "allow",
        /// `"requires_approval"`: an exact rule requires a digest-bound approval and a one-use claim.
        RequiresApproval = "requires_approval",
        /// `"deny"`: the call must not run.
        Deny = "deny",
    }
}

wire_enum! {
    /// What happened to the tool, as a receipt reports it.
    pub enum ExecutionStatus {
        /// `"blocked"`: the tool callback was not entered.
        Blocked = "blocked",
        /// `"dispatched"`: the tool callback returned (not proof of delivery).
        Dispatched = "dispatched",
        /// `"unknown"`: the tool callback was entered and failed; a side effect may have
        /// happened. Never retried automatically.
        Unknown = "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effect_strings_round_trip_through_serde() {
        for e in Effect::ALL {
            let json = serde_json::to_string(e).unwrap();
            assert_eq!(json, format!("\"{}\"", e.as_str()));
            assert_eq!(serde_json::from_str::<Effect>(&json).unwrap(), *e);
        }
        let names: Vec<_> = Effect::ALL.iter().map(|e| e.as_str()).collect();
        assert_eq!(names, ["read", "write", "send", "pay", "delete"]);
    }

    #[test]
    fn decisions_and_statuses_use_design_strings() {
        let d: Vec<_> = Decision::ALL.iter().map(|d| d.to_string()).collect();
        assert_eq!(d, ["allow", "requires_approval", "deny"]);
        let s: Vec<_> = ExecutionStatus::ALL.iter().map(|s| s.to_string()).collect();
        assert_eq!(s, ["blocked", "dispatched", "unknown"]);
    }

    #[test]
    fn unknown_strings_are_refused_with_the_value() {
        let err = "Send".parse::<Effect>().unwrap_err();
        assert_eq!(err.to_string(), "unknown Effect value \"Send\"");
        assert!(serde_json::from_str::<Decision>("\"maybe\"").is_err());
    }
}

//! Struct-shaped wire documents read only from JSON objects.
//!
//! serde's derived `Deserialize` for a struct also accepts the struct's *sequence* form: a
//! JSON array whose items are the fields in declaration order. Nothing on the wire is ever
//! written that way, and a second spelling of the same document is a way for two readers to
//! disagree, so every document a host or a peer supplies is read through [`ObjectOnly`].

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// A `T` read only from a map (a JSON object); an array, or anything else, is an error.
///
/// ```
/// use aml_core::ObjectOnly;
/// #[derive(serde::Deserialize)]
/// struct Entry {
///     key_id: String,
/// }
/// let ok: ObjectOnly<Entry> = serde_json::from_str(r#"{"key_id": "alice"}"#).unwrap();
/// assert_eq!(ok.0.key_id, "alice");
/// // serde's derive alone would take `["alice"]` as the same entry.
/// assert!(serde_json::from_str::<ObjectOnly<Entry>>(r#"["alice"]"#).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectOnly<T>(pub T);

impl<T> ObjectOnly<T> {
    /// The value read.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MapOnly(PhantomData)).map(ObjectOnly)
    }
}

struct MapOnly<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for MapOnly<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        // The fields are read from the same map access, so borrowed values (raw JSON text)
        // still borrow from the input.
        T::deserialize(MapAccessDeserializer::new(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Pair {
        a: u8,
        b: Option<String>,
    }

    #[test]
    fn objects_are_read_and_every_other_shape_is_refused() {
        let ok: ObjectOnly<Pair> = serde_json::from_str(r#"{"b": "x", "a": 1}"#).unwrap();
        assert_eq!(
            ok.into_inner(),
            Pair {
                a: 1,
                b: Some("x".into())
            }
        );
        for text in [r#"[1, "x"]"#, "[1]", "[]", "null", "1", r#""a""#] {
            let err = serde_json::from_str::<ObjectOnly<Pair>>(text).unwrap_err();
            assert!(err.to_string().contains("a JSON object"), "{text}: {err}");
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            assert!(
                serde_json::from_value::<ObjectOnly<Pair>>(value).is_err(),
                "{text}"
            );
        }
        // The derive alone takes the array: the reason this type exists.
        assert!(serde_json::from_str::<Pair>(r#"[1, "x"]"#).is_ok());
        // Field errors keep their meaning.
        assert!(serde_json::from_str::<ObjectOnly<Pair>>(r#"{"a": 1, "c": 2}"#).is_err());
        assert!(serde_json::from_str::<ObjectOnly<Pair>>(r#"{"a": 1, "a": 2}"#).is_err());
    }

    #[test]
    fn borrowed_fields_still_borrow() {
        #[derive(serde::Deserialize)]
        struct Borrowed<'a> {
            #[serde(borrow)]
            v: &'a str,
        }
        let text = r#"{"v": "plain"}"#;
        let read: ObjectOnly<Borrowed<'_>> = serde_json::from_str(text).unwrap();
        assert_eq!(read.0.v, "plain");
    }

    /// Fuzzing finding: the wire forms of plans, receipts and host approvals were read from
    /// arrays of their fields too.
    #[test]
    fn plans_receipts_and_approvals_are_objects_only() {
        use crate::{Approval, Plan, Receipt};
        let digest = "a".repeat(64);
        let plan: Result<Plan, _> = serde_json::from_value(serde_json::json!([
            "aml-action-plan/1",
            null,
            "deny",
            "invalid_proposal"
        ]));
        assert!(plan.is_err());
        let receipt: Result<Receipt, _> = serde_json::from_value(serde_json::json!([
            "aml-action-dispatch/1",
            null,
            "deny",
            "blocked",
            "invalid_proposal"
        ]));
        assert!(receipt.is_err());
        let approval: Result<Approval, _> = serde_json::from_value(serde_json::json!([true, digest]));
        assert!(approval.is_err());
        let approval: Approval =
            serde_json::from_value(serde_json::json!({"approved": true, "proposal_sha256": digest})).unwrap();
        assert!(approval.approved);
        let unknown = serde_json::json!({"approved": true, "proposal_sha256": digest, "x": 1});
        assert!(serde_json::from_value::<Approval>(unknown).is_err());
        let plan: Plan = serde_json::from_value(serde_json::json!({"protocol": "aml-action-plan/1",
            "proposal_sha256": null, "decision": "deny", "reason": "invalid_proposal"}))
        .unwrap();
        assert_eq!(plan.decision(), crate::Decision::Deny);
    }
}

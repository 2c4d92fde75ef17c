//! Capturing typed Rust arguments as JSON without silent loss.
//!
//! `serde_json::to_value` turns `f64::NAN` and the infinities into `null`. The boundary must
//! refuse them instead (`AML_CANONICAL_JSON_NON_FINITE_NUMBER`), so [`capture`] first walks
//! the value with a checking serializer and only then builds the JSON value.
//!
//! ```
//! use aml_core::capture::capture;
//! use aml_core::JsonErrorCode;
//!
//! #[derive(serde::Serialize)]
//! struct Args { to: String, amount: f64 }
//!
//! let ok = capture(&Args { to: "team@example.test".into(), amount: 1.5 }).unwrap();
//! assert_eq!(ok["amount"], 1.5);
//! let err = capture(&Args { to: "x".into(), amount: f64::NAN }).unwrap_err();
//! assert_eq!(err.code(), JsonErrorCode::NonFiniteNumber);
//! ```

use serde::ser::{self, Serialize};
use serde_json::Value;

use crate::canonical::{CanonicalError, MAX_DEPTH};
use crate::reason::JsonErrorCode;

/// Converts `value` to JSON, refusing non-finite floats, non-string map keys and nesting
/// deeper than [`MAX_DEPTH`].
pub fn capture<T: Serialize + ?Sized>(value: &T) -> Result<Value, CanonicalError> {
    value
        .serialize(FiniteCheck { depth: 0 })
        .map_err(|e| CanonicalError::new(e.code, e.detail))?;
    serde_json::to_value(value)
        .map_err(|e| CanonicalError::new(JsonErrorCode::UnsupportedValue, e.to_string()))
}

#[derive(Debug)]
struct CheckError {
    code: JsonErrorCode,
    detail: String,
}

impl core::fmt::Display for CheckError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}", self.code, self.detail)
    }
}

impl std::error::Error for CheckError {}

impl ser::Error for CheckError {
    fn custom<M: core::fmt::Display>(msg: M) -> Self {
        CheckError {
            code: JsonErrorCode::UnsupportedValue,
            detail: msg.to_string(),
        }
    }
}

/// A serializer that produces nothing and fails on what JSON cannot carry exactly.
#[derive(Clone, Copy)]
struct FiniteCheck {
    depth: usize,
}

impl FiniteCheck {
    fn nested(self) -> Result<Self, CheckError> {
        if self.depth >= MAX_DEPTH {
            return Err(CheckError {
                code: JsonErrorCode::TooDeep,
                detail: format!("nesting deeper than {MAX_DEPTH}"),
            });
        }
        Ok(FiniteCheck {
            depth: self.depth + 1,
        })
    }

    fn float(x: f64) -> Result<(), CheckError> {
        if x.is_finite() {
            Ok(())
        } else {
            Err(CheckError {
                code: JsonErrorCode::NonFiniteNumber,
                detail: format!("{x} is not a finite number"),
            })
        }
    }
}

macro_rules! accept {
    ($($name:ident($ty:ty)),* $(,)?) => {
        $(fn $name(self, _: $ty) -> Result<(), CheckError> { Ok(()) })*
    };
}

impl ser::Serializer for FiniteCheck {
    type Ok = ();
    type Error = CheckError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    accept!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
    );

    fn serialize_i128(self, v: i128) -> Result<(), CheckError> {
        i64::try_from(v)
            .map(drop)
            .or_else(|_| u64::try_from(v).map(drop))
            .map_err(|_| CheckError {
                code: JsonErrorCode::UnsupportedValue,
                detail: format!("integer {v} is wider than 64 bits"),
            })
    }
    fn serialize_u128(self, v: u128) -> Result<(), CheckError> {
        u64::try_from(v).map(drop).map_err(|_| CheckError {
            code: JsonErrorCode::UnsupportedValue,
            detail: format!("integer {v} is wider than 64 bits"),
        })
    }
    fn serialize_f32(self, v: f32) -> Result<(), CheckError> {
        Self::float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), CheckError> {
        Self::float(v)
    }
    fn serialize_none(self) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), CheckError> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), CheckError> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Result<(), CheckError> {
        v.serialize(self.nested()?)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self, CheckError> {
        self.nested()
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, CheckError> {
        self.nested()
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, CheckError> {
        self.nested()
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, CheckError> {
        self.nested()?.nested()
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self, CheckError> {
        self.nested()
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, CheckError> {
        self.nested()
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, CheckError> {
        self.nested()?.nested()
    }
}

impl ser::SerializeSeq for FiniteCheck {
    type Ok = ();
    type Error = CheckError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CheckError> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), CheckError> {
        Ok(())
    }
}

macro_rules! forward_seq_like {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for FiniteCheck {
            type Ok = ();
            type Error = CheckError;
            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CheckError> {
                v.serialize(*self)
            }
            fn end(self) -> Result<(), CheckError> {
                Ok(())
            }
        }
    )*};
}
forward_seq_like!(
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for FiniteCheck {
    type Ok = ();
    type Error = CheckError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), CheckError> {
        // serde_json accepts string, integer and bool keys; refuse floats with the same check.
        key.serialize(*self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CheckError> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), CheckError> {
        Ok(())
    }
}

macro_rules! forward_struct_like {
    ($($trait:ident),*) => {$(
        impl ser::$trait for FiniteCheck {
            type Ok = ();
            type Error = CheckError;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, _: &'static str, v: &T) -> Result<(), CheckError> {
                v.serialize(*self)
            }
            fn end(self) -> Result<(), CheckError> {
                Ok(())
            }
        }
    )*};
}
forward_struct_like!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn infinities_inside_collections_are_refused() {
        let v = vec![BTreeMap::from([("x", vec![1.0, f64::INFINITY])])];
        assert_eq!(capture(&v).unwrap_err().code(), JsonErrorCode::NonFiniteNumber);
        assert_eq!(
            capture(&Some(f32::NEG_INFINITY)).unwrap_err().code(),
            JsonErrorCode::NonFiniteNumber
        );
    }

    #[test]
    fn what_serde_json_cannot_carry_is_unsupported() {
        let by_tuple_key = BTreeMap::from([((1, 2), "v")]);
        assert_eq!(
            capture(&by_tuple_key).unwrap_err().code(),
            JsonErrorCode::UnsupportedValue
        );
        assert_eq!(
            capture(&u128::MAX).unwrap_err().code(),
            JsonErrorCode::UnsupportedValue
        );
        assert_eq!(capture(&(u64::MAX as u128)).unwrap(), serde_json::json!(u64::MAX));
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let mut v = serde_json::json!(1);
        for _ in 0..(MAX_DEPTH + 1) {
            v = serde_json::json!([v]);
        }
        assert_eq!(capture(&v).unwrap_err().code(), JsonErrorCode::TooDeep);
    }
}

//! A message's text fields as a map for the core's own `Deserialize` (which validates plans
//! and receipts), without building JSON values first: the fields are lent as they are.

use serde::de::value::{BorrowedStrDeserializer, MapDeserializer};
use serde::de::{Deserialize, Deserializer, Error, IntoDeserializer, Visitor};

/// One field: text, or JSON `null` (an empty digest).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Field<'a> {
    Text(&'a str),
    Null,
}

impl<'a> Field<'a> {
    /// A digest field: empty text stands for `null`.
    pub(crate) fn digest(text: &'a str) -> Self {
        if text.is_empty() {
            Field::Null
        } else {
            Field::Text(text)
        }
    }
}

/// Reads `T` from `fields` as if from a JSON object with those members.
pub(crate) fn read<'a, T, E>(fields: impl IntoIterator<Item = (&'static str, Field<'a>)>) -> Result<T, E>
where
    T: Deserialize<'a>,
    E: Error,
{
    T::deserialize(MapDeserializer::<_, E>::new(fields.into_iter()))
}

/// A [`Field`] as a deserializer, with a JSON reader's behaviour: text is a string, `null`
/// is a unit or `None`.
pub(crate) struct FieldDeserializer<'a, E> {
    field: Field<'a>,
    error: std::marker::PhantomData<E>,
}

impl<'a, E: Error> IntoDeserializer<'a, E> for Field<'a> {
    type Deserializer = FieldDeserializer<'a, E>;
    fn into_deserializer(self) -> Self::Deserializer {
        FieldDeserializer {
            field: self,
            error: std::marker::PhantomData,
        }
    }
}

impl<'de, E: Error> Deserializer<'de> for FieldDeserializer<'de, E> {
    type Error = E;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        match self.field {
            Field::Text(text) => visitor.visit_borrowed_str(text),
            Field::Null => visitor.visit_unit(),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        match self.field {
            Field::Text(text) => visitor.visit_some(BorrowedStrDeserializer::new(text)),
            Field::Null => visitor.visit_none(),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, E> {
        match self.field {
            Field::Text(text) => BorrowedStrDeserializer::new(text).deserialize_enum(name, variants, visitor),
            Field::Null => self.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct newtype_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

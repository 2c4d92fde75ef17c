//! A request message between its wire bytes and its proto3 JSON form, with the upstream's
//! descriptors (`prost-reflect`).
//!
//! In: the bytes are decoded into a dynamic message (prost's recursion limit applies, so a
//! deeply nested message is an error, not a stack overflow), any field the descriptors do
//! not name is refused (it would reach the upstream without being in the digest), and the
//! message is written as proto3 JSON with the fields' proto names (`order_id`), 64-bit
//! integers as strings (so no integer is rounded on its way through the boundary's JSON)
//! and default values left out, as the proto3 JSON mapping writes them.
//!
//! Out: the frozen arguments are read back into a message of the same type, unknown JSON
//! members refused, and encoded: the upstream receives exactly the message that was decided.

use prost::Message;
use prost_reflect::{
    DeserializeOptions, DynamicMessage, MessageDescriptor, ReflectMessage, SerializeOptions, Value,
};
use serde_json::{Map, Value as Json};

/// Why a request message cannot be turned into arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes are not a message of the method's request type (truncated, a wrong wire
    /// type, a length beyond the message, nesting too deep).
    #[error("the request is not a valid {message} message: {detail}")]
    Malformed {
        /// The request type.
        message: String,
        /// prost's description.
        detail: String,
    },
    /// The message holds a field its type does not declare.
    #[error("the request holds field number {number} unknown to {message}; unknown fields are refused")]
    UnknownField {
        /// The message (possibly nested) that holds it.
        message: String,
        /// Its field number.
        number: u32,
    },
    /// The message has no proto3 JSON form (e.g. a `google.protobuf.Any` of a type the
    /// descriptors do not hold).
    #[error("the request has no proto3 JSON form: {0}")]
    NoJson(String),
}

/// Why frozen arguments cannot be encoded as the request message again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the frozen arguments are not a {message} message in proto3 JSON: {detail}")]
pub struct EncodeError {
    message: String,
    detail: String,
}

fn options() -> SerializeOptions {
    SerializeOptions::new()
        .use_proto_field_name(true)
        .stringify_64_bit_integers(true)
        .skip_default_fields(true)
}

/// Decodes `bytes` as a message of type `desc`, refusing unknown fields.
pub fn decode(desc: &MessageDescriptor, bytes: &[u8]) -> Result<DynamicMessage, DecodeError> {
    let message = DynamicMessage::decode(desc.clone(), bytes).map_err(|e| DecodeError::Malformed {
        message: desc.full_name().to_owned(),
        detail: e.to_string(),
    })?;
    refuse_unknown(&message)?;
    Ok(message)
}

/// The proto3 JSON text of a request message's bytes (see the module documentation).
pub fn to_json(desc: &MessageDescriptor, bytes: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let message = decode(desc, bytes)?;
    let mut out = Vec::with_capacity(bytes.len() * 2 + 16);
    let mut serializer = serde_json::Serializer::new(&mut out);
    message
        .serialize_with_options(&mut serializer, &options())
        .map_err(|e| DecodeError::NoJson(e.to_string()))?;
    Ok(out)
}

/// The request message of type `desc` that frozen `arguments` describe, encoded.
pub fn encode(desc: &MessageDescriptor, arguments: Map<String, Json>) -> Result<Vec<u8>, EncodeError> {
    let message = DynamicMessage::deserialize_with_options(
        desc.clone(),
        Json::Object(arguments),
        &DeserializeOptions::new().deny_unknown_fields(true),
    )
    .map_err(|e| EncodeError {
        message: desc.full_name().to_owned(),
        detail: e.to_string(),
    })?;
    Ok(message.encode_to_vec())
}

/// Refuses a message, or any message inside it, that holds fields its type does not name.
fn refuse_unknown(message: &DynamicMessage) -> Result<(), DecodeError> {
    if let Some(field) = message.unknown_fields().next() {
        return Err(DecodeError::UnknownField {
            message: message.descriptor().full_name().to_owned(),
            number: field.number(),
        });
    }
    for (_, value) in message.fields() {
        refuse_unknown_in(value)?;
    }
    Ok(())
}

fn refuse_unknown_in(value: &Value) -> Result<(), DecodeError> {
    match value {
        Value::Message(inner) => refuse_unknown(inner),
        Value::List(items) => items.iter().try_for_each(refuse_unknown_in),
        Value::Map(entries) => entries.values().try_for_each(refuse_unknown_in),
        _ => Ok(()),
    }
}

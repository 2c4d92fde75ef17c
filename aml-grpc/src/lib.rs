//! placeholder
#![allow(missing_docs, unreachable_pub)]
pub mod pb {
    tonic::include_proto!("aml.v1");
}

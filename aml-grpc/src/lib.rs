//! The AML action boundary adapter for grpc.
//!
//! Not implemented yet: this crate is a placeholder in the workspace layout, and the
//! testkit reports its column as failing until the adapter exists.
#![forbid(unsafe_code)]

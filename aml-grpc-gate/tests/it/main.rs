//! aml-grpc-gate's integration tests: one binary, a module per area.

mod support;

mod decode_property;
mod health;
mod hostile_frames;
mod hostile_upstream;
mod interop_python;
mod methods;

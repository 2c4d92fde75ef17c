//! aml-grpc's integration tests: one binary, a module per area.

mod support;

mod answer_frames;
mod deadlines;
mod hostile_headers;
mod interop_python;
mod service;

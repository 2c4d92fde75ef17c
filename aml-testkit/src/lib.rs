//! The testkit of the AML action boundary.
//!
//! This crate provides:
//!
//! - **fixture hooks** ([`fixtures`]) that stand in for a host's approval channel, one-use
//!   grant store, tool and resource mapper, recording host events with the documented strings
//!   and counters in a [`HostLog`];
//! - the **documented cases**: the 17-case guarded-tool rehearsal ([`rehearsal`]) and the
//!   reference's 13-case black-box challenge ([`challenge`]);
//! - the [`Harness`] trait an adapter implements so those cases run through its wire path,
//!   a harness for each adapter the workspace ships (including the worked example of a
//!   custom adapter, [`http`]), and a [`matrix`] runner that plays every case through every
//!   adapter and compares the results with `fixtures/` ([`compare`]);
//! - the cross-adapter **conformance report** ([`conformance`]): the same hostile calls
//!   (big integers, `1e400`, duplicate keys, deadlines, a caller that leaves, a tool that
//!   panics or hangs, the listing) through every adapter, each giving the same status, reason,
//!   record and tool-entry count; [`conformance_with`] runs it through a custom adapter;
//! - [`rehearse_with`]: the 17 guarded-tool cases through any harness in one call, as a
//!   [`RehearsalReport`] a custom adapter's own test asserts (`assert!(report.passed())`),
//!   with documented deviations explained (see `docs/CUSTOM_ADAPTER.md`);
//! - the `aml-testkit` command line (`rehearse`, `case`, `canonicalize`).
#![forbid(unsafe_code)]

pub mod a2ui;
mod caller_args;
pub mod challenge;
pub mod compare;
pub mod conformance;
mod conformance_wires;
pub mod fixtures;
pub mod grpc;
mod harness;
pub mod http;
mod log;
pub mod matrix;
pub mod mcp;
pub mod notice_fixture;
pub mod rehearsal;
pub mod relay_fixture;
mod report;
pub mod wire;

pub use caller_args::{CallerArguments, MessageArgs};
pub use compare::CaseVerdict;
pub use conformance::conformance_with;
pub use harness::{Attempt, CoreHarness, Harness, HarnessError, UnavailableHarness};
pub use log::{Counters, HostLog};
pub use report::{mark, rehearse_with, CaseResult, RehearsalReport};

//! Authenticated human approval for the AML action boundary.
//!
//! This crate provides:
//!
//! - signed approval statements (`aml-approval-statement/1`, see [`statement`]): a decision
//!   bound to a proposal digest and a grant id, signed with Ed25519 by an approver key; built
//!   only by [`Statement::new`] (or parsed, with every field checked);
//! - approver keys and the host's [`Keyring`] of approver public keys (file formats in
//!   [`keys`]);
//! - [`SignedApprovalHook`], the approval hook that accepts only a valid, current, approving
//!   statement for the exact digest and the grant id it proposed, and then issues that grant;
//! - decision channels: [`WebApprovals`] (feature `web`, default), an approval page on
//!   loopback (per-run secret token, decisions signed server-side), and [`TtyApprovals`], a
//!   prompt on the controlling terminal;
//! - the `aml-approval` command: key generation, offline signing and verification
//!   (`aml-approval --help`; docs/APPROVAL.md in the repository).
//!
//! Feature flags: `web` (default) — the approval page, on hyper. Supported Rust: 1.88 and
//! later.
//!
//! What an approver sees is unambiguous: control, bidirectional and invisible characters
//! in a proposal are shown, on the page and the terminal, as `\u{…}` escapes with a warning
//! line; the digest is always of the exact bytes.
#![forbid(unsafe_code)]

mod display;
mod hex;
mod hook;
pub mod keys;
pub mod statement;
mod tty;
#[cfg(feature = "web")]
mod web;

pub use hook::{ChannelError, DecisionChannel, PendingApproval, SignedApprovalHook};
pub use keys::{ApproverKey, KeyError, Keyring};
pub use statement::{
    SignedStatement, Statement, StatementDecision, StatementError, StatementRefusal, StatementRules,
    Validity, MAX_SAFE_INTEGER, STATEMENT_PROTOCOL,
};
pub use tty::TtyApprovals;
#[cfg(feature = "web")]
pub use web::{DecisionLog, WebApprovals, WebApprovalsBuilder};

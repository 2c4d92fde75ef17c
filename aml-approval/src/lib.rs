//! Authenticated human approval for the AML action boundary.
//!
//! This crate provides:
//!
//! - signed approval statements (`aml-approval-statement/1`, see [`statement`]): a decision
//!   bound to a proposal digest and a grant id, signed with Ed25519 by an approver key, and
//!   the host's [`Keyring`] of approver public keys;
//! - [`SignedApprovalHook`], the approval hook that accepts only a valid, current, approving
//!   statement for the exact digest and then issues the one-use grant it names;
//! - decision channels: [`WebApprovals`], an approval page on loopback (per-run secret token,
//!   decisions signed server-side), and [`TtyApprovals`], a prompt on the controlling terminal;
//! - the `aml-approval` command: key generation and offline signing.
#![forbid(unsafe_code)]

mod hex;
mod hook;
mod html;
pub mod statement;
mod tty;
mod web;

pub use hook::{ChannelError, DecisionChannel, PendingApproval, SignedApprovalHook};
pub use statement::{
    ApproverKey, Keyring, SignedStatement, Statement, StatementError, Verdict, STATEMENT_PROTOCOL,
};
pub use tty::TtyApprovals;
pub use web::{DecisionLog, WebApprovals};

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
//!   loopback (per-run secret token, decisions signed server-side; live, with a JSON API and
//!   a notification command, [`NotifyCommand`]), and [`TtyApprovals`], a prompt on the
//!   controlling terminal;
//! - who asks for each request ([`Requester`], set by the host through
//!   [`SignedApprovalHook::with_requester`]) and the history of decided proposals
//!   ([`ApprovalHistory`]: [`MemoryHistory`], or [`ReceiptHistory`] in a durable store);
//! - the `aml-approval` command: key generation, offline signing and verification
//!   (`aml-approval --help`; docs/APPROVAL.md in the repository).
//! - [`display`]: the one escaping of what people are shown (the page, the terminal, the
//!   command), for hosts that show proposals or ids elsewhere.
//!
//! Feature flags: `web` (default) — the approval page, on hyper. Supported Rust: the
//! workspace's `rust-version` (1.89) and later.
//!
//! What an approver sees is unambiguous: control, bidirectional and invisible characters
//! in a proposal are shown, on the page and the terminal, as `\u{…}` escapes with a warning
//! line; the digest is always of the exact bytes.
#![forbid(unsafe_code)]

pub mod display;
mod hex;
mod history;
mod hook;
pub mod keys;
mod requester;
pub mod statement;
mod tty;
#[cfg(feature = "web")]
mod web;

pub use history::{
    ApprovalHistory, HistoryEntry, HistoryError, HistoryQuery, MemoryHistory, Outcome, ReceiptHistory,
    HISTORY_RECORD,
};
pub use hook::{ChannelError, DecisionChannel, PendingApproval, RequesterOf, SignedApprovalHook};
pub use keys::{ApproverKey, KeyError, Keyring};
pub use requester::Requester;
pub use statement::{
    SignedStatement, Statement, StatementDecision, StatementError, StatementRefusal, StatementRules,
    Validity, MAX_REASON_CHARS, MAX_SAFE_INTEGER, STATEMENT_PROTOCOL,
};
pub use tty::TtyApprovals;
#[cfg(feature = "web")]
pub use web::{DecisionLog, NotifyCommand, WebApprovals, WebApprovalsBuilder};

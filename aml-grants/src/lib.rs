//! Durable one-use grants, approval expiry, and a crash-safe receipt journal for the AML
//! action boundary.
//!
//! This crate provides:
//!
//! - grant stores that issue a grant bound to one proposal digest, with an id and an expiry
//!   ([`GrantLifetimes`]: 60 s by default, a host maximum), and consume it atomically once
//!   (they implement [`aml_core::GrantStore`]): [`MemoryGrants`], [`SqliteStore`] (feature
//!   `sqlite`, default) and [`PostgresStore`] (feature `postgres`);
//! - [`IssuingApproval`], which issues the grant when the host's approval decision approves;
//! - the receipt journal ([`ReceiptJournal`], implemented by both databases) and
//!   [`JournaledExecutor`], which writes an intent before the tool is entered and the outcome
//!   after; an intent left without an outcome is `unknown`, listed by
//!   [`ReceiptJournal::unresolved`] until the host reconciles it;
//! - [`ReceiptStore`] and [`StoredReceipts`]: the receipt records themselves, in the same
//!   database, appended from a task so recording never waits for the disk;
//! - [`JournaledGrants`], for stores that keep grants and journal together
//!   ([`ClaimsWithIntent`]): the claim that spends a grant writes the dispatch intent in the
//!   same transaction, so no process death leaves a spent grant without an intent;
//! - group commit: each durable store commits the claims, intents, outcomes and records
//!   queued at once in one transaction ([`CommitStats`]); a claim or an intent returns once
//!   committed, an outcome or a record once queued (durable with the next commit, or
//!   [`ReceiptJournal::flush`]); [`StoredReceipts::settling`] with
//!   [`JournaledGrants::settled_by`] stores each call's outcome with its receipt record
//!   ([`SettlesCalls`]), so a crash leaves a call with both or neither;
//! - the audit chain: every stored record is a link (sequence number, previous hash, own
//!   hash over canonical bytes: [`link_input`]) appended in the transaction that stores it;
//!   [`AuditLog`] reads it back and keeps checkpoints, [`verify`] walks it (docs/AUDIT.md).
//!
//! Feature flags: `sqlite` (default: bundled SQLite), `postgres` (tokio-postgres through a
//! deadpool pool). The bundled SQLite syncs with `fsync(2)` unless it is built with
//! `LIBSQLITE3_FLAGS=-DHAVE_FDATASYNC=1` (this workspace sets it in `.cargo/config.toml`; a
//! host's own workspace can do the same): `fdatasync(2)` skips the file times, which change
//! with every commit, and makes each commit about one flush instead of two. Supported Rust: the workspace's `rust-version`
//! (1.89) and later.
//!
//! Time: [`SqliteStore`] judges expiry by each process's clock (its [`Clock`]), so
//! processes sharing a file must keep their clocks in step; [`PostgresStore`] uses the
//! database server's `now()`, so replicas agree whatever their own clocks say.
//!
//! Errors: a [`StoreError::Database`] message carries the database's own cause chain
//! ("sqlite claim failed: database is locked"), never connection parameters.
//!
//! ```no_run
//! # async fn host() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use aml_core::{approval_fn, tool_fn, Approval, ArgumentSnapshot, Effect, GuardedTool, Policy};
//! use aml_grants::{IssuingApproval, JournaledGrants, SqliteStore};
//!
//! let store = Arc::new(SqliteStore::open("/var/lib/my-host/boundary.db")?);
//! // Claims write the intent in their own transaction; the wrapped tool writes the outcome.
//! let journaled = JournaledGrants::new(store.clone());
//! let person = Arc::new(approval_fn(|req| async move { Ok(Approval::approve(req.proposal().digest())) }));
//! let tool = GuardedTool::builder("send_message", Effect::Send, "Send a status update", Arc::new(Policy::empty()))
//!     .resource_for(|a: &ArgumentSnapshot| Ok(a.str("to").unwrap_or_default().to_owned()))
//!     .approval(IssuingApproval::new(person, store.clone()))
//!     .grants(journaled.clone())
//!     .executor(journaled.executor(Arc::new(tool_fn(|_| async { Ok(serde_json::json!(null)) }))))
//!     .build()?;
//! # let _ = tool; Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod chain;
mod clock;
mod grant;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod group;
mod intent_claims;
mod issuing;
mod journal;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod receipts;
mod settle;
mod shared;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use chain::{
    link_hash, link_input, verify, AuditLog, AuditRow, CheckpointClaim, Damage, Finding, Intact, Link,
    GENESIS, LINK_KIND,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use grant::{new_grant_id, GrantIssuer, GrantLifetimes, StoreError};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use group::CommitStats;
pub use intent_claims::{ClaimsWithIntent, JournaledGrants};
pub use issuing::IssuingApproval;
pub use journal::{
    DecisionJournal, DecisionRecord, IntentEntry, IntentOutcome, IntentRef, JournaledExecutor,
    ReceiptJournal, RecordedOutcome, UnresolvedIntent,
};
pub use memory::MemoryGrants;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use receipts::{ReceiptStore, StoredReceipts, StoredRecord};
pub use settle::{CallOutcomes, Settlement, SettlesCalls};
pub use shared::{OpenGrants, SharedApproval};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

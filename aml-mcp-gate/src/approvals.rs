//! Signed human approval for the gate: a decision channel, the approver's keyring, and the
//! state's grant store, which issues the grant each signed approval names. Every use of
//! `aml-approval` is in this one function.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aml_core::{ActionBoundaryBuilder, ApprovalRecord, ReceiptSink, Record};
use aml_grants::{DecisionJournal, GrantIssuer, OpenGrants, SharedApproval};

use crate::sinks::Receipts;

/// Where a person decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Channel {
    /// An approval page on 127.0.0.1; its URL (with a secret token) goes to stderr.
    Web,
    /// The controlling terminal (/dev/tty), never stdin/stdout.
    Tty,
}

/// What the approval setup needs from the rest of the gate.
pub(crate) struct Setup<'a> {
    pub(crate) channel: Channel,
    pub(crate) key: Option<&'a Path>,
    pub(crate) timeout: Duration,
    pub(crate) port: u16,
    /// Where each signed decision is recorded, beside the call records.
    pub(crate) records: Receipts,
    /// Issues the grant each signed approval names (the state's store).
    pub(crate) issuer: Arc<dyn GrantIssuer>,
    /// Journals every verified decision before it counts (the state's store, if durable).
    pub(crate) decisions: Option<Arc<dyn DecisionJournal>>,
    /// With a shared store: grants a person issued on any gate (see `SharedApproval`).
    pub(crate) shared: Option<Arc<dyn OpenGrants>>,
}

/// Adds signed approvals to `boundary`.
pub(crate) async fn with_approvals(
    boundary: ActionBoundaryBuilder,
    setup: Setup<'_>,
) -> Result<ActionBoundaryBuilder, String> {
    use aml_approval::{
        ApproverKey, DecisionChannel, Keyring, SignedApprovalHook, StatementDecision, TtyApprovals,
        WebApprovals,
    };

    let key = match setup.key {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            ApproverKey::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => ApproverKey::generate("aml-mcp-gate-session").map_err(|e| e.to_string())?,
    };
    let keyring = Keyring::new()
        .with_key(key.key_id(), &key.public_key_hex())
        .map_err(|e| e.to_string())?;
    let channel: Arc<dyn DecisionChannel> = match setup.channel {
        Channel::Web => {
            let decisions = setup.records;
            let page = WebApprovals::builder(key)
                .port(setup.port)
                .on_decision(move |signed| {
                    let statement = signed.statement();
                    decisions.record(&Record::Approval(ApprovalRecord::new(
                        statement.proposal_sha256(),
                        statement.decision() == StatementDecision::Approve,
                        Some(statement.grant_id().to_owned()),
                        signed.to_value(),
                    )));
                })
                .start()
                .await
                .map_err(|e| format!("approval page: {e}"))?;
            eprintln!("aml-mcp-gate: approve or deny pending calls at {}", page.url());
            Arc::new(page)
        }
        Channel::Tty => Arc::new(TtyApprovals::new(key)),
    };
    let mut hook = SignedApprovalHook::new(keyring, channel, setup.issuer).with_timeout(setup.timeout);
    if let Some(journal) = setup.decisions {
        hook = hook.with_journal(journal);
    }
    // Replicas on one store: an approval given on any of them serves the first request for
    // that exact proposal on any of them, once.
    Ok(match setup.shared {
        Some(open) => boundary.approval(SharedApproval::new(Arc::new(hook), open)),
        None => boundary.approval(hook),
    })
}

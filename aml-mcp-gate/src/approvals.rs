//! Signed human approval for the gate: a decision channel, the approver's keyring, and a
//! one-use grant store that issues the grant each signed approval names. Every use of
//! `aml-approval` is in this one function.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aml_core::{ActionBoundaryBuilder, ApprovalRecord, JsonLinesSink, ReceiptSink, Record};

/// Where a person decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Channel {
    /// An approval page on 127.0.0.1; its URL (with a secret token) goes to stderr.
    Web,
    /// The controlling terminal (/dev/tty), never stdin/stdout.
    Tty,
}

/// Adds signed approvals on `channel` to `boundary`; decisions are journaled in `sink`.
pub(crate) async fn with_approvals(
    boundary: ActionBoundaryBuilder,
    channel: Channel,
    key: Option<&Path>,
    timeout: Duration,
    port: u16,
    sink: &Arc<JsonLinesSink>,
) -> Result<ActionBoundaryBuilder, String> {
    use aml_approval::{
        ApproverKey, DecisionChannel, Keyring, SignedApprovalHook, StatementDecision, TtyApprovals,
        WebApprovals,
    };
    use aml_grants::MemoryGrants;

    let key = match key {
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
    let channel: Arc<dyn DecisionChannel> = match channel {
        Channel::Web => {
            // Every signed decision is journaled beside the receipts.
            let decisions = Arc::clone(sink);
            let page = WebApprovals::builder(key)
                .port(port)
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
    let grants = Arc::new(MemoryGrants::default());
    let hook = SignedApprovalHook::new(keyring, channel, grants.clone()).with_timeout(timeout);
    Ok(boundary.approval(hook).grants_arc(grants))
}

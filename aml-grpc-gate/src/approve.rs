//! `--approve web`: signed human approval on `aml-approval`'s page (and its JSON API), with
//! grants kept in memory for this run.

use std::sync::Arc;
use std::time::Duration;

use aml_approval::{ApproverKey, DecisionChannel, Keyring, SignedApprovalHook, WebApprovals};
use aml_core::ActionBoundaryBuilder;
use aml_grants::{GrantIssuer, MemoryGrants};

/// Adds the approval page to `boundary`; returns it and the page's URL (with its token).
pub(crate) async fn with_web_approvals(
    boundary: ActionBoundaryBuilder,
    timeout: Duration,
) -> Result<(ActionBoundaryBuilder, String), String> {
    let key = ApproverKey::generate("aml-grpc-gate-session").map_err(|e| e.to_string())?;
    let keyring = Keyring::new()
        .with_key(key.key_id(), &key.public_key_hex())
        .map_err(|e| e.to_string())?;
    let page = WebApprovals::builder(key)
        .port(0)
        .start()
        .await
        .map_err(|e| format!("approval page: {e}"))?;
    let url = page.url();
    let grants = Arc::new(MemoryGrants::default());
    let channel: Arc<dyn DecisionChannel> = Arc::new(page);
    let hook = SignedApprovalHook::new(keyring, channel, Arc::clone(&grants) as Arc<dyn GrantIssuer>)
        .with_timeout(timeout);
    Ok((boundary.approval(hook).grants_arc(grants), url))
}

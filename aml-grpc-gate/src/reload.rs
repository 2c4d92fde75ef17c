//! `SIGHUP` re-reads `--policy`, as `aml-mcp-gate` does (ADR 016): the new policy is in force
//! for the next decision, including the re-checks of calls waiting for approval. A file that
//! does not load puts an invalid policy in force, so every call is blocked (`invalid_policy`)
//! and the log says why, until a valid file is loaded: the failed edit was most often a
//! revocation. The tools file is read at start only (its methods are resolved then).

use std::path::PathBuf;

use aml_core::{LivePolicy, Policy, ToolCatalog};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Listens for `SIGHUP` from now on (from here the signal no longer ends the process).
pub(crate) fn listen() -> Result<Signal, String> {
    signal(SignalKind::hangup()).map_err(|e| format!("cannot listen for SIGHUP: {e}"))
}

/// Logs each rule of `policy` that can allow nothing with `catalog` (a tool it does not
/// register, or another effect): most likely a typo.
pub(crate) fn warn_of_typos(catalog: &ToolCatalog, policy: &Policy) {
    for warning in catalog.policy_warnings(policy) {
        tracing::warn!("{warning}");
    }
}

/// Reloads `path` into `live` at every `SIGHUP`, logging what is in force and its typos.
pub(crate) async fn on_hangup(mut hangups: Signal, path: PathBuf, live: LivePolicy, catalog: ToolCatalog) {
    while hangups.recv().await.is_some() {
        let loaded = Policy::read_file(&path).unwrap_or_else(Policy::invalid);
        match (loaded.error(), loaded.digest()) {
            (Some(e), _) => tracing::error!(
                policy = %path.display(),
                "policy reload failed: {e}; every call is blocked (invalid_policy) until a valid policy is loaded"
            ),
            (None, digest) => {
                tracing::info!(
                    policy = %path.display(),
                    policy_sha256 = %digest.map(|d| d.to_string()).unwrap_or_default(),
                    "policy reloaded"
                );
                warn_of_typos(&catalog, &loaded);
            }
        }
        live.replace(loaded);
    }
}

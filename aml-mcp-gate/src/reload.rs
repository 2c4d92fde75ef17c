//! A live policy: the gate reloads `--policy` and `--tools` on `SIGHUP` and when either file
//! changes, so a host can revoke a rule without dropping sessions or pending approvals.
//!
//! A reload that fails (a file that cannot be read, a malformed policy, tools that do not
//! load) puts a policy in force that blocks every call with `invalid_policy` until a valid
//! one is loaded: a typo in a revocation must not leave the revoked rule in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aml_core::{LivePolicy, Policy, Sha256Digest};
use aml_mcp::relay::RelayTools;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// How often the files are looked at. A change is loaded once the files have stayed the
/// same for one more look (the debounce), so an editor's partial writes are not loaded.
const POLL: Duration = Duration::from_millis(500);

/// What the gate reloads, and where from.
#[derive(Debug)]
pub(crate) struct Reloader {
    policy_path: PathBuf,
    tools_path: Option<PathBuf>,
    policy: LivePolicy,
    tools: RelayTools,
    /// `--metrics`: told the tool names of each tools file loaded.
    metrics: Option<Arc<crate::telemetry::Metrics>>,
}

/// What both files held when last looked at (`None`: unreadable).
type Fingerprint = (Option<Sha256Digest>, Option<Sha256Digest>);

impl Reloader {
    /// Reloads into `policy` (shared with the boundary) and `tools` (shared with the relay).
    pub(crate) fn new(
        policy_path: PathBuf,
        tools_path: Option<PathBuf>,
        policy: LivePolicy,
        tools: RelayTools,
        metrics: Option<Arc<crate::telemetry::Metrics>>,
    ) -> Self {
        Reloader {
            policy_path,
            tools_path,
            policy,
            tools,
            metrics,
        }
    }

    /// Listens for `SIGHUP` now (from here on the signal no longer ends the process) and
    /// watches the files on a task of the current runtime. Aborting the returned handle
    /// drops the reloader's tools (and with them its handle to the deferred sink).
    pub(crate) fn start(self, in_force: &Policy) -> std::io::Result<tokio::task::AbortHandle> {
        let hangup = signal(SignalKind::hangup())?;
        tracing::info!(
            pid = std::process::id(),
            policy_sha256 = %digest_text(in_force),
            "policy in force; SIGHUP (kill -HUP PID) or a change to the files reloads it"
        );
        Ok(tokio::spawn(Arc::new(self).watch(hangup)).abort_handle())
    }

    async fn watch(self: Arc<Self>, mut hangup: Signal) {
        let mut seen = self.fingerprint().unwrap_or_default();
        let mut changed: Option<Fingerprint> = None;
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                received = hangup.recv() => {
                    if received.is_none() {
                        return;
                    }
                    self.reload("SIGHUP");
                    seen = self.fingerprint().unwrap_or_default();
                    changed = None;
                }
                _ = tick.tick() => {
                    let Some(now) = self.fingerprint() else {
                        // This look failed, not the files: try again on the next tick.
                        continue;
                    };
                    if now == seen {
                        changed = None;
                    } else if changed.as_ref() == Some(&now) {
                        self.reload("the files changed");
                        seen = now;
                        changed = None;
                    } else {
                        changed = Some(now);
                    }
                }
            }
        }
    }

    /// What the files hold now; `None` when a read failed for a reason that says nothing
    /// about the files (out of file descriptors, say): that is not a change to reload for.
    fn fingerprint(&self) -> Option<Fingerprint> {
        use std::io::ErrorKind;
        let of = |path: &Path| match std::fs::read(path) {
            Ok(bytes) => Some(Some(Sha256Digest::of(&bytes))),
            Err(e) => matches!(
                e.kind(),
                ErrorKind::NotFound
                    | ErrorKind::PermissionDenied
                    | ErrorKind::IsADirectory
                    | ErrorKind::NotADirectory
            )
            .then_some(None),
        };
        let tools = match self.tools_path.as_deref() {
            Some(path) => of(path)?,
            None => None,
        };
        Some((of(&self.policy_path)?, tools))
    }

    /// Loads both files and puts them in force, or fails closed; logs either way.
    pub(crate) fn reload(&self, why: &str) {
        match self.load() {
            Ok(digest) => {
                tracing::info!(policy_sha256 = %digest, "reloaded ({why}): the new policy is in force")
            }
            Err(e) => {
                tracing::error!(
                    "reload ({why}) failed: {e}; every call is blocked with invalid_policy until a valid policy is loaded"
                );
                self.policy.replace(Policy::invalid(e));
            }
        }
    }

    fn load(&self) -> Result<Sha256Digest, String> {
        let read =
            |path: &Path| std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()));
        let policy = Policy::read_file(&self.policy_path)?;
        if let Some(e) = policy.error() {
            return Err(format!("{}: {e}", self.policy_path.display()));
        }
        let mut tools = None;
        if let Some(path) = &self.tools_path {
            let text =
                String::from_utf8(read(path)?).map_err(|_| format!("{}: not UTF-8 text", path.display()))?;
            self.tools.replace_from_json(&text).map_err(|e| {
                crate::init::placeholder_error(path, &text)
                    .unwrap_or_else(|| format!("{}: {e}", path.display()))
            })?;
            tools = Some(text);
        }
        let digest = policy
            .digest()
            .ok_or_else(|| format!("{}: the policy has no canonical form", self.policy_path.display()))?;
        crate::run::warn_typos(tools.as_deref(), &policy);
        if let Some(metrics) = &self.metrics {
            metrics.set_tools(crate::telemetry::tool_names(tools.as_deref()));
        }
        self.policy.replace(policy);
        Ok(digest)
    }
}

fn digest_text(policy: &Policy) -> String {
    policy
        .digest()
        .map_or_else(|| "none (invalid)".to_owned(), |d| d.to_string())
}

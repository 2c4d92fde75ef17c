//! Signed human approval for the gate: a decision channel, the approver's keyring, and the
//! state's grant store, which issues the grant each signed approval names. Every use of
//! `aml-approval` is in this one function.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aml_core::{ActionBoundaryBuilder, ApprovalRecord, ReceiptSink, Record};
use aml_grants::{DecisionJournal, GrantIssuer, OpenGrants, ReceiptStore, SharedApproval};

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

/// The approval page's connection limits (ADR 011) and its notification command (ADR 020):
/// flags, each also in `[approval]` of `--config`.
#[derive(Debug, Default, clap::Args)]
pub(crate) struct PageLimitArgs {
    /// With --approve web: how many connections that have not shown the page's token it
    /// holds; one more is still let in, and the oldest of them is closed [default: 64]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_UNAUTHENTICATED))]
    pub(crate) approval_max_unauthenticated: Option<u64>,
    /// With --approve web: how many requests that showed the token it serves at once; more
    /// are answered 503 [default: 16]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_AUTHENTICATED))]
    pub(crate) approval_max_authenticated: Option<u64>,
    /// With --approve web: how long a connection has to show the token before it is closed
    /// [default: 2]
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=MAX_TOKEN_TIMEOUT))]
    pub(crate) approval_token_timeout: Option<u64>,
    /// With --approve web: how many live streams (tabs with the page open) it keeps; one
    /// more closes the oldest [default: 64]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_STREAMS))]
    pub(crate) approval_max_streams: Option<u64>,
    /// With --approve web: a program run for each new pending proposal, with the page's
    /// address, the digest and the tool as arguments (the URL with its token in
    /// $AML_APPROVAL_URL); never through a shell, killed after 10 s, its failure logged
    #[arg(long, value_name = "PROGRAM")]
    pub(crate) approval_notify: Option<PathBuf>,
}

const MAX_UNAUTHENTICATED: u64 = 10_000;
const MAX_AUTHENTICATED: u64 = 1_024;
const MAX_TOKEN_TIMEOUT: u64 = 60;
const MAX_STREAMS: u64 = 1_024;

/// [`PageLimitArgs`], checked, with their defaults.
#[derive(Debug, Clone)]
pub(crate) struct PageLimits {
    max_unauthenticated: usize,
    max_authenticated: usize,
    max_streams: usize,
    token_timeout: Duration,
    notify: Option<PathBuf>,
}

impl PageLimitArgs {
    /// The limits, or a usage error: a limit without `--approve web`, or a value from
    /// `--config` (which clap did not check) out of range.
    pub(crate) fn settle(
        &self,
        channel: Option<Channel>,
    ) -> Result<PageLimits, (clap::error::ErrorKind, String)> {
        use clap::error::ErrorKind;
        let given = [
            (
                self.approval_max_unauthenticated,
                "--approval-max-unauthenticated",
                MAX_UNAUTHENTICATED,
            ),
            (
                self.approval_max_authenticated,
                "--approval-max-authenticated",
                MAX_AUTHENTICATED,
            ),
            (
                self.approval_token_timeout,
                "--approval-token-timeout",
                MAX_TOKEN_TIMEOUT,
            ),
            (self.approval_max_streams, "--approval-max-streams", MAX_STREAMS),
        ];
        for (value, flag, max) in given {
            let Some(value) = value else { continue };
            if channel != Some(Channel::Web) {
                return Err((ErrorKind::ArgumentConflict, format!("{flag} needs --approve web")));
            }
            if !(1..=max).contains(&value) {
                return Err((
                    ErrorKind::InvalidValue,
                    format!("{flag} must be between 1 and {max}, not {value}"),
                ));
            }
        }
        if let Some(program) = &self.approval_notify {
            if channel != Some(Channel::Web) {
                return Err((
                    ErrorKind::ArgumentConflict,
                    "--approval-notify needs --approve web".into(),
                ));
            }
            if !runnable(program) {
                return Err((
                    ErrorKind::InvalidValue,
                    format!(
                        "--approval-notify {}: no such program (a path to an executable file, or a name on PATH)",
                        program.display()
                    ),
                ));
            }
        }
        let [unauthenticated, authenticated, timeout, streams] = given.map(|(value, _, _)| value);
        Ok(PageLimits {
            max_unauthenticated: unauthenticated.unwrap_or(64) as usize,
            max_authenticated: authenticated.unwrap_or(16) as usize,
            max_streams: streams.unwrap_or(64) as usize,
            token_timeout: Duration::from_secs(timeout.unwrap_or(2)),
            notify: self.approval_notify.clone(),
        })
    }
}

/// Whether `program` names an executable file: a path (with a `/`), or a name found on
/// `PATH`, as the page will start it.
fn runnable(program: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.components().count() > 1 || program.is_absolute() {
        return executable(program);
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| executable(&dir.join(program))))
}

/// What the approval setup needs from the rest of the gate.
pub(crate) struct Setup<'a> {
    pub(crate) channel: Channel,
    pub(crate) key: Option<&'a Path>,
    pub(crate) timeout: Duration,
    pub(crate) port: u16,
    /// The page's connection limits.
    pub(crate) page_limits: PageLimits,
    /// Where each signed decision is recorded, beside the call records.
    pub(crate) records: Receipts,
    /// Issues the grant each signed approval names (the state's store).
    pub(crate) issuer: Arc<dyn GrantIssuer>,
    /// Journals every verified decision before it counts (the state's store, if durable).
    pub(crate) decisions: Option<Arc<dyn DecisionJournal>>,
    /// With a shared store: grants a person issued on any gate (see `SharedApproval`).
    pub(crate) shared: Option<Arc<dyn OpenGrants>>,
    /// Where the page keeps its history of decided proposals (the state's store, if
    /// durable; in memory otherwise).
    pub(crate) history: Option<Arc<dyn ReceiptStore>>,
    /// `--metrics`: approvals pending and the time to each decision.
    pub(crate) metrics: Option<Arc<crate::telemetry::Metrics>>,
}

/// Who asks for `request`, as the approver is shown it.
fn requester(request: &aml_core::ApprovalRequest) -> aml_approval::Requester {
    let facts = request.facts();
    let who = aml_approval::Requester::unknown().with_caller(facts.caller.id());
    match &facts.client {
        Some(client) => who.with_client(client.name.as_str(), client.version.as_str()),
        None => who,
    }
}

/// Adds signed approvals to `boundary`.
pub(crate) async fn with_approvals(
    boundary: ActionBoundaryBuilder,
    setup: Setup<'_>,
) -> Result<ActionBoundaryBuilder, String> {
    use aml_approval::{
        ApproverKey, DecisionChannel, Keyring, NotifyCommand, ReceiptHistory, SignedApprovalHook,
        StatementDecision, TtyApprovals, WebApprovals,
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
            let limits = setup.page_limits;
            let mut page = WebApprovals::builder(key)
                .port(setup.port)
                .max_unauthenticated(limits.max_unauthenticated)
                .max_authenticated(limits.max_authenticated)
                .max_streams(limits.max_streams)
                .token_timeout(limits.token_timeout);
            if let Some(store) = setup.history {
                page = page.history(Arc::new(ReceiptHistory::new(store)));
            }
            if let Some(program) = limits.notify {
                page = page.notify(NotifyCommand::new(program));
            }
            let page = page
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
    // Who asks: the caller (a token's name, a JWT's subject, `local` on stdio) and the client
    // software as its `initialize` named itself, on the page, the prompt and in the history.
    let mut hook = SignedApprovalHook::new(keyring, channel, setup.issuer)
        .with_timeout(setup.timeout)
        .with_requester(requester);
    if let Some(journal) = setup.decisions {
        hook = hook.with_journal(journal);
    }
    // Replicas on one store: an approval given on any of them serves the first request for
    // that exact proposal on any of them, once.
    let hook: Arc<dyn aml_core::ApprovalHook> = match setup.shared {
        Some(open) => Arc::new(SharedApproval::new(Arc::new(hook), open)),
        None => Arc::new(hook),
    };
    Ok(match setup.metrics {
        Some(metrics) => boundary.approval(crate::telemetry::TimedApproval { inner: hook, metrics }),
        None => boundary.approval_arc(hook),
    })
}

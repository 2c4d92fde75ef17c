//! A prompt on the controlling terminal (`/dev/tty`), never on stdin/stdout, which may be
//! an MCP channel.

use std::io::{BufRead, BufReader, Write};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use aml_core::async_trait;
use aml_grants::{Clock, SystemClock};

use crate::display::{shown, Shown, ESCAPE_WARNING};
use crate::hook::{ChannelError, DecisionChannel, PendingApproval};
use crate::keys::ApproverKey;
use crate::statement::{SignedStatement, Statement, StatementDecision, Validity};

/// Asks on a terminal and signs the answer with the approver's key. Anything but `y`/`yes`
/// is a denial. Control, bidirectional and invisible characters in the proposal are shown
/// as `\u{…}` escapes, with a warning line.
///
/// One question at a time: a second request is asked only once the first is answered, so
/// an answer always belongs to the last question shown. A request that stops waiting (its
/// caller went away, or its wait ran out) is never asked if it was not yet; if it was, the
/// terminal says it was withdrawn and that the answer to it will be ignored.
#[derive(Debug, Clone)]
pub struct TtyApprovals {
    approver: Arc<ApproverKey>,
    input: std::path::PathBuf,
    output: std::path::PathBuf,
    statement_ttl: Duration,
    clock: Arc<dyn Clock>,
    /// Held from a question until its answer.
    terminal: Arc<Mutex<()>>,
}

/// Where one request's question is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Not asked yet (another question may be on the terminal).
    Waiting,
    /// Asked; no answer yet.
    Asked,
    /// Answered.
    Answered,
    /// The request stopped waiting.
    Withdrawn,
}

type Shared = Arc<Mutex<Stage>>;

fn stage(shared: &Shared) -> MutexGuard<'_, Stage> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

impl TtyApprovals {
    /// Prompts on `/dev/tty`.
    pub fn new(approver: ApproverKey) -> Self {
        Self::on(approver, "/dev/tty")
    }

    /// Prompts on another terminal device.
    pub fn on(approver: ApproverKey, path: impl Into<std::path::PathBuf>) -> Self {
        let path = path.into();
        Self::on_pair(approver, path.clone(), path)
    }

    /// Reads answers from `input` and writes prompts to `output` (two ends of a terminal,
    /// or files in tests).
    pub fn on_pair(
        approver: ApproverKey,
        input: impl Into<std::path::PathBuf>,
        output: impl Into<std::path::PathBuf>,
    ) -> Self {
        TtyApprovals {
            approver: Arc::new(approver),
            input: input.into(),
            output: output.into(),
            statement_ttl: Duration::from_secs(300),
            clock: Arc::new(SystemClock),
            terminal: Arc::default(),
        }
    }

    /// Signed decisions stay valid for `ttl` (default five minutes).
    pub fn with_statement_ttl(mut self, ttl: Duration) -> Self {
        self.statement_ttl = ttl;
        self
    }

    /// Reads time from `clock` (for the statements' issue and expiry times).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    fn ask(&self, pending: &PendingApproval, shared: &Shared) -> Result<StatementDecision, ChannelError> {
        let withdrawn = || ChannelError("the request stopped waiting".into());
        let _terminal = self.terminal.lock().unwrap_or_else(|p| p.into_inner());
        let tty = {
            let mut at = stage(shared);
            if *at == Stage::Withdrawn {
                return Err(withdrawn());
            }
            let tty = open(&self.input, false)?;
            let mut out = open(&self.output, true)?;
            out.write_all(prompt(pending).as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| ChannelError(e.to_string()))?;
            *at = Stage::Asked;
            tty
        };
        let mut line = String::new();
        BufReader::new(tty)
            .read_line(&mut line)
            .map_err(|e| ChannelError(e.to_string()))?;
        let mut at = stage(shared);
        if *at == Stage::Withdrawn {
            return Err(withdrawn());
        }
        *at = Stage::Answered;
        Ok(match line.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => StatementDecision::Approve,
            _ => StatementDecision::Deny,
        })
    }
}

fn open(path: &std::path::Path, write: bool) -> Result<std::fs::File, ChannelError> {
    std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .open(path)
        .map_err(|e| ChannelError(format!("cannot open {path:?}: {e}")))
}

/// Marks a request withdrawn when its caller stops waiting; if its question is on the
/// terminal, says so there.
struct OnWithdraw {
    shared: Shared,
    output: std::path::PathBuf,
    notice: String,
}

impl Drop for OnWithdraw {
    fn drop(&mut self) {
        let mut at = stage(&self.shared);
        let asked = *at == Stage::Asked;
        if matches!(*at, Stage::Waiting | Stage::Asked) {
            *at = Stage::Withdrawn;
        }
        if asked {
            // Written while the question's reader still holds the terminal, so it follows
            // that question and precedes the next.
            if let Ok(mut out) = open(&self.output, true) {
                let _ = out.write_all(self.notice.as_bytes()).and_then(|()| out.flush());
            }
        }
    }
}

/// Said on the terminal when the request of a question still shown stops waiting.
fn withdrawn_notice(pending: &PendingApproval) -> String {
    let p = &pending.proposal;
    format!(
        "\nWithdrawn: {} ({}) -> {} (SHA-256 {}) stopped waiting before a decision; nothing to decide. \
         Your answer to it will be ignored: press Enter to go on.\n",
        shown(p.tool()),
        shown(p.effect().as_str()),
        shown(p.resource()),
        p.digest()
    )
}

/// The prompt: every field that came from the proposal or the requester passes through
/// [`shown`].
fn prompt(pending: &PendingApproval) -> String {
    let p = &pending.proposal;
    let fields = crate::display::proposal_fields(p);
    // Who asks, as far as the host knows: a client names itself as it likes, so its name is
    // escaped like the proposal's fields.
    let who: Vec<(&str, Shown)> = pending
        .requester
        .parts()
        .into_iter()
        .filter_map(|(label, part)| part.map(|text| (label, shown(&text))))
        .collect();
    let warning = if fields.iter().any(|f| f.escaped) || who.iter().any(|(_, s)| s.escaped()) {
        format!("{ESCAPE_WARNING}\n")
    } else {
        String::new()
    };
    let asked_by = match who.is_empty() {
        true => "Asked by: not known\n".to_owned(),
        false => {
            let parts: Vec<String> = who
                .iter()
                .map(|(label, s)| format!("{label} {}", s.text()))
                .collect();
            format!("Asked by: {}\n", parts.join(", "))
        }
    };
    let [tool, effect, resource, purpose, canonical] = fields.map(|f| f.text);
    format!(
        "\nApproval requested: {tool} ({effect}) -> {resource}\nPurpose: {purpose}\n{asked_by}SHA-256: {}\n{canonical}\n{warning}Approve? [y/N] ",
        p.digest()
    )
}

#[async_trait]
impl DecisionChannel for TtyApprovals {
    async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError> {
        let this = self.clone();
        let asked = pending.clone();
        let shared: Shared = Arc::new(Mutex::new(Stage::Waiting));
        let _withdraw = OnWithdraw {
            shared: Arc::clone(&shared),
            output: self.output.clone(),
            notice: withdrawn_notice(&pending),
        };
        // Reading a terminal blocks: keep it off the async workers.
        let decision = tokio::task::spawn_blocking(move || this.ask(&asked, &shared))
            .await
            .map_err(|e| ChannelError(e.to_string()))??;
        let fail = |e: crate::StatementError| ChannelError(e.to_string());
        let validity = Validity::lasting(self.clock.now_ms(), self.statement_ttl).map_err(fail)?;
        Statement::new(
            pending.proposal.digest(),
            pending.grant_id,
            self.approver.key_id(),
            decision,
            validity,
        )
        .sign(&self.approver)
        .map_err(fail)
    }
}

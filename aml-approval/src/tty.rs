//! A prompt on the controlling terminal (`/dev/tty`), never on stdin/stdout, which may be
//! an MCP channel.

use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::time::Duration;

use aml_core::async_trait;
use aml_grants::{Clock, SystemClock};

use crate::hook::{ChannelError, DecisionChannel, PendingApproval};
use crate::statement::{ApproverKey, SignedStatement, Statement, Verdict, STATEMENT_PROTOCOL};

/// Asks on a terminal and signs the answer with the approver's key. Anything but `y`/`yes`
/// is a denial.
#[derive(Debug, Clone)]
pub struct TtyApprovals {
    approver: Arc<ApproverKey>,
    input: std::path::PathBuf,
    output: std::path::PathBuf,
    statement_ttl: Duration,
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
        }
    }

    fn ask(&self, pending: &PendingApproval) -> Result<Verdict, ChannelError> {
        let open = |path: &std::path::Path, write: bool| {
            std::fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .open(path)
                .map_err(|e| ChannelError(format!("cannot open {path:?}: {e}")))
        };
        let tty = open(&self.input, false)?;
        let mut out = open(&self.output, true)?;
        let p = &pending.proposal;
        write!(
            out,
            "\nApproval requested: {} ({}) -> {}\nPurpose: {}\nSHA-256: {}\n{}\nApprove? [y/N] ",
            p.tool(),
            p.effect(),
            p.resource(),
            p.purpose(),
            p.digest(),
            p.canonical_json()
        )
        .and_then(|()| out.flush())
        .map_err(|e| ChannelError(e.to_string()))?;
        let mut line = String::new();
        BufReader::new(tty)
            .read_line(&mut line)
            .map_err(|e| ChannelError(e.to_string()))?;
        Ok(match line.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => Verdict::Approve,
            _ => Verdict::Deny,
        })
    }
}

#[async_trait]
impl DecisionChannel for TtyApprovals {
    async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError> {
        let this = self.clone();
        let asked = pending.clone();
        // Reading a terminal blocks: keep it off the async workers.
        let verdict = tokio::task::spawn_blocking(move || this.ask(&asked))
            .await
            .map_err(|e| ChannelError(e.to_string()))??;
        let now = SystemClock.now_ms();
        Statement {
            protocol: STATEMENT_PROTOCOL.into(),
            proposal_sha256: pending.proposal.digest().to_string(),
            grant_id: pending.grant_id,
            approver_key_id: self.approver.key_id().into(),
            decision: verdict,
            issued_at_ms: now,
            expires_at_ms: now
                .saturating_add(i64::try_from(self.statement_ttl.as_millis()).unwrap_or(i64::MAX)),
        }
        .sign(&self.approver)
        .map_err(|e| ChannelError(e.to_string()))
    }
}

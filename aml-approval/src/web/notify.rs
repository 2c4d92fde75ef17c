//! The notification command: run for each new pending proposal so the host can tell a
//! person (a desktop notification, a chat message) by whatever means it has.
//!
//! Never through a shell: the program is started with its arguments as given. It runs
//! beside the page and blocks nothing: a command that cannot start, fails or outlives its
//! time limit (then it is killed) is logged, and the proposal waits on the page as always.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use aml_core::Sha256Digest;
use tokio::io::AsyncReadExt;
use tokio::sync::Semaphore;

use super::State;
use crate::display::shown;

/// At most this many notification commands run at once; a proposal that finds them all
/// busy is not notified (and the log says so).
const AT_ONCE: usize = 4;
/// How much of a failing command's stderr the log quotes.
const STDERR_QUOTED: usize = 2048;

/// The command run for each new pending proposal: `PROGRAM [ARGS…] URL DIGEST TOOL`.
///
/// `URL` is the page's address with the request's anchor (`http://127.0.0.1:PORT/#m-GRANT`)
/// but *without* the token: every local user can read a process's arguments (`ps`). The
/// whole URL, token included, is in the environment variable `AML_APPROVAL_URL` (readable
/// only by the same user), the grant id in `AML_APPROVAL_GRANT_ID`. Stdin is empty and
/// stdout discarded; a command that has not ended within `timeout` (default 10 s) is
/// killed. The three come after any `ARGS`: a program that reads options after its
/// operands (GNU `getopt` does) should end `ARGS` with `--`, as tool names may begin with `-`.
///
/// ```
/// use std::time::Duration;
/// use aml_approval::NotifyCommand;
///
/// let notify = NotifyCommand::new("/usr/local/bin/tell-me").arg("--urgent").timeout(Duration::from_secs(5));
/// # let _ = notify;
/// ```
#[derive(Debug, Clone)]
pub struct NotifyCommand {
    program: PathBuf,
    args: Vec<String>,
    timeout: Duration,
}

impl NotifyCommand {
    /// Runs `program` (a path, or a name looked up in `PATH`).
    pub fn new(program: impl Into<PathBuf>) -> Self {
        NotifyCommand {
            program: program.into(),
            args: Vec::new(),
            timeout: Duration::from_secs(10),
        }
    }

    /// Passes `arg` before the URL, digest and tool.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Kills the command if it has not ended within `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Runs the command, a bounded number at a time.
#[derive(Debug)]
pub(super) struct Notifier {
    command: Arc<NotifyCommand>,
    running: Arc<Semaphore>,
}

impl Notifier {
    pub(super) fn new(command: NotifyCommand) -> Self {
        Notifier {
            command: Arc::new(command),
            running: Arc::new(Semaphore::new(AT_ONCE)),
        }
    }

    /// Starts the command for the proposal `digest` of `tool`, requested under `grant_id`.
    pub(super) fn run(&self, state: &State, digest: Sha256Digest, tool: &str, grant_id: &str) {
        let Ok(permit) = Arc::clone(&self.running).try_acquire_owned() else {
            tracing::warn!(target: "aml.approval", %digest, "approval page: {AT_ONCE} notification commands still run; this proposal was not notified");
            return;
        };
        let anchor = format!("#m-{grant_id}");
        let mut command = tokio::process::Command::new(&self.command.program);
        command
            .args(&self.command.args)
            .arg(format!("http://{}/{anchor}", state.address))
            .arg(digest.to_string())
            .arg(tool)
            .env("AML_APPROVAL_URL", format!("{}{anchor}", state.url()))
            .env("AML_APPROVAL_GRANT_ID", grant_id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let (program, timeout) = (self.command.program.display().to_string(), self.command.timeout);
        tokio::spawn(async move {
            let _permit = permit;
            let mut child = match command.spawn() {
                Ok(child) => child,
                Err(e) => {
                    tracing::warn!(target: "aml.approval", %program, error = %e, %digest,
                                   "approval page: the notification command could not start");
                    return;
                }
            };
            let mut stderr = child.stderr.take();
            let ran = tokio::time::timeout(timeout, async {
                let mut said = Vec::new();
                if let Some(err) = stderr.as_mut() {
                    let _ = err.take(STDERR_QUOTED as u64).read_to_end(&mut said).await;
                }
                (child.wait().await, said)
            })
            .await;
            match ran {
                Ok((Ok(status), _)) if status.success() => {
                    tracing::debug!(target: "aml.approval", %program, %digest, "approval page: notified");
                }
                Ok((Ok(status), said)) => {
                    let said = shown(String::from_utf8_lossy(&said).trim()).to_string();
                    tracing::warn!(target: "aml.approval", %program, %status, stderr = %said, %digest,
                                   "approval page: the notification command failed");
                }
                Ok((Err(e), _)) => {
                    tracing::warn!(target: "aml.approval", %program, error = %e, %digest,
                                   "approval page: the notification command could not be waited for");
                }
                Err(_) => {
                    let _ = child.start_kill();
                    tracing::warn!(target: "aml.approval", %program, ?timeout, %digest,
                                   "approval page: the notification command ran too long and was killed");
                }
            }
        });
    }
}

//! The first two transports: this process's stdin/stdout (the client side, as MCP clients
//! start servers) and a server started as a child process (the upstream side).

use std::ffi::OsString;
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};

use super::frame::{read_messages, write_messages};
use super::{Connection, Upstream};

/// Messages queued per direction before a slow reader holds the writer back.
const QUEUE: usize = 1024;

/// A connection over a byte stream pair, read and written by two tasks on the current
/// runtime. Messages longer than `max` bytes arrive as [`super::Inbound::Oversized`].
pub fn connection<R, W>(reader: R, writer: W, max: usize) -> Connection
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    connect(reader, writer, max, None)
}

/// With `failed_write` (what a failed write means, for the log), a failed write ends the
/// reading too: a peer that can no longer be written to has gone. A client's requests are
/// then not taken up to run unanswered; a server is not sent requests it cannot read, and
/// the relay treats it as gone.
fn connect<R, W>(reader: R, writer: W, max: usize, failed_write: Option<&'static str>) -> Connection
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (in_tx, incoming) = mpsc::channel(QUEUE);
    let (outgoing, out_rx) = mpsc::channel(QUEUE);
    let reading = tokio::spawn(async move {
        if let Some(e) = read_messages(reader, max, in_tx).await {
            tracing::warn!(target: "aml_mcp::relay", "reading failed: {e}");
        }
    });
    tokio::spawn(async move {
        if let Err(e) = write_messages(writer, out_rx).await {
            match failed_write {
                Some(what) => {
                    tracing::warn!(target: "aml_mcp::relay", "{what} ({e}): it is taken as gone");
                    reading.abort();
                }
                None => tracing::warn!(target: "aml_mcp::relay", "writing failed: {e}"),
            }
        }
    });
    Connection { incoming, outgoing }
}

/// The client side on this process's stdin and stdout. When both are pipes (as MCP clients
/// start servers), they are read and written through the event loop; otherwise (a terminal,
/// a file) through tokio's blocking stdio.
pub fn stdio_connection(max: usize) -> Connection {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    use tokio::net::unix::pipe;
    let fifo = |fd: std::os::fd::BorrowedFd<'_>| {
        fd.try_clone_to_owned()
            .map(std::fs::File::from)
            .and_then(|f| f.metadata())
            .is_ok_and(|m| m.file_type().is_fifo())
    };
    // Both or neither: making one a non-blocking pipe would change the descriptor that
    // tokio's blocking stdio then reads.
    if fifo(std::io::stdin().as_fd()) && fifo(std::io::stdout().as_fd()) {
        let pipes = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .and_then(pipe::Receiver::from_owned_fd)
            .and_then(|input| {
                let output = std::io::stdout()
                    .as_fd()
                    .try_clone_to_owned()
                    .and_then(pipe::Sender::from_owned_fd)?;
                Ok((input, output))
            });
        if let Ok((input, output)) = pipes {
            return connect(input, output, max, Some("the client cannot be answered"));
        }
    }
    connect(
        tokio::io::stdin(),
        tokio::io::stdout(),
        max,
        Some("the client cannot be answered"),
    )
}

/// A server started as a child process: its stdin and stdout carry MCP, its stderr is this
/// process's. Dropping [`ChildUpstream::stop`]'s sender (or the returned value) does not kill
/// it; [`ChildUpstream::stop`] does, after a grace period.
#[derive(Debug)]
pub struct ChildUpstream {
    /// The server's connection and exit signal, for [`super::run`].
    pub upstream: Upstream,
    /// Ends the child: closes its input, waits up to the grace period, then kills it.
    pub stop: oneshot::Sender<std::time::Duration>,
    /// Fires with the exit status once the child has ended after a stop.
    pub stopped: oneshot::Receiver<Option<ExitStatus>>,
}

/// Starts `command` (program and arguments) as the upstream server, with this process's
/// environment and working directory.
pub fn spawn_child(command: &[OsString], max: usize) -> std::io::Result<ChildUpstream> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no server command"))?;
    let mut command = tokio::process::Command::new(program);
    command.args(args);
    spawn_command(command, max)
}

/// Starts `command` as the upstream server: the caller has set its program, arguments and
/// whatever else it needs (working directory, environment, what happens to it when this
/// process dies); its stdin and stdout become the connection, its stderr is this process's,
/// and it is killed if the returned value is dropped before [`ChildUpstream::stop`].
pub fn spawn_command(mut command: tokio::process::Command, max: usize) -> std::io::Result<ChildUpstream> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
        (Some(stdin), Some(stdout)) => (stdin, stdout),
        _ => return Err(std::io::Error::other("the child's pipes are missing")),
    };
    let connection = connect(stdout, stdin, max, Some("the server cannot be written to"));
    let (exit_tx, exited) = oneshot::channel();
    let (stop, stop_rx) = oneshot::channel::<std::time::Duration>();
    let (stopped_tx, stopped) = oneshot::channel();
    tokio::spawn(async move {
        let mut stop_rx = stop_rx;
        tokio::select! {
            status = child.wait() => {
                let text = match &status {
                    Ok(status) => status.to_string(),
                    Err(e) => format!("cannot wait for it: {e}"),
                };
                let _ = exit_tx.send(text);
                // Hold the stop signal so the caller can still await `stopped`.
                let _ = (&mut stop_rx).await;
                let _ = stopped_tx.send(status.ok());
            }
            grace = &mut stop_rx => {
                let grace = grace.unwrap_or_default();
                let status = match tokio::time::timeout(grace, child.wait()).await {
                    Ok(status) => status.ok(),
                    Err(_) => {
                        let _ = child.start_kill();
                        child.wait().await.ok()
                    }
                };
                let _ = stopped_tx.send(status);
            }
        }
    });
    Ok(ChildUpstream {
        upstream: Upstream { connection, exited },
        stop,
        stopped,
    })
}

//! What the workspace's tests share, so that no test file grows its own copy: a fresh
//! scratch directory per test, waits on a condition with a deadline (never a bare sleep),
//! a child process that is killed and reaped however its test ends ([`Child`]) with its
//! output read line by line under a deadline ([`Lines`]), and where the interop peers that
//! `scripts/interop-setup` installs live.
//!
//! ```
//! use std::time::Duration;
//!
//! let dir = aml_test_support::scratch_dir("doc", "example");
//! std::fs::write(dir.join("ready"), "yes").unwrap();
//! let text = aml_test_support::wait_until("the ready file", Duration::from_secs(1), || {
//!     std::fs::read_to_string(dir.join("ready")).ok()
//! });
//! assert_eq!(text, "yes");
//! ```

#[cfg(feature = "relay")]
pub mod relay;

use std::future::Future;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, ExitStatus, Output};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How often a wait looks at its condition again.
pub const POLL: Duration = Duration::from_millis(10);

/// A fresh, empty directory under the system's temp dir, named after the suite, the test
/// and this process (so parallel runs never share one); whatever a previous run left there
/// is removed first.
pub fn scratch_dir(suite: &str, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aml-{suite}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create the scratch directory {dir:?}: {e}"));
    dir
}

/// Looks at `condition` every [`POLL`] until it gives a value, and returns that value;
/// panics naming `what` if `timeout` passes first.
pub fn wait_until<T>(what: &str, timeout: Duration, mut condition: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = condition() {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "waited {timeout:?} for {what}, in vain"
        );
        std::thread::sleep(POLL);
    }
}

/// [`wait_until`] for async tests: `condition` is awaited each time.
pub async fn wait_until_async<T, F>(what: &str, timeout: Duration, mut condition: impl FnMut() -> F) -> T
where
    F: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = condition().await {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "waited {timeout:?} for {what}, in vain"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// A test's child process, named for the messages about it: killed (SIGKILL) and reaped
/// when dropped unless it has exited, so a failing test leaves no process behind; every wait
/// on it is bounded.
///
/// ```
/// use std::process::{Command, Stdio};
/// use std::time::Duration;
///
/// let mut command = Command::new("sh");
/// command.args(["-c", "echo ready >&2; read line; echo \"got $line\""]);
/// command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
/// let mut child = aml_test_support::Child::spawn("the echo script", &mut command);
/// let (log, out) = (child.stderr_lines(), child.stdout_lines());
/// // Wait for its readiness line, not for a while.
/// log.wait_for("ready", Duration::from_secs(10));
/// use std::io::Write;
/// writeln!(child.stdin(), "hello").unwrap();
/// assert_eq!(out.next(Duration::from_secs(10)), "got hello");
/// assert!(child.wait(Duration::from_secs(10)).success());
/// ```
#[derive(Debug)]
pub struct Child {
    // `None` once `output` has taken it.
    process: Option<std::process::Child>,
    what: String,
}

impl Child {
    /// Starts `command`; panics naming `what` if it cannot.
    pub fn spawn(what: &str, command: &mut Command) -> Child {
        let process = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Child {
            process: Some(process),
            what: what.to_owned(),
        }
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.process.as_ref().expect("a running child").id()
    }

    /// The process itself, for what this guard does not wrap.
    pub fn process(&mut self) -> &mut std::process::Child {
        self.process.as_mut().expect("a running child")
    }

    /// Its stdin (taken: dropping it closes the pipe); panics if it was not piped or is taken.
    pub fn stdin(&mut self) -> ChildStdin {
        let what = self.what.clone();
        self.process()
            .stdin
            .take()
            .unwrap_or_else(|| panic!("{what}'s stdin is not piped, or taken"))
    }

    /// Its stdout, read line by line from now on (see [`Lines`]).
    pub fn stdout_lines(&mut self) -> Lines {
        let what = format!("{}'s stdout", self.what);
        let out = self.process().stdout.take();
        let out = out.unwrap_or_else(|| panic!("{what} is not piped, or taken"));
        Lines::read(&what, out)
    }

    /// Its stderr, read line by line from now on (see [`Lines`]).
    pub fn stderr_lines(&mut self) -> Lines {
        let what = format!("{}'s stderr", self.what);
        let err = self.process().stderr.take();
        let err = err.unwrap_or_else(|| panic!("{what} is not piped, or taken"));
        Lines::read(&what, err)
    }

    /// Sends `signal` (`TERM`, `HUP`, `KILL`, …) as `kill -SIGNAL PID` does.
    pub fn signal(&self, signal: &str) {
        signal_pid(self.id(), signal);
    }

    /// Its exit status, if it has exited (reaping it).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.process().try_wait().expect("try_wait on a child")
    }

    /// Waits until it exits, at most `timeout`; then kills it and panics.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        self.wait_within(timeout)
            .unwrap_or_else(|| panic!("waited {timeout:?} for {} to exit, in vain", self.what))
    }

    /// Its exit status if it exits within `timeout`; else it is killed (and reaped) and the
    /// answer is `None`, for a caller that fails with more to say.
    pub fn wait_within(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if started.elapsed() >= timeout {
                let _ = self.process().kill();
                let _ = self.process().wait();
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGTERM, then [`Child::wait`].
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        if self.exited().is_none() {
            self.signal("TERM");
        }
        self.wait(timeout)
    }

    /// Its exit status and the output of the pipes not taken, at most `timeout`; then kills
    /// it and panics.
    pub fn output(mut self, timeout: Duration) -> Output {
        let id = self.id();
        let process = self.process.take().expect("a running child");
        let (done, output) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(process.wait_with_output());
        });
        match output.recv_timeout(timeout) {
            Ok(output) => output.unwrap_or_else(|e| panic!("{}: {e}", self.what)),
            Err(_) => {
                signal_pid(id, "KILL");
                panic!("waited {timeout:?} for {} to exit, in vain", self.what);
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Some(process) = self.process.as_mut() {
            if process.try_wait().ok().flatten().is_none() {
                let _ = process.kill();
                let _ = process.wait();
            }
        }
    }
}

/// Sends `signal` to process `pid`, as `kill -SIGNAL PID` does; panics if `kill` fails.
pub fn signal_pid(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("cannot run kill");
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// Lines of a child's output (or any reader), read by a thread of their own so that a test
/// waits for a line with a deadline instead of blocking on the pipe.
#[derive(Debug)]
pub struct Lines {
    lines: Receiver<String>,
    what: String,
}

impl Lines {
    /// Starts reading `from`; `what` names it in the messages of a failed wait.
    pub fn read<R: Read + Send + 'static>(what: &str, from: R) -> Lines {
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(from).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines {
            lines,
            what: what.to_owned(),
        }
    }

    /// The next line, within `timeout`; panics if none comes (or the output ended).
    pub fn next(&self, timeout: Duration) -> String {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("waited {timeout:?} for a line of {}, in vain", self.what)
            }
            Err(RecvTimeoutError::Disconnected) => panic!("{} ended", self.what),
        }
    }

    /// The next line within `timeout`; `Err` says why there is none (timed out, or the
    /// output ended), for a caller that fails with more to say.
    pub fn next_within(&self, timeout: Duration) -> Result<String, RecvTimeoutError> {
        self.lines.recv_timeout(timeout)
    }

    /// The next line within `timeout`, or `None` when the output has ended; panics when it
    /// stays open that long without a line.
    pub fn next_or_end(&self, timeout: Duration) -> Option<String> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => panic!(
                "waited {timeout:?} for a line or the end of {}, in vain",
                self.what
            ),
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// The first line from now on that contains `needle` (a readiness line, say), within
    /// `timeout`; the lines before it are passed over.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> String {
        let started = Instant::now();
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(e) => panic!(
                    "waited {timeout:?} for a line of {} with {needle:?}, in vain ({e})",
                    self.what
                ),
            }
        }
    }

    /// Every line until the output ends, within `timeout`.
    pub fn rest(&self, timeout: Duration) -> Vec<String> {
        self.rest_within(timeout).unwrap_or_else(|so_far| {
            panic!(
                "waited {timeout:?} for the end of {}, in vain; so far: {so_far:?}",
                self.what
            )
        })
    }

    /// Every line until the output ends, if it ends within `timeout`; else `Err` with the
    /// lines read so far.
    pub fn rest_within(&self, timeout: Duration) -> Result<Vec<String>, Vec<String>> {
        let started = Instant::now();
        let mut rest = Vec::new();
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(line) => rest.push(line),
                Err(RecvTimeoutError::Disconnected) => return Ok(rest),
                Err(RecvTimeoutError::Timeout) => return Err(rest),
            }
        }
    }

    /// The lines read so far and not taken yet, without waiting.
    pub fn so_far(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }
}

/// The repository's root (this crate sits one level below it).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("aml-test-support sits in the repository")
        .to_path_buf()
}

/// Where `scripts/interop-setup` installs the peers nobody here wrote.
pub fn interop_dir() -> PathBuf {
    repo().join("target/interop")
}

/// The interop venv's Python (the official MCP SDK, grpcio, the A2UI SDKs); panics, naming
/// the setup script, when it is absent: a test that needs a peer fails loudly, never skips.
pub fn python() -> PathBuf {
    interop_peer("venv/bin/python")
}

/// An installed npm peer's command (`mcp-server-everything`, `mcp-server-filesystem`).
pub fn node_bin(name: &str) -> PathBuf {
    interop_peer(&format!("node/node_modules/.bin/{name}"))
}

fn interop_peer(relative: &str) -> PathBuf {
    let path = interop_dir().join(relative);
    assert!(
        path.exists(),
        "interop peer missing: {path:?}; run `bash scripts/interop-setup`"
    );
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_dir_starts_empty() {
        let dir = scratch_dir("support", "empty");
        std::fs::write(dir.join("left-over"), "x").unwrap();
        let again = scratch_dir("support", "empty");
        assert_eq!(dir, again);
        assert_eq!(std::fs::read_dir(&again).unwrap().count(), 0);
    }

    #[test]
    #[should_panic(expected = "waited 30ms for nothing, in vain")]
    fn a_wait_that_runs_out_names_what_it_waited_for() {
        wait_until::<()>("nothing", Duration::from_millis(30), || None);
    }

    #[test]
    fn a_dropped_child_is_killed_and_reaped() {
        // `sleep` stands for a child that would never exit by itself.
        let mut command = Command::new("sleep");
        command.arg("300");
        let child = Child::spawn("a child that never exits", &mut command);
        let pid = child.id();
        drop(child);
        // Reaped, not a zombie: no such process any more.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    #[should_panic(expected = "waited 50ms for a child that never exits to exit, in vain")]
    fn a_bounded_wait_on_a_child_names_it() {
        let mut command = Command::new("sleep"); // never exits by itself
        command.arg("300");
        Child::spawn("a child that never exits", &mut command).wait(Duration::from_millis(50));
    }

    #[test]
    fn lines_wait_for_a_readiness_line_and_see_the_end() {
        let mut command = Command::new("sh");
        command
            .args(["-c", "echo starting; echo ready at 1234; echo last"])
            .stdout(std::process::Stdio::piped());
        let mut child = Child::spawn("the script", &mut command);
        let out = child.stdout_lines();
        assert_eq!(out.wait_for("ready", Duration::from_secs(10)), "ready at 1234");
        assert_eq!(out.rest(Duration::from_secs(10)), ["last"]);
        assert!(child.wait(Duration::from_secs(10)).success());
    }

    #[test]
    fn a_wait_returns_the_first_value() {
        let mut n = 0;
        let got = wait_until("the third look", Duration::from_secs(5), || {
            n += 1;
            (n == 3).then_some(n)
        });
        assert_eq!(got, 3);
    }
}

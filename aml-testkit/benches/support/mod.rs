//! What the MCP benchmarks share: the bare forwarding process they measure the gate
//! against, and the release gate binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A bare forwarding process: starts the server, then copies stdin to it and its stdout
/// back, as read, with poll(2). The physical cost of one more process on the path.
const FORWARDER_C: &str = r#"
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static int copy(int from, int to) {
    char buf[65536];
    ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0) return -1;
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, n - off);
        if (w <= 0) return -1;
        off += w;
    }
    return 0;
}
int main(int argc, char **argv) {
    int in[2], out[2];
    if (argc < 2 || pipe(in) || pipe(out)) return 2;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0); dup2(out[1], 1);
        close(in[0]); close(in[1]); close(out[0]); close(out[1]);
        execvp(argv[1], argv + 1);
        _exit(127);
    }
    close(in[0]); close(out[1]);
    struct pollfd fds[2] = {{0, POLLIN, 0}, {out[0], POLLIN, 0}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) break;
        if (fds[0].revents && copy(0, in[1])) { close(in[1]); fds[0].fd = -1; }
        if (fds[1].revents && copy(out[0], 1)) break;
    }
    kill(pid, SIGTERM);
    waitpid(pid, 0, 0);
    return 0;
}
"#;

/// Compiles the forwarder in `dir` with the machine's `cc`; its path.
pub(crate) fn build_forwarder(dir: &Path) -> PathBuf {
    let source = dir.join("forward.c");
    let binary = dir.join("forward");
    std::fs::write(&source, FORWARDER_C).unwrap();
    let status = std::process::Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("a C compiler (cc) builds the baseline forwarder");
    assert!(status.success(), "cc failed to build the forwarder");
    binary
}

/// The release `aml-mcp-gate`.
pub(crate) fn gate_binary() -> PathBuf {
    // Needs the release build: `cargo build --release -p aml-mcp-gate`.
    aml_testkit::mcp::gate_binary_path()
        .expect("aml-mcp-gate (release): cargo build --release -p aml-mcp-gate")
}

/// The CPU time a process's threads have used so far (Linux `schedstat`, ns); `None` where
/// it cannot be read.
pub(crate) fn cpu_ns(pid: Option<u32>) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", pid?)).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// The p50 and p99 of `samples`.
pub(crate) fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let n = samples.len();
    (samples[n / 2], samples[n * 99 / 100])
}

/// The machine's load average (1, 5, 15 minutes), as a bench prints it beside its figures.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

#[path = "summary.rs"]
pub(crate) mod summary;

#[path = "peer.rs"]
pub(crate) mod peer;

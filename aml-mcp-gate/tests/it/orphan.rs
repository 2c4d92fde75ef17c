//! After `kill -9` of the gate, its server does not live on as an orphan, even one that
//! ignores the end of its input: on Linux its parent-death signal kills it with the gate.
#![cfg(target_os = "linux")]

use crate::raw;

use std::path::Path;
use std::time::Duration;

use raw::{gate_options, wait_for, wait_until, write_config, StdioGate};

/// How long the server may outlive the gate (the kernel signals it at once; this bounds a
/// slow machine).
const BOUND: Duration = Duration::from_secs(10);

/// Whether process `pid` still runs (a zombie, dead but not yet reaped by whoever adopted
/// it, does not).
fn running(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

fn server_pid(dir: &Path) -> String {
    let file = dir.join("server.pid");
    wait_for("the server to start", || {
        std::fs::read_to_string(&file).is_ok_and(|t| t.ends_with('\n'))
    });
    std::fs::read_to_string(&file).unwrap().trim().to_owned()
}

#[test]
fn a_server_that_ignores_eof_dies_with_a_gate_killed_with_sigkill() {
    let dir = raw::work("orphan");
    write_config(&dir);
    // A server that never reads its input: the end of it would not stop it.
    let never_reads = "exec sleep 300"; // simulates a server that ignores EOF, never exits itself
    let script = format!("echo $$ > '{}'; {never_reads}", dir.join("server.pid").display());
    let server = ["sh".to_owned(), "-c".to_owned(), script];
    let mut gate = StdioGate::start(&dir, &gate_options(&dir), &server);
    let pid = server_pid(&dir);
    assert!(running(&pid), "the server runs");
    raw::signal(&gate, "KILL");
    assert_eq!(gate.wait().code(), None, "killed by a signal");
    // Kills the server should the wait fail: a failed test leaves no orphan either.
    struct KillOnPanic<'a>(&'a str);
    impl Drop for KillOnPanic<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() && running(self.0) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", self.0])
                    .status();
            }
        }
    }
    let _guard = KillOnPanic(&pid);
    wait_until(
        &format!("the server {pid} to die with the gate (it outlived the gate by {BOUND:?})"),
        BOUND,
        || (!running(&pid)).then_some(()),
    );
}

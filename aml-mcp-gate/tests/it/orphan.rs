//! After `kill -9` of the gate, its server does not live on as an orphan, even one that
//! ignores the end of its input: on Linux its parent-death signal kills it with the gate.
#![cfg(target_os = "linux")]

use crate::raw;

use std::path::Path;
use std::time::{Duration, Instant};

use raw::{gate_options, wait_for, write_config, StdioGate};

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
    let script = format!("echo $$ > '{}'; exec sleep 300", dir.join("server.pid").display());
    let server = ["sh".to_owned(), "-c".to_owned(), script];
    let mut gate = StdioGate::start(&dir, &gate_options(&dir), &server);
    let pid = server_pid(&dir);
    assert!(running(&pid), "the server runs");
    raw::signal(&gate, "KILL");
    assert_eq!(gate.wait().code(), None, "killed by a signal");
    let deadline = Instant::now() + BOUND;
    while running(&pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let orphan = running(&pid);
    if orphan {
        let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
    }
    assert!(!orphan, "the server {pid} outlived the gate by {BOUND:?}");
}

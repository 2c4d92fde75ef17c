//! What the raw-wire tests of the gate share: the gate on stdio driven line by line (every
//! wait bounded), in front of `scripts/interop/mcp_raw_stdin_server.py`, a server that logs
//! every raw line it reads and dispatches by method whether or not a message has an id.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};

use serde_json::{json, Value};

pub use crate::common::{python, repo, wait_until, Child, Lines, GATE, WAIT};
pub use crate::session::{http, pending};

pub fn work(tag: &str) -> PathBuf {
    aml_test_support::scratch_dir("gate-raw", tag)
}

/// The raw-stdin server's command line, logging into `dir/raw.log` (every line it read) and
/// `dir/ran.log` (every tools/call it ran, answered or not).
pub fn raw_server(dir: &Path) -> Vec<String> {
    vec![
        python().display().to_string(),
        repo()
            .join("scripts/interop/mcp_raw_stdin_server.py")
            .display()
            .to_string(),
        dir.join("raw.log").display().to_string(),
        dir.join("ran.log").display().to_string(),
    ]
}

/// The host's files for the raw server: `send` needs a person's approval, `echo` is allowed.
pub fn write_config(dir: &Path) {
    let tool = |name: &str, effect: &str| {
        json!({"name": name, "effect": effect, "purpose": format!("Use {name}"),
               "resource": {"fixed": name}, "input_schema": {"type": "object"}})
    };
    let tools = json!({"tools": [tool("send", "send"), tool("echo", "read")]});
    std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
    let policy = json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send", "effect": "send", "resource": "send", "requires_approval": true},
        {"tool": "echo", "effect": "read", "resource": "echo", "requires_approval": false}]});
    std::fs::write(dir.join("policy.json"), policy.to_string()).unwrap();
}

/// The gate's own options for the files in `dir`.
pub fn gate_options(dir: &Path) -> Vec<String> {
    let file = |name: &str| dir.join(name).display().to_string();
    vec![
        "--policy".into(),
        file("policy.json"),
        "--tools".into(),
        file("tools.json"),
        "--receipts".into(),
        file("receipts.jsonl"),
        "--state".into(),
        file("state.sqlite3"),
    ]
}

/// Lines of a file so far (none if it does not exist).
pub fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The call records of the receipt log.
pub fn records(dir: &Path) -> Vec<Value> {
    read_lines(&dir.join("receipts.jsonl"))
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["record"] == "aml-call-record/1")
        .collect()
}

/// Waits (bounded) until `ready` holds.
pub fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    wait_until(what, WAIT, || ready().then_some(()));
}

/// Sends `signal` (`HUP`, `TERM`, `KILL`) to the gate, as `kill -SIGNAL PID` does.
pub fn signal(gate: &StdioGate, signal: &str) {
    gate.child.signal(signal);
}

/// The gate on stdio, its stderr in `dir/stderr.txt`.
pub struct StdioGate {
    pub child: Child,
    stdin: Option<ChildStdin>,
    out: Lines,
    pub dir: PathBuf,
}

impl StdioGate {
    /// `aml-mcp-gate OPTIONS -- SERVER…`.
    pub fn start(dir: &Path, options: &[String], server: &[String]) -> StdioGate {
        Self::start_in(dir, options, server, None)
    }

    /// [`StdioGate::start`] with the gate's working directory set.
    pub fn start_in(dir: &Path, options: &[String], server: &[String], cwd: Option<&Path>) -> StdioGate {
        let stderr = std::fs::File::create(dir.join("stderr.txt")).unwrap();
        let mut command = Command::new(GATE);
        command
            .args(options)
            .arg("--")
            .args(server)
            .env("RUST_LOG", "aml_mcp=info,aml_mcp_gate=info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        let mut child = Child::spawn("the gate", &mut command);
        let stdin = Some(child.stdin());
        let out = child.stdout_lines();
        StdioGate {
            child,
            stdin,
            out,
            dir: dir.to_owned(),
        }
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub fn send_json(&mut self, message: &Value) {
        self.send(&message.to_string());
    }

    /// The next message the gate writes (bounded).
    pub fn recv(&self) -> Value {
        let line = self
            .out
            .next_within(WAIT)
            .unwrap_or_else(|e| panic!("no line from the gate within {WAIT:?} ({e}): {}", self.stderr()));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Every line the gate writes until it closes its output (bounded).
    pub fn rest(&self) -> Vec<Value> {
        let rest = self
            .out
            .rest_within(WAIT)
            .unwrap_or_else(|_| panic!("the gate kept its output open: {}", self.stderr()));
        rest.iter()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }

    pub fn initialize(&mut self) -> Value {
        self.send_json(
            &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "1"}}}),
        );
        let answer = self.recv();
        self.send_json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        answer
    }

    /// Closes the gate's stdin (the client leaves).
    pub fn close(&mut self) {
        self.stdin = None;
    }

    /// Waits (bounded) for the gate to exit.
    pub fn wait(&mut self) -> ExitStatus {
        self.child
            .wait_within(WAIT)
            .unwrap_or_else(|| panic!("the gate did not exit within {WAIT:?}: {}", self.stderr()))
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.txt")).unwrap_or_default()
    }
}

//! What the pin and init tests share: `aml-mcp-gate init` run as a user runs it, and a
//! session of the official Python MCP SDK client (`scripts/interop/mcp_session_client.py`)
//! through the gate to any server, taking orders (`call`, `list`) one at a time.
#![allow(dead_code, unreachable_pub)]

use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::session;
pub use session::{lines, outcome, pair, python, repo, GATE, WAIT};

pub fn work(tag: &str) -> std::path::PathBuf {
    aml_test_support::scratch_dir("gate-pinned", tag)
}

/// `aml-mcp-gate init --out DIR -- SERVER…`, bounded.
pub fn init(dir: &Path, server: &[String], env: &[(&str, String)]) -> Output {
    init_run(dir, &[], server, env)
}

/// `aml-mcp-gate init --out DIR OPTIONS… -- SERVER…`, bounded.
pub fn init_with(dir: &Path, options: &[&str], server: &[String]) -> Output {
    init_run(dir, options, server, &[])
}

fn init_run(dir: &Path, options: &[&str], server: &[String], env: &[(&str, String)]) -> Output {
    let child = Command::new(GATE)
        .arg("init")
        .arg("--out")
        .arg(dir)
        .args(options)
        .arg("--")
        .args(server)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bounded(child)
}

pub fn wait_bounded(mut child: Child) -> Output {
    let deadline = Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not exit within {WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub fn write_json(path: &Path, value: &Value) {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, serde_json::to_string_pretty(value).unwrap()).unwrap();
    std::fs::rename(&temp, path).unwrap();
}

/// The gate's command line in front of `server`, with the files in `dir`.
pub fn gate_command(dir: &Path, server: &[String]) -> Vec<String> {
    let file = |name: &str| dir.join(name).display().to_string();
    let mut command = vec![GATE.to_owned()];
    for (flag, value) in [
        ("--policy", file("policy.json")),
        ("--tools", file("tools.json")),
        ("--receipts", file("receipts.jsonl")),
        ("--state", file("state.sqlite3")),
    ] {
        command.push(flag.to_owned());
        command.push(value);
    }
    command.push("--".to_owned());
    command.extend(server.iter().cloned());
    command
}

/// One Python SDK client session running `command` (the gate).
pub struct Client {
    child: Child,
    orders: Option<ChildStdin>,
    answers: Receiver<Value>,
    pub log: Receiver<String>,
}

impl Client {
    pub fn start(command: &[String], env: &[(&str, String)]) -> Client {
        let mut child = Command::new(python())
            .arg(repo().join("scripts/interop/mcp_session_client.py"))
            .arg(serde_json::to_string(command).unwrap())
            .env("RUST_LOG", "warn,aml_mcp_gate=info")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let answers = lines(child.stdout.take().unwrap(), |line| {
            serde_json::from_str(&line).unwrap()
        });
        let log = lines(child.stderr.take().unwrap(), |line| line);
        let orders = child.stdin.take();
        let client = Client {
            child,
            orders,
            answers,
            log,
        };
        assert_eq!(client.answer(), json!({"ready": true}));
        client
    }

    fn answer(&self) -> Value {
        match self.answers.recv_timeout(WAIT) {
            Ok(answer) => answer,
            Err(_) => {
                let log: Vec<String> = self.log.try_iter().collect();
                panic!(
                    "the client did not answer within {WAIT:?}; its stderr:\n{}",
                    log.join("\n")
                )
            }
        }
    }

    fn order(&mut self, order: Value) -> Value {
        let stdin = self.orders.as_mut().unwrap();
        writeln!(stdin, "{order}").unwrap();
        stdin.flush().unwrap();
        self.answer()
    }

    /// One `tools/call`: the client's answer (`is_error`, `text`, `verdict`).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.order(json!({"call": tool, "arguments": arguments}))
    }

    /// The names `tools/list` shows, sorted.
    pub fn listed(&mut self) -> Vec<String> {
        let answer = self.order(json!({"list": true}));
        let mut names: Vec<String> = answer["tools"]
            .as_array()
            .expect("a tool list")
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    }

    /// Waits (bounded) for a log line containing `needle`.
    pub fn wait_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => panic!("no log line with {needle:?} within {WAIT:?}"),
            }
        }
    }

    /// Ends the session (EOF to the client) and waits, bounded, for it to exit.
    pub fn close(mut self) {
        drop(self.orders.take());
        let deadline = Instant::now() + WAIT;
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the client did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The call records in the gate's receipt log (complete once the gate has exited).
pub fn records(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("receipts.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|record: &Value| record["record"] == "aml-call-record/1")
        .collect()
}

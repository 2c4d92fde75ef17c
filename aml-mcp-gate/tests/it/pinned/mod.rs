//! What the pin and init tests share: `aml-mcp-gate init` run as a user runs it, and a
//! session of the official Python MCP SDK client (`scripts/interop/mcp_session_client.py`)
//! through the gate to any server, taking orders (`call`, `list`) one at a time.
#![allow(dead_code, unreachable_pub)]

use std::io::Write;
use std::path::Path;
use std::process::{ChildStdin, Command, Output, Stdio};

use serde_json::{json, Value};

pub use crate::common::{python, repo, Child, Lines, GATE, WAIT};
pub use crate::session::{outcome, pair, receipts as records};

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
    let mut command = Command::new(GATE);
    command
        .arg("init")
        .arg("--out")
        .arg(dir)
        .args(options)
        .arg("--")
        .args(server)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Child::spawn("aml-mcp-gate init", &mut command).output(WAIT)
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
    answers: Lines,
    pub log: Lines,
}

impl Client {
    pub fn start(command: &[String], env: &[(&str, String)]) -> Client {
        let mut child = Child::spawn(
            "the Python SDK client",
            Command::new(python())
                .arg(repo().join("scripts/interop/mcp_session_client.py"))
                .arg(serde_json::to_string(command).unwrap())
                .env("RUST_LOG", "warn,aml_mcp_gate=info")
                .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let answers = child.stdout_lines();
        let log = child.stderr_lines();
        let orders = Some(child.stdin());
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
        match self.answers.next_within(WAIT) {
            Ok(line) => serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")),
            Err(_) => {
                let log = self.log.so_far();
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
        self.log.wait_for(needle, WAIT)
    }

    /// Ends the session (EOF to the client) and waits, bounded, for it to exit.
    pub fn close(mut self) {
        drop(self.orders.take());
        self.child.wait(WAIT);
    }
}

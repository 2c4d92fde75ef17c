//! Interop: Python `grpcio` (installed by `scripts/interop-setup`) against the example
//! server `tool_server`, driven as a user would: a client that cancels, hits its deadline or
//! is killed while approval is pending never gets the tool entered; a client that cancels
//! while the tool runs leaves a recorded receipt; a tool failing with 100 KB of error text
//! is `UNKNOWN` with `ErrorInfo`.
//!
//! The example binary is built by `cargo test` (which builds every example of the package it
//! tests) at `target/<profile>/examples/tool_server`; this test finds it next to its own
//! executable and fails loudly when it is missing (e.g. under `cargo test --test` alone).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const SEND: &str = r#"{"to":"team@example.test","body":"hi"}"#;
const SEND_LATER: &str = r#"{"to":"team@example.test","body":"hi again"}"#;
const APPROVAL_DELAY_MS: u64 = 1500;
const WAIT: Duration = Duration::from_secs(20);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    aml_test_support::python()
}

fn example_server() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<this test> -> target/<profile>/examples/tool_server
    let path = exe.parent().unwrap().join("../examples/tool_server");
    assert!(
        path.is_file(),
        "{path:?} missing: run `cargo test -p aml-grpc` (it builds the examples) or \
         `cargo build -p aml-grpc --example tool_server`"
    );
    path
}

/// Lines a child writes to stdout, as JSON, read on a thread.
fn lines(stdout: ChildStdout) -> Receiver<Value> {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let value = serde_json::from_str(&line).unwrap_or_else(|_| json!({"unparsed": line}));
            if send.send(value).is_err() {
                break;
            }
        }
    });
    receive
}

/// Kills the child when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Server {
    _process: Running,
    address: String,
    stdout: Receiver<Value>,
    /// Everything read from stdout so far.
    seen: Vec<Value>,
    receipts: PathBuf,
}

impl Server {
    fn start(dir: &Path, name: &str, fixture: Value) -> Server {
        let config = json!({
            "policy": {"protocol": "aml-action-policy/1", "rules": [
                {"tool": "send_message", "effect": "send", "resource": "team@example.test", "requires_approval": true},
                {"tool": "flaky", "effect": "write", "resource": "x", "requires_approval": false}]},
            "tools": [
                {"name": "send_message", "effect": "send", "purpose": "Send a status update",
                 "resource": {"argument": "to"},
                 "input_schema": aml_core::testing::send_message_schema()},
                {"name": "flaky", "effect": "write", "purpose": "Write x", "resource": {"fixed": "x"},
                 "input_schema": {"type": "object"}}],
            "fixture": fixture,
        });
        let config_path = dir.join(format!("{name}.json"));
        std::fs::write(&config_path, config.to_string()).unwrap();
        let receipts = dir.join(format!("{name}.receipts.jsonl"));
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let mut child = Command::new(example_server())
            .args(["--addr", "127.0.0.1:0", "--config"])
            .arg(&config_path)
            .arg("--receipts")
            .arg(&receipts)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let stdout = lines(child.stdout.take().unwrap());
        let mut server = Server {
            _process: Running(child),
            address: String::new(),
            stdout,
            seen: Vec::new(),
            receipts,
        };
        let listening = server.wait_for("listening");
        server.address = listening["listening"].as_str().unwrap().to_owned();
        server
    }

    /// Waits (at most [`WAIT`]) for the next stdout line that has `key`.
    fn wait_for(&mut self, key: &str) -> Value {
        let until = Instant::now() + WAIT;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let line = self
                .stdout
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {key:?} line from the server within {WAIT:?}"));
            self.seen.push(line.clone());
            if line.get(key).is_some() {
                return line;
            }
        }
    }

    /// Reads stdout (at most [`WAIT`]) up to the tool entry for proposal `digest`; how many
    /// tool entries it has shown in all by then.
    fn entries_up_to(&mut self, digest: &str) -> usize {
        while self.wait_for("entered")["proposal_sha256"] != digest {}
        self.seen.iter().filter(|l| l.get("entered").is_some()).count()
    }

    /// Waits (at most [`WAIT`]) until the receipts file holds `n` call records.
    fn records(&self, n: usize) -> Vec<Value> {
        aml_test_support::wait_until(&format!("{n} call records"), WAIT, || {
            let text = std::fs::read_to_string(&self.receipts).unwrap_or_default();
            // Whole lines only: the writer may be part way through a long one.
            let whole = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
            let records: Vec<Value> = whole.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            (records.len() >= n).then_some(records)
        })
    }
}

/// A Python client process.
struct Client {
    process: Running,
    stdin: ChildStdin,
    stdout: Receiver<Value>,
}

impl Client {
    fn start(server: &Server, mode: &str, tool: &str, arguments: &str) -> Client {
        let mut child = Command::new(python())
            .arg(repo().join("scripts/interop/grpc_calls.py"))
            .args([&server.address, mode, tool, arguments])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = lines(child.stdout.take().unwrap());
        Client {
            process: Running(child),
            stdin,
            stdout,
        }
    }

    fn next(&self) -> Value {
        self.stdout
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("no line from the python client within {WAIT:?}"))
    }

    /// Tells a `cancel` client to cancel; returns its outcome line.
    fn cancel(mut self) -> Value {
        writeln!(self.stdin, "cancel").unwrap();
        assert_eq!(self.next(), json!({"cancel_accepted": true}));
        self.next()
    }
}

fn receipt(record: &Value) -> (&str, &str) {
    let receipt = &record["receipt"];
    (
        receipt["execution_status"].as_str().unwrap(),
        receipt["reason"].as_str().unwrap(),
    )
}

#[test]
fn a_client_that_gives_up_during_approval_never_gets_the_tool_entered() {
    let dir = aml_test_support::scratch_dir("grpc-interop", "approval");
    let fixture = json!({"approval_delay_ms": APPROVAL_DELAY_MS, "approve": true,
                         "tool_delay_ms": 0, "tool_error_bytes": 0});
    let mut server = Server::start(&dir, "approval", fixture);

    // Cancelled while the approver is thinking.
    let client = Client::start(&server, "cancel", "send_message", SEND);
    assert_eq!(client.next(), json!({"started": true}));
    server.wait_for("approval_requested");
    assert_eq!(client.cancel()["code"], "CANCELLED");
    let cancelled = &server.records(1)[0];
    assert_eq!(receipt(cancelled), ("blocked", "approval_error"));
    assert_eq!(
        cancelled["detail"],
        "the caller went away before the tool was entered"
    );

    // The client's own deadline passes while the approver is thinking.
    let client = Client::start(&server, "deadline", "send_message", SEND);
    let late = client.next();
    assert_eq!(late["code"], "DEADLINE_EXCEEDED", "{late}");
    server.wait_for("approval_requested");
    assert_eq!(receipt(&server.records(2)[1]), ("blocked", "approval_error"));

    // The client is SIGKILLed while the approver is thinking.
    let mut client = Client::start(&server, "hang", "send_message", SEND);
    assert_eq!(client.next(), json!({"started": true}));
    server.wait_for("approval_requested");
    client.process.0.kill().unwrap();
    let killed = &server.records(3)[2];
    assert_eq!(receipt(killed), ("blocked", "approval_error"));
    assert_eq!(
        killed["detail"],
        "the caller went away before the tool was entered"
    );

    // A later call (its own body, so its own proposal), waited for, is approved and enters
    // the tool once: the count can move. Its approval came after every one of those
    // (the same delay, asked later), so by its entry the tool was never entered for them.
    let client = Client::start(&server, "call", "send_message", SEND_LATER);
    assert_eq!(
        client.next(),
        json!({"code": "OK", "receipt_reason": "host_dispatch_returned"})
    );
    let records = server.records(4);
    assert_eq!(records.len(), 4);
    let later = records[3]["receipt"]["proposal_sha256"].as_str().unwrap();
    assert!(records[..3]
        .iter()
        .all(|r| r["receipt"]["proposal_sha256"] != later));
    assert_eq!(server.entries_up_to(later), 1, "{:?}", server.seen);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_that_cancels_while_the_tool_runs_leaves_a_recorded_receipt() {
    let dir = aml_test_support::scratch_dir("grpc-interop", "tool");
    let fixture = json!({"approval_delay_ms": 0, "approve": true,
                         "tool_delay_ms": 1500, "tool_error_bytes": 0});
    let mut server = Server::start(&dir, "tool", fixture);
    let client = Client::start(&server, "cancel", "send_message", SEND);
    assert_eq!(client.next(), json!({"started": true}));
    let entered = server.wait_for("entered");
    assert_eq!(client.cancel()["code"], "CANCELLED");
    let record = &server.records(1)[0];
    assert_eq!(receipt(record), ("dispatched", "host_dispatch_returned"));
    assert_eq!(record["receipt"]["proposal_sha256"], entered["proposal_sha256"]);
    assert!(record["result"]["sha256"].is_string());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tool_failing_with_100_kb_of_error_text_is_unknown_with_error_info() {
    let dir = aml_test_support::scratch_dir("grpc-interop", "error");
    let fixture = json!({"approval_delay_ms": 0, "approve": true,
                         "tool_delay_ms": 0, "tool_error_bytes": 100_000});
    let server = Server::start(&dir, "error", fixture);
    let client = Client::start(&server, "call", "flaky", "{}");
    let failed = client.next();
    assert_eq!(failed["code"], "UNKNOWN", "{failed}");
    let info = &failed["error_info"];
    assert_eq!(info["reason"], "host_dispatch_error");
    assert_eq!(info["domain"], "aml.action-boundary");
    assert_eq!(info["detail_bytes"], 1024);
    assert_eq!(info["detail_truncated"], true);
    assert_eq!(info["receipt"]["execution_status"], "unknown");
    // The host's record keeps the whole error text.
    let record = &server.records(1)[0];
    assert_eq!(record["detail"].as_str().map(str::len), Some(100_000));
    let _ = std::fs::remove_dir_all(&dir);
}

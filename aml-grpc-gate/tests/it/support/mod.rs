//! What the gateway's tests share: the test API's descriptors, the Python peers, the gateway
//! binary, and bounded waits on their output lines.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use prost::Message;
use serde_json::{json, Value};

/// How long any one step may take.
pub const WAIT: Duration = Duration::from_secs(60);

/// The interop venv's Python; panics, naming the setup script, when it is absent.
pub fn python() -> PathBuf {
    aml_test_support::python()
}

/// A script under `tests/python/`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
}

/// Compiles `tests/proto/payments.proto` (with protox, so no protoc) and writes the
/// descriptor set to `dir/payments.pb`.
pub fn descriptor_set(dir: &Path) -> PathBuf {
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proto");
    let set = protox::compile(["payments.proto"], [&proto]).expect("the test proto compiles");
    let path = dir.join("payments.pb");
    std::fs::write(&path, set.encode_to_vec()).unwrap();
    path
}

/// The test API's descriptors, compiled with protox.
pub fn descriptor_pool() -> prost_reflect::DescriptorPool {
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proto");
    let set = protox::compile(["payments.proto"], [&proto]).expect("the test proto compiles");
    prost_reflect::DescriptorPool::decode(set.encode_to_vec().as_slice()).unwrap()
}

/// A child process, killed when dropped, and its stdout as JSON lines.
pub struct Running {
    pub child: Child,
    pub lines: Receiver<Value>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// Starts `command` with stdout piped and read as JSON lines on a thread.
    pub fn start(mut command: Command) -> Running {
        let mut child = command
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line).unwrap_or_else(|_| json!({"unparsed": line}));
                if send.send(value).is_err() {
                    break;
                }
            }
        });
        Running { child, lines }
    }

    /// The next line that has `key`, within [`WAIT`].
    pub fn line_with(&self, key: &str) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(WAIT)
                .unwrap_or_else(|_| panic!("no line with {key:?} within {WAIT:?}"));
            if line.get(key).is_some() {
                return line[key].clone();
            }
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

/// Runs the Python client (`tests/python/client.py TARGET ARGS...`) and returns its one
/// JSON line; fails after [`WAIT`].
pub fn client(target: &str, args: &[&str]) -> Value {
    let mut command = Command::new(python());
    command
        .arg(script("client.py"))
        .arg(target)
        .args(args)
        .stderr(Stdio::inherit());
    let run = Running::start(command);
    let out = run.lines.recv_timeout(WAIT).unwrap_or_else(|_| {
        panic!("client {args:?} printed nothing (it failed, see above) or not within {WAIT:?}")
    });
    assert!(out.get("unparsed").is_none(), "client {args:?}: {out}");
    out
}

/// Starts the Python upstream on `descriptors`, logging what it receives to `log`; returns
/// it and its `127.0.0.1:PORT`.
pub fn upstream(descriptors: &Path, log: &Path) -> (Running, String) {
    let mut command = Command::new(python());
    command.arg(script("upstream.py")).arg(descriptors).arg(log);
    let running = Running::start(command);
    let port = running.line_with("listening");
    (running, format!("127.0.0.1:{port}"))
}

/// Starts the gateway binary with `args` after the listen address; returns it and its
/// address (after the `approval_page` line, when `--approve web` is among the args).
pub fn gateway(args: &[&str]) -> (Running, String, Option<String>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aml-grpc-gate"));
    command
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_LOG", "warn");
    let running = Running::start(command);
    let page = args
        .contains(&"--approve")
        .then(|| running.line_with("approval_page").as_str().unwrap().to_owned());
    let address = running.line_with("listening").as_str().unwrap().to_owned();
    (running, address, page)
}

/// A gateway started in a scratch folder of its own (`tag`) with `tools` and `policy`, the
/// test API's descriptor set, `--receipts` in that folder, and `extra` arguments, in front of
/// `upstream_url`; returns it, its address and its receipts file.
pub fn gateway_on(
    tag: &str,
    tools: &str,
    policy: &str,
    upstream_url: &str,
    extra: &[&str],
) -> (Running, String, PathBuf) {
    let dir = aml_test_support::scratch_dir("grpc-gate", tag);
    let descriptors = descriptor_set(&dir).display().to_string();
    std::fs::write(dir.join("tools.json"), tools).unwrap();
    std::fs::write(dir.join("policy.json"), policy).unwrap();
    let receipts = dir.join("receipts.jsonl");
    let files = |p: &str| dir.join(p).display().to_string();
    let (tools, policy, receipts_arg) = (files("tools.json"), files("policy.json"), files("receipts.jsonl"));
    let mut args = vec!["--upstream", upstream_url, "--tools", &tools, "--policy", &policy];
    args.extend(["--descriptors", &descriptors, "--receipts", &receipts_arg]);
    args.extend(extra);
    let (gate, address, _) = gateway(&args);
    (gate, address, receipts)
}

/// The lines of the upstream's request log.
pub fn upstream_log(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

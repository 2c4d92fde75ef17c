//! A raw-wire MCP client for relay tests: writes lines to `aml-mcp-gate`'s stdin and reads
//! its stdout, every wait bounded. The gate runs in front of the relay fixture
//! ([`crate::relay_fixture`]) or any other server.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::harness::HarnessError;
use crate::mcp::read_json_lines;

/// How long a test waits for one line from the gate.
pub const LINE_WAIT: Duration = Duration::from_secs(20);

/// A gate process driven line by line.
#[derive(Debug)]
pub struct WireGate {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The gate's output; `None` once the test closed it.
    lines: Option<Lines<BufReader<ChildStdout>>>,
    dir: PathBuf,
}

fn err(e: impl core::fmt::Display) -> HarnessError {
    HarnessError(e.to_string())
}

/// The fixture's tools as a host registers them: every one a read of `fixture`, plus
/// `unlisted` (registered, no rule allows it); `secret` (served) is not registered.
pub fn fixture_tools() -> Value {
    let names = [
        "echo",
        "slow",
        "garbage",
        "garbage_with_id",
        "silent",
        "huge",
        "die",
        "error",
        "sample",
        "verbatim",
        "unlisted",
    ];
    json!({"tools": names.iter().map(|n| json!({"name": n, "effect": "read", "purpose": format!("fixture {n}"),
        "resource": {"fixed": "fixture"}, "input_schema": {"type": "object"}})).collect::<Vec<_>>()})
}

/// A policy that allows every fixture tool but `unlisted`; `approval` makes `slow` need one.
pub fn fixture_policy(approval: bool) -> Value {
    let names = [
        "echo",
        "slow",
        "garbage",
        "garbage_with_id",
        "silent",
        "huge",
        "die",
        "error",
        "sample",
        "verbatim",
    ];
    json!({"protocol": "aml-action-policy/1", "rules": names.iter().map(|n| json!({"tool": n, "effect": "read",
        "resource": "fixture", "requires_approval": approval && *n == "slow"})).collect::<Vec<_>>()})
}

/// A fresh folder `aml-{suite}-{tag}-{pid}` in the temporary folder, holding the fixture's
/// `tools.json` and `policy.json` ([`fixture_tools`], [`fixture_policy`] without approval).
pub fn fixture_dir(suite: &str, tag: &str) -> Result<PathBuf, HarnessError> {
    let dir = std::env::temp_dir().join(format!("aml-{suite}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(err)?;
    std::fs::write(dir.join("tools.json"), fixture_tools().to_string()).map_err(err)?;
    std::fs::write(dir.join("policy.json"), fixture_policy(false).to_string()).map_err(err)?;
    Ok(dir)
}

impl WireGate {
    /// The `aml-mcp-gate` of this build with `dir`'s policy and tools and `extra` options, in
    /// front of the relay fixture served by `fixture` (the `aml-testkit` binary).
    pub fn in_front_of_fixture(fixture: &str, dir: &Path, extra: &[&str]) -> Result<Self, HarnessError> {
        let (policy, tools) = (dir.join("policy.json"), dir.join("tools.json"));
        let (policy, tools) = (policy.display().to_string(), tools.display().to_string());
        let mut args = vec!["--policy", policy.as_str(), "--tools", tools.as_str()];
        args.extend_from_slice(extra);
        let gate = crate::mcp::gate_binary_path()?;
        Self::start(&gate, dir, &args, &[fixture, "serve-relay-fixture"])
    }

    /// Starts `gate` with `args` (before `--`), receipts in `dir/receipts.jsonl`, in front of
    /// `server` (program and arguments); the server's audit file is `dir/audit.jsonl`
    /// (`AML_RELAY_AUDIT`). The gate's stderr goes to `dir/stderr.txt`.
    pub fn start(gate: &Path, dir: &Path, args: &[&str], server: &[&str]) -> Result<Self, HarnessError> {
        std::fs::create_dir_all(dir).map_err(err)?;
        let stderr = std::fs::File::create(dir.join("stderr.txt")).map_err(err)?;
        let mut child = tokio::process::Command::new(gate)
            .args(args)
            .arg("--receipts")
            .arg(dir.join("receipts.jsonl"))
            .arg("--")
            .args(server)
            .env("AML_RELAY_AUDIT", dir.join("audit.jsonl"))
            .env("RUST_LOG", "aml_mcp=info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(err)?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or_else(|| err("no stdout"))?;
        Ok(WireGate {
            child,
            stdin,
            lines: Some(BufReader::new(stdout).lines()),
            dir: dir.to_owned(),
        })
    }

    /// Writes one line (a newline is added).
    pub async fn send(&mut self, line: &[u8]) {
        if let Some(stdin) = &mut self.stdin {
            let _ = stdin.write_all(line).await;
            let _ = stdin.write_all(b"\n").await;
            let _ = stdin.flush().await;
        }
    }

    /// Writes one message.
    pub async fn send_json(&mut self, message: &Value) {
        self.send(message.to_string().as_bytes()).await;
    }

    /// The next line the gate writes, raw.
    pub async fn recv_raw(&mut self) -> Result<String, HarnessError> {
        let lines = self
            .lines
            .as_mut()
            .ok_or_else(|| err("this test closed the gate's output"))?;
        match tokio::time::timeout(LINE_WAIT, lines.next_line()).await {
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => Err(err("the gate closed its output")),
            Ok(Err(e)) => Err(err(e)),
            Err(_) => Err(err(format!("no line from the gate within {LINE_WAIT:?}"))),
        }
    }

    /// The next message the gate writes.
    pub async fn recv(&mut self) -> Result<Value, HarnessError> {
        let line = self.recv_raw().await?;
        serde_json::from_str(&line).map_err(|e| err(format!("{e}: {line}")))
    }

    /// `initialize` and `notifications/initialized`; the server's result.
    pub async fn initialize(&mut self) -> Result<Value, HarnessError> {
        self.send_json(
            &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}},
            "clientInfo": {"name": "wire-test", "version": "1"}}}),
        )
        .await;
        let answer = self.recv().await?;
        self.send_json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        Ok(answer)
    }

    /// Calls `name` with `arguments` under `id`; the answer.
    pub async fn call(&mut self, id: Value, name: &str, arguments: Value) -> Result<Value, HarnessError> {
        self.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                               "params": {"name": name, "arguments": arguments}}))
            .await;
        self.recv().await
    }

    /// The gate's process id (`None` once it has been waited for).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Closes this end of the gate's stdout: a client that stops reading.
    pub fn stop_reading(&mut self) {
        self.lines = None;
    }

    /// Closes the gate's stdin (the client goes away).
    pub fn close(&mut self) {
        self.stdin = None;
    }

    /// Closes stdin and waits (bounded) for the gate to exit.
    pub async fn finish(mut self) -> Result<(ExitStatus, PathBuf), HarnessError> {
        self.close();
        let status = self.wait(Duration::from_secs(30)).await?;
        Ok((status, self.dir.clone()))
    }

    /// Waits (bounded) for the gate to exit, stdin left as it is.
    pub async fn wait(&mut self, limit: Duration) -> Result<ExitStatus, HarnessError> {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .map_err(|_| err(format!("the gate did not exit within {limit:?}")))?
            .map_err(err)
    }

    /// The receipt log so far.
    pub fn receipts(&self) -> Vec<Value> {
        read_json_lines(&self.dir.join("receipts.jsonl")).unwrap_or_default()
    }

    /// The server's audit file so far.
    pub fn audit(&self) -> Vec<Value> {
        read_json_lines(&self.dir.join("audit.jsonl")).unwrap_or_default()
    }

    /// Waits (bounded, checking every 10 ms) until the server's audit file has `n` lines.
    pub async fn audit_reaches(&self, n: usize) -> Result<Vec<Value>, HarnessError> {
        let deadline = tokio::time::Instant::now() + LINE_WAIT;
        loop {
            let audit = self.audit();
            if audit.len() >= n {
                return Ok(audit);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(err(format!("the server saw {} of {n} messages", audit.len())));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The gate's stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.txt")).unwrap_or_default()
    }

    /// The working directory (policy, tools, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

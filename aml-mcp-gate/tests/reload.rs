//! A live policy, driven the way a user meets it: the official Python MCP SDK client keeps one
//! session open through `aml-mcp-gate` to a server built with the official Python SDK that
//! records every call it receives (`scripts/interop/mcp_notice_server.py`), while the test
//! edits `policy.json`, sends `SIGHUP`, and approves on the approval page.
//!
//! `scripts/interop-setup` installs the Python SDK into `target/interop`; without it these
//! tests fail, naming the setup to run.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const GATE: &str = env!("CARGO_BIN_EXE_aml-mcp-gate");
const WAIT: Duration = Duration::from_secs(30);
const TO: &str = "team@example.test";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    let python = repo().join("target/interop/venv/bin/python");
    assert!(
        python.is_file(),
        "the Python MCP SDK is missing at {python:?}: run `bash scripts/interop-setup` (scripts/test does)"
    );
    python
}

fn work(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aml-gate-reload-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn policy(requires_approval: Option<bool>) -> String {
    let rules: Vec<Value> = requires_approval
        .map(|r| json!({"tool": "send_notice", "effect": "send", "resource": TO, "requires_approval": r}))
        .into_iter()
        .collect();
    json!({"protocol": "aml-action-policy/1", "rules": rules}).to_string()
}

/// Writes the file whole, the way an editor's save replaces it.
fn write(path: &Path, text: &str) {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, path).unwrap();
}

/// One session: the Python client, which starts the gate, which starts the server.
struct Session {
    client: Child,
    orders: Option<ChildStdin>,
    answers: Receiver<Value>,
    log: Receiver<String>,
    dir: PathBuf,
}

impl Session {
    fn start(dir: &Path, requires_approval: Option<bool>, extra: &[&str]) -> Session {
        std::fs::write(dir.join("policy.json"), policy(requires_approval)).unwrap();
        let schema = json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                            "required": ["to", "body"], "additionalProperties": false});
        let tools = json!({"tools": [{"name": "send_notice", "effect": "send", "purpose": "Send a notice for the user",
                                      "resource": {"argument": "to"}, "input_schema": schema}]});
        std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
        let mut command: Vec<String> = vec![GATE.into()];
        for (flag, file) in [
            ("--policy", "policy.json"),
            ("--tools", "tools.json"),
            ("--receipts", "receipts.jsonl"),
        ] {
            command.push(flag.into());
            command.push(dir.join(file).display().to_string());
        }
        command.extend(extra.iter().map(|s| s.to_string()));
        command.push("--".into());
        command.push(python().display().to_string());
        command.push(
            repo()
                .join("scripts/interop/mcp_notice_server.py")
                .display()
                .to_string(),
        );
        let mut client = Command::new(python())
            .arg(repo().join("scripts/interop/mcp_session_client.py"))
            .arg(serde_json::to_string(&command).unwrap())
            .env("AML_NOTICE_AUDIT", dir.join("audit.jsonl"))
            .env("RUST_LOG", "warn,aml_mcp_gate=info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let answers = lines(client.stdout.take().unwrap(), |line| {
            serde_json::from_str(&line).unwrap()
        });
        let log = lines(client.stderr.take().unwrap(), |line| line);
        let orders = client.stdin.take();
        let session = Session {
            client,
            orders,
            answers,
            log,
            dir: dir.to_owned(),
        };
        assert_eq!(session.answer(), json!({"ready": true}));
        session
    }

    /// Sends one `tools/call`, without waiting for its answer.
    fn send(&mut self) {
        let order = json!({"call": "send_notice", "arguments": {"to": TO, "body": "Build passed."}});
        let stdin = self.orders.as_mut().unwrap();
        writeln!(stdin, "{order}").unwrap();
        stdin.flush().unwrap();
    }

    fn answer(&self) -> Value {
        self.answers
            .recv_timeout(WAIT)
            .expect("the client answers in time")
    }

    /// One call: the receipt's (execution status, reason), or the refusal before planning.
    fn call(&mut self) -> (String, String) {
        self.send();
        outcome(&self.answer())
    }

    /// Waits (bounded) for a log line containing `needle`; returns it.
    fn wait_log(&self, needle: &str) -> String {
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

    fn gate_pid(&self) -> String {
        let line = self.wait_log("policy in force");
        let pid = line.split("pid=").nth(1).expect("the gate logs its pid");
        pid.chars().take_while(char::is_ascii_digit).collect()
    }

    fn reached_server(&self) -> usize {
        std::fs::read_to_string(self.dir.join("audit.jsonl")).map_or(0, |text| text.lines().count())
    }
}

/// The call records in the gate's receipt log (complete once the gate has exited).
fn receipts(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("receipts.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|record: &Value| record["record"] == "aml-call-record/1")
        .collect()
}

impl Session {
    /// Ends the session (EOF to the client) and waits, bounded, for everyone to exit.
    fn close(mut self) {
        drop(self.orders.take());
        let deadline = Instant::now() + WAIT;
        while self.client.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the client did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn lines<R: Read + Send + 'static, T: Send + 'static>(from: R, map: fn(String) -> T) -> Receiver<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { return };
            if tx.send(map(line)).is_err() {
                return;
            }
        }
    });
    rx
}

fn outcome(answer: &Value) -> (String, String) {
    let verdict = &answer["verdict"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match verdict["receipt"].as_object() {
        Some(receipt) => (text(&receipt["execution_status"]), text(&receipt["reason"])),
        None => ("refused".into(), text(&verdict["rejection"])),
    }
}

fn hangup(pid: &str) {
    let status = Command::new("kill").args(["-HUP", pid]).status().unwrap();
    assert!(status.success());
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_owned(), b.to_owned())
}

#[test]
fn a_rule_removed_and_sighup_sent_blocks_the_next_call_and_a_bad_file_fails_closed() {
    let dir = work("sighup");
    let mut session = Session::start(&dir, Some(false), &[]);
    let pid = session.gate_pid();
    let policy_path = dir.join("policy.json");

    assert_eq!(session.call(), pair("dispatched", "host_dispatch_returned"));
    assert_eq!(session.reached_server(), 1);

    write(&policy_path, &policy(None));
    hangup(&pid);
    session.wait_log("reloaded (SIGHUP)");
    assert_eq!(session.call(), pair("blocked", "no_exact_rule"));

    write(&policy_path, r#"{"protocol": "aml-action-policy/1", "rules": [}"#);
    hangup(&pid);
    let why = session.wait_log("reload (SIGHUP) failed");
    assert!(why.contains("policy.json"), "the log names the file: {why}");
    assert_eq!(session.call(), pair("blocked", "invalid_policy"));

    // No signal this time: the file watch sees the change.
    write(&policy_path, &policy(Some(false)));
    session.wait_log("reloaded (the files changed)");
    assert_eq!(session.call(), pair("dispatched", "host_dispatch_returned"));
    assert_eq!(
        session.reached_server(),
        2,
        "only the two allowed calls reached the server"
    );

    session.close();
    let reasons: Vec<Value> = receipts(&dir)
        .iter()
        .map(|r| r["receipt"]["reason"].clone())
        .collect();
    assert_eq!(
        reasons,
        [
            "host_dispatch_returned",
            "no_exact_rule",
            "invalid_policy",
            "host_dispatch_returned"
        ]
    );
}

fn http(origin: &str, request: String) -> String {
    let mut stream = std::net::TcpStream::connect(origin).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

/// Waits (bounded) for the approval page to list a pending proposal.
fn pending(origin: &str, token: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let response = http(
            origin,
            format!("GET /pending.json?t={token} HTTP/1.1\r\nHost: {origin}\r\n\r\n"),
        );
        let list: Vec<Value> = serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        if let Some(first) = list.into_iter().next() {
            return first;
        }
        assert!(Instant::now() < deadline, "nothing pending on the approval page");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_rule_revoked_while_its_call_waits_for_approval_ends_policy_changed_and_never_runs() {
    let dir = work("pending");
    let mut session = Session::start(
        &dir,
        Some(true),
        &["--approve", "web", "--approval-timeout", "60"],
    );
    // The page starts before the policy is put in force: its line comes first.
    let url = session.wait_log(" at http://");
    let pid = session.gate_pid();
    let url = url.split(" at http://").nth(1).unwrap().trim();
    let (origin, token) = url.split_once("/?t=").unwrap();

    session.send();
    let proposal = pending(origin, token);

    write(&dir.join("policy.json"), &policy(None));
    hangup(&pid);
    session.wait_log("reloaded (SIGHUP)");

    // The approver, who has not seen the revocation, approves.
    let form = format!(
        "t={token}&grant_id={}&proposal_sha256={}&decision=approve",
        proposal["grant_id"].as_str().unwrap(),
        proposal["proposal_sha256"].as_str().unwrap()
    );
    let decided = http(
        origin,
        format!(
            "POST /decide HTTP/1.1\r\nHost: {origin}\r\nOrigin: http://{origin}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        ),
    );
    assert!(decided.starts_with("HTTP/1.1 200"), "{decided}");

    assert_eq!(outcome(&session.answer()), pair("blocked", "policy_changed"));
    assert_eq!(
        session.reached_server(),
        0,
        "the revoked call never reached the server"
    );
    session.close();
    let receipts = receipts(&dir);
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0]["receipt"]["reason"], "policy_changed");
    assert_eq!(
        receipts[0]["plan"]["proposal_sha256"],
        proposal["proposal_sha256"]
    );
}

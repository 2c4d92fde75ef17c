//! What the gate's tests share: a session of the official Python MCP SDK client
//! (`scripts/interop/mcp_session_client.py`) that starts the gate, which starts a server built
//! with the official Python SDK that records every call it receives
//! (`scripts/interop/mcp_notice_server.py`); and the approval page driven over HTTP.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};

use serde_json::{json, Value};

pub use crate::common::{python, repo, wait_until, Child, Lines, GATE, WAIT};

pub const TO: &str = "team@example.test";

pub fn work(tag: &str) -> PathBuf {
    aml_test_support::scratch_dir("gate-reload", tag)
}

pub fn policy(requires_approval: Option<bool>) -> String {
    let rules: Vec<Value> = requires_approval
        .map(|r| json!({"tool": "send_notice", "effect": "send", "resource": TO, "requires_approval": r}))
        .into_iter()
        .collect();
    json!({"protocol": "aml-action-policy/1", "rules": rules}).to_string()
}

/// Writes the file whole, the way an editor's save replaces it.
pub fn write(path: &Path, text: &str) {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, path).unwrap();
}

/// One session: the Python client, which starts the gate, which starts the server.
pub struct Session {
    pub client: Child,
    orders: Option<ChildStdin>,
    answers: Lines,
    log: Lines,
    dir: PathBuf,
}

impl Session {
    pub fn start(dir: &Path, requires_approval: Option<bool>, extra: &[&str]) -> Session {
        Session::start_with(dir, requires_approval, extra, &[])
    }

    /// Like [`Session::start`], with more environment for the client, gate and server.
    pub fn start_with(
        dir: &Path,
        requires_approval: Option<bool>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Session {
        write_config(dir, requires_approval);
        let mut command: Vec<String> = vec![GATE.into()];
        for (flag, file) in [
            ("--policy", "policy.json"),
            ("--tools", "tools.json"),
            ("--receipts", "receipts.jsonl"),
        ] {
            command.push(flag.into());
            command.push(dir.join(file).display().to_string());
        }
        // Never the user's own state folder.
        if !extra.contains(&"--state") {
            command.push("--state".into());
            command.push(dir.join("state.sqlite3").display().to_string());
        }
        command.extend(extra.iter().map(|s| s.to_string()));
        command.push("--".into());
        command.push(python().display().to_string());
        command.push(notice_server());
        Session::spawn(dir, &command, env)
    }

    /// A session of a gate in front of two servers (`--config gate.toml`, ADR 033), `a` and
    /// `b`, each the notice server recording the calls it receives in `audit-a.jsonl` and
    /// `audit-b.jsonl`: `a__send_notice` to [`TO`] is allowed, `b__send_notice` needs an
    /// approval.
    pub fn start_listed(dir: &Path, extra: &[&str]) -> Session {
        write_listed_config(dir);
        let mut command: Vec<String> = vec![GATE.into(), "--config".into()];
        command.push(dir.join("gate.toml").display().to_string());
        if !extra.contains(&"--state") {
            command.push("--state".into());
            command.push(dir.join("state.sqlite3").display().to_string());
        }
        command.extend(extra.iter().map(|s| s.to_string()));
        Session::spawn(dir, &command, &[])
    }

    fn spawn(dir: &Path, command: &[String], env: &[(&str, &str)]) -> Session {
        let mut client = Child::spawn(
            "the Python SDK client",
            Command::new(python())
                .arg(repo().join("scripts/interop/mcp_session_client.py"))
                .arg(serde_json::to_string(&command).unwrap())
                .env("AML_NOTICE_AUDIT", dir.join("audit.jsonl"))
                .env("RUST_LOG", "warn,aml_mcp_gate=info")
                .envs(env.iter().copied())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let answers = client.stdout_lines();
        let log = client.stderr_lines();
        let orders = Some(client.stdin());
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
    pub fn send(&mut self) {
        self.order(json!({"call": "send_notice", "arguments": {"to": TO, "body": "Build passed."}}));
    }

    /// Sends one order to the client (see `mcp_session_client.py`).
    pub fn order(&mut self, order: Value) {
        let stdin = self.orders.as_mut().unwrap();
        writeln!(stdin, "{order}").unwrap();
        stdin.flush().unwrap();
    }

    pub fn answer(&self) -> Value {
        let line = self.answers.next(WAIT);
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// One call: the receipt's (execution status, reason), or the refusal before planning.
    pub fn call(&mut self) -> (String, String) {
        self.send();
        outcome(&self.answer())
    }

    /// Waits (bounded) for a log line containing `needle`; returns it.
    pub fn wait_log(&self, needle: &str) -> String {
        self.log.wait_for(needle, WAIT)
    }

    pub fn gate_pid(&self) -> String {
        let line = self.wait_log("policy in force");
        let pid = line.split("pid=").nth(1).expect("the gate logs its pid");
        pid.chars().take_while(char::is_ascii_digit).collect()
    }

    pub fn reached_server(&self) -> usize {
        self.reached("audit.jsonl")
    }

    /// How many calls the server that records in `audit` (`audit-a.jsonl`, …) received.
    pub fn reached(&self, audit: &str) -> usize {
        std::fs::read_to_string(self.dir.join(audit)).map_or(0, |text| text.lines().count())
    }
}

/// The call records in the gate's receipt log (complete once the gate has exited).
pub fn receipts(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("receipts.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|record: &Value| record["record"] == "aml-call-record/1")
        .collect()
}

impl Session {
    /// Ends the session (EOF to the client) and waits, bounded, for everyone to exit.
    pub fn close(mut self) {
        drop(self.orders.take());
        self.client.wait(WAIT);
    }
}

pub fn outcome(answer: &Value) -> (String, String) {
    let verdict = &answer["verdict"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match verdict["receipt"].as_object() {
        Some(receipt) => (text(&receipt["execution_status"]), text(&receipt["reason"])),
        None => ("refused".into(), text(&verdict["rejection"])),
    }
}

pub fn hangup(pid: &str) {
    let status = Command::new("kill").args(["-HUP", pid]).status().unwrap();
    assert!(status.success());
}

pub fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_owned(), b.to_owned())
}

pub fn http(origin: &str, request: String) -> String {
    let mut stream = std::net::TcpStream::connect(origin).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

/// Waits (bounded) for the approval page to list a pending proposal.
pub fn pending(origin: &str, token: &str) -> Value {
    wait_until("a proposal pending on the approval page", WAIT, || {
        let response = http(
            origin,
            format!("GET /pending.json?t={token} HTTP/1.1\r\nHost: {origin}\r\n\r\n"),
        );
        let list: Vec<Value> = serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        list.into_iter().next()
    })
}

/// The page's URL parts (origin, token) from the gate's log line.
pub fn page(session: &Session) -> (String, String) {
    let line = session.wait_log(" at http://");
    let url = line.split(" at http://").nth(1).unwrap().trim().to_owned();
    let (origin, token) = url.split_once("/?t=").unwrap();
    (origin.to_owned(), token.to_owned())
}

/// Approves `proposal` (an entry of the page's pending list) as the page's form does.
pub fn approve(origin: &str, token: &str, proposal: &Value) {
    decide(origin, token, proposal, "approve");
}

/// Decides `proposal` (`approve` or `deny`) as the page's form does.
pub fn decide(origin: &str, token: &str, proposal: &Value, decision: &str) {
    let form = format!(
        "t={token}&grant_id={}&proposal_sha256={}&decision={decision}",
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
}

/// Every call record of the gates whose receipts are `receipts-NAME.jsonl` in `dir`.
pub fn replica_records(dir: &Path, names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .flat_map(|n| {
            std::fs::read_to_string(dir.join(format!("receipts-{n}.jsonl")))
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect::<Vec<_>>()
        })
        .filter(|r| r["record"] == "aml-call-record/1")
        .collect()
}

/// Starts a gate that listens (`command` has `--listen …`; its stderr is the caller's to
/// set); the gate and the MCP URL the first line of its stdout names.
pub fn listening(what: &str, command: &mut Command) -> (Child, String) {
    command.stdin(Stdio::null()).stdout(Stdio::piped());
    let mut child = Child::spawn(what, command);
    let url = child
        .stdout_lines()
        .next(WAIT)
        .trim()
        .strip_prefix("aml-mcp-gate: MCP at ")
        .expect("an MCP URL")
        .to_owned();
    (child, url)
}

/// `--state postgres://…` from the machine's server (AML_POSTGRES_URL, as scripts/test sets
/// it, in either connection-string form).
pub fn postgres_url() -> String {
    let url = std::env::var("AML_POSTGRES_URL")
        .expect("AML_POSTGRES_URL is not set: scripts/test sets it to the machine's PostgreSQL server");
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return url;
    }
    let field = |key: &str| {
        url.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
    };
    format!(
        "postgres://{}@{}:{}/{}",
        field("user").unwrap_or_else(|| "postgres".into()),
        field("host").unwrap_or_else(|| "127.0.0.1".into()),
        field("port").unwrap_or_else(|| "5432".into()),
        field("dbname").unwrap_or_else(|| "test".into()),
    )
}

/// `policy.json` (one rule for `send_notice` to [`TO`], if any) and `tools.json` in `dir`.
pub fn write_config(dir: &Path, requires_approval: Option<bool>) {
    std::fs::write(dir.join("policy.json"), policy(requires_approval)).unwrap();
    let schema = json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                        "required": ["to", "body"], "additionalProperties": false});
    let tools = json!({"tools": [{"name": "send_notice", "effect": "send", "purpose": "Send a notice for the user",
                                  "resource": {"argument": "to"}, "input_schema": schema}]});
    std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
}

fn notice_server() -> String {
    repo()
        .join("scripts/interop/mcp_notice_server.py")
        .display()
        .to_string()
}

/// [`Session::start_listed`]'s files: `gate.toml` with servers `a` and `b`, `tools.json`
/// with `send_notice` of each, `policy.json` (`b`'s needs an approval).
pub fn write_listed_config(dir: &Path) {
    write_config(dir, None);
    let mut tools: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tools.json")).unwrap()).unwrap();
    let notice = tools["tools"][0].clone();
    let mut rules = Vec::new();
    tools["tools"] = Value::Array(Vec::new());
    let mut toml =
        String::from("policy = \"policy.json\"\ntools = \"tools.json\"\nreceipts = \"receipts.jsonl\"\n");
    for (server, approval) in [("a", false), ("b", true)] {
        let mut tool = notice.clone();
        tool["server"] = json!(server);
        tools["tools"].as_array_mut().unwrap().push(tool);
        rules.push(
            json!({"tool": format!("{server}__send_notice"), "effect": "send", "resource": TO,
                          "requires_approval": approval}),
        );
        let audit = dir.join(format!("audit-{server}.jsonl"));
        let command = [
            "env".to_owned(),
            format!("AML_NOTICE_AUDIT={}", audit.display()),
            python().display().to_string(),
            notice_server(),
        ];
        toml.push_str(&format!(
            "\n[[servers]]\nname = \"{server}\"\ncommand = {}\n",
            serde_json::to_string(&command).unwrap()
        ));
    }
    std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
    let policy = json!({"protocol": "aml-action-policy/1", "rules": rules});
    std::fs::write(dir.join("policy.json"), policy.to_string()).unwrap();
    std::fs::write(dir.join("gate.toml"), toml).unwrap();
}

/// `aml-mcp-gate journal ARGS --state STATE`: its exit code, its output's JSON lines, and
/// its stderr.
pub fn journal(state: &str, args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let out = Command::new(GATE)
        .arg("journal")
        .args(args)
        .args(["--state", state])
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (
        out.status.code(),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

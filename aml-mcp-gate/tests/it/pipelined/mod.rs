//! A raw JSON-RPC client over the gate's stdio that sends many `tools/call`s without waiting
//! (pipelined), reads the answers as they come, and can stop the gate (SIGKILL, SIGTERM)
//! once it has read a given number of them; then what the server saw (its audit file), what
//! the client was answered, and what the state says, side by side.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{json, Value};

use crate::common::{python, repo, wait_until, Child, GATE, WAIT};
use crate::session::{write_config, TO};

/// What the server, the client and the state know after a run.
#[derive(Debug)]
pub struct Seen {
    /// Bodies of the calls the server received, with how many times.
    pub server: HashMap<String, usize>,
    /// Bodies of the calls the client was answered, with their receipt's execution status.
    pub answered: HashMap<String, String>,
    /// The journal's intents by proposal digest: (id, outcome).
    pub intents: HashMap<String, Vec<(i64, Option<String>)>>,
    /// The stored receipts' execution statuses, by proposal digest.
    pub receipts: HashMap<String, Vec<String>>,
}

/// The body of call `n` of run `run` (each call its own proposal).
pub fn body(run: &str, n: usize) -> String {
    format!("{run}: call {n}")
}

/// The proposal digest the gate computes for a call with `body` (tools.json of
/// [`write_config`]).
pub fn digest(body: &str) -> String {
    let proposal = json!({"protocol": "aml-proposed-action/1", "tool": "send_notice", "effect": "send",
                          "resource": TO, "purpose": "Send a notice for the user",
                          "arguments": {"to": TO, "body": body}});
    aml_core::FrozenProposal::from_value(&proposal)
        .unwrap()
        .digest()
        .to_string()
}

/// The command of a gate on `state`, with `extra` options, in front of the Python SDK notice
/// server (config of [`write_config`] in `dir`, the server's audit file there).
pub fn gate_command(dir: &Path, state: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(GATE);
    command
        .args(["--policy", &dir.join("policy.json").display().to_string()])
        .args(["--tools", &dir.join("tools.json").display().to_string()])
        .args(["--state", &state.display().to_string()])
        .args(extra)
        .arg("--")
        .arg(python())
        .arg(repo().join("scripts/interop/mcp_notice_server.py"))
        .env("AML_NOTICE_AUDIT", dir.join("audit.jsonl"));
    command
}

/// A gate on `state` (see [`gate_command`]), its receipt log in `dir`, initialized.
pub fn start_gate(dir: &Path, state: &Path) -> Child {
    write_config(dir, Some(false));
    let receipts = dir.join("receipts.jsonl").display().to_string();
    let mut child = Child::spawn(
        "the gate",
        gate_command(dir, state, &["--receipts", &receipts])
            .env("RUST_LOG", "warn,aml_mcp_gate=info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let stdin = child.process().stdin.as_mut().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "pipelined-test", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    child
}

/// Sends `calls` calls at once through `gate` (started by [`start_gate`]) and, after `stop_after`
/// answers, sends it `signal`; waits (bounded) for the gate and its server to exit. The
/// bodies of the calls answered, with their receipt's status, and the gate's log.
pub fn pipeline(
    mut gate: Child,
    run: &str,
    calls: usize,
    stop_after: usize,
    signal: &str,
) -> (HashMap<String, String>, String) {
    let mut stdin = gate.stdin();
    let log = gate.stderr_lines();
    let answered = gate.stdout_lines();
    let json =
        |line: String| -> Value { serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")) };
    let ready = json(answered.next(WAIT));
    assert_eq!(ready["id"], 0, "{ready}");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    let server = server_pid(gate.id());
    let run_name = run.to_owned();
    // Written from a thread: the pipe fills while the gate works through the calls.
    std::thread::spawn(move || {
        for n in 1..=calls {
            let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                              "params": {"name": "send_notice", "arguments": {"to": TO, "body": body(&run_name, n)}}});
            if writeln!(stdin, "{call}").is_err() {
                return; // the gate is gone
            }
        }
        // Left open: the gate must be stopped by the signal, not by the end of its input.
        loop {
            std::thread::park();
        }
    });
    let mut result = HashMap::new();
    let deadline = Instant::now() + WAIT;
    while result.len() < stop_after {
        let left = deadline.saturating_duration_since(Instant::now());
        let answer = json(answered.next(left));
        let n = answer["id"].as_u64().expect("an answer to a call") as usize;
        let status = answer["result"]["_meta"]["aml.action-boundary/verdict"]["receipt"]["execution_status"]
            .as_str()
            .unwrap_or("none")
            .to_owned();
        result.insert(body(run, n), status);
    }
    gate.signal(signal.trim_start_matches('-'));
    // Answers already on their way still count as answered (until the gate's output ends,
    // or WAIT passes without its end).
    let rest = answered.rest_within(WAIT).unwrap_or_else(|so_far| so_far);
    // A line SIGKILL cut short is no answer (the old reader thread stopped at it, too).
    for answer in rest.iter().filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
        if let Some(n) = answer["id"].as_u64() {
            let status = answer["result"]["_meta"]["aml.action-boundary/verdict"]["receipt"]
                ["execution_status"]
                .as_str()
                .unwrap_or("none")
                .to_owned();
            result.insert(body(run, n as usize), status);
        }
    }
    gate.wait(WAIT);
    if let Some(pid) = server {
        // The server reads what was forwarded before the gate died, then sees its input end.
        wait_until(&format!("the server (pid {pid}) to exit"), WAIT, || {
            (!Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid)).then_some(())
        });
    }
    (result, log.rest(WAIT).join("\n"))
}

/// The `writes` and `commits` of the gate's last log line about its state, if it wrote one.
pub fn commits(log: &str) -> Option<(u64, u64)> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("state: writes committed"))?;
    let field = |name: &str| {
        line.split(&format!("{name}="))
            .nth(1)?
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some((field("writes")?, field("commits")?))
}

/// The gate's child (the server), from `/proc`.
fn server_pid(gate: u32) -> Option<u32> {
    let deadline = Instant::now() + WAIT;
    wait_until(
        "the gate's server to start, or the time to look to pass",
        WAIT + WAIT,
        || {
            let entries = match std::fs::read_dir("/proc") {
                Ok(entries) => entries,
                Err(_) => return Some(None),
            };
            for entry in entries.flatten() {
                let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                    continue;
                };
                let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                // pid (comm) state ppid …: comm may hold spaces, so read after the last ')'.
                let ppid = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|p| p.parse::<u32>().ok());
                if ppid == Some(gate) {
                    return Some(Some(pid));
                }
            }
            // Not found within WAIT: no server to wait for (as before), not a failure.
            (Instant::now() > deadline).then_some(None)
        },
    )
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// What the server saw, the client was answered and the state keeps, for run `run`.
pub fn seen(dir: &Path, state: &Path, run: &str, answered: HashMap<String, String>) -> Seen {
    let mut server = HashMap::new();
    for line in std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
    {
        let call: Value = serde_json::from_str(line).unwrap();
        let body = call["body"].as_str().unwrap().to_owned();
        if body.starts_with(run) {
            *server.entry(body).or_insert(0) += 1;
        }
    }
    let db = rusqlite::Connection::open(state).unwrap();
    let mut intents: HashMap<String, Vec<(i64, Option<String>)>> = HashMap::new();
    let mut rows = db
        .prepare("SELECT id, digest, outcome FROM aml_journal WHERE reconciled_at IS NULL")
        .unwrap();
    for row in rows
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
            ))
        })
        .unwrap()
    {
        let (id, digest, outcome) = row.unwrap();
        intents.entry(digest).or_default().push((id, outcome));
    }
    let mut receipts: HashMap<String, Vec<String>> = HashMap::new();
    let mut rows = db.prepare("SELECT record FROM aml_receipts").unwrap();
    for record in rows.query_map([], |r| r.get::<_, String>(0)).unwrap() {
        let record: Value = serde_json::from_str(&record.unwrap()).unwrap();
        if let Some(digest) = record["plan"]["proposal_sha256"].as_str() {
            let status = record["receipt"]["execution_status"].as_str().unwrap_or("none");
            receipts
                .entry(digest.to_owned())
                .or_default()
                .push(status.to_owned());
        }
    }
    Seen {
        server,
        answered,
        intents,
        receipts,
    }
}

/// A count of each `(key, value)` for a report line.
pub fn tally<'a>(values: impl Iterator<Item = &'a str>) -> BTreeMap<&'a str, usize> {
    let mut counts = BTreeMap::new();
    for value in values {
        *counts.entry(value).or_insert(0) += 1;
    }
    counts
}

/// A fresh directory for one run.
pub fn run_dir(tag: &str) -> PathBuf {
    crate::session::work(tag)
}

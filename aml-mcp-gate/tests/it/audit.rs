//! The audit chain, end to end, on SQLite and PostgreSQL: gates signing checkpoints
//! (`--audit-key`) run calls, an approval, a call killed in flight and its reconciliation;
//! `journal verify` (the real binary) finds the chain intact; then each tampering done with
//! direct SQL — a changed byte, a deleted row, a forged row inserted, two rows swapped, the
//! last rows cut — makes it fail naming the first bad seq and the kind, and a checkpoint
//! signed with another key is refused. The server is the standard-library raw stdin server
//! (`scripts/interop/mcp_raw_stdin_server.py`, run with the system's python3).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::time::Instant;

use aml_approval::ApproverKey;
use serde_json::{json, Value};

use crate::common::{repo, Child, Lines, GATE, WAIT};
use crate::session::{approve, pending};

/// Direct SQL on the state, as a tamperer has it.
enum Db {
    Sqlite(PathBuf),
    Postgres(Box<(tokio::runtime::Runtime, tokio_postgres::Client)>),
}

impl Db {
    fn exec(&self, sql: &str) {
        match self {
            Db::Sqlite(path) => rusqlite::Connection::open(path)
                .unwrap()
                .execute_batch(sql)
                .unwrap(),
            Db::Postgres(pg) => pg.0.block_on(pg.1.batch_execute(sql)).unwrap(),
        }
    }

    /// One text column of one row.
    fn text(&self, sql: &str) -> String {
        match self {
            Db::Sqlite(path) => rusqlite::Connection::open(path)
                .unwrap()
                .query_row(sql, [], |r| r.get(0))
                .unwrap(),
            Db::Postgres(pg) => pg.0.block_on(pg.1.query_one(sql, &[])).unwrap().get(0),
        }
    }

    fn number(&self, sql: &str) -> i64 {
        self.text(&format!("SELECT CAST(({sql}) AS TEXT)"))
            .parse()
            .unwrap()
    }

    /// The time as the chain hashes it, for a forged row.
    fn at_ms(&self, seq: i64) -> i64 {
        match self {
            Db::Sqlite(_) => self.number(&format!("SELECT recorded_at FROM aml_receipts WHERE seq = {seq}")),
            Db::Postgres(_) => self.number(&format!(
                "SELECT (extract(epoch from recorded_at) * 1000)::bigint FROM aml_receipts WHERE seq = {seq}"
            )),
        }
    }

    fn snapshot(&self) {
        self.exec(
            "CREATE TABLE kept_receipts AS SELECT * FROM aml_receipts;
             CREATE TABLE kept_checkpoints AS SELECT * FROM aml_checkpoints;",
        );
    }

    fn restore(&self) {
        self.exec(
            "DELETE FROM aml_receipts; INSERT INTO aml_receipts SELECT * FROM kept_receipts;
             DELETE FROM aml_checkpoints; INSERT INTO aml_checkpoints SELECT * FROM kept_checkpoints;",
        );
    }
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A gate with `--audit-key` in front of the raw server; its output read line by line.
struct Gate {
    child: Child,
    input: Option<ChildStdin>,
    answers: Lines,
    log: Lines,
}

impl Gate {
    fn start(dir: &Path, state: &str, extra: &[&str]) -> Gate {
        let mut child = Child::spawn(
            "the gate",
            Command::new(GATE)
                .args(["--policy", &dir.join("policy.json").display().to_string()])
                .args(["--tools", &dir.join("tools.json").display().to_string()])
                .args(["--state", state])
                .args(["--receipts", &dir.join("receipts.jsonl").display().to_string()])
                .args(["--audit-key", &dir.join("audit-key.json").display().to_string()])
                .args(["--audit-every", "3"])
                .args(extra)
                .arg("--")
                .arg("python3")
                .arg(repo().join("scripts/interop/mcp_raw_stdin_server.py"))
                .arg(dir.join("raw.log"))
                .arg(dir.join("ran.log"))
                .env("RUST_LOG", "warn,aml_mcp_gate=info")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let answers = child.stdout_lines();
        let log = child.stderr_lines();
        let mut gate = Gate {
            input: Some(child.stdin()),
            child,
            answers,
            log,
        };
        gate.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "audit-test", "version": "1"}}}));
        gate.answer(0);
        gate.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        gate
    }

    fn send(&mut self, message: Value) {
        let input = self.input.as_mut().unwrap();
        writeln!(input, "{message}").unwrap();
        input.flush().unwrap();
    }

    fn call(&mut self, id: i64, tool: &str, arguments: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": tool, "arguments": arguments}}));
    }

    fn answer(&self, id: i64) -> Value {
        let started = Instant::now();
        loop {
            let line = self.answers.next(WAIT.saturating_sub(started.elapsed()));
            let answer: Value = serde_json::from_str(&line).unwrap();
            if answer["id"] == id {
                return answer;
            }
        }
    }

    fn wait_log(&self, needle: &str) -> String {
        self.log.wait_for(needle, WAIT)
    }

    /// EOF, then a bounded wait for a clean exit; the log lines not read yet.
    fn close(mut self) -> Vec<String> {
        drop(self.input.take());
        let status = self.child.wait(WAIT);
        assert!(status.success(), "the gate exited with {status}");
        // Until the reader sees the end of the pipe.
        self.log.rest_within(WAIT).unwrap_or_else(|so_far| so_far)
    }

    fn kill(mut self) {
        self.child.process().kill().unwrap();
        self.child.wait(WAIT);
    }
}

/// Approves the first proposal pending on the gate's approval page.
fn approve_pending(gate: &Gate) {
    let line = gate.wait_log(" at http://");
    let url = line.split(" at http://").nth(1).unwrap().trim().to_owned();
    let (origin, token) = url.split_once("/?t=").unwrap();
    let proposal = pending(origin, token);
    approve(origin, token, &proposal);
}

fn journal(state: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(GATE)
        .arg("journal")
        .args(args)
        .args(["--state", state])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `journal verify`'s exit code and its JSON line.
fn verify(state: &str, args: &[&str]) -> (i32, Value) {
    let (code, out, err) = journal(state, &[&["verify"], args].concat());
    let line = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?} {err}"));
    (code, line)
}

fn write_keys(dir: &Path) {
    let key = ApproverKey::generate("gate-audit").unwrap();
    std::fs::write(dir.join("audit-key.json"), key.to_json()).unwrap();
    std::fs::write(dir.join("audit.pub.json"), key.public_entry().to_string()).unwrap();
    let other = ApproverKey::generate("gate-audit").unwrap();
    std::fs::write(dir.join("other-key.json"), other.to_json()).unwrap();
    std::fs::write(dir.join("other.pub.json"), other.public_entry().to_string()).unwrap();
}

fn write_config(dir: &Path) {
    let tools = json!({"tools": [
        {"name": "echo", "effect": "read", "purpose": "Echo for the user", "resource": {"fixed": "notes"},
         "input_schema": {"type": "object"}},
        {"name": "send", "effect": "send", "purpose": "Send a note for the user", "resource": {"fixed": "outbox"},
         "input_schema": {"type": "object"}}]});
    let policy = json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "echo", "effect": "read", "resource": "notes", "requires_approval": false},
        {"tool": "send", "effect": "send", "resource": "outbox", "requires_approval": true}]});
    std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
    std::fs::write(dir.join("policy.json"), policy.to_string()).unwrap();
}

/// Calls, an approval, a call killed in flight and reconciled, and a last clean start (its
/// checkpoint in the log covers the reconcile note); the number of links.
fn history(dir: &Path, state: &str) -> i64 {
    write_config(dir);
    write_keys(dir);
    let mut gate = Gate::start(dir, state, &["--approve", "web", "--approval-timeout", "30"]);
    for id in 1..=5 {
        gate.call(id, "echo", json!({"n": id, "text": "it's \"quoted\" é"}));
    }
    gate.call(6, "send", json!({"to": "ops"}));
    approve_pending(&gate);
    for id in 1..=6 {
        assert!(
            gate.answer(id)["result"].is_object(),
            "call {id} was not dispatched"
        );
    }
    gate.close();

    let mut gate = Gate::start(dir, state, &[]);
    gate.call(1, "echo", json!({"hang": true}));
    let ran = dir.join("ran.log");
    aml_test_support::wait_until("the hanging call to reach the server", WAIT, || {
        std::fs::read_to_string(&ran).ok().filter(|t| t.contains("hang"))
    });
    gate.kill();
    let (code, out, err) = journal(state, &["unresolved"]);
    assert_eq!(code, 0, "{err}");
    let unresolved: Value = serde_json::from_str(out.lines().next().expect("one unresolved intent")).unwrap();
    let id = unresolved["id"].to_string();
    let (code, _, err) = journal(state, &["reconcile", &id, "--note", "checked: it echoed once"]);
    assert_eq!(code, 0, "{err}");

    // The last run's log on stderr, kept as an operator would keep it.
    let kept = Gate::start(dir, state, &[]).close();
    std::fs::write(dir.join("gate-stderr.log"), kept.join("\n")).unwrap();
    let (code, out, err) = journal(state, &["export"]);
    assert_eq!(code, 0, "{err}");
    let links: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l["kind"] == "aml-audit-link/1")
        .collect();
    let records: Vec<&str> = links.iter().filter_map(|l| l["record"].as_str()).collect();
    for kind in [
        "aml-call-record/1",
        "aml-approval-record/1",
        "aml-reconcile-record/1",
    ] {
        assert!(
            records.iter().any(|r| r.contains(kind)),
            "no {kind} among the links"
        );
    }
    // Each exported link's hash is the documented one over its other fields.
    for link in &links {
        let seq = link["seq"].as_i64().unwrap();
        let hash = aml_grants::link_hash(
            seq,
            link["prev"].as_str().unwrap(),
            link["at"].as_i64().unwrap(),
            link["record"].as_str().unwrap(),
        );
        assert_eq!(link["hash"], hash.as_str(), "link {seq}");
    }
    links.len() as i64
}

/// Tampers with `sql`, expects `verify` to name `seq` and `kind`, restores.
fn expect_damage(db: &Db, state: &str, dir: &Path, sql: &str, seq: i64, kind: &str) {
    db.exec(sql);
    let log = dir.join("receipts.jsonl").display().to_string();
    let (code, line) = verify(
        state,
        &[
            "--key",
            &dir.join("audit.pub.json").display().to_string(),
            "--checkpoints",
            &log,
        ],
    );
    assert_eq!(code, 1, "{sql}: {line}");
    assert_eq!(
        (line["seq"].as_i64(), line["kind"].as_str()),
        (Some(seq), Some(kind)),
        "{sql}: {line}"
    );
    db.restore();
}

fn tamper_and_verify(dir: &Path, state: &str, db: &Db) {
    let n = history(dir, state);
    assert!(n >= 9, "{n} links");
    let key = dir.join("audit.pub.json").display().to_string();
    let other = dir.join("other.pub.json").display().to_string();
    let log = dir.join("receipts.jsonl").display().to_string();

    let (code, line) = verify(state, &["--key", &key, "--checkpoints", &log]);
    assert_eq!(code, 0, "{line}");
    assert_eq!(line["links"], n);
    assert_eq!(line["signatures_checked"], true);
    let in_log = std::fs::read_to_string(&log)
        .unwrap()
        .matches("aml-audit-checkpoint/1")
        .count();
    assert!(in_log >= 3, "{in_log} checkpoints in the log");
    assert!(
        line["checkpoints"].as_u64().unwrap() >= 2 * in_log as u64,
        "{line}"
    );
    db.snapshot();

    // One byte: the record's closing brace becomes a space.
    let changed =
        "UPDATE aml_receipts SET record = substr(record, 1, length(record) - 1) || ' ' WHERE seq = 2";
    expect_damage(db, state, dir, changed, 2, "modified");
    expect_damage(
        db,
        state,
        dir,
        "DELETE FROM aml_receipts WHERE seq = 3",
        3,
        "deleted",
    );
    let (a, b) = (
        db.text("SELECT record FROM aml_receipts WHERE seq = 4"),
        db.text("SELECT record FROM aml_receipts WHERE seq = 5"),
    );
    let swap = format!(
        "UPDATE aml_receipts SET record = {} WHERE seq = 4; UPDATE aml_receipts SET record = {} WHERE seq = 5;",
        quoted(&b),
        quoted(&a)
    );
    expect_damage(db, state, dir, &swap, 4, "reordered");

    // A forged link 4 with a valid hash, the links after it renumbered.
    let prev = db.text("SELECT hash FROM aml_receipts WHERE seq = 3");
    let at = db.at_ms(3);
    let forged = r#"{"record":"aml-call-record/1","forged":true}"#;
    let hash = aml_grants::link_hash(4, &prev, at, forged);
    let at_sql = match db {
        Db::Sqlite(_) => at.to_string(),
        Db::Postgres(_) => "(SELECT recorded_at FROM aml_receipts WHERE seq = 3)".to_owned(),
    };
    let insert = format!(
        "UPDATE aml_receipts SET seq = -(seq + 1) WHERE seq >= 4; UPDATE aml_receipts SET seq = -seq WHERE seq < 0;
         INSERT INTO aml_receipts (recorded_at, record, seq, prev, hash)
         VALUES ({at_sql}, {}, 4, '{prev}', '{hash}');",
        quoted(forged)
    );
    expect_damage(db, state, dir, &insert, 4, "inserted");

    // The last two links cut, with the checkpoints stored of them: only the log's copy of a
    // checkpoint shows it.
    let cut = format!(
        "DELETE FROM aml_receipts WHERE seq > {}; DELETE FROM aml_checkpoints WHERE seq > {};",
        n - 2,
        n - 2
    );
    db.exec(&cut);
    let (code, line) = verify(state, &["--key", &key]);
    assert_eq!(
        code, 0,
        "without an outside checkpoint a cut tail cannot be seen: {line}"
    );
    db.restore();
    expect_damage(db, state, dir, &cut, n - 1, "tail_cut");
    // The copy in the gate's own log on stderr shows it too.
    db.exec(&cut);
    let stderr_log = dir.join("gate-stderr.log").display().to_string();
    let (code, line) = verify(state, &["--key", &key, "--checkpoints", &stderr_log]);
    assert_eq!(
        (code, line["seq"].as_i64(), line["kind"].as_str()),
        (1, Some(n - 1), Some("tail_cut")),
        "{line}"
    );
    db.restore();

    // Checkpoints signed with another key are refused.
    let (code, line) = verify(state, &["--key", &other]);
    assert_eq!(
        (code, line["kind"].as_str()),
        (1, Some("checkpoint_refused")),
        "{line}"
    );
    let forged_key =
        ApproverKey::from_json(&std::fs::read_to_string(dir.join("other-key.json")).unwrap()).unwrap();
    let tail_hash = db.text(&format!("SELECT hash FROM aml_receipts WHERE seq = {n}"));
    let forged_checkpoint = forged_checkpoint(&forged_key, n, &tail_hash);
    let add = format!(
        "INSERT INTO aml_checkpoints (seq, checkpoint) VALUES ({n}, {})",
        quoted(&forged_checkpoint)
    );
    expect_damage(db, state, dir, &add, n, "checkpoint_refused");

    // Usage and I/O errors are exit 2.
    let (code, _, _) = journal(
        state,
        &["verify", "--key", &dir.join("missing.json").display().to_string()],
    );
    assert_eq!(code, 2);
}

/// A checkpoint as the gate writes it, signed with `key` (docs/AUDIT.md).
fn forged_checkpoint(key: &ApproverKey, seq: i64, hash: &str) -> String {
    let body =
        json!({"at": 1, "hash": hash, "key_id": key.key_id(), "kind": "aml-audit-checkpoint/1", "seq": seq});
    let input = aml_core::canonical::to_canonical_string(&body).unwrap();
    let mut signed = body;
    signed["signature"] = json!(key.sign_message(input.as_bytes()));
    signed.to_string()
}

#[test]
fn sqlite_tampering_is_found_and_named() {
    let dir = aml_test_support::scratch_dir("gate-audit", "sqlite");
    let path = dir.join("state.sqlite3");
    tamper_and_verify(&dir, &path.display().to_string(), &Db::Sqlite(path.clone()));
}

#[test]
fn postgres_tampering_is_found_and_named() {
    let url = std::env::var("AML_POSTGRES_URL")
        .expect("AML_POSTGRES_URL is not set: scripts/test sets it to the machine's PostgreSQL server");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (client, connection) = rt
        .block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls))
        .unwrap_or_else(|e| panic!("PostgreSQL at {url:?} is unreachable: {e}"));
    rt.spawn(connection);
    let schema = format!(
        "aml_audit_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    rt.block_on(client.batch_execute(&format!("CREATE SCHEMA {schema}; SET search_path = {schema}")))
        .unwrap();
    let field = |key: &str, default: &str| {
        url.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or(default)
            .to_owned()
    };
    // The gate's own connections use the test's schema.
    let state = format!(
        "postgres://{}@{}:{}/{}?options=-c%20search_path%3D{schema}",
        field("user", "postgres"),
        field("host", "127.0.0.1"),
        field("port", "5432"),
        field("dbname", "test"),
    );
    let dir = aml_test_support::scratch_dir("gate-audit", "postgres");
    let db = Db::Postgres(Box::new((rt, client)));
    tamper_and_verify(&dir, &state, &db);
    db.exec(&format!("DROP SCHEMA {schema} CASCADE"));
}

/// A bad `--audit-key` stops the gate at start, naming the reason; the server never starts.
#[test]
fn a_bad_audit_key_is_an_error_at_start() {
    let dir = aml_test_support::scratch_dir("gate-audit", "bad-key");
    write_config(&dir);
    let marker = dir.join("server-started");
    let server = format!("touch {}", marker.display());
    let not_a_key = dir.join("not-a-key.json");
    std::fs::write(&not_a_key, r#"{"keys": []}"#).unwrap();
    let weak = dir.join("weak.json");
    std::fs::write(
        &weak,
        json!({"key_id": "gate", "secret_key": "00".repeat(32)}).to_string(),
    )
    .unwrap();
    let state = dir.join("state.sqlite3").display().to_string();
    let state = state.as_str();
    let cases: [(&[&str], &str); 5] = [
        (
            &["--state", state, "--audit-key", "/nonexistent/key.json"],
            "cannot read --audit-key",
        ),
        (
            &["--state", state, "--audit-key", &not_a_key.display().to_string()],
            "not an approver key file",
        ),
        (
            &["--state", state, "--audit-key", &weak.display().to_string()],
            "weak seed",
        ),
        (
            &["--state", state, "--audit-every", "5"],
            "--audit-every needs --audit-key",
        ),
        (
            &["--audit-key", &weak.display().to_string(), "--state", "memory"],
            "needs a database --state",
        ),
    ];
    for (flags, says) in cases {
        let out = Command::new(GATE)
            .args(["--policy", &dir.join("policy.json").display().to_string()])
            .args(flags)
            .args(["--", "sh", "-c", &server])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
    // From --config, relative to the file.
    let config = dir.join("gate.toml");
    std::fs::write(&config, format!("policy = \"policy.json\"\nstate = \"state.sqlite3\"\nserver = [\"sh\", \"-c\", {server:?}]\n[audit]\nkey = \"weak.json\"\nevery = 5\n")).unwrap();
    let out = Command::new(GATE)
        .args(["--config", &config.display().to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("weak.json") && stderr.contains("weak seed"),
        "{stderr}"
    );
    assert!(!marker.exists(), "no server was started");
}

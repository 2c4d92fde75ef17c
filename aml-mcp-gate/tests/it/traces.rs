//! `--otlp-endpoint`: the gate exports one OpenTelemetry span per call, received by an
//! OTLP/HTTP receiver that decodes it with the official `opentelemetry-proto` package
//! (`scripts/interop/otlp_receiver.py`): its `aml.digest` is the call's receipt digest, its
//! decision, reason, status and tool are the record's, and a client's valid W3C
//! `traceparent` (`params._meta`) is continued (an invalid one is ignored). The spans are
//! all exported before the gate exits on the client's EOF; the stdio server receives the
//! client's `_meta` as it was sent.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

pub(crate) const T1: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
pub(crate) const T2: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
pub(crate) const T3: &str = "00-a1b2c3d4e5f60718293a4b5c6d7e8f90-1122334455667788-01";
/// Upper-case hex: not a valid traceparent; ignored.
pub(crate) const INVALID: &str = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01";

/// Starts the receiver, writing spans to `out`; its port, from its readiness line.
/// The receiver is killed when its guard is dropped.
pub(crate) fn start_receiver(out: &Path) -> (Child, u16) {
    let mut child = Child::spawn(
        "the OTLP receiver",
        Command::new(python())
            .arg(repo().join("scripts/interop/otlp_receiver.py"))
            .arg(out)
            .stdout(Stdio::piped()),
    );
    let line = child.stdout_lines().next(Duration::from_secs(30));
    let port = line
        .trim()
        .strip_prefix("otlp receiver on ")
        .unwrap_or_else(|| panic!("the OTLP receiver did not start: {line:?}"))
        .parse()
        .unwrap();
    (child, port)
}

/// The gate's arguments: `extra`, spans to the receiver on `port`, and server-everything
/// behind `tee` (what reached it is in the returned file).
pub(crate) fn traced_gate_args(dir: &Path, port: u16, extra: &[&str]) -> (Vec<String>, PathBuf) {
    let reached = dir.join("reached.log");
    let mut args = gate_args(dir);
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend([
        "--otlp-endpoint".into(),
        format!("http://127.0.0.1:{port}"),
        "--".into(),
        "sh".into(),
        "-c".into(),
        format!("tee -a '{}' | '{}'", reached.display(), everything().display()),
    ]);
    (args, reached)
}

/// The spans the receiver wrote, once the gate has exited.
pub(crate) fn spans_in(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let spans: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(spans.iter().all(|s| s.get("error").is_none()), "{spans:#?}");
    spans
}

pub(crate) fn call(id: u64, tool: &str, arguments: Value, traceparent: Option<&str>) -> String {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(traceparent) = traceparent {
        params["_meta"] = json!({"progressToken": id, "traceparent": traceparent});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
}

/// The trace and span ids of a valid traceparent.
pub(crate) fn ids(traceparent: &str) -> (&str, &str) {
    (&traceparent[3..35], &traceparent[36..52])
}

#[test]
fn one_span_per_call_with_the_receipts_digest_and_the_clients_trace_continued() {
    let dir = work("traces");
    write_everything_config(&dir);
    let spans_file = dir.join("spans.jsonl");
    let (_receiver, port) = start_receiver(&spans_file);

    let (args, reached) = traced_gate_args(&dir, port, &[]);
    let mut gate = Child::spawn(
        "the gate",
        Command::new(GATE)
            .args(&args)
            // A collector's token, percent-encoded as the OpenTelemetry variable has it.
            .env("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-token=s%3Dcret%2C1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let rx = json_lines(gate.stdout_lines());

    // (id, tool, arguments, traceparent): one call of each tool, so that each record and
    // span is found by its tool.
    let calls: Vec<(u64, &str, Value, Option<&str>)> = vec![
        (2, "echo", json!({"message": "traced"}), Some(T1)),
        (3, "get-env", json!({}), Some(T2)),
        (4, "get-sum", json!({"a": 1, "b": 2}), None),
        (
            5,
            "get-structured-content",
            json!({"location": "Chicago"}),
            Some(INVALID),
        ),
        (6, "not-registered", json!({}), Some(T3)),
    ];
    let mut input = gate.stdin();
    let mut lines = vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        .to_string(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
    ];
    lines.extend(
        calls
            .iter()
            .map(|(id, tool, a, t)| call(*id, tool, a.clone(), *t)),
    );
    for line in &lines {
        writeln!(input, "{line}").unwrap();
    }
    input.flush().unwrap();
    let mut answered = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while answered.len() < calls.len() + 1 {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("answers within 60 s: only {answered:?}"));
        if let Some(id) = message["id"].as_u64() {
            answered.insert(id);
        }
    }
    // EOF: the gate ends cleanly, having exported every span.
    drop(input);
    let status = gate.wait(Duration::from_secs(30));
    assert!(status.success(), "the gate exited with {status}");

    let records: Vec<Value> = receipts(&dir)
        .into_iter()
        .filter(|r| r["record"] == "aml-call-record/1")
        .collect();
    assert_eq!(records.len(), calls.len(), "{records:#?}");
    let spans = spans_in(&spans_file);
    assert_eq!(spans.len(), calls.len(), "one span per call: {spans:#?}");

    let mut by_tool: BTreeMap<&str, &Value> = BTreeMap::new();
    for span in &spans {
        let tool = span["attributes"]["aml.tool"].as_str().unwrap();
        assert!(
            by_tool.insert(tool, span).is_none(),
            "two spans for {tool}: {spans:#?}"
        );
    }
    let mut new_traces = BTreeSet::new();
    for (_, tool, _, traceparent) in &calls {
        let record = records
            .iter()
            .find(|r| r["tool"] == *tool)
            .unwrap_or_else(|| panic!("no record of {tool}: {records:#?}"));
        let span = by_tool
            .get(tool)
            .unwrap_or_else(|| panic!("no span of {tool}: {spans:#?}"));
        let a = &span["attributes"];
        assert_eq!(span["name"], format!("tools/call {tool}"));
        assert_eq!(span["service"], "aml-mcp-gate");
        assert_eq!(span["kind"], 2, "SPAN_KIND_SERVER");
        assert_eq!(span["post_headers"]["x-collector-token"], "s=cret,1");
        assert_eq!(a["aml.tool"], *tool);
        // The `server` label of the metrics: the program, as the gate names it in messages.
        assert_eq!(a["aml.server"], "\"sh\"");
        let receipt = &record["receipt"];
        let (digest, status, reason) = match receipt {
            Value::Null => ("", "blocked", record["refusal"].as_str().unwrap()),
            r => (
                r["proposal_sha256"].as_str().unwrap(),
                r["execution_status"].as_str().unwrap(),
                r["reason"].as_str().unwrap(),
            ),
        };
        assert_eq!(a["aml.digest"], digest);
        assert_eq!(a["aml.status"], status, "{tool}");
        assert_eq!(a["aml.reason"], reason, "{tool}");
        assert_eq!(
            a["aml.decision"],
            record["plan"]["decision"].as_str().unwrap_or("none")
        );
        match *tool {
            "echo" | "get-sum" => assert_eq!(status, "dispatched", "{record}"),
            "get-env" => assert_eq!(a["aml.decision"], "deny", "{record}"),
            "not-registered" => assert_eq!((digest, status), ("", "blocked"), "{record}"),
            _ => {}
        }
        assert!(span["end_ns"].as_u64() >= span["start_ns"].as_u64() && span["start_ns"].as_u64() > Some(0));
        match traceparent.filter(|t| *t != INVALID) {
            Some(traceparent) => {
                let (trace, parent) = ids(traceparent);
                assert_eq!(span["trace_id"], trace, "{tool}: the client's trace is kept");
                assert_eq!(
                    span["parent_span_id"], parent,
                    "{tool}: the client's span is the parent"
                );
            }
            None => {
                let trace = span["trace_id"].as_str().unwrap();
                assert!(![T1, T2, T3, INVALID]
                    .iter()
                    .any(|t| t[3..35].eq_ignore_ascii_case(trace)));
                assert_eq!(span["parent_span_id"], "", "{tool}: a trace of its own");
                assert!(new_traces.insert(trace.to_string()), "one new trace per call");
            }
        }
    }
    assert_eq!(
        new_traces.len(),
        2,
        "the untraced call and the invalid traceparent's"
    );

    // The stdio server received the client's `_meta` as sent, traceparent and all.
    let reached = std::fs::read_to_string(&reached).unwrap();
    assert!(
        reached.contains(&format!("\"traceparent\":\"{T1}\"")),
        "{reached}"
    );
    assert!(!reached.contains(T2), "the denied call never reached the server");
}

/// A headers variable that is not `key=value,…` stops the gate at start (exit 2), naming
/// the variable: a collector's token is never silently left out.
#[test]
fn a_malformed_otlp_headers_variable_stops_the_gate() {
    let dir = work("traces-bad-headers");
    write_everything_config(&dir);
    for (variable, value) in [
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-token"),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "bad name=x"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-token=a%0Ab"),
    ] {
        let mut args = gate_args(&dir);
        args.extend([
            "--otlp-endpoint".into(),
            "http://127.0.0.1:9".into(),
            "--".into(),
            "true".into(),
        ]);
        let gate = Child::spawn(
            "the gate",
            Command::new(GATE)
                .args(&args)
                .env(variable, value)
                .stdin(Stdio::null())
                .stderr(Stdio::piped()),
        );
        let out = gate.output(Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(stderr.contains(variable), "{value}: {stderr}");
    }
}

#[test]
fn a_bad_otlp_endpoint_is_a_usage_error() {
    let dir = work("traces-bad-url");
    write_everything_config(&dir);
    for bad in ["127.0.0.1:4318", "https://127.0.0.1:4318", "http://"] {
        let mut args = gate_args(&dir);
        args.extend(["--otlp-endpoint".into(), bad.into(), "--".into(), "true".into()]);
        let out = Command::new(GATE)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--otlp-endpoint"), "{bad}: {stderr}");
    }
}

/// The config file's `otlp_endpoint` is the flag; with no collector there, the call is
/// answered and recorded all the same, the failed export is logged, and the gate exits 0.
#[test]
fn the_config_files_otlp_endpoint_key_is_the_flag_and_a_missing_collector_fails_no_call() {
    let dir = work("traces-config");
    write_everything_config(&dir);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "policy = \"policy.json\"\ntools = \"tools.json\"\nstate = \"memory\"\nreceipts = \"receipts.jsonl\"\nserver = [{:?}]\notlp_endpoint = \"http://127.0.0.1:{closed}\"\n",
        everything().display().to_string()
    );
    std::fs::write(dir.join("gate.toml"), config).unwrap();
    let mut gate = Child::spawn(
        "the gate",
        Command::new(GATE)
            .args(["--config", &dir.join("gate.toml").display().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let mut input = gate.stdin();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    writeln!(input, "{init}").unwrap();
    writeln!(
        input,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    writeln!(input, "{}", call(2, "echo", json!({"message": "hi"}), Some(T1))).unwrap();
    let rx = json_lines(gate.stdout_lines());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = rx.recv_timeout(left).expect("the call's answer within 60 s");
        if message["id"] == 2 {
            assert!(message["result"].is_object(), "{message}");
            break;
        }
    }
    drop(input);
    let status = gate.wait(Duration::from_secs(30));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut gate.process().stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status}: {stderr}");
    let url = format!("http://127.0.0.1:{closed}/v1/traces");
    assert!(
        stderr.contains(&format!("otlp: one span per call to {url}")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("otlp: cannot export spans to {url}")),
        "{stderr}"
    );
    let records: Vec<Value> = receipts(&dir)
        .into_iter()
        .filter(|r| r["record"] == "aml-call-record/1")
        .collect();
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["receipt"]["execution_status"], "dispatched");
}

/// The JSON messages among `lines`, in order (others passed over), through a channel.
pub(crate) fn json_lines(lines: Lines) -> mpsc::Receiver<Value> {
    let (tx, rx) = mpsc::channel::<Value>();
    std::thread::spawn(move || {
        while let Ok(line) = lines.next_within(Duration::MAX) {
            if let Ok(message) = serde_json::from_str(&line) {
                if tx.send(message).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

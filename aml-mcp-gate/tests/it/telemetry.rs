//! `--metrics`: the gate's `/metrics`, read by the official Python client's parsers, counts
//! exactly the calls made, by outcome (and agrees with the receipts); `/healthz` answers;
//! `/readyz` turns unready when the policy file breaks and when the server dies.
//!
//! The gate runs with `--listen` in front of server-everything over Streamable HTTP
//! (`--upstream`), so that the server can be killed while the gate runs.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// A tool the host registers and allows that the server does not have: its calls are
/// forwarded and fail there.
const MISSING: &str = "no-such-tool";

fn call(id: u64, tool: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
        .to_string()
}

/// server-everything's tools as `write_everything_config` registers them, and [`MISSING`]
/// registered and allowed too.
fn write_config(dir: &Path) {
    write_everything_config(dir);
    let mut tools: Value = serde_json::from_slice(&std::fs::read(dir.join("tools.json")).unwrap()).unwrap();
    tools["tools"].as_array_mut().unwrap().push(json!({
        "name": MISSING, "effect": "read", "purpose": "Fail", "resource": {"fixed": "everything"},
        "input_schema": {"type": "object"}}));
    std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
    let mut policy: Value = serde_json::from_slice(&std::fs::read(dir.join("policy.json")).unwrap()).unwrap();
    policy["rules"].as_array_mut().unwrap().push(
        json!({"tool": MISSING, "effect": "read", "resource": "everything", "requires_approval": false}),
    );
    std::fs::write(dir.join("policy.json"), policy.to_string()).unwrap();
}

/// The gate, and where its metrics are: read from its stderr's readiness line.
fn start_gate(dir: &Path, upstream: &str) -> (Gate, SocketAddr) {
    let mut args = gate_args(dir);
    args.extend(
        [
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            "127.0.0.1:0",
            "--upstream",
            upstream,
        ]
        .map(String::from),
    );
    let mut command = Command::new(GATE);
    command.args(&args).stderr(Stdio::piped());
    let mut gate = Gate::start_command(command);
    let stderr = gate.child.process().stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("gate: {line}");
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("the gate did not name its metrics address within 20 s");
        if let Some(url) = line.strip_prefix("aml-mcp-gate: metrics at http://") {
            let addr = url.trim_end_matches("/metrics").parse().unwrap();
            return (gate, addr);
        }
    }
}

/// `GET path` on the metrics listener: status and body.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    get_with(addr, path, "")
}

/// [`get`] with extra header lines (each ending in `\r\n`).
fn get_with(addr: SocketAddr, path: &str, headers: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n{headers}\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let status = raw.split(' ').nth(1).unwrap_or("0").parse().unwrap();
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The scrape, parsed by `scripts/interop/metrics_parse.py`.
fn parsed_metrics(dir: &Path, addr: SocketAddr) -> Value {
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    let file = dir.join("scrape.txt");
    std::fs::write(&file, &body).unwrap();
    let script = repo().join("scripts/interop/metrics_parse.py");
    let parsed = python_report(&script, &[file.display().to_string()]);
    assert_eq!(parsed["parsers_agree"], true, "{body}");
    parsed
}

type Key = (String, String, String, String);

/// `aml_gate_calls_total` by (tool, decision, status, reason).
fn calls_by_outcome(parsed: &Value) -> BTreeMap<Key, u64> {
    let mut counts = BTreeMap::new();
    assert_eq!(parsed["types"]["aml_gate_calls"], "counter", "{parsed}");
    for sample in parsed["samples"].as_array().unwrap() {
        if sample["name"] != "aml_gate_calls_total" {
            continue;
        }
        let l = &sample["labels"];
        let key =
            [&l["tool"], &l["decision"], &l["status"], &l["reason"]].map(|v| v.as_str().unwrap().to_string());
        assert!(
            l["server"].as_str().unwrap().starts_with("http://127.0.0.1:"),
            "{l}"
        );
        *counts.entry(key.into()).or_default() += sample["value"].as_f64().unwrap() as u64;
    }
    counts
}

/// The same, from the receipts the gate wrote.
fn receipts_by_outcome(dir: &Path) -> BTreeMap<Key, u64> {
    let mut counts = BTreeMap::new();
    for record in receipts(dir)
        .iter()
        .filter(|r| r["record"] == "aml-call-record/1")
    {
        let tool = record["tool"].as_str().unwrap();
        let registered = ["echo", "get-env", MISSING].contains(&tool);
        let decision = record["plan"]["decision"].as_str().unwrap_or("none");
        let (status, reason) = match &record["receipt"] {
            Value::Null => ("blocked", record["refusal"].as_str().unwrap_or("host_error")),
            receipt => (
                receipt["execution_status"].as_str().unwrap(),
                receipt["reason"].as_str().unwrap(),
            ),
        };
        let tool = if registered { tool } else { "(other)" };
        let key = [tool, decision, status, reason].map(String::from);
        *counts.entry(key.into()).or_default() += 1;
    }
    counts
}

/// The sum of every sample named `sample` (all label sets), of a family of type `kind`.
fn sample_value(parsed: &Value, family: &str, sample: &str) -> f64 {
    let kind = if sample == family { "gauge" } else { "histogram" };
    assert_eq!(parsed["types"][family], kind, "{family}");
    let samples: Vec<f64> = parsed["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == sample)
        .map(|s| s["value"].as_f64().unwrap())
        .collect();
    assert!(!samples.is_empty(), "no sample {sample}");
    samples.iter().sum()
}

fn wait_ready(addr: SocketAddr, want: u16, mention: &str) -> String {
    aml_test_support::wait_until(
        &format!("/readyz {want} naming {mention}"),
        Duration::from_secs(20),
        || {
            let (status, body) = get(addr, "/readyz");
            (status == want && body.contains(mention)).then_some(body)
        },
    )
}

#[test]
fn metrics_count_every_call_by_outcome_and_readyz_follows_the_server_and_the_policy() {
    let dir = work("telemetry");
    write_config(&dir);
    let server = EverythingHttp::start();
    let (mut gate, metrics) = start_gate(&dir, &server.url());
    assert_eq!(get(metrics, "/healthz"), (200, "ok\n".to_string()));
    wait_ready(metrics, 200, "upstream: ok");

    let session = open_session(gate.addr, &[]);
    let headers = [JSON_ONLY, CONTENT_JSON, ("mcp-session-id", session.as_str())];
    let mut id = 10;
    let mut make = |tool: &str, arguments: Value| {
        id += 1;
        let reply = request(gate.addr, "POST", &headers, &call(id, tool, arguments));
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()
    };
    for n in 0..3 {
        let answer = make("echo", json!({"message": format!("hello {n}")}));
        assert_eq!(answer["result"]["isError"], Value::Null, "{answer}");
    }
    for _ in 0..2 {
        make("get-env", json!({}));
    }
    for _ in 0..2 {
        // Forwarded, and failing at the server: a tool error result.
        let answer = make(MISSING, json!({}));
        assert_eq!(answer["result"]["isError"], true, "{answer}");
    }
    make("not-registered", json!({}));

    // The records are written after each answer: wait until all eight are in the scrape.
    let parsed = aml_test_support::wait_until("8 calls in /metrics", Duration::from_secs(10), || {
        let parsed = parsed_metrics(&dir, metrics);
        (calls_by_outcome(&parsed).values().sum::<u64>() == 8).then_some(parsed)
    });
    let counted = calls_by_outcome(&parsed);
    let by_tool_status = |tool: &str, status: &str| -> u64 {
        counted
            .iter()
            .filter(|((t, _, s, _), _)| t == tool && s == status)
            .map(|(_, n)| n)
            .sum()
    };
    assert_eq!(by_tool_status("echo", "dispatched"), 3, "{counted:?}");
    assert_eq!(by_tool_status("get-env", "blocked"), 2, "{counted:?}");
    assert_eq!(by_tool_status(MISSING, "dispatched"), 2, "{counted:?}");
    let unregistered = ("(other)", "none", "blocked", "invalid_or_unregistered_call");
    let unregistered: Key = (
        unregistered.0.into(),
        unregistered.1.into(),
        unregistered.2.into(),
        unregistered.3.into(),
    );
    assert_eq!(counted.get(&unregistered), Some(&1), "{counted:?}");
    assert!(
        counted
            .keys()
            .any(|(t, d, _, r)| t == "get-env" && d == "deny" && r != "host_error"),
        "{counted:?}"
    );

    // Every call once in each histogram, and the receipts say the same as the counters.
    for family in ["aml_gate_call_duration_seconds", "aml_gate_gate_added_seconds"] {
        let count = sample_value(&parsed, family, &format!("{family}_count"));
        assert_eq!(count, 8.0, "{family}");
    }
    assert_eq!(
        sample_value(
            &parsed,
            "aml_gate_upstream_call_duration_seconds",
            "aml_gate_upstream_call_duration_seconds_count"
        ),
        5.0
    );
    // One intent written before each of the five forwards (SQLite state).
    assert_eq!(
        sample_value(
            &parsed,
            "aml_gate_state_commit_seconds",
            "aml_gate_state_commit_seconds_count"
        ),
        5.0
    );
    assert_eq!(
        sample_value(&parsed, "aml_gate_sessions", "aml_gate_sessions"),
        1.0
    );
    assert_eq!(
        sample_value(&parsed, "aml_gate_upstream_up", "aml_gate_upstream_up"),
        1.0
    );
    assert_eq!(
        sample_value(&parsed, "aml_gate_policy_valid", "aml_gate_policy_valid"),
        1.0
    );
    gate_receipts_match(&dir, &counted);
    // The same endpoints on the --listen port.
    let (status, front) = get(gate.addr, "/metrics");
    assert_eq!(status, 200);
    assert!(front.contains("aml_gate_calls_total{"), "{front}");
    assert_eq!(get(gate.addr, "/healthz"), (200, "ok\n".to_string()));

    // A broken policy file: not ready (every call would be blocked), and says why.
    let policy = std::fs::read(dir.join("policy.json")).unwrap();
    std::fs::write(dir.join("policy.json"), b"{ not json").unwrap();
    let body = wait_ready(metrics, 503, "policy: every call is blocked with invalid_policy");
    assert!(body.contains("upstream: ok"), "{body}");
    let parsed = parsed_metrics(&dir, metrics);
    assert_eq!(
        sample_value(&parsed, "aml_gate_policy_valid", "aml_gate_policy_valid"),
        0.0
    );
    std::fs::write(dir.join("policy.json"), policy).unwrap();
    wait_ready(metrics, 200, "policy: ok");

    // The server dies: not ready, the gauge down; the process is still alive.
    drop(server);
    let body = wait_ready(metrics, 503, "upstream: 127.0.0.1:");
    assert!(body.contains("policy: ok"), "{body}");
    let parsed = parsed_metrics(&dir, metrics);
    assert_eq!(
        sample_value(&parsed, "aml_gate_upstream_up", "aml_gate_upstream_up"),
        0.0
    );
    assert_eq!(get(metrics, "/healthz").0, 200);
    assert_eq!(get(metrics, "/nothing").0, 404);
    gate.stop();
}

/// The counters agree with the receipts, outcome by outcome.
fn gate_receipts_match(dir: &Path, counted: &BTreeMap<Key, u64>) {
    let recorded = aml_test_support::wait_until("8 receipts", Duration::from_secs(10), || {
        let recorded = receipts_by_outcome(dir);
        (recorded.values().sum::<u64>() == 8).then_some(recorded)
    });
    assert_eq!(&recorded, counted);
}

#[test]
fn a_bad_metrics_address_is_a_clear_usage_error() {
    let dir = work("telemetry-bad");
    write_config(&dir);
    for (value, says) in [
        ("nonsense", "--metrics \"nonsense\": not an address"),
        ("127.0.0.1:99999", "expected HOST:PORT"),
        ("listen", "--metrics listen needs --listen"),
    ] {
        let out = Command::new(GATE)
            .args(gate_args(&dir))
            .args(["--metrics", value, "--", "true"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(stderr.contains(says), "{value}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn on_the_listen_port_the_probes_need_no_token_and_metrics_do() {
    let dir = work("telemetry-front");
    write_config(&dir);
    let mut args = gate_args(&dir);
    let tokens = dir.join("tokens").display().to_string();
    args.extend(
        [
            "--listen",
            "127.0.0.1:0",
            "--tokens",
            &tokens,
            "--metrics",
            "listen",
            "--",
        ]
        .map(String::from),
    );
    args.push(everything().display().to_string());
    let mut gate = Gate::start(&args);
    assert_eq!(get(gate.addr, "/healthz"), (200, "ok\n".to_string()));
    let (status, body) = get(gate.addr, "/readyz");
    assert_eq!(status, 200, "{body}");
    assert_eq!(get(gate.addr, "/metrics").0, 401);
    let bearer = format!("authorization: Bearer {TOKEN}\r\n");
    let (status, body) = get_with(gate.addr, "/metrics", &bearer);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("# TYPE aml_gate_sessions gauge"), "{body}");
    // A foreign page is refused before anything, probes included.
    let foreign = "origin: http://127.0.0.1:1\r\n";
    assert_eq!(get_with(gate.addr, "/healthz", foreign).0, 403);
    gate.stop();
}

#[test]
fn the_config_files_metrics_key_is_the_flag() {
    let dir = work("telemetry-config");
    write_config(&dir);
    let run = |metrics: &str| {
        let config = format!(
            "policy = \"policy.json\"\ntools = \"tools.json\"\nstate = \"memory\"\nserver = [\"cat\"]\nmetrics = \"{metrics}\"\n"
        );
        std::fs::write(dir.join("gate.toml"), config).unwrap();
        let out = Child::spawn(
            "the gate",
            Command::new(GATE)
                .args(["--config", &dir.join("gate.toml").display().to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped()),
        )
        .output(Duration::from_secs(20));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run("127.0.0.1:0");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("aml-mcp-gate: metrics at http://127.0.0.1:"),
        "{stderr}"
    );
    let (code, stderr) = run("127.0.0.1:not-a-port");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--metrics \"127.0.0.1:not-a-port\""), "{stderr}");
}

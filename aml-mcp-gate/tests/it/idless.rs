//! A request-only method sent without an `"id"` (a notification to JSON-RPC) never reaches
//! the server, on every front and in both protocol eras: stdio with the `initialize`
//! handshake, stdio with 2026-07-28's per-request envelope, the HTTP session front, and the
//! HTTP stateless (2026-07-28) front. The server (`scripts/interop/mcp_raw_stdin_server.py`)
//! logs every raw line it reads and runs a `tools/call` whether or not it has an id, as the
//! server of the report did; each case then sends a request with an id, whose answer proves
//! that the gate had read and handled the id-less message before.

use crate::common;
use crate::raw;
use crate::stateless;

use std::path::Path;

use serde_json::{json, Value};

use raw::{gate_options, raw_server, read_lines, records, write_config, StdioGate};

const CALL_WITHOUT_ID: &str =
    r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"send","arguments":{"to":"everyone"}}}"#;

/// The server never read a message that has a method outside `notifications/` and no id,
/// nor anything of the id-less call; it ran only `echo`.
fn assert_the_server_never_saw_it(dir: &Path, echoes: usize) {
    let raw = read_lines(&dir.join("raw.log"));
    assert!(!raw.is_empty(), "the server read nothing");
    for line in &raw {
        let message: Value = serde_json::from_str(line).unwrap();
        let method = message["method"].as_str().unwrap_or("notifications/");
        assert!(
            method.starts_with("notifications/") || message.get("id").is_some(),
            "the server read a request without an id: {line}"
        );
        assert!(
            !line.contains("everyone"),
            "the id-less call reached the server: {line}"
        );
    }
    let ran = read_lines(&dir.join("ran.log"));
    assert_eq!(ran.len(), echoes, "{ran:?}");
    assert!(ran.iter().all(|r| r.contains("\"echo\"")), "{ran:?}");
}

/// One record per dropped message: a malformed request, named by its tool or method.
fn assert_recorded(dir: &Path, named: &[&str]) {
    let dropped: Vec<Value> = records(dir)
        .into_iter()
        .filter(|r| r["refusal"] == "malformed_request")
        .collect();
    let names: Vec<&str> = dropped.iter().map(|r| r["tool"].as_str().unwrap()).collect();
    assert_eq!(names, named, "{dropped:?}");
    for record in &dropped {
        assert!(
            record["detail"].as_str().unwrap().contains("without an \"id\""),
            "{record}"
        );
        assert_eq!(record["receipt"], Value::Null, "never planned: {record}");
    }
}

#[test]
fn on_stdio_with_the_handshake_requests_without_an_id_are_dropped_logged_and_recorded() {
    let dir = raw::work("stdio-handshake");
    write_config(&dir);
    let mut gate = StdioGate::start(&dir, &gate_options(&dir), &raw_server(&dir));
    gate.initialize();
    gate.send(CALL_WITHOUT_ID);
    gate.send(r#"{"jsonrpc":"2.0","method":"tools/list"}"#);
    gate.send(r#"{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#);
    gate.send_json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"after": true}}}));
    let echoed = gate.recv();
    assert_eq!(echoed["id"], 2, "{echoed}");
    assert_eq!(echoed["result"]["content"][0]["text"], r#"{"after": true}"#);
    gate.close();
    assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());
    assert_the_server_never_saw_it(&dir, 1);
    assert_recorded(&dir, &["send", "tools/list", "initialize"]);
    assert_eq!(
        gate.stderr()
            .matches("a client request without an \"id\" was dropped")
            .count(),
        3,
        "{}",
        gate.stderr()
    );
}

/// A 2026-07-28 `tools/call` of `send` (with its `_meta` envelope), without an id.
fn modern_call_without_id() -> Value {
    let call = stateless::call(json!(0), "send", json!({"to": "everyone"}), None);
    let mut message: Value = serde_json::from_str(&call).unwrap();
    message.as_object_mut().unwrap().remove("id");
    message
}

#[test]
fn on_stdio_in_the_2026_07_28_era_a_call_without_an_id_is_dropped_and_recorded() {
    let dir = raw::work("stdio-modern");
    write_config(&dir);
    let mut gate = StdioGate::start(&dir, &gate_options(&dir), &raw_server(&dir));
    gate.send_json(&modern_call_without_id());
    gate.send(&stateless::call(json!("e"), "echo", json!({"after": 1}), None));
    let echoed = gate.recv();
    assert_eq!(echoed["id"], "e", "{echoed}");
    gate.close();
    assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());
    assert_the_server_never_saw_it(&dir, 1);
    assert_recorded(&dir, &["send"]);
}

fn http_gate(dir: &Path) -> common::Gate {
    write_config(dir);
    let mut args = gate_options(dir);
    args.extend(["--listen", "127.0.0.1:0", "--"].map(String::from));
    args.extend(raw_server(dir));
    common::Gate::start(&args)
}

#[test]
fn over_the_http_session_front_a_call_without_an_id_gets_202_and_never_reaches_the_server() {
    let dir = raw::work("http-session");
    let mut gate = http_gate(&dir);
    let session = common::open_session(gate.addr, &[]);
    let headers = [
        common::JSON_ONLY,
        common::CONTENT_JSON,
        ("mcp-session-id", session.as_str()),
    ];
    let dropped = common::request(gate.addr, "POST", &headers, CALL_WITHOUT_ID);
    assert_eq!(dropped.status, 202, "{}", dropped.body);
    let echo = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"after": true}}});
    let echoed = common::request(gate.addr, "POST", &headers, &echo.to_string());
    assert_eq!(echoed.status, 200, "{}", echoed.body);
    assert_eq!(echoed.json()["id"], 7);
    assert!(gate.stop().success());
    assert_the_server_never_saw_it(&dir, 1);
    assert_recorded(&dir, &["send"]);
}

#[test]
fn over_the_http_stateless_front_a_call_without_an_id_gets_202_is_recorded_and_never_reaches_the_server() {
    let dir = raw::work("http-stateless");
    let mut gate = http_gate(&dir);
    let without_id = modern_call_without_id();
    let headers = stateless::call_headers("send", common::JSON_ONLY);
    let dropped = common::request(gate.addr, "POST", &headers, &without_id.to_string());
    assert_eq!(dropped.status, 202, "{}", dropped.body);
    let echo = stateless::call(json!(1), "echo", json!({"after": true}), None);
    let echoed = common::request(
        gate.addr,
        "POST",
        &stateless::call_headers("echo", common::JSON_ONLY),
        &echo,
    );
    assert_eq!(echoed.status, 200, "{}", echoed.body);
    assert_eq!(echoed.json()["id"], 1);
    assert!(gate.stop().success());
    assert_the_server_never_saw_it(&dir, 1);
    assert_recorded(&dir, &["send"]);
}

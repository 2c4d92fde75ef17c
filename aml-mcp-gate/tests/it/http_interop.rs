//! The official Python MCP SDK client (`mcp.client.streamable_http`) and the reference
//! server `@modelcontextprotocol/server-everything`, through `aml-mcp-gate` on every
//! transport pair: HTTP front to a stdio child, stdio front to server-everything's Streamable
//! HTTP mode, and HTTP to HTTP. Each is compared with the same client talking to the server
//! directly: tools, resources, prompts, completion and progress notifications arrive as they
//! do directly, plus the gate's verdict; a call the host's policy denies never reaches the
//! server; receipts hold no tool output.
//!
//! `scripts/interop-setup` installs the peers into `target/interop`; without them these tests
//! fail, naming the setup to run.

use crate::common;

use common::*;
use serde_json::{json, Value};

/// What the gate must keep as the server sent it, and what it adds.
fn assert_transparent(direct: &Value, gated: &Value) {
    // The handshake, less the offer of task-augmented tools/call, which the gate refuses.
    let mut expected = direct["initialize"].clone();
    let offered = expected["capabilities"]["tasks"]["requests"]["tools"]
        .as_object_mut()
        .and_then(|tools| tools.remove("call"));
    assert!(offered.is_some(), "{expected}");
    assert_eq!(gated["initialize"], expected, "initialize");
    for key in [
        "resources",
        "resource_read",
        "resource_templates",
        "prompts",
        "prompt_get",
        "completion",
        "ping",
    ] {
        assert_eq!(gated[key], direct[key], "{key}");
    }
    assert!(direct["resources"]["resources"].as_array().unwrap().len() > 3);
    assert!(direct["prompts"]["prompts"].as_array().unwrap().len() > 1);
    // Progress notifications: all four, as directly.
    assert_eq!(
        gated["progress"].as_array().unwrap().len(),
        4,
        "{}",
        gated["progress"]
    );
    assert_eq!(gated["progress"], direct["progress"]);
    for call in ["long_running", "echo", "sum", "structured"] {
        assert_eq!(
            gated[call]["without_verdict"], direct[call]["without_verdict"],
            "{call}"
        );
        assert_eq!(gated[call]["verdict"]["mcp_result_status"], "returned", "{call}");
        assert!(direct[call]["verdict"].is_null());
    }
    // tools/list: what the server lists, less what the host does not register and allow
    // (this client cannot sample, so the server hides trigger-sampling-request).
    let allowed = [
        "echo",
        "get-structured-content",
        "get-sum",
        "trigger-long-running-operation",
        "trigger-sampling-request",
    ];
    let expected: Vec<&Value> = direct["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| allowed.contains(&t.as_str().unwrap()))
        .collect();
    assert_eq!(expected.len(), 4, "{}", direct["tools"]);
    assert_eq!(gated["tools"], json!(expected));
    assert_eq!(gated["tool_schemas"]["get-sum"]["additionalProperties"], false);
    // Denied by the host: an error with the verdict, not the server's answer (which,
    // directly, is the environment).
    assert_eq!(direct["unlisted"]["is_error"], false);
    assert_eq!(gated["unlisted"]["is_error"], true);
    assert_eq!(gated["unlisted"]["verdict"]["receipt"]["reason"], "no_exact_rule");
    let direct_env = direct["unlisted"]["without_verdict"].to_string();
    assert!(direct_env.contains("PATH"), "{direct_env}");
    assert!(!gated["unlisted"]["without_verdict"].to_string().contains("PATH"));
}

fn assert_receipts(dir: &std::path::Path) {
    let log = receipts(dir);
    assert_eq!(log.len(), 5, "{log:?}");
    let denied: Vec<_> = log.iter().filter(|r| r["tool"] == "get-env").collect();
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0]["receipt"]["execution_status"], "blocked");
    let dispatched = log
        .iter()
        .filter(|r| r["receipt"]["execution_status"] == "dispatched")
        .count();
    assert_eq!(dispatched, 4, "{log:?}");
    assert!(log
        .iter()
        .all(|r| r["result"].is_null() || r["result"]["sha256"].is_string()));
    let text = std::fs::read_to_string(dir.join("receipts.jsonl")).unwrap();
    assert!(
        !text.contains("Echo:") && !text.contains("héllo"),
        "tool output in receipts"
    );
}

/// A gate listening on loopback, with `flags`, in front of a stdio server-everything; its
/// directory (config, receipts) named by `tag`.
fn http_gate_to_everything(tag: &str, flags: &[String]) -> (std::path::PathBuf, Gate) {
    let dir = work(tag);
    write_everything_config(&dir);
    let mut args = gate_args(&dir);
    args.extend(["--listen", "127.0.0.1:0"].map(String::from));
    args.extend(flags.iter().cloned());
    args.push("--".into());
    args.push(everything().display().to_string());
    let gate = Gate::start(&args);
    (dir, gate)
}

#[test]
fn python_client_over_http_through_the_gate_to_a_stdio_server_everything() {
    let dir = work("http-stdio");
    write_everything_config(&dir);
    let mut args = gate_args(&dir);
    args.extend(["--listen", "127.0.0.1:0", "--tokens"].map(String::from));
    args.push(dir.join("tokens").display().to_string());
    args.push("--".into());
    args.push(everything().display().to_string());
    let mut gate = Gate::start(&args);

    let direct = http_client(&json!({"command": [everything()]}), &["everything"]);
    let gated = http_client(&json!({"url": gate.url, "token": TOKEN}), &["everything"]);
    assert_transparent(&direct, &gated);
    assert!(gate.stop().success());
    assert_receipts(&dir);
}

#[test]
fn python_client_over_stdio_through_the_gate_to_server_everything_over_http() {
    let server = EverythingHttp::start();
    let dir = work("stdio-http");
    write_everything_config(&dir);
    let direct = http_client(&json!({"url": server.url()}), &["everything"]);
    let mut command = vec![GATE.to_string()];
    command.extend(gate_args(&dir));
    command.extend(["--upstream".to_string(), server.url()]);
    let gated = http_client(&json!({"command": command}), &["everything"]);
    assert_transparent(&direct, &gated);
    assert_receipts(&dir);
}

#[test]
fn python_client_over_http_through_the_gate_to_server_everything_over_http() {
    let server = EverythingHttp::start();
    let dir = work("http-http");
    write_everything_config(&dir);
    let mut args = gate_args(&dir);
    args.extend([
        "--listen".to_string(),
        "127.0.0.1:0".into(),
        "--upstream".into(),
        server.url(),
    ]);
    let mut gate = Gate::start(&args);
    let direct = http_client(&json!({"url": server.url()}), &["everything"]);
    let gated = http_client(&json!({"url": gate.url}), &["everything"]);
    assert_transparent(&direct, &gated);
    // A second client gets its own session with the server, at the same time.
    let (a, b) = std::thread::scope(|s| {
        let one = s.spawn(|| http_client(&json!({"url": gate.url}), &["calls", "5"]));
        let two = s.spawn(|| http_client(&json!({"url": gate.url}), &["calls", "5"]));
        (one.join().unwrap(), two.join().unwrap())
    });
    assert_eq!(a["calls"].as_array().unwrap().len(), 5);
    assert_eq!(a["calls"], b["calls"]);
    assert!(gate.stop().success());
    assert_eq!(receipts(&dir).len(), 15);
}

#[test]
fn a_sampling_request_from_the_server_reaches_the_http_client_and_its_answer_comes_back() {
    let (_dir, gate) = http_gate_to_everything("http-sampling", &["--sampling".into(), "relay".into()]);
    let report = http_client(&json!({"url": gate.url}), &["sampling"]);
    assert_eq!(
        report["sampling_requests_seen"].as_array().unwrap().len(),
        1,
        "{report}"
    );
    let text = report["call"]["without_verdict"]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("hi from the test client"), "{text}");
    assert_eq!(report["call"]["verdict"]["mcp_result_status"], "returned");
}

#[test]
fn a_gate_reaches_a_token_protected_gate_with_upstream_token() {
    // The inner gate wants a token; the outer one relays to it over HTTP with the token file.
    let inner_dir = work("inner");
    write_everything_config(&inner_dir);
    let mut args = gate_args(&inner_dir);
    args.extend(["--listen", "127.0.0.1:0", "--tokens"].map(String::from));
    args.push(inner_dir.join("tokens").display().to_string());
    args.push("--".into());
    args.push(everything().display().to_string());
    let mut inner = Gate::start(&args);

    let outer_dir = work("outer");
    write_everything_config(&outer_dir);
    let token_file = outer_dir.join("server-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut command = vec![GATE.to_string()];
    command.extend(gate_args(&outer_dir));
    command.extend([
        "--upstream".to_string(),
        inner.url.clone(),
        "--upstream-token".into(),
    ]);
    command.push(token_file.display().to_string());
    let report = http_client(&json!({"command": command}), &["calls", "3"]);
    assert_eq!(
        report["calls"],
        json!(["Echo: call 0", "Echo: call 1", "Echo: call 2"])
    );
    assert!(inner.stop().success());
    assert_eq!(receipts(&inner_dir).len(), 3);
    assert_eq!(receipts(&outer_dir).len(), 3);

    // Without the token the inner gate refuses the outer one's session: the client is told.
    let mut inner = Gate::start(&args);
    let mut command = vec![GATE.to_string()];
    command.extend(gate_args(&outer_dir));
    command.extend(["--upstream".to_string(), inner.url.clone()]);
    let out = std::process::Command::new(python())
        .arg(repo().join("scripts/interop/mcp_http_client.py"))
        .arg(json!({"command": command}).to_string())
        .args(["calls", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("401"), "{stderr}");
    assert!(inner.stop().success());
    assert_eq!(
        receipts(&inner_dir).len(),
        3,
        "nothing more reached the inner gate"
    );
}

/// A cancel from the client reaches the server: the call is recorded `unknown`, cancelled,
/// and the session goes on.
fn assert_cancelled(report: &Value, dir: &std::path::Path) {
    assert_eq!(report["finished"], false, "{report}");
    assert_eq!(report["progress_before_cancel"], json!([1.0]));
    let log = receipts(dir);
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["receipt"]["execution_status"], "unknown");
    assert!(
        log[0]["detail"].as_str().unwrap().contains("cancelled"),
        "{}",
        log[0]
    );
}

#[test]
fn a_cancel_from_the_client_reaches_the_server_on_both_fronts() {
    let (dir, mut gate) = http_gate_to_everything("cancel-http", &[]);
    let report = http_client(&json!({"url": gate.url}), &["cancel"]);
    assert!(gate.stop().success());
    assert_cancelled(&report, &dir);

    let server = EverythingHttp::start();
    let dir = work("cancel-upstream");
    write_everything_config(&dir);
    let mut command = vec![GATE.to_string()];
    command.extend(gate_args(&dir));
    command.extend(["--upstream".to_string(), server.url()]);
    let report = http_client(&json!({"command": command}), &["cancel"]);
    assert_cancelled(&report, &dir);
}

/// A call whose SSE stream stays quiet past `--sse-keep-alive` (2.5 s with one progress step
/// at its end, keep-alives every second): the Python SDK client reads through the
/// `: keep-alive` comments to its progress and its answer.
#[test]
fn the_python_client_reads_a_quiet_stream_through_its_keep_alive_comments() {
    let (dir, mut gate) = http_gate_to_everything("keep-alive", &["--sse-keep-alive".into(), "1".into()]);
    let report = http_client(&json!({"url": gate.url}), &["quiet"]);
    assert!(gate.stop().success());
    assert_eq!(
        report["call"]["verdict"]["mcp_result_status"], "returned",
        "{report}"
    );
    assert_eq!(report["progress"], json!([1.0]), "{report}");
    let log = receipts(&dir);
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["receipt"]["execution_status"], "dispatched");
}

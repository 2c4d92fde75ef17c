//! Interop: the official Python MCP SDK client (`mcp` 2.3.0) through `aml-mcp-gate` in front
//! of the reference server `@modelcontextprotocol/server-everything` (npm), compared with the
//! same client talking to the server directly; and the input-required retry of protocol
//! 2026-07-28 against a server built with the official Python SDK. None of the peers was
//! written here (`scripts/interop/mcp_input_required_server.py` only declares one tool with
//! the SDK).
//!
//! `scripts/interop-setup` installs the peers into `target/interop`; without them these tests
//! fail, naming the setup to run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use aml_core::{Effect, FrozenProposal, ProposalParts};
use serde_json::{json, Value};

const VERDICT: &str = "aml.action-boundary/verdict";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn peers() -> PathBuf {
    // Each panics, naming the setup script, when its peer is missing.
    aml_test_support::python();
    aml_test_support::node_bin("mcp-server-everything");
    aml_test_support::interop_dir()
}

fn everything() -> PathBuf {
    peers().join("node/node_modules/.bin/mcp-server-everything")
}

fn work(tag: &str) -> PathBuf {
    aml_test_support::scratch_dir("interop-relay", tag)
}

/// The host's registry for server-everything: five tools it may call, and `get-env`
/// registered but allowed by no rule.
fn write_everything_config(dir: &Path) {
    let object = json!({"type": "object"});
    let tools = [
        (
            "echo",
            json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"],
                   "additionalProperties": false}),
        ),
        (
            "get-sum",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                   "required": ["a", "b"], "additionalProperties": false}),
        ),
        ("get-structured-content", object.clone()),
        ("trigger-long-running-operation", object.clone()),
        ("trigger-sampling-request", object.clone()),
        ("get-env", object),
    ];
    let registry: Vec<Value> = tools
        .iter()
        .map(|(name, schema)| {
            json!({"name": name, "effect": "read", "purpose": format!("Use {name} for the user"),
                   "resource": {"fixed": "everything"}, "input_schema": schema})
        })
        .collect();
    std::fs::write(dir.join("tools.json"), json!({"tools": registry}).to_string()).unwrap();
    let rules: Vec<Value> = tools[..5]
        .iter()
        .map(|(name, _)| json!({"tool": name, "effect": "read", "resource": "everything", "requires_approval": false}))
        .collect();
    std::fs::write(
        dir.join("policy.json"),
        json!({"protocol": "aml-action-policy/1", "rules": rules}).to_string(),
    )
    .unwrap();
}

fn gate_command(dir: &Path, extra: &[&str], server: &[PathBuf]) -> Value {
    let mut command = vec![
        json!(crate::bins::gate()),
        json!("--policy"),
        json!(dir.join("policy.json")),
        json!("--tools"),
        json!(dir.join("tools.json")),
        json!("--receipts"),
        json!(dir.join("receipts.jsonl")),
    ];
    command.extend(extra.iter().map(|a| json!(a)));
    command.push(json!("--"));
    command.extend(server.iter().map(|s| json!(s)));
    Value::Array(command)
}

/// Runs one scenario of `scripts/interop/mcp_relay_client.py`; its report and stderr.
fn client(command: &Value, scenario: &str, env: &[(&str, &str)]) -> (Value, String) {
    let out = Command::new(peers().join("venv/bin/python"))
        .arg(repo().join("scripts/interop/mcp_relay_client.py"))
        .arg(command.to_string())
        .arg(scenario)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "python client failed: {stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

fn receipts(dir: &Path) -> Vec<Value> {
    aml_testkit::mcp::read_json_lines(&dir.join("receipts.jsonl")).unwrap()
}

#[test]
fn through_the_gate_the_python_client_sees_what_it_sees_directly_plus_the_verdict() {
    let dir = work("everything");
    write_everything_config(&dir);
    let (direct, _) = client(&json!([everything()]), "everything", &[]);
    let (gated, _) = client(&gate_command(&dir, &[], &[everything()]), "everything", &[]);

    // The handshake as the server sent it, less the capability to take task-augmented
    // tools/call, which the gate refuses (documented in ADR 007).
    let mut expected = direct["initialize"].clone();
    let task_calls = expected["capabilities"]["tasks"]["requests"]["tools"]
        .as_object_mut()
        .and_then(|tools| tools.remove("call"));
    assert!(
        task_calls.is_some(),
        "server-everything offers task-augmented calls: {expected}"
    );
    assert_eq!(gated["initialize"], expected);
    // Relayed as the server sent it: resources, prompts, completion, ping.
    for key in [
        "resources",
        "resource_read",
        "resource_templates",
        "prompts",
        "prompt_get",
        "completion",
        "ping",
        "notifications",
    ] {
        assert_eq!(gated[key], direct[key], "{key}");
    }
    assert!(direct["resources"]["resources"].as_array().unwrap().len() > 3);
    assert!(!direct["completion"]["completion"]["values"]
        .as_array()
        .unwrap()
        .is_empty());
    assert!(gated["initialize"]["capabilities"]["completions"].is_object());

    // Progress: every notification arrives, as directly.
    assert_eq!(gated["progress"].as_array().unwrap().len(), 4);
    assert_eq!(gated["progress"], direct["progress"]);

    // Tool results: identical but for the verdict under _meta.
    for call in ["long_running", "echo", "sum", "structured"] {
        assert_eq!(
            gated[call]["without_verdict"], direct[call]["without_verdict"],
            "{call}"
        );
        assert_eq!(gated[call]["verdict"]["mcp_result_status"], "returned", "{call}");
        assert!(direct[call]["verdict"].is_null());
    }
    let digest = &gated["echo"]["verdict"]["plan"]["proposal_sha256"];
    assert_eq!(gated["echo"]["verdict"]["receipt"]["proposal_sha256"], *digest);

    // tools/list: only what the host registered and allows, with the host's schemas. The
    // sampling tool is there: the server shows it only to clients that can sample, so the
    // client's capabilities reached it.
    assert_eq!(
        gated["tools"],
        json!([
            "echo",
            "get-structured-content",
            "get-sum",
            "trigger-long-running-operation",
            "trigger-sampling-request"
        ])
    );
    assert!(direct["tools"].as_array().unwrap().contains(&json!("get-env")));
    assert_eq!(
        gated["tool_schemas"]["get-sum"]["required"],
        json!(["a", "b"]),
        "the host's schema"
    );
    assert_eq!(gated["tool_schemas"]["get-sum"]["additionalProperties"], false);

    // Registered without a rule: denied, never sent; directly it returns the environment.
    assert_eq!(gated["unlisted"]["is_error"], true);
    assert_eq!(gated["unlisted"]["verdict"]["receipt"]["reason"], "no_exact_rule");
    assert_eq!(direct["unlisted"]["is_error"], false);

    let log = receipts(&dir);
    assert_eq!(log.len(), 5);
    assert!(log
        .iter()
        .all(|r| r["result"].is_null() || r["result"]["sha256"].is_string()));
    assert!(!std::fs::read_to_string(dir.join("receipts.jsonl"))
        .unwrap()
        .contains("Echo:"));
}

#[test]
fn sampling_from_server_everything_is_refused_by_default_and_relayed_when_configured() {
    let dir = work("sampling");
    write_everything_config(&dir);
    let (refused, _) = client(&gate_command(&dir, &[], &[everything()]), "sampling", &[]);
    assert_eq!(
        refused["sampling_requests_seen"],
        json!([]),
        "the client never saw it"
    );
    assert_eq!(refused["call"]["is_error"], true);
    assert_eq!(refused["call"]["verdict"]["mcp_result_status"], "tool_error");
    let text = refused["call"]["without_verdict"]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("does not relay sampling/createMessage"), "{text}");
    let log = receipts(&dir);
    assert!(log
        .iter()
        .any(|r| r["tool"] == "sampling/createMessage" && r["refusal"] == "server_request_refused"));

    let dir = work("sampling-relay");
    write_everything_config(&dir);
    let (relayed, _) = client(
        &gate_command(&dir, &["--sampling", "relay"], &[everything()]),
        "sampling",
        &[],
    );
    assert_eq!(relayed["sampling_requests_seen"].as_array().unwrap().len(), 1);
    let text = relayed["call"]["without_verdict"]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("hi from the test client"), "{text}");
    assert_eq!(relayed["call"]["verdict"]["mcp_result_status"], "returned");
}

#[test]
fn a_cancel_from_the_python_client_reaches_server_everything() {
    let dir = work("cancel");
    write_everything_config(&dir);
    let (report, stderr) = client(
        &gate_command(&dir, &[], &[everything()]),
        "cancel",
        &[("RUST_LOG", "aml_mcp=info")],
    );
    assert_eq!(report["finished"], false);
    assert_eq!(report["progress_before_cancel"], json!([1.0]));
    // The server got the cancel: past the time the operation takes, it never answered the
    // cancelled request (the gate logs any answer that comes after a cancel).
    assert!(!stderr.contains("after it was cancelled"), "{stderr}");
    let log = receipts(&dir);
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["receipt"]["execution_status"], "unknown");
    assert!(
        log[0]["detail"].as_str().unwrap().contains("cancelled"),
        "{}",
        log[0]
    );
}

fn input_required_config(dir: &Path, requires_approval: bool) {
    std::fs::write(
        dir.join("tools.json"),
        json!({"tools": [{"name": "delete_file", "effect": "delete", "purpose": "Delete a file the user names",
            "resource": {"argument": "path"},
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
                             "additionalProperties": false}}]})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("policy.json"),
        json!({"protocol": "aml-action-policy/1", "rules": [{"tool": "delete_file", "effect": "delete",
            "resource": "/tmp/aml-report.txt", "requires_approval": requires_approval}]})
        .to_string(),
    )
    .unwrap();
}

fn input_server() -> Vec<PathBuf> {
    vec![
        peers().join("venv/bin/python"),
        repo().join("scripts/interop/mcp_input_required_server.py"),
    ]
}

/// The digest the gate must give a retry: the envelope of the tool arguments, the client's
/// input responses and the server's request state.
fn retry_digest(report: &Value) -> String {
    let envelope = json!({"arguments": {"path": "/tmp/aml-report.txt"},
        "inputResponses": report["input_responses"], "requestState": report["request_state"]});
    FrozenProposal::freeze(ProposalParts {
        tool: "delete_file",
        effect: Effect::Delete,
        resource: "/tmp/aml-report.txt",
        purpose: "Delete a file the user names",
        arguments: envelope.as_object().unwrap(),
    })
    .unwrap()
    .digest()
    .to_string()
}

#[test]
fn an_input_required_retry_is_its_own_proposal_whose_digest_covers_the_responses() {
    let dir = work("input");
    input_required_config(&dir, false);
    let audit = dir.join("server-audit.jsonl");
    let audit_env = audit.to_str().unwrap();
    let command = gate_command(&dir, &["--elicitation", "relay"], &input_server());
    let (report, _) = client(&command, "input", &[("AML_INPUT_AUDIT", audit_env)]);
    assert_eq!(report["protocol_version"], "2026-07-28");
    let first = &report["first"]["_meta"][VERDICT];
    assert_eq!(first["mcp_result_status"], "input_required", "{report}");
    assert_eq!(report["first"]["resultType"], "input_required");
    let retry = &report["retry"]["_meta"][VERDICT];
    assert_eq!(retry["mcp_result_status"], "returned", "{report}");
    assert_eq!(
        report["retry"]["content"][0]["text"],
        "deleted /tmp/aml-report.txt"
    );
    // The retry is a new proposal: its digest covers the responses and the request state.
    assert_ne!(first["plan"]["proposal_sha256"], retry["plan"]["proposal_sha256"]);
    assert_eq!(retry["plan"]["proposal_sha256"], retry_digest(&report));
    let done = aml_testkit::mcp::read_json_lines(&audit).unwrap();
    assert_eq!(done, [json!({"path": "/tmp/aml-report.txt", "done": "deleted"})]);

    // Elicitation refused (the default): the client is told, the server never gets a retry.
    let dir = work("input-refused");
    input_required_config(&dir, false);
    let audit = dir.join("server-audit.jsonl");
    let command = gate_command(&dir, &[], &input_server());
    let (report, _) = client(&command, "input", &[("AML_INPUT_AUDIT", audit.to_str().unwrap())]);
    assert_eq!(report["first"]["isError"], true, "{report}");
    assert_eq!(
        report["first"]["_meta"][VERDICT]["mcp_result_status"],
        "input_required"
    );
    assert!(report["first"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("elicitation/create"));
    assert!(aml_testkit::mcp::read_json_lines(&audit).unwrap().is_empty());
}

async fn http(address: &str, request: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    out
}

/// The approval page's pending proposals.
async fn pending(origin: &str, token: &str) -> Vec<Value> {
    let response = http(
        origin,
        format!("GET /pending.json?t={token} HTTP/1.1\r\nHost: {origin}\r\n\r\n"),
    )
    .await;
    serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap()).unwrap()
}

async fn approve(origin: &str, token: &str, proposal: &Value) {
    let form = format!(
        "t={token}&grant_id={}&proposal_sha256={}&decision=approve",
        proposal["grant_id"].as_str().unwrap(),
        proposal["proposal_sha256"].as_str().unwrap()
    );
    let decided = http(origin, format!("POST /decide HTTP/1.1\r\nHost: {origin}\r\nOrigin: http://{origin}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}", form.len())).await;
    assert!(decided.starts_with("HTTP/1.1 200"), "{decided}");
}

/// Waits (bounded) for a pending proposal other than `seen`.
async fn next_pending(origin: &str, token: &str, seen: &[String]) -> Value {
    aml_test_support::wait_until_async("a new pending proposal", Duration::from_secs(30), || async {
        pending(origin, token)
            .await
            .into_iter()
            .find(|p| !seen.contains(&p["proposal_sha256"].as_str().unwrap_or_default().to_owned()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approver_sees_and_signs_the_retry_with_the_users_answer_in_it() {
    use tokio::io::AsyncBufReadExt;
    let dir = work("input-approval");
    input_required_config(&dir, true);
    let command = gate_command(
        &dir,
        &[
            "--elicitation",
            "relay",
            "--approve",
            "web",
            "--approval-timeout",
            "30",
        ],
        &input_server(),
    );
    let mut python = tokio::process::Command::new(peers().join("venv/bin/python"))
        .arg(repo().join("scripts/interop/mcp_relay_client.py"))
        .arg(command.to_string())
        .arg("input")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(python.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("the gate prints its approval URL");
            if let Some((_, url)) = line.split_once(" at http://") {
                break url.to_owned();
            }
        }
    })
    .await
    .unwrap();
    let (origin, token) = url.split_once("/?t=").unwrap();
    let first = next_pending(origin, token, &[]).await;
    assert!(!first["canonical_json"]
        .as_str()
        .unwrap()
        .contains("inputResponses"));
    approve(origin, token, &first).await;
    let retry = next_pending(
        origin,
        token,
        &[first["proposal_sha256"].as_str().unwrap().to_owned()],
    )
    .await;
    let canonical: Value = serde_json::from_str(retry["canonical_json"].as_str().unwrap()).unwrap();
    assert_eq!(
        canonical["arguments"]["arguments"],
        json!({"path": "/tmp/aml-report.txt"})
    );
    assert!(
        canonical["arguments"]["inputResponses"].is_object(),
        "{canonical}"
    );
    assert!(canonical["arguments"]["requestState"].is_string(), "{canonical}");
    approve(origin, token, &retry).await;
    let out = tokio::time::timeout(Duration::from_secs(60), python.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["retry"]["content"][0]["text"],
        "deleted /tmp/aml-report.txt"
    );
    assert_eq!(
        report["retry"]["_meta"][VERDICT]["plan"]["proposal_sha256"],
        retry["proposal_sha256"]
    );
    assert_eq!(
        canonical["arguments"]["inputResponses"],
        report["input_responses"]
    );
    assert_eq!(canonical["arguments"]["requestState"], report["request_state"]);
}

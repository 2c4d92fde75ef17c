//! The MCP adapter: the documented report over a real child-process rmcp server, the 17
//! guarded-tool cases over MCP, and `aml-mcp-gate` in front of the fixture server.

use std::path::PathBuf;

use aml_mcp::VERDICT_META_KEY;
use aml_testkit::compare::CaseVerdict;
use aml_testkit::matrix::{guarded_tool_verdicts, mcp_verdicts};
use aml_testkit::mcp::{approved_digest, read_json_lines, report_with, McpHarness};
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};

fn setup() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// This package's binary, which serves the fixture with `serve-notice-fixture`.
const FIXTURE: &str = env!("CARGO_BIN_EXE_aml-testkit");

#[test]
fn the_six_documented_cases_match_the_fixture_except_digest_values() {
    let rt = setup();
    let report = rt.block_on(report_with(std::path::Path::new(FIXTURE))).unwrap();
    let verdicts = mcp_verdicts(Ok(report.clone()));
    assert_eq!(verdicts.len(), 6);
    for (id, v) in verdicts {
        assert_eq!(v, CaseVerdict::Pass, "{id}");
    }
    // Digests are real: plan and receipt agree, and the approved call's is this host's.
    for case in report["cases"].as_array().unwrap() {
        let v = &case["verdict"];
        assert_eq!(v["plan"]["proposal_sha256"], v["receipt"]["proposal_sha256"]);
    }
    let approved = &report["cases"][1];
    assert_eq!(approved["id"], "approved");
    assert_eq!(
        approved["verdict"]["plan"]["proposal_sha256"],
        approved_digest().unwrap().to_string()
    );
    // The server lied about being read-only; the gate decided anyway.
    assert_eq!(report["advertised_read_only_hint"], true);
}

#[test]
fn the_seventeen_guarded_tool_cases_run_over_mcp() {
    let rt = setup();
    let verdicts = rt.block_on(guarded_tool_verdicts(&McpHarness));
    assert_eq!(verdicts.len(), 17);
    for (id, v) in verdicts {
        match id.as_str() {
            "mapper_mutated" => assert_eq!(v, CaseVerdict::PassStatic),
            "invalid_arguments" => assert_eq!(v, CaseVerdict::PassWireRefused),
            _ => assert_eq!(v, CaseVerdict::Pass, "{id}"),
        }
    }
}

fn gate_binary() -> PathBuf {
    crate::bins::gate()
}

/// The gate's policy (one rule for `send_notice` to the team) and tool registry.
fn write_gate_config(policy: &std::path::Path, tools: &std::path::Path, requires_approval: bool) {
    std::fs::write(
        policy,
        json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_notice", "effect": "send", "resource": "team@example.test",
         "requires_approval": requires_approval}]})
        .to_string(),
    )
    .unwrap();
    std::fs::write(tools, json!({"tools": [{"name": "send_notice", "effect": "send", "purpose": "Send a local notice",
        "resource": {"argument": "to"},
        "input_schema": {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                         "required": ["to", "body"], "additionalProperties": false}}]}).to_string()).unwrap();
}

fn meta_verdict(result: &rmcp::model::CallToolResult) -> Value {
    result.meta.as_ref().unwrap().0[VERDICT_META_KEY].clone()
}

#[test]
fn aml_mcp_gate_forwards_allowed_calls_and_stops_the_rest() {
    let rt = setup();
    let dir = aml_test_support::scratch_dir("mcp-proxy", "gate");
    let (policy, tools, receipts, audit) = (
        dir.join("policy.json"),
        dir.join("tools.json"),
        dir.join("receipts.jsonl"),
        dir.join("audit.jsonl"),
    );
    write_gate_config(&policy, &tools, false);

    rt.block_on(async {
        let mut command = tokio::process::Command::new(gate_binary());
        command
            .arg("--policy")
            .arg(&policy)
            .arg("--tools")
            .arg(&tools)
            .arg("--receipts")
            .arg(&receipts)
            .arg("--")
            .arg(FIXTURE)
            .arg("serve-notice-fixture")
            // Reaches the fixture only if the gate passes its environment on.
            .env("AML_NOTICE_AUDIT", &audit);
        let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
        let tools = client.peer().list_all_tools().await.unwrap();
        assert_eq!(
            tools.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>(),
            ["send_notice"]
        );

        let call = |name: &str, args: Value| {
            let peer = client.peer().clone();
            let params =
                CallToolRequestParams::new(name.to_owned()).with_arguments(args.as_object().unwrap().clone());
            async move { peer.call_tool(params).await.unwrap() }
        };
        let allowed = call("send_notice", json!({"to": "team@example.test", "body": "hi"})).await;
        assert_eq!(allowed.is_error, None);
        assert_eq!(
            meta_verdict(&allowed)["receipt"]["reason"],
            "host_dispatch_returned"
        );
        let denied = call("send_notice", json!({"to": "outside@example.test", "body": "hi"})).await;
        assert_eq!(denied.is_error, Some(true));
        assert_eq!(meta_verdict(&denied)["receipt"]["reason"], "no_exact_rule");
        let unknown = call("delete_records", json!({})).await;
        assert_eq!(
            meta_verdict(&unknown)["rejection"],
            "invalid_or_unregistered_call"
        );
        let extra = call(
            "send_notice",
            json!({"to": "team@example.test", "body": "hi", "cc": ["x"]}),
        )
        .await;
        assert_eq!(meta_verdict(&extra)["rejection"], "invalid_arguments");
        // Still serving after refusals.
        let again = call("send_notice", json!({"to": "team@example.test", "body": "again"})).await;
        assert_eq!(meta_verdict(&again)["mcp_result_status"], "returned");
        let _ = client.cancel().await;
    });

    let audit = read_json_lines(&audit).unwrap();
    assert_eq!(
        audit,
        [
            json!({"tool": "send_notice", "to": "team@example.test", "body": "hi"}),
            json!({"tool": "send_notice", "to": "team@example.test", "body": "again"})
        ]
    );
    let log = read_json_lines(&receipts).unwrap();
    assert_eq!(log.len(), 5);
    assert_eq!(log[1]["receipt"]["execution_status"], "blocked");
    assert_eq!(log[2]["refusal"], "invalid_or_unregistered_call");
    assert!(log
        .iter()
        .all(|l| l["record"] == "aml-call-record/1" && l["adapter"] == "mcp" && l["started_at_ms"].is_u64()));
    // Records hold the result's digest, never the result.
    assert!(log[0]["result"]["sha256"].is_string());
    assert!(!std::fs::read_to_string(&receipts)
        .unwrap()
        .contains("recorded locally"));
}

async fn http(address: &str, request: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    out
}

#[test]
fn aml_mcp_gate_waits_for_a_signed_decision_on_its_approval_page() {
    use tokio::io::AsyncBufReadExt;
    let rt = setup();
    let dir = aml_test_support::scratch_dir("mcp-proxy", "approve-web");
    let (policy, tools, audit) = (
        dir.join("policy.json"),
        dir.join("tools.json"),
        dir.join("audit.jsonl"),
    );
    write_gate_config(&policy, &tools, true);
    rt.block_on(async {
        let mut command = tokio::process::Command::new(gate_binary());
        command
            .args(["--approve", "web", "--approval-timeout", "3", "--receipts"])
            .arg(dir.join("receipts.jsonl"))
            .arg("--policy").arg(&policy).arg("--tools").arg(&tools).arg("--").arg(FIXTURE).arg("serve-notice-fixture")
            .env("AML_NOTICE_AUDIT", &audit);
        let (transport, stderr) = TokioChildProcess::builder(command).stderr(std::process::Stdio::piped()).spawn().unwrap();
        let mut lines = tokio::io::BufReader::new(stderr.unwrap()).lines();
        let url = loop {
            let line = lines.next_line().await.unwrap().expect("the gate prints its approval URL");
            if let Some((_, url)) = line.split_once(" at ") {
                break url.to_owned();
            }
        };
        let (origin, token) = url.trim_start_matches("http://").split_once("/?t=").unwrap();
        let (origin, token) = (origin.to_owned(), token.to_owned());
        let client = ().serve(transport).await.unwrap();
        let args = json!({"to": "team@example.test", "body": "needs a person"}).as_object().unwrap().clone();
        let peer = client.peer().clone();
        let call = tokio::spawn(async move {
            peer.call_tool(CallToolRequestParams::new("send_notice").with_arguments(args)).await.unwrap()
        });
        let pending = aml_test_support::wait_until_async("a pending proposal", std::time::Duration::from_secs(30), || async {
            let response = http(&origin, format!("GET /pending.json?t={token} HTTP/1.1\r\nHost: {origin}\r\n\r\n")).await;
            let list: Value = serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap()).unwrap();
            list.as_array().and_then(|l| l.first()).cloned()
        })
        .await;
        assert_eq!(pending["tool"], "send_notice");
        let form = format!("t={token}&grant_id={}&proposal_sha256={}&decision=approve", pending["grant_id"].as_str().unwrap(),
                           pending["proposal_sha256"].as_str().unwrap());
        let decided = http(&origin, format!("POST /decide HTTP/1.1\r\nHost: {origin}\r\nOrigin: http://{origin}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}", form.len())).await;
        assert!(decided.starts_with("HTTP/1.1 200"), "{decided}");
        let approved = call.await.unwrap();
        let statement: Value = read_json_lines(&dir.join("receipts.jsonl"))
            .unwrap()
            .into_iter()
            .find(|r| r["record"] == "aml-approval-record/1")
            .map(|r| r["statement"].clone())
            .expect("the signed decision is journaled");
        assert_eq!(statement["decision"], "approve");
        assert_eq!(statement["proposal_sha256"], pending["proposal_sha256"]);
        assert_eq!(statement["signature"].as_str().unwrap().len(), 128);
        assert_eq!(meta_verdict(&approved)["receipt"]["reason"], "host_dispatch_returned");
        assert_eq!(meta_verdict(&approved)["plan"]["proposal_sha256"], pending["proposal_sha256"]);

        // Nobody decides: the call blocks when the wait runs out; it never runs.
        let args = json!({"to": "team@example.test", "body": "nobody answers"}).as_object().unwrap().clone();
        let ignored = client.peer().call_tool(CallToolRequestParams::new("send_notice").with_arguments(args)).await.unwrap();
        assert_eq!(meta_verdict(&ignored)["receipt"]["reason"], "approval_error");
        let _ = client.cancel().await;
    });
    let audit = read_json_lines(&audit).unwrap();
    assert_eq!(
        audit,
        [json!({"tool": "send_notice", "to": "team@example.test", "body": "needs a person"})]
    );
}

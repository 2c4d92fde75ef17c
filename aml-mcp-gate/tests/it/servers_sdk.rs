//! The issue's three servers at once (ADR 033): server-everything (npm), server-filesystem
//! (npm) and a server made with the official Python SDK, behind one gate, driven by the
//! official Python SDK client on stdio and over Streamable HTTP (`--listen`): every page of
//! the tools, a call to each that reaches its server, prompts, resources, completion,
//! progress, and a cancellation that reaches only its server (server-everything's input is
//! logged through `tee`); then one server is killed, and the other two serve on. Every
//! record names its server.

use crate::raw;
use crate::session;

use serde_json::{json, Value};

use raw::{python, read_lines, repo};

#[test]
fn the_python_sdk_client_reaches_three_real_servers_through_one_gate_on_stdio() {
    three_servers("servers-sdk", Front::Stdio);
}

#[test]
fn the_python_sdk_client_reaches_three_real_servers_through_one_gate_over_http() {
    three_servers("servers-sdk-http", Front::Http);
}

/// How the client reaches the gate.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Front {
    /// The client starts the gate and speaks stdio.
    Stdio,
    /// The gate listens (`--listen`); the client speaks Streamable HTTP, its session with
    /// servers of its own.
    Http,
}

fn three_servers(tag: &str, front: Front) {
    let dir = raw::work(tag);
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("report.txt"), "quarterly numbers").unwrap();
    let notices = dir.join("notices.jsonl");
    let path = |p: &std::path::Path| p.display().to_string();
    let string = json!({"type": "string"});
    let tool = |name: &str, server: &str, properties: Value| {
        json!({"name": name, "server": server, "effect": "read", "purpose": format!("Use {name}"),
               "resource": {"fixed": server}, "input_schema": {"type": "object", "properties": properties}})
    };
    let number = json!({"type": "number"});
    let tools = json!({"tools": [
        tool("echo", "everything", json!({"message": string})),
        tool("trigger-long-running-operation", "everything", json!({"duration": number, "steps": number})),
        tool("read_text_file", "files", json!({"path": string})),
        tool("send_notice", "notes", json!({"to": string, "body": string}))]});
    std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
    let rule = |tool: &str, server: &str| json!({"tool": tool, "effect": "read", "resource": server, "requires_approval": false});
    let policy = json!({"protocol": "aml-action-policy/1", "rules": [
        rule("everything__echo", "everything"), rule("everything__trigger-long-running-operation", "everything"),
        rule("read_text_file", "files"), rule("send_notice", "notes")]});
    std::fs::write(dir.join("policy.json"), policy.to_string()).unwrap();
    let config = format!(
        r#"policy = "policy.json"
tools = "tools.json"
state = "memory"
receipts = "receipts.jsonl"

[[servers]]
name = "files"
command = [{filesystem:?}, {files:?}]
names = "on_conflict"

[[servers]]
name = "everything"
command = ["sh", "-c", "tee -a \"$0\" | exec \"$1\"", {everything_in:?}, {everything:?}]

[[servers]]
name = "notes"
command = ["sh", "-c", "echo $$ > \"$0\"; exec \"$1\" \"$2\"", {notes_pid:?}, {python:?}, {notice:?}]
names = "never"
"#,
        everything = path(&crate::common::everything()),
        everything_in = path(&dir.join("everything.in.log")),
        notes_pid = path(&dir.join("notes.pid")),
        filesystem = path(&crate::common::node_bin("mcp-server-filesystem")),
        files = path(&files),
        python = path(&python()),
        notice = path(&repo().join("scripts/interop/mcp_notice_server.py")),
    );
    std::fs::write(dir.join("gate.toml"), config).unwrap();
    let config = path(&dir.join("gate.toml"));
    let mut listening = None;
    let target = match front {
        Front::Stdio => json!([crate::common::GATE, "--config", config]),
        Front::Http => {
            let mut gate = std::process::Command::new(crate::common::GATE);
            gate.args(["--config", &config, "--listen", "127.0.0.1:0"])
                .env("AML_NOTICE_AUDIT", &notices)
                .stderr(std::fs::File::create(dir.join("gate.stderr")).unwrap());
            let (child, url) = session::listening("the gate", &mut gate);
            listening = Some(child);
            json!({"url": url})
        }
    };
    let calls = json!([
        {"name": "everything__echo", "arguments": {"message": "hello"}},
        {"name": "read_text_file", "arguments": {"path": path(&files.join("report.txt"))}},
        {"name": "send_notice", "arguments": {"to": "team", "body": "hi"}},
        // Prompts and resources of server-everything, the second server: only what the gate
        // learnt from the lists sends them there, not the first server's default.
        {"list": "prompts"},
        {"prompt": "everything__simple-prompt"},
        {"list": "resources"},
        {"read": "demo://resource/static/document/architecture.md"},
        {"list": "templates"},
        {"read": "demo://resource/dynamic/text/1"},
        // Progress from the second server reaches the client's call.
        {"name": "everything__trigger-long-running-operation", "arguments": {"duration": 1, "steps": 3}, "progress": true},
        // Completion by the prompt's and by the template's server.
        {"complete": {"prompt": "everything__completable-prompt"}, "argument": {"name": "department", "value": "Eng"}},
        {"complete": {"template": "demo://resource/dynamic/text/{resourceId}"}, "argument": {"name": "resourceId", "value": "7"}},
        // A call the client cancels at its first progress: the cancellation reaches its server.
        {"cancel": "everything__trigger-long-running-operation", "arguments": {"duration": 4, "steps": 4}},
        {"name": "everything__echo", "arguments": {"message": "after the cancel"}},
        {"name": "send_notice", "arguments": {"to": "team", "body": "after the cancel"}},
        // The notes server is killed: its tool is gone, the other two serve on.
        {"kill": path(&dir.join("notes.pid"))},
        {"name": "send_notice", "arguments": {"to": "team", "body": "after the kill"}},
        {"name": "everything__echo", "arguments": {"message": "after the kill"}},
        {"name": "read_text_file", "arguments": {"path": path(&files.join("report.txt"))}},
    ]);
    let out = std::process::Command::new(python())
        .arg(repo().join("scripts/interop/mcp_client.py"))
        .arg(target.to_string())
        .arg(calls.to_string())
        .env("AML_NOTICE_AUDIT", &notices)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(mut gate) = listening {
        // The session's servers stop with it; the gate, on SIGTERM, once its records are out.
        let stopped = gate.terminate(crate::common::WAIT);
        let stderr = std::fs::read_to_string(dir.join("gate.stderr")).unwrap_or_default();
        assert!(stopped.success(), "{stopped:?}: {stderr}");
    }
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["server"], "aml-mcp-gate", "{report}");
    assert_eq!(
        report["pages"],
        json!([
            ["read_text_file"],
            ["everything__echo", "everything__trigger-long-running-operation"],
            ["send_notice"]
        ]),
        "one page per server, each with its registered tool under its exposed name"
    );
    let results = report["results"].as_array().unwrap();
    let texts: Vec<&str> = results
        .iter()
        .map(|r| r["text"].as_str().unwrap_or_default())
        .collect();
    assert!(texts[0].contains("hello"), "{report}");
    assert!(texts[1].contains("quarterly numbers"), "{report}");
    assert_eq!(texts[2], "sent to team", "{report}");
    assert!(results[..3].iter().all(|r| r["is_error"] == false), "{report}");
    let listed = |i: usize| {
        results[i]["pages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p.as_array().unwrap().clone())
            .collect::<Vec<Value>>()
    };
    assert!(
        listed(3).contains(&json!("everything__simple-prompt")),
        "{report}"
    );
    assert!(
        !texts[4].is_empty(),
        "the prompt came from server-everything: {report}"
    );
    assert!(
        listed(5).contains(&json!("demo://resource/static/document/architecture.md")),
        "{report}"
    );
    assert!(
        !texts[6].is_empty(),
        "a listed resource read from server-everything: {report}"
    );
    assert!(
        listed(7).contains(&json!("demo://resource/dynamic/text/{resourceId}")),
        "{report}"
    );
    assert!(
        !texts[8].is_empty(),
        "a resource read by its template's server: {report}"
    );
    assert_eq!(results[9]["is_error"], false, "{report}");
    assert_eq!(
        results[9]["progress"],
        json!([1.0, 2.0, 3.0]),
        "each step's progress: {report}"
    );
    assert_eq!(results[10]["values"], json!(["Engineering"]), "{report}");
    assert_eq!(results[11]["values"], json!(["7"]), "{report}");
    assert_eq!(
        (&results[12]["progress"], &results[12]["finished"]),
        (&json!([1.0]), &json!(false)),
        "{report}"
    );
    assert!(texts[13].contains("after the cancel"), "{report}");
    assert_eq!(texts[14], "sent to team", "{report}");
    assert!(results[15]["killed"].is_number(), "{report}");
    assert_eq!(
        results[16]["is_error"], true,
        "the killed server's tool: {report}"
    );
    assert!(texts[17].contains("after the kill"), "{report}");
    assert!(texts[18].contains("quarterly numbers"), "{report}");
    assert_eq!(results[17]["is_error"], false, "{report}");
    assert_eq!(results[18]["is_error"], false, "{report}");
    assert_eq!(
        read_lines(&notices).len(),
        2,
        "the notes server ran its tool twice, and nothing after it was killed"
    );
    // server-everything's own input: the cancelled call under its id, then its cancellation.
    let received: Vec<Value> = read_lines(&dir.join("everything.in.log"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let cancelled_call = received
        .iter()
        .find(|m| m["method"] == "tools/call" && m["params"]["arguments"]["duration"] == 4)
        .unwrap_or_else(|| panic!("the call did not reach server-everything: {received:?}"));
    assert_eq!(cancelled_call["params"]["name"], "trigger-long-running-operation");
    let cancel = received
        .iter()
        .find(|m| m["method"] == "notifications/cancelled")
        .unwrap_or_else(|| panic!("no cancellation reached server-everything: {received:?}"));
    assert_eq!(cancel["params"]["requestId"], cancelled_call["id"], "{cancel}");
    let records = read_lines(&dir.join("receipts.jsonl"));
    let record: Value = records
        .iter()
        .rev()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["tool"] == "everything__trigger-long-running-operation")
        .unwrap();
    assert_eq!(record["server"], "everything", "{record}");
    assert_eq!(
        record["receipt"]["execution_status"], "unknown",
        "entered, then cancelled: {record}"
    );
}

//! Interop: the official Python MCP SDK client (`mcp` on PyPI) calls tools through
//! `aml-mcp-gate` in front of the reference filesystem server
//! (`@modelcontextprotocol/server-filesystem` on npm). Neither peer was written here.
//!
//! `scripts/interop-setup` installs both into `target/interop`; `scripts/test` runs it.
//! Without them this test fails, naming the setup to run.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

fn interop_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/interop");
    let ready = dir.join("venv/bin/python").is_file()
        && dir.join("node/node_modules/.bin/mcp-server-filesystem").is_file();
    assert!(
        ready,
        "interop peers missing in {dir:?}: run `bash scripts/interop-setup` (scripts/test does)"
    );
    dir
}

fn gate_binary() -> PathBuf {
    aml_testkit::mcp::gate_binary_path().unwrap()
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, value.to_string()).unwrap();
}

#[test]
fn python_sdk_client_through_the_gate_to_the_filesystem_server() {
    let peers = interop_dir();
    let work = std::env::temp_dir().join(format!("aml-interop-mcp-{}", std::process::id()));
    let files = work.join("files");
    std::fs::create_dir_all(&files).unwrap();
    // The filesystem server reports real paths; resolve ours the same way.
    let files = files.canonicalize().unwrap();
    let readable = files.join("report.txt");
    std::fs::write(&readable, "quarterly numbers").unwrap();
    let forbidden = files.join("planted.txt");

    let path_schema = |extra: Value| {
        let mut props = json!({"path": {"type": "string"}});
        props
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let required: Vec<&String> = props.as_object().unwrap().keys().collect();
        json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
    };
    write_json(
        &work.join("policy.json"),
        &json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "read_text_file", "effect": "read", "resource": readable, "requires_approval": false}]}),
    );
    write_json(
        &work.join("tools.json"),
        &json!({"tools": [
        {"name": "read_text_file", "effect": "read", "purpose": "Read a report for the user",
         "resource": {"argument": "path"}, "input_schema": path_schema(json!({}))},
        {"name": "write_file", "effect": "write", "purpose": "Save a file for the user",
         "resource": {"argument": "path"}, "input_schema": path_schema(json!({"content": {"type": "string"}}))}]}),
    );

    let command = json!([
        gate_binary(),
        "--policy",
        work.join("policy.json"),
        "--tools",
        work.join("tools.json"),
        "--receipts",
        work.join("receipts.jsonl"),
        "--",
        peers.join("node/node_modules/.bin/mcp-server-filesystem"),
        files,
    ]);
    let calls = json!([
        {"name": "read_text_file", "arguments": {"path": readable}},
        {"name": "write_file", "arguments": {"path": forbidden, "content": "the agent was here"}},
        {"name": "list_directory", "arguments": {"path": files}},
    ]);
    let out = Command::new(peers.join("venv/bin/python"))
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/mcp_client.py"))
        .arg(command.to_string())
        .arg(calls.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();

    // tools/list is filtered: registered tools the policy can allow (write_file has no rule;
    // list_directory is not registered).
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tools, ["read_text_file"]);

    let [read, write, list] = report["results"].as_array().unwrap().as_slice() else {
        panic!("{report}")
    };
    assert_eq!(read["is_error"], false);
    assert!(read["text"].as_str().unwrap().contains("quarterly numbers"));
    assert_eq!(
        read["meta"]["aml.action-boundary/verdict"]["receipt"]["reason"],
        "host_dispatch_returned"
    );

    assert_eq!(write["is_error"], true);
    assert_eq!(
        write["meta"]["aml.action-boundary/verdict"]["receipt"]["reason"],
        "no_exact_rule"
    );
    assert!(!forbidden.exists(), "a denied call reached the server");

    assert_eq!(
        list["meta"]["aml.action-boundary/verdict"]["rejection"],
        "invalid_or_unregistered_call"
    );
    let _ = std::fs::remove_dir_all(&work);
}

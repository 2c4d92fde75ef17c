//! `aml-mcp-gate init` against `@modelcontextprotocol/server-everything`, the way a user goes
//! from "I have an MCP server" to a gated one: init, edit (keep one tool, choose its effect,
//! add one rule), run; the official Python SDK client then calls through the gate.
//!
//! `scripts/interop-setup` installs the peers into `target/interop`; without them these tests
//! fail, naming the setup to run.

use crate::pinned;

use std::path::{Path, PathBuf};

use pinned::*;
use serde_json::json;

fn everything() -> Vec<String> {
    vec![crate::common::everything().display().to_string()]
}

fn run_init(dir: &Path) {
    let out = init(dir, &everything(), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Next:") && stdout.contains("echo"), "{stdout}");
}

#[test]
fn init_writes_files_that_with_one_rule_gate_a_call_end_to_end() {
    let dir = work("init-everything").join("gate");
    run_init(&dir);
    let tools = read_json(&dir.join("tools.json"));
    let entries = tools["tools"].as_array().unwrap();
    assert!(entries.len() > 5, "every tool is written: {}", entries.len());
    for entry in entries {
        let pin = entry["pin"].as_str().unwrap();
        assert!(pin.starts_with("sha256:") && pin.len() == 71, "{pin}");
    }
    assert_eq!(
        read_json(&dir.join("policy.json")),
        json!({"protocol": "aml-action-policy/1", "rules": []})
    );

    // Unedited, the files start nothing: every effect is still a placeholder.
    let (code, stderr) = start_unedited(&dir, &everything());
    assert_eq!(code, Some(2));
    assert!(stderr.contains("CHOOSE ONE"), "{stderr}");
    let command = gate_command(&dir, &everything());

    // The host keeps echo, chooses its effect, and adds one rule.
    let mut echo = entries.iter().find(|t| t["name"] == "echo").unwrap().clone();
    echo["effect"] = json!("read");
    write_json(&dir.join("tools.json"), &json!({"tools": [echo]}));
    write_json(
        &dir.join("policy.json"),
        &json!({"protocol": "aml-action-policy/1", "rules": [
            {"tool": "echo", "effect": "read", "resource": "echo", "requires_approval": false}]}),
    );

    let mut client = Client::start(&command, &[]);
    assert_eq!(client.listed(), ["echo"]);
    let echoed = client.call("echo", json!({"message": "gated"}));
    assert_eq!(
        outcome(&echoed),
        pair("dispatched", "host_dispatch_returned"),
        "{echoed}"
    );
    assert_eq!(echoed["text"], "Echo: gated");
    let other = client.call("get-sum", json!({"a": 1, "b": 2}));
    assert_eq!(
        outcome(&other),
        pair("refused", "invalid_or_unregistered_call"),
        "{other}"
    );
    client.close();

    let records = records(&dir);
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["receipt"]["reason"], "host_dispatch_returned");
    assert_eq!(records[0]["tool"], "echo");
}

#[test]
fn init_refuses_to_overwrite_and_says_why_a_server_cannot_be_read() {
    let dir = work("init-refusals");
    run_init(&dir);
    let before = std::fs::read_to_string(dir.join("tools.json")).unwrap();
    let again = init(&dir, &everything(), &[]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert_eq!(std::fs::read_to_string(dir.join("tools.json")).unwrap(), before);

    let empty = work("init-not-a-server");
    let out = init(&empty, &["true".to_owned()], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("exited before it answered initialize"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!empty.join("tools.json").exists(), "nothing is written");
    let missing: PathBuf = empty.join("no-such-server");
    let out = init(&empty, &[missing.display().to_string()], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot start the server"));
}

/// The gate started on `dir`'s files as written, in front of `server`: its exit and stderr.
fn start_unedited(dir: &Path, server: &[String]) -> (Option<i32>, String) {
    let command = gate_command(dir, server);
    let out = Child::spawn(
        "the gate",
        std::process::Command::new(&command[0])
            .args(&command[1..])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    )
    .output(WAIT);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn init_declares_client_capabilities_suggests_no_deprecated_tool_and_the_gate_names_placeholders() {
    // server-everything lists its sampling, elicitation and roots tools only to a client
    // that declares those capabilities.
    let dir = work("init-capabilities");
    run_init(&dir);
    let tools = read_json(&dir.join("tools.json"));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for needs_a_capability in [
        "trigger-sampling-request",
        "trigger-elicitation-request",
        "trigger-url-elicitation",
        "get-roots-list",
    ] {
        assert!(
            names.contains(&needs_a_capability),
            "{needs_a_capability}: {names:?}"
        );
    }
    // Declaring none (as a client that declares none would see it): they are not listed.
    let bare = work("init-no-capabilities");
    let mut server = everything();
    let out = init_with(&bare, &["--client-capabilities", "{}"], &server);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed = std::fs::read_to_string(bare.join("tools.json")).unwrap();
    assert!(!listed.contains("trigger-sampling-request"), "{listed}");

    // server-filesystem lists `read_file`, which it calls deprecated, first.
    let files = work("init-filesystem");
    let served = files.join("served");
    std::fs::create_dir_all(&served).unwrap();
    let filesystem = aml_test_support::node_bin("mcp-server-filesystem");
    server = vec![filesystem.display().to_string(), served.display().to_string()];
    let out = init(&files.join("gate"), &server, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(r#"{"tool": "read_text_file", "effect": "read""#),
        "{stdout}"
    );
    assert!(
        stdout.contains("deprecated (in their descriptions); prefer what they name: read_file"),
        "{stdout}"
    );

    // Started unedited, the gate names the tools whose effect is still the placeholder.
    let (code, stderr) = start_unedited(&files.join("gate"), &server);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(r#"tool "read_file" (and 13 more: read_text_file,"#),
        "{stderr}"
    );
    assert!(
        stderr.contains("replace it with read, write, send, pay or delete"),
        "{stderr}"
    );
}

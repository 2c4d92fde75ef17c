//! `--config`: the file's `server` command runs in the file's folder, as its other relative
//! paths are read from there (an MCP client starts the gate in a folder of its own choosing);
//! a server command given after `--` runs where the gate runs.

use crate::raw;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::json;

use raw::{python, read_lines, repo, write_config, StdioGate};

/// `conf/` with the gate's files, the raw-stdin server as `server.py` and `serve.sh`, which
/// runs `python ARGS…`; and `elsewhere/`, where the gate is started.
fn layout(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (conf, elsewhere) = (dir.join("conf"), dir.join("elsewhere"));
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    write_config(&conf);
    std::fs::copy(
        repo().join("scripts/interop/mcp_raw_stdin_server.py"),
        conf.join("server.py"),
    )
    .unwrap();
    let script = conf.join("serve.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec '{}' \"$@\"\n", python().display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        conf.join("gate.toml"),
        r#"policy = "policy.json"
tools = "tools.json"
state = "memory"
receipts = "receipts.jsonl"
server = ["./serve.sh", "server.py", "raw.log", "ran.log"]
"#,
    )
    .unwrap();
    (conf, elsewhere)
}

fn echo_once(gate: &mut StdioGate) {
    let init = gate.initialize();
    assert_eq!(init["result"]["serverInfo"]["name"], "raw-stdin-server", "{init}");
    gate.send_json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"here": true}}}));
    let answer = gate.recv();
    assert_eq!(
        answer["result"]["content"][0]["text"], r#"{"here": true}"#,
        "{answer}"
    );
    gate.close();
    assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());
}

#[test]
fn the_config_files_server_runs_in_the_files_folder_with_its_relative_arguments() {
    let dir = raw::work("config-server");
    let (conf, elsewhere) = layout(&dir);
    // The config file named relative to where the gate starts, as a client's configuration may.
    let options = ["--config".to_owned(), "../conf/gate.toml".to_owned()];
    let mut gate = StdioGate::start_in(&dir, &options, &[], Some(&elsewhere));
    echo_once(&mut gate);
    assert!(
        gate.stderr().contains("the server command runs in"),
        "{}",
        gate.stderr()
    );
    assert_eq!(
        read_lines(&conf.join("ran.log")).len(),
        1,
        "the server's files are in conf/"
    );
    assert!(!elsewhere.join("raw.log").exists());
    assert_eq!(read_lines(&conf.join("receipts.jsonl")).len(), 1);
}

#[test]
fn a_server_command_given_after_the_separator_runs_where_the_gate_runs() {
    let dir = raw::work("config-server-flag");
    let (conf, elsewhere) = layout(&dir);
    let options = [
        "--config".to_owned(),
        conf.join("gate.toml").display().to_string(),
    ];
    let server = [
        python().display().to_string(),
        conf.join("server.py").display().to_string(),
        "raw.log".to_owned(),
        "ran.log".to_owned(),
    ];
    let mut gate = StdioGate::start_in(&dir, &options, &server, Some(&elsewhere));
    echo_once(&mut gate);
    assert_eq!(read_lines(&elsewhere.join("ran.log")).len(), 1);
    assert!(!conf.join("raw.log").exists());
}

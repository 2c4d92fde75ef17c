//! `aml-mcp-gate init --config gate.toml` with `[[servers]]` (ADR 033): init starts each
//! listed server (two raw-stdin servers that both have `send` and `echo`), writes one tools
//! file whose tools name their server, and prints the names the client will see and the
//! command to run. Edited as a user would, the files run: each call reaches its own server.
//! A name two servers would both show bare is refused, saying how to resolve it.

use crate::raw;
use crate::servers::{call, calls_read, layout};

use serde_json::{json, Value};

use raw::StdioGate;

/// `aml-mcp-gate init --out OUT --config gate.toml`, run in `dir` (a bare file name, as a
/// user types it there).
fn init(dir: &std::path::Path, out: &str) -> std::process::Output {
    std::process::Command::new(crate::common::GATE)
        .args(["init", "--out", out, "--config", "gate.toml"])
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn init_reads_every_listed_server_into_one_tools_file_that_runs_once_edited() {
    let dir = raw::work("servers-init");
    layout(&dir);
    let out = init(&dir, "gen");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for shown in ["a__send", "a__echo", "b__send", "b__echo"] {
        assert!(stdout.contains(shown), "{shown} not in: {stdout}");
    }
    let gen = dir.join("gen");
    let tools: Value =
        serde_json::from_str(&std::fs::read_to_string(gen.join("tools.json")).unwrap()).unwrap();
    let entries = tools["tools"].as_array().unwrap();
    let mut named: Vec<(String, String)> = entries
        .iter()
        .map(|t| {
            (
                t["server"].as_str().unwrap().to_owned(),
                t["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    named.sort();
    let pairs = [("a", "echo"), ("a", "send"), ("b", "echo"), ("b", "send")];
    let want: Vec<(String, String)> = pairs
        .iter()
        .map(|(s, n)| (s.to_string(), n.to_string()))
        .collect();
    assert_eq!(named, want, "each tool under its server's own name");
    let cedar = std::fs::read_to_string(gen.join("policy.cedar")).unwrap();
    assert!(
        cedar.contains("\"b__send\""),
        "the examples use the shown names: {cedar}"
    );

    assert!(
        stdout.contains(r#""resource": "a__send""#) || stdout.contains(r#""resource": "a__echo""#),
        "the example rule is one the written file can match: {stdout}"
    );

    // Edited as the next steps say: effects chosen, two rules by the shown names.
    let edited = serde_json::to_string(&tools)
        .unwrap()
        .replace(aml_placeholder(), "read");
    std::fs::write(gen.join("tools.json"), edited).unwrap();
    let rule = |tool: &str, resource: &str| json!({"tool": tool, "effect": "read", "resource": resource, "requires_approval": false});
    let policy = json!({"protocol": "aml-action-policy/1", "rules": [rule("a__echo", "a__echo"), rule("b__send", "b__send")]});
    std::fs::write(gen.join("policy.json"), policy.to_string()).unwrap();
    // The command the next steps print, as printed.
    let line = stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("aml-mcp-gate --config"))
        .unwrap_or_else(|| panic!("no command to run in: {stdout}"));
    let options: Vec<String> = line.split_whitespace().skip(1).map(str::to_owned).collect();
    // Run where init ran: its paths are as the user gave them.
    let mut gate = StdioGate::start_in(&dir, &options, &[], Some(&dir));
    gate.initialize();
    let echoed = call(&mut gate, "c1", "a__echo", json!({"n": 1}));
    assert_eq!(echoed["result"]["content"][0]["text"], r#"{"n": 1}"#, "{echoed}");
    let sent = call(&mut gate, "c2", "b__send", json!({"n": 2}));
    assert_eq!(sent["result"]["content"][0]["text"], r#"{"n": 2}"#, "{sent}");
    let denied = call(&mut gate, "c3", "b__echo", json!({"n": 3}));
    assert_eq!(denied["result"]["isError"], true, "no rule: {denied}");
    let a: Vec<_> = calls_read(&dir, "a")
        .iter()
        .map(|m| m["params"]["name"].clone())
        .collect();
    let b: Vec<_> = calls_read(&dir, "b")
        .iter()
        .map(|m| m["params"]["name"].clone())
        .collect();
    assert_eq!((a, b), (vec![json!("echo")], vec![json!("send")]));
    gate.close();
    assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());
}

fn aml_placeholder() -> &'static str {
    "CHOOSE ONE: read | write | send | pay | delete"
}

#[test]
fn init_refuses_names_two_servers_would_both_show_and_a_command_beside_the_config() {
    let dir = raw::work("servers-init-never");
    layout(&dir);
    let config = std::fs::read_to_string(dir.join("gate.toml")).unwrap();
    let never = config
        .replace("name = \"a\"\n", "name = \"a\"\nnames = \"never\"\n")
        .replace("name = \"b\"\n", "name = \"b\"\nnames = \"never\"\n");
    std::fs::write(dir.join("gate.toml"), never).unwrap();
    let out = init(&dir, "gen");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("\"send\"") && stderr.contains("on_conflict"),
        "{stderr}"
    );
    assert!(!dir.join("gen/tools.json").exists(), "nothing is written");

    let both = std::process::Command::new(crate::common::GATE)
        .args([
            "init",
            "--config",
            &dir.join("gate.toml").display().to_string(),
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(
        both.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
    let none = std::process::Command::new(crate::common::GATE)
        .args([
            "init",
            "--config",
            &dir.join("no-such.toml").display().to_string(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert_eq!(none.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no-such.toml"), "{stderr}");
}

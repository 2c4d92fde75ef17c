//! `[[servers]]` names (ADR 033): two raw-stdin servers that both have a tool `echo`, behind
//! one gate, under each naming. `on_conflict` prefixes the shared name and keeps the others
//! bare; `never` keeps its names bare and pushes the other server's shared name under its
//! prefix, or, when both say `never`, stops the gate at start. Each shown name reaches its
//! own server under the server's own name.
//! A registered tool its server does not list is warned of, naming the server; a server
//! whose command cannot start is gone for the session, and the other serves.

use crate::raw;
use crate::servers::{call, calls_read, layout};

use serde_json::{json, Value};

use raw::StdioGate;

/// `layout`'s files with `a`'s `send` registered too and each server's `names`, the policy
/// allowing `shown`.
fn named(dir: &std::path::Path, a: &str, b: &str, shown: &[&str]) -> Vec<String> {
    let options = layout(dir);
    let tool = |name: &str, server: &str| {
        json!({"name": name, "server": server, "effect": "read", "purpose": "Echo",
               "resource": {"fixed": "echo"}, "input_schema": {"type": "object"}})
    };
    let tools = json!({"tools": [tool("echo", "a"), tool("send", "a"), tool("echo", "b")]});
    std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
    let rules: Vec<Value> = shown
        .iter()
        .map(|t| json!({"tool": t, "effect": "read", "resource": "echo", "requires_approval": false}))
        .collect();
    let policy = json!({"protocol": "aml-action-policy/1", "rules": rules});
    std::fs::write(dir.join("policy.json"), policy.to_string()).unwrap();
    let config = std::fs::read_to_string(dir.join("gate.toml")).unwrap();
    let config = config
        .replace("name = \"a\"\n", &format!("name = \"a\"\nnames = \"{a}\"\n"))
        .replace("name = \"b\"\n", &format!("name = \"b\"\nnames = \"{b}\"\n"));
    std::fs::write(dir.join("gate.toml"), config).unwrap();
    options
}

/// Every tool name the gate lists, page by page.
fn listed(gate: &mut StdioGate) -> Vec<String> {
    let mut names = Vec::new();
    let mut cursor = Value::Null;
    for page in 0..8 {
        let params = match &cursor {
            Value::Null => json!({}),
            c => json!({"cursor": c}),
        };
        gate.send_json(
            &json!({"jsonrpc": "2.0", "id": format!("l{page}"), "method": "tools/list", "params": params}),
        );
        let answer = gate.recv();
        for tool in answer["result"]["tools"].as_array().unwrap() {
            names.push(tool["name"].as_str().unwrap().to_owned());
        }
        cursor = answer["result"]["nextCursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    names
}

/// What the client sees under a naming: (shown name, server, the server's own name).
type Shown = &'static [(&'static str, &'static str, &'static str)];

#[test]
fn a_name_two_servers_share_is_shown_per_each_naming_and_reaches_its_own_server() {
    // (a's naming, b's naming, what the client sees: (shown, server, own name)).
    let cases: [(&str, &str, Shown); 3] = [
        (
            "prefix",
            "prefix",
            &[
                ("a__echo", "a", "echo"),
                ("a__send", "a", "send"),
                ("b__echo", "b", "echo"),
            ],
        ),
        (
            "on_conflict",
            "on_conflict",
            &[
                ("a__echo", "a", "echo"),
                ("send", "a", "send"),
                ("b__echo", "b", "echo"),
            ],
        ),
        (
            "never",
            "on_conflict",
            &[
                ("echo", "a", "echo"),
                ("send", "a", "send"),
                ("b__echo", "b", "echo"),
            ],
        ),
    ];
    for (a, b, expected) in cases {
        let dir = raw::work(&format!("servers-names-{a}-{b}"));
        let shown: Vec<&str> = expected.iter().map(|(s, _, _)| *s).collect();
        let options = named(&dir, a, b, &shown);
        let mut gate = StdioGate::start(&dir, &options, &[]);
        gate.initialize();
        let mut names = listed(&mut gate);
        names.sort();
        let mut want: Vec<String> = shown.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(names, want, "{a}/{b}");
        for (i, (name, server, own)) in expected.iter().enumerate() {
            let answer = call(&mut gate, &format!("c{i}"), name, json!({"i": i}));
            assert!(answer["result"]["isError"] != true, "{a}/{b} {name}: {answer}");
            let read = calls_read(&dir, server);
            let last = read
                .last()
                .unwrap_or_else(|| panic!("{a}/{b}: {name} reached no call at {server}"));
            assert_eq!(
                (&last["params"]["name"], &last["params"]["arguments"]["i"]),
                (&json!(own), &json!(i))
            );
        }
        assert_eq!(
            calls_read(&dir, "a").len() + calls_read(&dir, "b").len(),
            3,
            "{a}/{b}: one call each"
        );
        // A server's own name for a prefixed tool is not a name the client can call.
        if let Some((name, _, own)) = expected.iter().find(|(shown, _, own)| shown != own) {
            let refused = call(&mut gate, "bare", own, json!({}));
            if !expected.iter().any(|(s, _, _)| s == own) {
                let verdict = &refused["result"]["_meta"]["aml.action-boundary/verdict"];
                assert_eq!(
                    verdict["rejection"], "invalid_or_unregistered_call",
                    "{name}: {refused}"
                );
            }
        }
        gate.close();
        assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());
    }

    // Both `never`: the shared name would be shown twice; the gate does not start.
    let dir = raw::work("servers-names-never-never");
    let options = named(&dir, "never", "never", &["echo", "send"]);
    let out = std::process::Command::new(crate::common::GATE)
        .args(&options)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("\"echo\"") && stderr.contains("\"a\"") && stderr.contains("\"b\""),
        "the conflict names the tool and both servers: {stderr}"
    );
}

#[test]
fn a_registered_tool_its_server_does_not_list_is_warned_of_naming_the_server() {
    let dir = raw::work("servers-names-typo");
    let options = named(&dir, "prefix", "prefix", &["a__echo", "a__sned", "b__echo"]);
    let mut tools: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tools.json")).unwrap()).unwrap();
    // `a` lists `send`; the host wrote `sned`.
    tools["tools"][1]["name"] = json!("sned");
    std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
    let mut gate = StdioGate::start(&dir, &options, &[]);
    gate.initialize();
    let names = listed(&mut gate);
    assert_eq!(names, ["a__echo", "b__echo"], "the typo is never listed");
    raw::wait_for("the warning", || gate.stderr().contains("does not list"));
    gate.close();
    assert_eq!(gate.wait().code(), Some(0));
    let stderr = gate.stderr();
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("does not list")).collect();
    assert_eq!(
        warnings.len(),
        1,
        "one warning, for the one missing tool: {stderr}"
    );
    assert!(
        warnings[0].contains("tool=a__sned server=\"a\""),
        "{}",
        warnings[0]
    );
}

/// `gate.toml` with the commands of the servers `broken` (in file order) replaced by one
/// that cannot start.
fn with_unstartable(dir: &std::path::Path, broken: &[usize]) {
    let config = std::fs::read_to_string(dir.join("gate.toml")).unwrap();
    let mut seen = 0;
    let lines: Vec<String> = config
        .lines()
        .map(|line| {
            if !line.starts_with("command = ") {
                return line.to_owned();
            }
            seen += 1;
            match broken.contains(&(seen - 1)) {
                true => "command = [\"/nonexistent/no-such-server\"]".to_owned(),
                false => line.to_owned(),
            }
        })
        .collect();
    std::fs::write(dir.join("gate.toml"), lines.join("\n")).unwrap();
}

#[test]
fn a_server_that_cannot_start_is_gone_and_the_others_serve() {
    let dir = raw::work("servers-unstartable");
    let options = named(&dir, "prefix", "prefix", &["a__echo", "a__send", "b__echo"]);
    with_unstartable(&dir, &[1]);
    let mut gate = StdioGate::start(&dir, &options, &[]);
    let init = gate.initialize();
    assert_eq!(init["result"]["serverInfo"]["name"], "aml-mcp-gate", "{init}");
    assert_eq!(listed(&mut gate), ["a__send", "a__echo"], "only a's tools");
    let refused = call(&mut gate, "c1", "b__echo", json!({}));
    let verdict = &refused["result"]["_meta"]["aml.action-boundary/verdict"];
    assert_eq!(verdict["rejection"], "upstream_gone", "{refused}");
    let answer = call(&mut gate, "c2", "a__echo", json!({"n": 2}));
    assert_eq!(answer["result"]["content"][0]["text"], r#"{"n": 2}"#, "{answer}");
    gate.close();
    assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());
    let stderr = gate.stderr();
    assert!(
        stderr.contains("cannot start the server") && stderr.contains("no-such-server"),
        "{stderr}"
    );

    // None can start: the client's initialize is answered that the servers are gone (why),
    // and the gate ends.
    with_unstartable(&dir, &[0, 1]);
    let mut gate = StdioGate::start(&dir, &options, &[]);
    gate.send_json(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    );
    let answer = gate.recv();
    assert_eq!(answer["error"]["code"], -32000, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("could not start"), "{message}");
    gate.close();
    let status = gate.wait();
    assert_eq!(status.code(), Some(1), "{}", gate.stderr());
}

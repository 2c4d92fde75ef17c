//! `[[servers]]` (ADR 033): one gate on stdio in front of two raw-stdin servers. The client
//! sees each server's tools under its prefix, page by page; a call reaches only its tool's
//! server (their raw input logs), under the server's own name; a server that stops reading
//! takes only its own tools.

use crate::raw;

use serde_json::{json, Value};

use raw::{python, read_lines, repo, StdioGate};

/// `dir` with two raw-stdin servers `a` and `b` (logs `a.raw.log`, `b.raw.log`), both with a
/// tool `echo`, registered and allowed as `a__echo` and `b__echo`.
pub(crate) fn layout(dir: &std::path::Path) -> Vec<String> {
    let server = |name: &str| {
        let script = repo().join("scripts/interop/mcp_raw_stdin_server.py");
        json!({"name": name, "command": [python().display().to_string(), script.display().to_string(),
                                         format!("{name}.raw.log"), format!("{name}.ran.log")]})
    };
    let tool = |server: &str| {
        json!({"name": "echo", "server": server, "effect": "read", "purpose": "Echo",
               "resource": {"fixed": "echo"}, "input_schema": {"type": "object"}})
    };
    let tools = json!({"tools": [tool("a"), tool("b")]});
    std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
    let rule =
        |tool: &str| json!({"tool": tool, "effect": "read", "resource": "echo", "requires_approval": false});
    let policy = json!({"protocol": "aml-action-policy/1", "rules": [rule("a__echo"), rule("b__echo")]});
    std::fs::write(dir.join("policy.json"), policy.to_string()).unwrap();
    let mut config = String::from("policy = \"policy.json\"\ntools = \"tools.json\"\nstate = \"memory\"\nreceipts = \"receipts.jsonl\"\n");
    for name in ["a", "b"] {
        let table = server(name);
        config.push_str(&format!(
            "\n[[servers]]\nname = {}\ncommand = {}\n",
            table["name"], table["command"]
        ));
    }
    std::fs::write(dir.join("gate.toml"), config).unwrap();
    vec!["--config".into(), dir.join("gate.toml").display().to_string()]
}

pub(crate) fn call(gate: &mut StdioGate, id: &str, tool: &str, arguments: Value) -> Value {
    gate.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                           "params": {"name": tool, "arguments": arguments}}));
    gate.recv()
}

/// The `tools/call` lines a server read.
pub(crate) fn calls_read(dir: &std::path::Path, server: &str) -> Vec<Value> {
    read_lines(&dir.join(format!("{server}.raw.log")))
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["method"] == "tools/call")
        .collect()
}

#[test]
fn two_servers_behind_one_gate_each_get_only_their_own_calls_and_one_can_fail_alone() {
    let dir = raw::work("servers");
    let options = layout(&dir);
    let mut gate = StdioGate::start(&dir, &options, &[]);
    let init = gate.initialize();
    assert_eq!(init["result"]["serverInfo"]["name"], "aml-mcp-gate", "{init}");
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true);
    for server in ["a", "b"] {
        let read = read_lines(&dir.join(format!("{server}.raw.log")));
        assert!(
            read.iter().any(|l| l.contains("\"initialize\"")),
            "{server} was not initialized"
        );
    }

    gate.send_json(&json!({"jsonrpc": "2.0", "id": "l1", "method": "tools/list"}));
    let first = gate.recv();
    assert_eq!(first["result"]["tools"][0]["name"], "a__echo", "{first}");
    let cursor = first["result"]["nextCursor"].clone();
    gate.send_json(
        &json!({"jsonrpc": "2.0", "id": "l2", "method": "tools/list", "params": {"cursor": cursor}}),
    );
    let second = gate.recv();
    assert_eq!(second["result"]["tools"][0]["name"], "b__echo", "{second}");
    assert!(second["result"].get("nextCursor").is_none());

    let answer = call(&mut gate, "c1", "b__echo", json!({"n": 1}));
    assert_eq!(answer["result"]["content"][0]["text"], r#"{"n": 1}"#, "{answer}");
    assert!(calls_read(&dir, "a").is_empty(), "a read b's call");
    let read = calls_read(&dir, "b");
    assert_eq!(read.len(), 1);
    assert_eq!(read[0]["params"]["name"], "echo", "under b's own name");

    // a stops reading its input: its next call cannot be written, and a is gone; b serves on.
    call(&mut gate, "c2", "a__echo", json!({"close_input": true}));
    // The client is told a's tools are gone, and the call that found a gone is answered.
    let first = call(&mut gate, "c3", "a__echo", json!({}));
    let (changed, lost) = match first.get("method") {
        Some(_) => (first, gate.recv()),
        None => (gate.recv(), first),
    };
    assert_eq!(changed["method"], "notifications/tools/list_changed", "{changed}");
    assert_eq!(
        (&lost["id"], &lost["result"]["isError"]),
        (&json!("c3"), &json!(true)),
        "{lost}"
    );
    let refused = call(&mut gate, "c4", "a__echo", json!({}));
    let verdict = &refused["result"]["_meta"]["aml.action-boundary/verdict"];
    assert_eq!(verdict["rejection"], "upstream_gone", "{refused}");
    let answer = call(&mut gate, "c5", "b__echo", json!({"n": 2}));
    assert_eq!(answer["result"]["content"][0]["text"], r#"{"n": 2}"#, "{answer}");
    assert_eq!(calls_read(&dir, "b").len(), 2);
    assert_eq!(
        calls_read(&dir, "a").len(),
        1,
        "only the call before it stopped reading"
    );

    gate.close();
    assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());
    let records = read_lines(&dir.join("receipts.jsonl"));
    assert_eq!(records.len(), 5, "one record per call");
    for line in &records {
        let record: Value = serde_json::from_str(line).unwrap();
        let tool = record["tool"].as_str().unwrap();
        let server = &tool[..1];
        assert_eq!(record["server"], server, "each record names its server: {record}");
    }
}

/// A `[[servers]]` file that cannot work stops the gate at start (exit 2), saying why.
#[test]
fn servers_that_cannot_work_are_refused_at_start() {
    let dir = raw::work("servers-refused");
    layout(&dir);
    let base = std::fs::read_to_string(dir.join("gate.toml")).unwrap();
    let no_server_tool = json!({"tools": [{"name": "echo", "effect": "read", "purpose": "Echo",
        "resource": {"fixed": "echo"}, "input_schema": {"type": "object"}}]});
    std::fs::write(dir.join("unnamed.json"), no_server_tool.to_string()).unwrap();
    let cases = [
        (
            format!("server = [\"x\"]\n{base}"),
            "cannot be given with `server`",
        ),
        (
            base.replace("name = \"b\"", "name = \"a\""),
            "two servers are named \"a\"",
        ),
        (base.replace("name = \"b\"", "name = \"b__c\""), "\"b__c\""),
        (format!("{base}names = \"sometimes\"\n"), "\"sometimes\""),
        (base.replace("tools.json", "unnamed.json"), "names no \"server\""),
        (
            format!("{base}url = \"http://127.0.0.1:9/mcp\"\n"),
            "give `command` or `url`, not both",
        ),
        (format!("{base}token = \"t\"\n"), "are for a server over HTTP"),
        (
            format!("{base}\n[[servers]]\nname = \"web\"\nurl = \"https://example.com/mcp\"\n"),
            "https is not built in",
        ),
        (
            format!("{base}\n[[servers]]\nname = \"web\"\n"),
            "`command` or `url` is missing",
        ),
    ];
    for (config, why) in cases {
        std::fs::write(dir.join("bad.toml"), &config).unwrap();
        let out = std::process::Command::new(crate::common::GATE)
            .args(["--config", &dir.join("bad.toml").display().to_string()])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{config}\n{stderr}");
        assert!(stderr.contains(why), "{why:?} not in: {stderr}");
    }
}

/// Durable state with several servers: each call's intent and record are kept under the
/// exposed tool name, and a session that ends leaves nothing unresolved.
#[test]
fn several_servers_keep_their_calls_in_the_durable_state() {
    let dir = raw::work("servers-durable");
    let options = layout(&dir);
    let config = std::fs::read_to_string(dir.join("gate.toml")).unwrap();
    std::fs::write(
        dir.join("gate.toml"),
        config.replace("state = \"memory\"", "state = \"gate.sqlite3\""),
    )
    .unwrap();
    let mut gate = StdioGate::start(&dir, &options, &[]);
    gate.initialize();
    for (id, tool) in [("c1", "a__echo"), ("c2", "b__echo")] {
        let answer = call(&mut gate, id, tool, json!({"id": id}));
        assert_eq!(
            answer["result"]["content"][0]["text"],
            format!(r#"{{"id": "{id}"}}"#),
            "{answer}"
        );
    }
    gate.close();
    assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());
    let state = dir.join("gate.sqlite3").display().to_string();
    let journal = |what: &str| {
        let (code, lines, stderr) = crate::session::journal(&state, &[what]);
        assert_eq!(code, Some(0), "{stderr}");
        lines
    };
    assert!(journal("unresolved").is_empty());
    let calls: Vec<Value> = journal("receipts")
        .into_iter()
        .filter(|r| r.get("tool").is_some())
        .map(|r| json!([r["tool"], r["receipt"]["execution_status"]]))
        .collect();
    assert_eq!(
        calls,
        [json!(["a__echo", "dispatched"]), json!(["b__echo", "dispatched"])]
    );
}

/// Hostile input through a gate with several servers, in each shape the wire allows: every
/// message gets its clear answer (or, a notification, none) in bounded time, and no call
/// reaches either server.
#[test]
fn hostile_calls_through_several_servers_reach_neither() {
    let dir = raw::work("servers-hostile");
    let options = layout(&dir);
    let mut gate = StdioGate::start(&dir, &options, &[]);
    gate.initialize();
    let echo = |id: Value, name: &str| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": {}}});
    // A batch of two servers' calls: refused whole, each member answered -32600.
    gate.send(&format!(
        "[{},{}]",
        echo(json!(1), "a__echo"),
        echo(json!(2), "b__echo")
    ));
    let batch = gate.recv();
    let codes: Vec<&Value> = batch
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["error"]["code"])
        .collect();
    assert_eq!(codes, [&json!(-32600), &json!(-32600)], "{batch}");
    // A call sent as a notification is dropped; the next request is still answered.
    gate.send_json(
        &json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "b__echo", "arguments": {}}}),
    );
    // A server's own name is not a name the client may call.
    let own = call(&mut gate, "own", "echo", json!({}));
    let verdict = &own["result"]["_meta"]["aml.action-boundary/verdict"];
    assert_eq!(verdict["rejection"], "invalid_or_unregistered_call", "{own}");
    // A member the digest would not cover, an inexact number, a cursor the gate did not give.
    gate.send_json(&json!({"jsonrpc": "2.0", "id": "extra", "method": "tools/call",
                           "params": {"name": "a__echo", "arguments": {}, "server": "b"}}));
    assert_eq!(gate.recv()["error"]["code"], -32602);
    gate.send(r#"{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"b__echo","arguments":{"n":9007199254740993}}}"#);
    let big = gate.recv();
    assert_eq!(
        big["result"]["_meta"]["aml.action-boundary/verdict"]["rejection"], "inexact_number",
        "{big}"
    );
    for cursor in [json!("9."), json!(1), json!("b.x")] {
        gate.send_json(
            &json!({"jsonrpc": "2.0", "id": "l", "method": "tools/list", "params": {"cursor": cursor}}),
        );
        assert_eq!(gate.recv()["error"]["code"], -32602, "cursor {cursor}");
    }
    gate.send_json(&json!({"jsonrpc": "2.0", "id": "live", "method": "tools/list"}));
    assert_eq!(gate.recv()["id"], "live", "the gate still answers");
    assert!(
        calls_read(&dir, "a").is_empty() && calls_read(&dir, "b").is_empty(),
        "a call reached a server"
    );
    gate.close();
    assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());
}

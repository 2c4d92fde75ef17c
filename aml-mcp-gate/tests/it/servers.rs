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

/// The issue's three servers at once: server-everything (npm), server-filesystem (npm) and
/// a server made with the official Python SDK, behind one gate, driven by the official
/// Python SDK client: every page of the tools, a call to each that reaches its server,
/// prompts, resources, completion, progress and a cancellation that reaches only its
/// server (server-everything's input is logged through `tee`).
#[test]
fn the_python_sdk_client_reaches_three_real_servers_through_one_gate() {
    let dir = raw::work("servers-sdk");
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
command = [{python:?}, {notice:?}]
names = "never"
"#,
        everything = path(&crate::common::everything()),
        everything_in = path(&dir.join("everything.in.log")),
        filesystem = path(&crate::common::node_bin("mcp-server-filesystem")),
        files = path(&files),
        python = path(&python()),
        notice = path(&repo().join("scripts/interop/mcp_notice_server.py")),
    );
    std::fs::write(dir.join("gate.toml"), config).unwrap();
    let command = json!([crate::common::GATE, "--config", path(&dir.join("gate.toml"))]);
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
    ]);
    let out = std::process::Command::new(python())
        .arg(repo().join("scripts/interop/mcp_client.py"))
        .arg(command.to_string())
        .arg(calls.to_string())
        .env("AML_NOTICE_AUDIT", &notices)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    assert_eq!(
        read_lines(&notices).len(),
        2,
        "the notes server ran its tool twice"
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

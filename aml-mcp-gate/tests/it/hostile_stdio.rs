//! A client that writes hostile lines on stdio, in every shape the wire allows (a request, a
//! notification, a batch, an answer to nothing, an oversized line, a request without an id,
//! a call the policy blocks, a progress token MCP does not allow), gets a clear answer to each that can be answered,
//! within the wait, and no `tools/call` of them reaches the server. The gate keeps serving:
//! an allowed call made afterwards runs once.

use crate::raw;

use serde_json::{json, Value};

use raw::{gate_options, raw_server, read_lines, records, write_config, StdioGate};

/// The next answer, which must carry `id` and a JSON-RPC error with `code`.
fn expect_error(gate: &StdioGate, id: &Value, code: i64) -> Value {
    let answer = gate.recv();
    assert_eq!(&answer["id"], id, "{answer}");
    assert_eq!(answer["error"]["code"], code, "{answer}");
    answer
}

#[test]
fn hostile_lines_on_stdio_are_answered_and_no_call_of_them_reaches_the_server() {
    let dir = raw::work("hostile-stdio");
    write_config(&dir);
    let mut options = gate_options(&dir);
    options.extend(["--max-message-bytes".into(), "4096".into()]);
    let mut gate = StdioGate::start(&dir, &options, &raw_server(&dir));
    gate.initialize();

    gate.send("this is not json {");
    expect_error(&gate, &Value::Null, -32700);

    let batch = r#"[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"m":"batch"}}}]"#;
    gate.send(batch);
    let answers = gate.recv();
    assert_eq!(answers[0]["id"], 7, "{answers}");
    assert_eq!(answers[0]["error"]["code"], -32600, "{answers}");

    let twice = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","name":"send","arguments":{"m":"twice"}}}"#;
    gate.send(twice);
    expect_error(&gate, &json!(8), -32700);

    gate.send_json(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"m": "smuggled"}, "task": {"ttl": 1}}}));
    expect_error(&gate, &json!(9), -32602);

    gate.send(r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"echo","arguments":{"m":"big","n":1e400}}}"#);
    let huge = gate.recv();
    assert_eq!(huge["id"], 10, "{huge}");
    assert!(
        huge.get("error").is_some() || huge["result"]["isError"] == true,
        "a number the canonical form cannot keep is refused: {huge}"
    );

    let oversized = format!(
        r#"{{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{{"name":"echo","arguments":{{"m":"{}"}}}}}}"#,
        "x".repeat(8192)
    );
    gate.send(&oversized);
    expect_error(&gate, &json!(11), -32600);

    // Nothing is answered for these; the ping after them is answered first, so the gate
    // had read and handled them.
    gate.send(
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","arguments":{"m":"idless"}}}"#,
    );
    gate.send(r#"{"jsonrpc":"2.0","id":"nobody-asked","result":{}}"#);
    gate.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"never-sent"}}"#);
    gate.send_json(&json!({"jsonrpc": "2.0", "id": 12, "method": "ping"}));
    let pong = gate.recv();
    assert_eq!(pong["id"], 12, "{pong}");

    // `send` needs a person's approval and this gate has no approver: blocked, not sent.
    gate.send_json(&json!({"jsonrpc": "2.0", "id": 13, "method": "tools/call",
        "params": {"name": "send", "arguments": {"m": "unapproved"}}}));
    let blocked = gate.recv();
    assert_eq!(blocked["id"], 13, "{blocked}");
    assert_eq!(blocked["result"]["isError"], true, "{blocked}");

    // A progress token MCP does not allow (not a string or an integer a double keeps) is
    // refused, gated call or not: servers drop such a request unanswered.
    gate.send_json(&json!({"jsonrpc": "2.0", "id": 15, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"m": "odd token"}, "_meta": {"progressToken": {"a": 1}}}}));
    let odd = gate.recv();
    assert_eq!(odd["id"], 15, "{odd}");
    assert_eq!(odd["result"]["isError"], true, "{odd}");
    gate.send_json(&json!({"jsonrpc": "2.0", "id": 16, "method": "ping",
        "params": {"_meta": {"progressToken": null}}}));
    expect_error(&gate, &json!(16), -32602);
    gate.send(r#"{"jsonrpc":"2.0","id":17,"method":"ping","params":{"_meta":{"progressToken":1.5}}}"#);
    expect_error(&gate, &json!(17), -32602);

    // Still serving: an allowed call runs, once.
    gate.send_json(&json!({"jsonrpc": "2.0", "id": 14, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"m": "fine"}}}));
    let fine = gate.recv();
    assert_eq!(fine["id"], 14, "{fine}");
    assert_ne!(fine["result"]["isError"], true, "{fine}");
    gate.close();
    assert_eq!(gate.rest(), Vec::<Value>::new(), "nothing more is answered");
    assert!(gate.wait().success(), "{}", gate.stderr());

    let calls: Vec<String> = read_lines(&dir.join("raw.log"))
        .into_iter()
        .filter(|line| line.contains("tools/call"))
        .collect();
    assert_eq!(
        calls.len(),
        1,
        "only the allowed call reached the server: {calls:?}"
    );
    assert!(calls[0].contains("fine"), "{calls:?}");
    let ran = read_lines(&dir.join("ran.log"));
    assert_eq!(ran.len(), 1, "{ran:?}");
    // Every refused call leaves a record, whether it was answered with a verdict or a
    // JSON-RPC error: the batched, twice-named, smuggled-task, `1e400`, id-less and
    // odd-token calls as malformed, the oversized one as too large.
    let refusals: Vec<String> = records(&dir)
        .into_iter()
        .filter_map(|r| r["refusal"].as_str().map(str::to_owned))
        .collect();
    let count = |reason: &str| refusals.iter().filter(|r| *r == reason).count();
    assert_eq!(count("malformed_request"), 6, "{refusals:?}");
    assert_eq!(count("request_too_large"), 1, "{refusals:?}");
    let reached = std::fs::read_to_string(dir.join("raw.log")).unwrap();
    assert!(
        !reached.contains("progressToken"),
        "an odd token reached the server: {reached}"
    );
}

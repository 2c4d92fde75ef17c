//! `--otlp-endpoint` with `--upstream URL`: each forwarded call carries the gate's span as
//! the POST's W3C `traceparent` header (the message itself unchanged). Proved with two gates
//! in a chain, both exporting to the OTLP receiver: the client's stdio gate in front of a
//! `--listen` gate in front of server-everything. For a call whose `_meta` names no
//! `traceparent`, the second gate's span is a child of the first's; for one that does, both
//! are children of the client's span (the second gate reads `_meta` first); a denied call
//! sends nothing; a garbage `traceparent` with a 100,000-byte `tracestate` is dropped. No
//! trace header becomes message content on the way.

use crate::common;
use crate::traces::{call, ids, json_lines, spans_in, start_receiver, traced_gate_args, T1};

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

#[test]
fn a_forwarded_calls_span_parents_the_next_gates_through_its_traceparent_header() {
    let dir = work("traces-upstream");
    let (front_dir, back_dir) = (dir.join("front"), dir.join("back"));
    for d in [&front_dir, &back_dir] {
        std::fs::create_dir_all(d).unwrap();
        write_everything_config(d);
    }
    let spans_file = dir.join("spans.jsonl");
    let (_receiver, port) = start_receiver(&spans_file);
    let (back_args, reached) = traced_gate_args(&back_dir, port, &["--listen", "127.0.0.1:0"]);
    let mut back = Gate::start(&back_args);

    let mut front_args = gate_args(&front_dir);
    front_args.extend([
        "--otlp-endpoint".into(),
        format!("http://127.0.0.1:{port}"),
        "--upstream".into(),
        back.url.clone(),
    ]);
    let mut front = Child::spawn(
        "the front gate",
        Command::new(GATE)
            .args(&front_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let answers = json_lines(front.stdout_lines());
    let mut input = front.stdin();
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        .to_string(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        call(2, "echo", json!({"message": "chained"}), Some(T1)),
        call(3, "get-sum", json!({"a": 1, "b": 2}), None),
        call(4, "get-env", json!({}), None),
        // Hostile trace context: a garbage traceparent and a 100,000-byte tracestate.
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "get-structured-content", "arguments": {"location": "Chicago"},
            "_meta": {"traceparent": "garbage", "tracestate": "x".repeat(100_000)}}})
        .to_string(),
    ];
    for line in &lines {
        writeln!(input, "{line}").unwrap();
    }
    input.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut answered = Vec::new();
    while answered.len() < 5 {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = answers
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("answers within 60 s: only {answered:?}"));
        if let Some(id) = message["id"].as_u64() {
            assert!(message["result"].is_object(), "{message}");
            answered.push(id);
        }
    }
    drop(input);
    let status = front.wait(Duration::from_secs(30));
    assert!(status.success(), "the front gate exited with {status}");
    let status = back.stop();
    assert!(status.success(), "the back gate exited with {status}");

    let spans = spans_in(&spans_file);
    let span = |front: bool, tool: &str| -> Option<&Value> {
        let server = if front { back.url.as_str() } else { "\"sh\"" };
        let mut found = spans
            .iter()
            .filter(|s| s["attributes"]["aml.server"] == server && s["attributes"]["aml.tool"] == tool);
        let one = found.next();
        assert!(found.next().is_none(), "two spans of {tool}: {spans:#?}");
        one
    };
    let get = |front: bool, tool: &str| {
        span(front, tool).unwrap_or_else(|| panic!("no span of {tool}: {spans:#?}"))
    };
    // A span's (trace id, parent span id).
    let parent = |s: &Value| (s["trace_id"].clone(), s["parent_span_id"].clone());

    // No traceparent from the client: the front gate's span starts the trace, and the back
    // gate's continues the header the front gate sent.
    let (front_sum, back_sum) = (get(true, "get-sum"), get(false, "get-sum"));
    assert_eq!(front_sum["parent_span_id"], "", "{front_sum}");
    assert_eq!(
        parent(back_sum),
        (front_sum["trace_id"].clone(), front_sum["span_id"].clone()),
        "the back gate's span is the front gate's child"
    );

    // The client's traceparent in _meta: both gates' spans are children of the client's.
    let (front_echo, back_echo) = (get(true, "echo"), get(false, "echo"));
    let client = ids(T1);
    for s in [front_echo, back_echo] {
        assert_eq!(parent(s), (json!(client.0), json!(client.1)), "{s}");
    }
    assert_ne!(front_echo["span_id"], back_echo["span_id"]);

    // The hostile context is dropped: a trace of the front gate's own, continued behind.
    let (front_bad, back_bad) = (
        get(true, "get-structured-content"),
        get(false, "get-structured-content"),
    );
    assert_eq!(front_bad["parent_span_id"], "", "{front_bad}");
    assert_eq!(front_bad["trace_state"], "", "{front_bad}");
    assert_eq!(
        parent(back_bad),
        (front_bad["trace_id"].clone(), front_bad["span_id"].clone()),
        "{back_bad}"
    );

    // Denied at the front: nothing sent, so no span at the back.
    assert_eq!(get(true, "get-env")["attributes"]["aml.status"], "blocked");
    assert!(span(false, "get-env").is_none(), "{spans:#?}");

    // The header stayed a header: the server saw the client's _meta as sent, and never the
    // front gate's ids.
    let reached = std::fs::read_to_string(reached).unwrap();
    assert!(
        reached.contains(&format!("\"traceparent\":\"{T1}\"")),
        "{reached}"
    );
    for id in [
        &front_sum["trace_id"],
        &front_sum["span_id"],
        &front_echo["span_id"],
    ] {
        assert!(
            !reached.contains(id.as_str().unwrap()),
            "{id} reached the server: {reached}"
        );
    }
}

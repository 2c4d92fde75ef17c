//! `--otlp-endpoint` with `--listen`: a POST's W3C `traceparent` and `tracestate` headers
//! parent the call's span when its `_meta` names no `traceparent` (`_meta` wins when it
//! does), in the handshake era's sessions and in 2026-07-28's stateless POSTs. Hostile
//! headers (invalid, doubled, not ASCII, an oversized `tracestate`) never fail a call: each
//! is answered in bounded time, the span starts a trace of its own (or drops the bad
//! `tracestate`), and no header value reaches the server. A batch POST's calls each continue
//! the header, unless their own `_meta` names a parent.

use crate::common;
use crate::stateless;
use crate::traces::{call, ids, spans_in, start_receiver, traced_gate_args, INVALID, T1, T2, T3};

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// One POST: its `traceparent` headers, its `tracestate` headers, the tool, and the
/// `traceparent` in its `_meta`.
type Case<'a> = (Vec<&'a str>, Vec<&'a str>, &'a str, Option<&'a str>);

/// The spans in the order their calls were made (one after another).
fn in_order(mut spans: Vec<Value>) -> Vec<Value> {
    spans.sort_by_key(|s| s["start_ns"].as_u64());
    spans
}

/// The span's (trace id, parent span id).
fn parent_of(span: &Value) -> (&str, &str) {
    (
        span["trace_id"].as_str().unwrap(),
        span["parent_span_id"].as_str().unwrap(),
    )
}

#[test]
fn a_sessions_trace_headers_are_continued_and_hostile_ones_fail_no_call() {
    let dir = work("traces-http");
    write_everything_config(&dir);
    let spans_file = dir.join("spans.jsonl");
    let (_receiver, port) = start_receiver(&spans_file);
    let (args, reached) = traced_gate_args(&dir, port, &["--listen", "127.0.0.1:0"]);
    let mut gate = Gate::start(&args);
    let session = open_session(gate.addr, &[]);
    let long_state = format!("vendor={}", "v".repeat(5000));
    let not_ascii = format!("00-{}-00f067aa0ba902b7-01", "ÿ".repeat(16));
    // (traceparent headers, tracestate headers, tool, _meta traceparent)
    let cases: Vec<Case<'_>> = vec![
        (vec![T1], vec!["vendor=a1", "other=b2"], "echo", None),
        (vec![T3], vec!["vendor=a1"], "echo", Some(T2)),
        (vec![INVALID], vec![], "echo", None),
        (vec![T1, T3], vec![], "echo", None),
        (vec![&not_ascii], vec![], "echo", None),
        (vec![T1], vec![&long_state], "echo", None),
        (vec![T3], vec![], "get-env", None),
    ];
    for (n, (parents, states, tool, meta)) in cases.iter().enumerate() {
        let mut headers = vec![JSON_ONLY, CONTENT_JSON, ("mcp-session-id", session.as_str())];
        headers.extend(parents.iter().map(|p| ("traceparent", *p)));
        headers.extend(states.iter().map(|s| ("tracestate", *s)));
        let arguments = match *tool {
            "echo" => json!({"message": format!("case {n}")}),
            _ => json!({}),
        };
        let reply = request(
            gate.addr,
            "POST",
            &headers,
            &call(n as u64 + 2, tool, arguments, *meta),
        );
        assert_eq!(reply.status, 200, "case {n}: {}", reply.body);
        assert!(reply.json()["result"].is_object(), "case {n}: {}", reply.body);
    }
    // A notification with the headers is accepted and makes no span.
    let note = r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#;
    let headers = [
        CONTENT_JSON,
        ("mcp-session-id", session.as_str()),
        ("traceparent", T1),
    ];
    assert_eq!(request(gate.addr, "POST", &headers, note).status, 202);
    // A batch with the headers: each call is answered; the one whose _meta names a parent
    // keeps it, the other continues the header.
    let batch = format!(
        "[{},{}]",
        call(40, "echo", json!({"message": "batch 0"}), None),
        call(41, "echo", json!({"message": "batch 1"}), Some(T2))
    );
    let headers = [
        JSON_ONLY,
        CONTENT_JSON,
        ("mcp-session-id", session.as_str()),
        ("traceparent", T3),
    ];
    let reply = request(gate.addr, "POST", &headers, &batch);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answers = reply.json();
    let mut answered: Vec<u64> = answers
        .as_array()
        .unwrap_or_else(|| panic!("a batch's answers: {}", reply.body))
        .iter()
        .map(|a| {
            assert!(a["result"].is_object(), "{a}");
            a["id"].as_u64().unwrap()
        })
        .collect();
    answered.sort();
    assert_eq!(answered, [40, 41]);
    let status = gate.child.terminate(Duration::from_secs(30));
    assert!(status.success(), "the gate exited with {status}");

    let mut spans = in_order(spans_in(&spans_file));
    assert_eq!(spans.len(), cases.len() + 2, "one span per call: {spans:#?}");
    let batched = spans.split_off(cases.len());
    let mut parents: Vec<(&str, &str)> = batched.iter().map(parent_of).collect();
    parents.sort();
    let mut expected = vec![ids(T2), ids(T3)];
    expected.sort();
    assert_eq!(
        parents, expected,
        "the batch's calls: _meta's parent, and the header's"
    );
    assert_eq!(parent_of(&spans[0]), ids(T1), "the header's parent");
    assert_eq!(
        spans[0]["trace_state"], "vendor=a1,other=b2",
        "both tracestate headers, in order"
    );
    assert_eq!(parent_of(&spans[1]), ids(T2), "_meta wins over the header");
    assert_eq!(
        spans[1]["trace_state"], "",
        "_meta's parent, without the header's tracestate"
    );
    for (n, why) in [
        (2, "an invalid traceparent"),
        (3, "two traceparents"),
        (4, "a traceparent not in ASCII"),
    ] {
        assert_eq!(spans[n]["parent_span_id"], "", "{why}: a trace of its own");
        assert!(
            ![T1, T2, T3].iter().any(|t| ids(t).0 == parent_of(&spans[n]).0),
            "{why}: {:#?}",
            spans[n]
        );
    }
    assert_eq!(parent_of(&spans[5]), ids(T1), "a bad tracestate keeps the parent");
    assert_eq!(spans[5]["trace_state"], "", "and is dropped");
    assert_eq!(
        parent_of(&spans[6]),
        ids(T3),
        "a denied call's span continues too"
    );
    assert_eq!(spans[6]["attributes"]["aml.status"], "blocked");
    let reached = std::fs::read_to_string(&reached).unwrap();
    for header in [&T1[3..35], &T3[3..35], "vendor=a1", "\"get-env\""] {
        assert!(
            !reached.contains(header),
            "{header} reached the server: {reached}"
        );
    }
    assert!(
        reached.contains("case 0"),
        "the allowed calls reached it: {reached}"
    );
}

#[test]
fn a_2026_07_28_posts_trace_headers_are_continued() {
    let dir = work("traces-http-stateless");
    let spans_file = dir.join("spans.jsonl");
    let (_receiver, port) = start_receiver(&spans_file);
    let url = format!("http://127.0.0.1:{port}");
    let mut gate = stateless::gate(&dir, &["--otlp-endpoint", &url]);
    for (n, parent) in [T1, INVALID].into_iter().enumerate() {
        let mut headers = stateless::call_headers("echo", JSON_ONLY);
        headers.push(("traceparent", parent));
        let body = stateless::call(
            json!(n + 1),
            "echo",
            json!({"message": format!("modern {n}")}),
            None,
        );
        let reply = request(gate.addr, "POST", &headers, &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(reply.json()["result"].is_object(), "{}", reply.body);
    }
    let status = gate.child.terminate(Duration::from_secs(30));
    assert!(status.success(), "the gate exited with {status}");
    let spans = in_order(spans_in(&spans_file));
    assert_eq!(spans.len(), 2, "one span per call: {spans:#?}");
    assert_eq!(parent_of(&spans[0]), ids(T1), "the header's parent");
    assert_eq!(
        spans[1]["parent_span_id"], "",
        "an invalid header: a trace of its own"
    );
    let reached = stateless::read(&dir, "reached.log");
    assert!(
        reached.contains("modern 0") && !reached.contains(&T1[3..35]),
        "{reached}"
    );
}

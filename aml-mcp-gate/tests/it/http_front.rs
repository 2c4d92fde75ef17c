//! The gate's HTTP front seen from raw HTTP: a request without a valid bearer token gets 401
//! and reaches nothing, a foreign Origin gets 403, every over-limit or malformed request gets
//! a clear status with a JSON-RPC error body and the gate keeps serving, and an SSE stream
//! that broke off resumes with Last-Event-ID.
//!
//! The server is `@modelcontextprotocol/server-everything` behind `tee`, so the test sees
//! every byte that reached it (`scripts/interop-setup` installs it).

use crate::common;

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::json;

fn gate(dir: &Path, extra: &[&str]) -> Gate {
    gate_logging_what_reaches_the_server(dir, extra)
}

/// Sends a call of the long-running tool (`seconds` long) in a session (`headers`) and
/// waits until the server has it; the connection, for its answer.
fn long_call(
    addr: std::net::SocketAddr,
    dir: &Path,
    headers: &[(&str, &str)],
    id: u64,
    seconds: u64,
) -> std::net::TcpStream {
    let arguments = json!({"duration": seconds, "steps": 2});
    let stream = send(
        addr,
        "POST",
        headers,
        &call(id, "trigger-long-running-operation", arguments),
    );
    let marker = format!("\"duration\":{seconds},");
    aml_test_support::wait_until(
        "the long call to reach the server",
        Duration::from_secs(10),
        || reached(dir).contains(&marker).then_some(()),
    );
    stream
}

/// Calls `echo` with `message` in a session (`headers`) and checks its answer.
fn echoes(addr: std::net::SocketAddr, headers: &[(&str, &str)], id: u64, message: &str) {
    let reply = request(
        addr,
        "POST",
        headers,
        &call(id, "echo", json!({"message": message})),
    );
    let text = &reply.json()["result"]["content"][0]["text"];
    assert_eq!(text, &json!(format!("Echo: {message}")), "{}", reply.body);
}

fn call(id: u64, tool: &str, arguments: serde_json::Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}).to_string()
}

#[test]
fn without_a_valid_token_401_and_nothing_forwarded_a_foreign_origin_403() {
    let dir = work("auth");
    let tokens = dir.join("tokens").display().to_string();
    let gate = gate(&dir, &["--tokens", &tokens]);
    let bearer = format!("Bearer {TOKEN}");
    let body = initialize_body(1);
    for auth in [
        None,
        Some("Bearer wrong-token-0123456789abcdef"),
        Some("Basic dGVzdDp0ZXN0"),
        Some("Bearer "),
    ] {
        let mut headers = vec![JSON_AND_SSE, CONTENT_JSON];
        headers.extend(auth.map(|a| ("authorization", a)));
        let reply = request(gate.addr, "POST", &headers, &body);
        assert_eq!(reply.status, 401, "{auth:?}");
        assert!(reply.header("www-authenticate").unwrap().starts_with("Bearer"));
        assert_eq!(reply.json()["error"]["code"], -32000);
    }
    for method in ["GET", "DELETE"] {
        assert_eq!(
            request(gate.addr, method, &[("mcp-session-id", "x")], "").status,
            401
        );
    }
    // A browser page from elsewhere (DNS rebinding), even with a token: 403.
    let reply = request(
        gate.addr,
        "POST",
        &[
            JSON_AND_SSE,
            CONTENT_JSON,
            ("authorization", &bearer),
            ("origin", "http://evil.example"),
        ],
        &body,
    );
    assert_eq!(reply.status, 403);
    assert_eq!(reply.json()["error"]["code"], -32000);
    assert_eq!(reached(&dir), "", "nothing reached the server");

    // With the token (and the gate's own Origin): the session opens and the server sees it.
    let own = format!("http://{}", gate.addr);
    let session = open_session(gate.addr, &[("authorization", &bearer), ("origin", &own)]);
    assert!(reached(&dir).contains("\"initialize\""));
    // A call in that session without the token: 401, and the server never sees it.
    let reply = request(
        gate.addr,
        "POST",
        &[JSON_ONLY, CONTENT_JSON, ("mcp-session-id", &session)],
        &call(2, "echo", json!({"message": "unauthenticated"})),
    );
    assert_eq!(reply.status, 401);
    let reply = request(
        gate.addr,
        "POST",
        &[
            JSON_ONLY,
            CONTENT_JSON,
            ("mcp-session-id", &session),
            ("authorization", &bearer),
        ],
        &call(3, "echo", json!({"message": "authenticated"})),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.json()["result"]["content"][0]["text"],
        "Echo: authenticated"
    );
    let log = reached(&dir);
    assert!(
        log.contains("authenticated") && !log.contains("unauthenticated"),
        "{log}"
    );
}

/// Method, headers, body, the status and JSON-RPC error code wanted.
type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str, u16, i64);

/// Headers that name one twice, a word the call carries, the JSON-RPC error code wanted.
type Named<'a> = (&'a [(&'a str, &'a str)], &'a str, i64);

#[test]
fn over_limit_and_malformed_requests_get_clear_errors_and_the_gate_keeps_serving() {
    let dir = work("limits");
    let gate = gate(
        &dir,
        &[
            "--max-body-bytes",
            "2048",
            "--max-sessions",
            "2",
            "--max-calls-per-session",
            "1",
            "--session-idle-timeout",
            "2",
        ],
    );
    let addr = gate.addr;
    let one = open_session(addr, &[]);
    let in_one = [JSON_ONLY, CONTENT_JSON, ("mcp-session-id", one.as_str())];

    // Body size: 413, with a JSON-RPC error, nothing forwarded.
    let big = call(2, "echo", json!({"message": "x".repeat(5000)}));
    let reply = request(addr, "POST", &in_one, &big);
    assert_eq!(reply.status, 413);
    assert!(reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("2048"));
    assert!(!reached(&dir).contains("xxxxxxxx"));

    // Sessions: the third gets 503 with the initialize's id.
    let two_opened = std::time::Instant::now();
    let two = open_session(addr, &[]);
    let reply = request(addr, "POST", &[JSON_ONLY, CONTENT_JSON], &initialize_body(9));
    assert_eq!(reply.status, 503);
    assert_eq!(reply.json()["id"], 9);

    // Calls per session: one waits for its answer, the next gets 429 with its id.
    // The first call holds the session's one place once the server has it.
    let mut waiting = long_call(addr, &dir, &in_one, 3, 1);
    let reply = request(
        addr,
        "POST",
        &in_one,
        &call(4, "echo", json!({"message": "second"})),
    );
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.json()["id"], 4);
    let mut first = String::new();
    waiting.read_to_string(&mut first).unwrap();
    assert!(first.contains("Long running operation completed"), "{first}");
    echoes(addr, &in_one, 5, "third");
    // A call the client cancels gets no answer (MCP): its POST ends at once (202, nothing
    // to answer), long before the tool would, and its place is free for the next call.
    let mut cancelled = long_call(addr, &dir, &in_one, 18, 20);
    let cancelling = std::time::Instant::now();
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":18}}"#;
    assert_eq!(request(addr, "POST", &in_one, cancel).status, 202);
    let mut ended = String::new();
    cancelled.read_to_string(&mut ended).unwrap();
    assert!(ended.starts_with("HTTP/1.1 202"), "{ended}");
    assert!(cancelling.elapsed() < Duration::from_secs(10));
    echoes(addr, &in_one, 19, "after a cancel");

    // Malformed: each a 4xx with a JSON-RPC error.
    let cases: [Case<'_>; 5] = [
        ("POST", &in_one, "{\"jsonrpc\":", 400, -32700),
        ("POST", &in_one, "[]", 400, -32700),
        ("POST", &in_one, "[1, 2]", 400, -32600),
        (
            "POST",
            &[JSON_ONLY, CONTENT_JSON],
            &call(6, "echo", json!({})),
            400,
            -32600,
        ),
        ("PUT", &in_one, "", 405, -32000),
    ];
    for (method, headers, body, status, code) in cases {
        let reply = request(addr, method, headers, body);
        assert_eq!(
            (reply.status, reply.json()["error"]["code"].as_i64()),
            (status, Some(code)),
            "{body}"
        );
    }
    let unknown = [JSON_ONLY, CONTENT_JSON, ("mcp-session-id", "no-such-session")];
    assert_eq!(
        request(addr, "POST", &unknown, &call(7, "echo", json!({}))).status,
        404
    );
    let old = [
        JSON_ONLY,
        CONTENT_JSON,
        ("mcp-session-id", one.as_str()),
        ("mcp-protocol-version", "1999-01-01"),
    ];
    assert_eq!(
        request(addr, "POST", &old, &call(8, "echo", json!({}))).status,
        400
    );
    // A header the gate reads named twice (a proxy and the gate could each take another
    // copy): 400, nothing forwarded.
    let session = ("mcp-session-id", one.as_str());
    let version = |v| ("mcp-protocol-version", v);
    let twice: [Named<'_>; 2] = [
        (
            &[session, version("2025-06-18"), version("2025-03-26")],
            "two versions",
            -32020,
        ),
        (&[session, ("mcp-session-id", "another")], "two sessions", -32600),
    ];
    for (id, (named, message, code)) in (14..).zip(twice) {
        let headers = [&[JSON_ONLY, CONTENT_JSON][..], named].concat();
        let reply = request(
            addr,
            "POST",
            &headers,
            &call(id, "echo", json!({"message": message})),
        );
        assert_eq!(
            (reply.status, reply.json()["error"]["code"].as_i64()),
            (400, Some(code)),
            "{message}"
        );
        assert!(!reached(&dir).contains(message), "{message}");
    }
    // The same in a batch and in a notification: refused from the headers alone.
    let two_versions = [&[JSON_ONLY, CONTENT_JSON][..], twice[0].0].concat();
    let batch = format!("[{}]", call(16, "echo", json!({"message": "batched twice"})));
    let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"noted twice"}}"#;
    for body in [batch.as_str(), note] {
        let reply = request(addr, "POST", &two_versions, body);
        assert_eq!(
            (reply.status, reply.json()["error"]["code"].as_i64()),
            (400, Some(-32020)),
            "{body}"
        );
    }
    assert!(
        !reached(&dir).contains("twice\""),
        "nothing named twice reached the server"
    );

    // Idle: session two had no request for longer than 2 s; it is gone, and its slot free.
    // A new session is refused (two are open) until the idle one is closed; not before 2 s.
    let three =
        aml_test_support::wait_until("the idle session to be closed", Duration::from_secs(15), || {
            let reply = request(addr, "POST", &[JSON_ONLY, CONTENT_JSON], &initialize_body(13));
            if reply.status == 503 {
                return None;
            }
            assert_eq!(reply.status, 200, "{}", reply.body);
            Some(reply.header("mcp-session-id").unwrap().to_owned())
        });
    assert!(
        two_opened.elapsed() >= Duration::from_secs(2),
        "closed before its idle timeout"
    );
    let in_two = [JSON_ONLY, CONTENT_JSON, ("mcp-session-id", two.as_str())];
    assert_eq!(
        request(
            addr,
            "POST",
            &in_two,
            &call(10, "echo", json!({"message": "late"}))
        )
        .status,
        404
    );
    let in_three = [JSON_ONLY, CONTENT_JSON, ("mcp-session-id", three.as_str())];
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(request(addr, "POST", &in_three, initialized).status, 202);
    echoes(addr, &in_three, 11, "still serving");
    // A notification the relay refuses (a member named twice, deep inside) beside a request
    // in one batch: the POST's answer is the request's, not the refusal's.
    let bad_note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":{"a":1,"a":2}}}"#;
    let batch = format!(
        "[{bad_note},{}]",
        call(17, "echo", json!({"message": "beside a bad note"}))
    );
    let reply = request(addr, "POST", &in_three, &batch);
    let answers = reply.json();
    assert_eq!(answers.as_array().map(Vec::len), Some(1), "{}", reply.body);
    assert_eq!(answers[0]["id"], 17);
    assert_eq!(
        answers[0]["result"]["content"][0]["text"],
        "Echo: beside a bad note"
    );
    // One id on two requests of a batch: both answers would carry it, so the batch is
    // refused whole and nothing of it is sent.
    let batch = format!(
        "[{},{}]",
        call(18, "echo", json!({"message": "first of a pair"})),
        call(18, "echo", json!({"message": "second of a pair"}))
    );
    let reply = request(addr, "POST", &in_three, &batch);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], -32600, "{}", reply.body);
    assert!(
        reply.body.contains("two requests with the id 18"),
        "{}",
        reply.body
    );
    assert!(
        !reached(&dir).contains("of a pair"),
        "nothing of the batch was sent"
    );
    // A progress token servers drop unanswered (not a string or a safe integer) is refused
    // in the session, alone or in a batch, and never sent.
    let odd = |id: u64, token: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{"_meta":{{"progressToken":{token}}}}}}}"#
        )
    };
    for body in [odd(19, "null"), format!("[{}]", odd(20, "1.5"))] {
        let reply = request(addr, "POST", &in_three, &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let answer = reply.json();
        let answer = if answer.is_array() {
            answer[0].clone()
        } else {
            answer
        };
        assert_eq!(answer["error"]["code"], -32602, "{}", reply.body);
    }
    assert!(!reached(&dir).contains("progressToken"), "an odd token was sent");
    // Batches end with 2025-06-18: a batch naming that revision or a later one is refused
    // whole and nothing of it is sent; one naming 2025-03-26 is still answered.
    let batch = format!("[{}]", call(21, "echo", json!({"message": "a late batch"})));
    for version in ["2025-06-18", "2025-11-25"] {
        let later = [
            JSON_ONLY,
            CONTENT_JSON,
            ("mcp-session-id", three.as_str()),
            ("mcp-protocol-version", version),
        ];
        let reply = request(addr, "POST", &later, &batch);
        assert_eq!(reply.status, 400, "{version}: {}", reply.body);
        assert_eq!(reply.json()["error"]["code"], -32600, "{}", reply.body);
        assert!(reply.body.contains("batches were removed"), "{}", reply.body);
    }
    assert!(
        !reached(&dir).contains("a late batch"),
        "nothing of the batch was sent"
    );
    // Each call refused with its POST leaves its record, as one the relay refuses.
    aml_test_support::wait_until("a record of each refused batched call", WAIT, || {
        let log = std::fs::read_to_string(dir.join("receipts.jsonl")).unwrap_or_default();
        let refused = log
            .lines()
            .filter(|l| l.contains("\"malformed_request\"") && l.contains("batches were removed"))
            .filter(|l| l.contains("\"tool\":\"echo\""))
            .count();
        (refused == 2).then_some(())
    });
    // A call whose params name the tool twice cannot be read: refused with its POST, sent
    // nowhere, and recorded (the tool it names unread).
    let twice = r#"{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"echo","name":"get-env","arguments":{"message":"named twice"}}}"#;
    let reply = request(addr, "POST", &in_three, twice);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(!reached(&dir).contains("named twice"), "nothing was sent");
    aml_test_support::wait_until("a record of the unreadable call", WAIT, || {
        let log = std::fs::read_to_string(dir.join("receipts.jsonl")).unwrap_or_default();
        log.lines()
            .any(|l| {
                l.contains("\"malformed_request\"")
                    && l.contains("not a JSON-RPC request")
                    && l.contains("\"tool\":\"\"")
            })
            .then_some(())
    });
    let earlier = [
        JSON_ONLY,
        CONTENT_JSON,
        ("mcp-session-id", three.as_str()),
        ("mcp-protocol-version", "2025-03-26"),
    ];
    let batch = format!("[{}]", call(22, "echo", json!({"message": "an early batch"})));
    let reply = request(addr, "POST", &earlier, &batch);
    assert_eq!(
        reply.json()[0]["result"]["content"][0]["text"],
        "Echo: an early batch",
        "{}",
        reply.body
    );
    // DELETE ends a session: later requests get 404.
    assert_eq!(
        request(addr, "DELETE", &[("mcp-session-id", three.as_str())], "").status,
        204
    );
    assert_eq!(
        request(
            addr,
            "POST",
            &in_three,
            &call(12, "echo", json!({"message": "to a gone session"}))
        )
        .status,
        404
    );
    // The call to the ended session leaves its record too.
    aml_test_support::wait_until("a record of the call to the ended session", WAIT, || {
        let log = std::fs::read_to_string(dir.join("receipts.jsonl")).unwrap_or_default();
        log.lines()
            .any(|l| l.contains("\"malformed_request\"") && l.contains("no such session"))
            .then_some(())
    });
}

#[test]
fn a_stream_that_broke_off_resumes_with_last_event_id() {
    let dir = work("resume");
    let gate = gate(&dir, &[]);
    let session = open_session(gate.addr, &[]);
    let headers = [JSON_AND_SSE, CONTENT_JSON, ("mcp-session-id", session.as_str())];
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "trigger-long-running-operation", "arguments": {"duration": 1.5, "steps": 3},
        "_meta": {"progressToken": "p"}}})
    .to_string();
    let mut stream = send(gate.addr, "POST", &headers, &body);
    // Read up to the end of the first progress notification's event, then hang up.
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    let complete = |seen: &[u8]| {
        let text = String::from_utf8_lossy(seen);
        text.find("notifications/progress")
            .is_some_and(|at| text[at..].contains("\n\n"))
    };
    while !complete(&seen) {
        stream.read_exact(&mut byte).unwrap();
        seen.push(byte[0]);
    }
    drop(stream);
    let seen = String::from_utf8_lossy(&seen).into_owned();
    assert!(!seen.contains("completed"), "{seen}");
    let progress_at = seen.find("notifications/progress").unwrap();
    let first_id = seen[..progress_at]
        .rsplit("id: ")
        .next()
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();

    let resumed = request(
        gate.addr,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
            ("last-event-id", &first_id),
        ],
        "",
    );
    assert_eq!(resumed.status, 200);
    // The rest of the stream: the later progress notifications and the answer, each once.
    let (stream_no, seq) = first_id.split_once('-').unwrap();
    let next: u64 = seq.parse::<u64>().unwrap() + 1;
    assert!(
        resumed.body.contains(&format!("id: {stream_no}-{next}\n")),
        "{}",
        resumed.body
    );
    assert_eq!(
        resumed.body.matches("\"progress\":1,").count(),
        0,
        "{}",
        resumed.body
    );
    assert_eq!(
        resumed.body.matches("Long running operation completed").count(),
        1,
        "{}",
        resumed.body
    );
    assert!(resumed.body.contains("\"progress\":3"), "{}", resumed.body);

    // A client that lost that stream too resumes again, from any event it saw: the same
    // events come again (a finished stream is kept for resumption, ADR 015).
    let resume = |last: &str| {
        request(
            gate.addr,
            "GET",
            &[
                ("accept", "text/event-stream"),
                ("mcp-session-id", &session),
                ("last-event-id", last),
            ],
            "",
        )
    };
    let again = resume(&first_id);
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body, resumed.body);
    // From the second progress event on: the events after it, not it.
    let answer_at = resumed.body.find("Long running operation completed").unwrap();
    let answer_id = resumed.body[..answer_at]
        .rsplit("id: ")
        .next()
        .and_then(|rest| rest.lines().next())
        .unwrap()
        .to_owned();
    let after_progress = resume(&format!("{stream_no}-{next}"));
    assert_eq!(after_progress.status, 200);
    assert!(
        after_progress.body.contains(&format!("id: {answer_id}\n")),
        "{}",
        after_progress.body
    );
    assert!(
        !after_progress.body.contains(&format!("id: {stream_no}-{next}\n")),
        "{}",
        after_progress.body
    );
    // An event id no stream of this session has, or one that is not `STREAM-SEQ`: 404, at
    // once, and the session goes on.
    let long = "7".repeat(4000);
    for hostile in [
        "999999-1",
        "abc",
        "1-",
        "-1",
        "1-x",
        "18446744073709551616-1",
        long.as_str(),
    ] {
        assert_eq!(resume(hostile).status, 404, "{hostile:.40}");
    }
    assert_eq!(resume(&first_id).status, 200);
}

//! Protocol 2026-07-28 over the gate's HTTP front, on the wire: two clients using the same
//! request id (and progress token) at once each get their own answer and progress; hostile
//! POSTs get a clear status and JSON-RPC error and reach nothing; closing a response stream
//! cancels the request at the server; the limit of requests waiting; a server that dies in a
//! call is replaced for the next request.
//!
//! The server is `tests/stateless/server.py` (the Python SDK), behind `tee` where the test
//! looks at what reached it. `scripts/interop-setup` installs the SDK into `target/interop`.

use crate::common;
use crate::stateless;

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use stateless::*;

#[test]
fn two_clients_with_the_same_id_and_progress_token_each_get_their_own_answer_and_progress() {
    let dir = work("stateless-ids");
    let gate = gate(&dir, &[]);
    let addr = gate.addr;
    let started = Instant::now();
    let (slow, fast, two, four, string_a, string_b) = std::thread::scope(|s| {
        let echo = |message: &'static str, seconds: f64, id: Value, accept| {
            s.spawn(move || {
                let body = call(
                    id,
                    "slow_echo",
                    json!({"message": message, "seconds": seconds}),
                    None,
                );
                request(addr, "POST", &call_headers("slow_echo", accept), &body)
            })
        };
        let count = |steps: u64| {
            s.spawn(move || {
                let body = call(json!(1), "countdown", json!({"steps": steps}), Some(json!(1)));
                request(addr, "POST", &call_headers("countdown", JSON_AND_SSE), &body)
            })
        };
        let slow = echo("slow", 1.0, json!(1), JSON_ONLY);
        let fast = echo("fast", 0.5, json!(1), JSON_AND_SSE);
        let two = count(2);
        let four = count(4);
        let a = echo("a", 0.5, json!("x"), JSON_ONLY);
        let b = echo("b", 0.5, json!("x"), JSON_ONLY);
        let j = |h: std::thread::ScopedJoinHandle<'_, Reply>| h.join().unwrap();
        (j(slow), j(fast), j(two), j(four), j(a), j(b))
    });
    // They ran at once (one after the other would take over 3.5 s).
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    for (reply, text) in [(&slow, "Echo: slow"), (&fast, "Echo: fast")] {
        assert_eq!(reply.status, 200, "{}", reply.body);
        let answer = reply.json();
        assert_eq!(answer["id"], 1);
        assert_eq!(answer["result"]["content"][0]["text"], text, "{answer}");
    }
    // An answer that comes before any notification goes as JSON even to a client that
    // takes SSE (one write, and the status its error code asks for); progress starts SSE.
    assert_eq!(slow.header("content-type"), Some("application/json"));
    assert_eq!(fast.header("content-type"), Some("application/json"));
    assert_eq!(two.header("content-type"), Some("text/event-stream"));
    assert_eq!(string_a.json()["result"]["content"][0]["text"], "Echo: a");
    assert_eq!(string_b.json()["result"]["content"][0]["text"], "Echo: b");
    assert_eq!(string_a.json()["id"], "x");
    for (reply, steps) in [(&two, 2), (&four, 4)] {
        let messages = events(&reply.body);
        let progress: Vec<&Value> = messages
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), steps, "{}", reply.body);
        assert!(progress
            .iter()
            .all(|p| p["params"]["progressToken"] == 1 && p["params"]["total"] == steps));
        let last = messages.last().unwrap();
        assert_eq!(
            (&last["id"], &last["result"]["content"][0]["text"]),
            (&json!(1), &json!("done"))
        );
    }
    // The server saw the front's own ids and tokens, never two requests with one id.
    let reached = read(&dir, "reached.log");
    assert!(reached.contains("aml-progress-"), "{reached}");
}

#[test]
fn hostile_stateless_posts_get_a_clear_status_and_error_and_reach_nothing() {
    let dir = work("stateless-hostile");
    let gate = gate(&dir, &["--max-body-bytes", "4096"]);
    let addr = gate.addr;
    let echo = call(json!(1), "echo", json!({"message": "hi"}), None);
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut h = vec![JSON_AND_SSE, CONTENT_JSON];
        h.extend_from_slice(extra);
        h
    };
    let v = ("mcp-protocol-version", MODERN);
    let m = ("mcp-method", "tools/call");
    let n = ("mcp-name", "echo");
    let no_meta = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "echo", "arguments": {"message": "hi"}}})
    .to_string();
    let old_meta = echo.replace(MODERN, "2025-11-25");
    let huge = call(json!(3), "echo", json!({"message": "x".repeat(5000)}), None);
    let listen = modern(json!(4), "subscriptions/listen", json!({}));
    let object_id = call(json!({"a": 1}), "echo", json!({"message": "hi"}), None);
    let capabilities = "\"io.modelcontextprotocol/clientCapabilities\":";
    assert!(echo.contains(&format!("{capabilities}{{}}")), "{echo}");
    let scalar_capabilities = echo.replace(&format!("{capabilities}{{}}"), &format!("{capabilities}5"));
    let null_id = call(Value::Null, "echo", json!({"message": "hi"}), None);
    let null_token = modern(json!(6), "tools/list", json!({"_meta": {"progressToken": null}}));
    let initialize = modern(
        json!(5),
        "initialize",
        json!({"protocolVersion": MODERN, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}),
    );
    // What, the headers, the body, the status and the JSON-RPC error code expected.
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str, u16, i64);
    let cases: Vec<Case> = vec![
        ("no version, no session", with(&[m, n]), &echo, 400, -32600),
        (
            "unknown version",
            with(&[("mcp-protocol-version", "2099-01-01"), m, n]),
            &echo,
            400,
            -32022,
        ),
        ("not JSON", with(&[v, m, n]), "{\"jsonrpc\":", 400, -32700),
        (
            "a batch",
            with(&[v, m, n]),
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
            400,
            -32600,
        ),
        (
            "a session that does not exist",
            with(&[v, m, n, ("mcp-session-id", "no-such")]),
            &echo,
            400,
            -32600,
        ),
        ("no envelope", with(&[v, m, n]), &no_meta, 400, -32602),
        (
            "capabilities that are not an object",
            with(&[v, m, n]),
            &scalar_capabilities,
            400,
            -32602,
        ),
        (
            "envelope of another version",
            with(&[v, m, n]),
            &old_meta,
            400,
            -32020,
        ),
        ("no Mcp-Method", with(&[v, n]), &echo, 400, -32020),
        (
            "MCP-Protocol-Version twice",
            with(&[v, ("mcp-protocol-version", "2025-06-18"), m, n]),
            &echo,
            400,
            -32020,
        ),
        ("Mcp-Method twice", with(&[v, m, m, n]), &echo, 400, -32020),
        (
            "Mcp-Name of another tool",
            with(&[v, m, ("mcp-name", "countdown")]),
            &echo,
            400,
            -32020,
        ),
        (
            "a response",
            with(&[v]),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
            400,
            -32600,
        ),
        (
            "duplicate members",
            with(&[v, m, n]),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}",
            400,
            -32600,
        ),
        (
            "subscriptions/listen without an event stream",
            vec![JSON_ONLY, CONTENT_JSON, v, ("mcp-method", "subscriptions/listen")],
            &listen,
            406,
            -32000,
        ),
        (
            "an id that is an object",
            with(&[v, m, n]),
            &object_id,
            400,
            -32600,
        ),
        // Not a notification: 2026-07-28 clients send none over HTTP, and null is no id.
        ("an id that is null", with(&[v, m, n]), &null_id, 400, -32600),
        // Refused by the relay, after the front: the status is still the error's, although
        // the client takes SSE.
        (
            "a progress token that is null",
            with(&[v, ("mcp-method", "tools/list")]),
            &null_token,
            400,
            -32602,
        ),
        (
            "initialize as 2026-07-28",
            with(&[v, ("mcp-method", "initialize")]),
            &initialize,
            400,
            -32600,
        ),
        ("a huge body", with(&[v, m, n]), &huge, 413, -32000),
    ];
    for (what, headers, body, status, code) in &cases {
        let reply = request(addr, "POST", headers, body);
        assert_eq!(
            (reply.status, reply.json()["error"]["code"].as_i64()),
            (*status, Some(*code)),
            "{what}: {}",
            reply.body
        );
    }
    let unknown = request(
        addr,
        "POST",
        &with(&[("mcp-protocol-version", "2099-01-01")]),
        &echo,
    );
    assert!(unknown.json()["error"]["data"]["supported"]
        .as_array()
        .unwrap()
        .contains(&json!(MODERN)));
    // A notification: acknowledged, not passed on (2026-07-28 defines none over HTTP).
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        .to_string();
    assert_eq!(request(addr, "POST", &with(&[v]), &note).status, 202);
    // No GET stream and no session to delete in 2026-07-28.
    for method in ["GET", "DELETE"] {
        let reply = request(addr, method, &[JSON_AND_SSE, v], "");
        assert_eq!(
            (reply.status, reply.header("allow")),
            (405, Some("POST")),
            "{method}"
        );
    }
    // The front keeps serving: a good request goes through.
    let reply = request(addr, "POST", &with(&[v, m, n]), &echo);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["result"]["content"][0]["text"], "Echo: hi");
    // It went the way every message before it would have gone, so what reached the server by
    // its answer is all that ever will: the handshake and this one call, none of the refused
    // ones and not the notification.
    let reached = read(&dir, "reached.log");
    let methods: Vec<String> = reached
        .lines()
        .map(|line| {
            let message: Value = serde_json::from_str(line).unwrap();
            message["method"].as_str().unwrap_or("(an answer)").to_owned()
        })
        .collect();
    assert_eq!(
        methods.iter().filter(|m| *m == "tools/call").count(),
        1,
        "only the good call reached the server: {reached}"
    );
    assert!(
        methods.iter().all(|m| [
            "initialize",
            "notifications/initialized",
            "server/discover",
            "tools/call"
        ]
        .contains(&m.as_str())),
        "{reached}"
    );
    // An integer id of any size is an id (as on stdio), answered as it was spelled.
    let big = "123456789012345678901234567890";
    let big_id = echo.replacen("\"id\":1,", &format!("\"id\":{big},"), 1);
    assert_ne!(big_id, echo);
    let reply = request(addr, "POST", &[JSON_ONLY, CONTENT_JSON, v, m, n], &big_id);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.contains(&format!("\"id\":{big},")), "{}", reply.body);
    // A method the server does not know: its -32601, with 404 as 2026-07-28 asks.
    let unknown = modern(json!(6), "no/such-method", json!({}));
    let headers = [JSON_ONLY, CONTENT_JSON, v, ("mcp-method", "no/such-method")];
    let reply = request(addr, "POST", &headers, &unknown);
    assert_eq!(
        (reply.status, reply.json()["error"]["code"].as_i64()),
        (404, Some(-32601)),
        "{}",
        reply.body
    );
}

#[test]
fn closing_the_response_stream_cancels_the_request_at_the_server() {
    let dir = work("stateless-cancel");
    let gate = gate(&dir, &[]);
    let body = call(json!(7), "countdown", json!({"steps": 100}), Some(json!("t")));
    let stream = send(gate.addr, "POST", &call_headers("countdown", JSON_AND_SSE), &body);
    let mut lines = BufReader::new(stream);
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        assert!(lines.read_line(&mut line).unwrap() > 0, "the stream ended early");
    }
    assert!(
        line.contains("notifications/progress") && line.contains("\"t\""),
        "{line}"
    );
    let mut stream = lines.into_inner();
    stream.flush().unwrap();
    stream.shutdown(std::net::Shutdown::Both).unwrap();
    drop(stream);
    wait_until(
        "a cancellation to reach the server",
        Duration::from_secs(10),
        || {
            read(&dir, "reached.log")
                .contains("notifications/cancelled")
                .then_some(())
        },
    );
    // The next request is served as usual.
    let echo = call(json!(8), "echo", json!({"message": "after"}), None);
    let reply = request(gate.addr, "POST", &call_headers("echo", JSON_ONLY), &echo);
    assert_eq!(reply.json()["result"]["content"][0]["text"], "Echo: after");
}

#[test]
fn over_the_limit_429_and_after_the_server_dies_the_next_request_starts_a_new_one() {
    let dir = work("stateless-limits");
    let gate = gate_with(&dir, &["--max-stateless-calls", "1"], false);
    let addr = gate.addr;
    let slow = call(
        json!(1),
        "slow_echo",
        json!({"message": "first", "seconds": 1.5}),
        None,
    );
    let second = call(json!("two"), "echo", json!({"message": "over-the-limit"}), None);
    std::thread::scope(|s| {
        let first = s.spawn(|| request(addr, "POST", &call_headers("slow_echo", JSON_ONLY), &slow));
        wait_until(
            "the first call to reach the server",
            Duration::from_secs(10),
            || read(&dir, "audit.jsonl").contains("first").then_some(()),
        );
        // One request waits already: the limit is one, for all clients together.
        let refused = request(addr, "POST", &call_headers("echo", JSON_ONLY), &second);
        assert_eq!(refused.status, 429, "{}", refused.body);
        assert_eq!(
            (
                refused.json()["id"].as_str(),
                refused.json()["error"]["code"].as_i64()
            ),
            (Some("two"), Some(-32000))
        );
        assert_eq!(
            first.join().unwrap().json()["result"]["content"][0]["text"],
            "Echo: first"
        );
    });
    assert!(
        !read(&dir, "audit.jsonl").contains("over-the-limit"),
        "the refused call was never sent"
    );

    // The server dies in a call: the call's answer says so (its receipt is unknown), and the
    // next request is served by a new server.
    let crash = call(json!(3), "crash", json!({}), None);
    let reply = request(addr, "POST", &call_headers("crash", JSON_AND_SSE), &crash);
    let answer = reply.json();
    assert_eq!(answer["id"], 3, "{answer}");
    assert!(
        answer["result"]["isError"] == true || answer["error"].is_object(),
        "{answer}"
    );
    let echo = call(json!(4), "echo", json!({"message": "again"}), None);
    // Until the old relay has ended (its grace period), requests are refused.
    wait_until("a new server to answer", Duration::from_secs(20), || {
        let reply = request(addr, "POST", &call_headers("echo", JSON_ONLY), &echo);
        (reply.status == 200 && reply.json()["result"]["content"][0]["text"] == "Echo: again").then_some(())
    });
    drop(gate);
    let crashed = receipts(&dir)
        .into_iter()
        .filter(|r| r["tool"] == "crash")
        .map(|r| r["receipt"]["execution_status"].clone())
        .collect::<Vec<_>>();
    assert_eq!(crashed, [json!("unknown")]);
}

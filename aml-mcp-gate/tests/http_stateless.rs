//! Protocol 2026-07-28 over the gate's HTTP front (no sessions, a `_meta` envelope on every
//! request): the official Python SDK client negotiates it with `server/discover` and its
//! calls are gated like any (allowed and dispatched once, denied and never sent); the
//! handshake era still works on the same gate; two clients using the same request id (and
//! progress token) at once each get their own answer and progress; hostile POSTs get a clear
//! status and JSON-RPC error and reach nothing.
//!
//! rmcp's Streamable HTTP client transport (on a hyper client of the test's own) speaks
//! 2026-07-28 through the gate too.
//!
//! The server is a stdio server built with the Python SDK (`tests/stateless/server.py`),
//! behind `tee`, so the test sees every byte that reached it. `scripts/interop-setup`
//! installs the SDK into `target/interop`.

mod common;
#[path = "stateless/rmcp_http.rs"]
mod rmcp_http;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const MODERN: &str = "2026-07-28";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/stateless")
        .join(name)
}

/// The host's registry: four tools allowed, `secret` registered but allowed by no rule.
fn write_config(dir: &Path) {
    let tools = [
        ("echo", json!({"message": {"type": "string"}}), vec!["message"]),
        (
            "slow_echo",
            json!({"message": {"type": "string"}, "seconds": {"type": "number"}}),
            vec!["message", "seconds"],
        ),
        ("countdown", json!({"steps": {"type": "integer"}}), vec!["steps"]),
        ("crash", json!({}), vec![]),
        ("secret", json!({}), vec![]),
    ];
    let registry: Vec<Value> = tools
        .iter()
        .map(|(name, properties, required)| {
            json!({"name": name, "effect": "read", "purpose": format!("Use {name} for the user"),
                   "resource": {"fixed": "fixture"},
                   "input_schema": {"type": "object", "properties": properties, "required": required,
                                    "additionalProperties": false}})
        })
        .collect();
    std::fs::write(dir.join("tools.json"), json!({"tools": registry}).to_string()).unwrap();
    let rules: Vec<Value> = tools[..4]
        .iter()
        .map(|(name, ..)| json!({"tool": name, "effect": "read", "resource": "fixture", "requires_approval": false}))
        .collect();
    std::fs::write(
        dir.join("policy.json"),
        json!({"protocol": "aml-action-policy/1", "rules": rules}).to_string(),
    )
    .unwrap();
}

/// The gate in front of the fixture server; what reaches the server is in `dir/reached.log`,
/// the calls it ran in `dir/audit.jsonl`.
fn gate(dir: &Path, extra: &[&str]) -> Gate {
    gate_with(dir, extra, true)
}

/// [`gate`], with the server behind `tee` or as the gate's own child (`exec`: its exit is
/// the child's exit).
fn gate_with(dir: &Path, extra: &[&str], tee: bool) -> Gate {
    write_config(dir);
    let mut args = gate_args(dir);
    args.extend(["--listen", "127.0.0.1:0"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    let python = peers().join("venv/bin/python");
    args.extend([
        "--".into(),
        "sh".into(),
        "-c".into(),
        format!(
            "AML_STATELESS_AUDIT='{}' && export AML_STATELESS_AUDIT && {} '{}' '{}'",
            dir.join("audit.jsonl").display(),
            if tee {
                format!("tee -a '{}' |", dir.join("reached.log").display())
            } else {
                "exec".into()
            },
            python.display(),
            fixture("server.py").display()
        ),
    ]);
    Gate::start(&args)
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default()
}

/// Runs `tests/stateless/client.py URL TOKEN MODE`: its JSON report.
fn python_client(url: &str, token: &str, mode: &str) -> Value {
    let out = Command::new(peers().join("venv/bin/python"))
        .arg(fixture("client.py"))
        .args([url, token, mode])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python client failed ({}): {stderr}",
        out.status
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// A 2026-07-28 request body: `params` plus the per-request envelope.
fn modern(id: Value, method: &str, mut params: Value) -> String {
    let meta = params
        .as_object_mut()
        .unwrap()
        .entry("_meta")
        .or_insert_with(|| json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!(MODERN);
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn call(id: Value, tool: &str, arguments: Value, token: Option<Value>) -> String {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(token) = token {
        params["_meta"] = json!({"progressToken": token});
    }
    modern(id, "tools/call", params)
}

/// The headers a 2026-07-28 client sends with a `tools/call` of `tool`.
fn call_headers<'a>(tool: &'a str, accept: (&'a str, &'a str)) -> Vec<(&'a str, &'a str)> {
    vec![
        accept,
        CONTENT_JSON,
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ]
}

/// The JSON messages of an SSE body, in order.
fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn the_python_sdk_client_speaks_2026_07_28_through_the_gate_and_the_handshake_era_still_works() {
    let dir = work("stateless-python");
    let tokens = dir.join("tokens").display().to_string();
    let gate = gate(&dir, &["--tokens", &tokens]);

    let modern = python_client(&gate.url, TOKEN, "auto");
    assert_eq!(modern["protocol_version"], MODERN, "{modern}");
    // The host lists what it registered and can allow.
    assert_eq!(
        modern["tools"],
        json!(["countdown", "crash", "echo", "slow_echo"])
    );
    assert_eq!(modern["echo"]["text"], json!(["Echo: héllo"]));
    assert_eq!(modern["echo"]["verdict"]["mcp_result_status"], "returned");
    assert_eq!(modern["countdown"]["text"], json!(["done"]));
    let progress = modern["progress"].as_array().unwrap();
    assert_eq!(progress.len(), 3, "{modern}");
    assert_eq!(progress[2]["message"], "step 3");
    assert_eq!(modern["secret"]["is_error"], true);
    assert_eq!(modern["secret"]["verdict"]["receipt"]["reason"], "no_exact_rule");
    let reached = read(&dir, "reached.log");
    assert!(reached.contains("\"server/discover\""), "{reached}");
    assert!(
        !reached.contains("\"initialize\""),
        "the modern client sent no handshake"
    );

    // The previous era on the same gate: a session of its own.
    let legacy = python_client(&gate.url, TOKEN, "legacy");
    assert_eq!(legacy["protocol_version"], "2025-11-25", "{legacy}");
    for key in ["tools", "echo", "countdown", "progress"] {
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("verdict");
            }
            v
        };
        assert_eq!(strip(&legacy[key]), strip(&modern[key]), "{key}");
    }

    // The server ran each allowed call once per client, and never the denied one.
    let audit = read(&dir, "audit.jsonl");
    let ran: Vec<Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(ran.len(), 4, "{audit}");
    assert!(!audit.contains("secret") && !read(&dir, "reached.log").contains("\"secret\""));
    drop(gate);
    let log = receipts(&dir);
    let dispatched = log
        .iter()
        .filter(|r| r["receipt"]["execution_status"] == "dispatched")
        .count();
    let blocked = log
        .iter()
        .filter(|r| r["receipt"]["execution_status"] == "blocked")
        .count();
    assert_eq!((dispatched, blocked), (4, 2), "{log:?}");
}

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
    assert_eq!(slow.header("content-type"), Some("application/json"));
    assert_eq!(fast.header("content-type"), Some("text/event-stream"));
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
            "envelope of another version",
            with(&[v, m, n]),
            &old_meta,
            400,
            -32020,
        ),
        ("no Mcp-Method", with(&[v, n]), &echo, 400, -32020),
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
            "subscriptions/listen",
            with(&[v, ("mcp-method", "subscriptions/listen")]),
            &listen,
            404,
            -32601,
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
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(read(&dir, "reached.log"), "", "nothing reached the server");

    // The front keeps serving: a good request goes through.
    let reply = request(addr, "POST", &with(&[v, m, n]), &echo);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["result"]["content"][0]["text"], "Echo: hi");
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
    let deadline = Instant::now() + Duration::from_secs(10);
    while !read(&dir, "reached.log").contains("notifications/cancelled") {
        assert!(Instant::now() < deadline, "no cancellation reached the server");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The next request is served as usual.
    let echo = call(json!(8), "echo", json!({"message": "after"}), None);
    let reply = request(gate.addr, "POST", &call_headers("echo", JSON_ONLY), &echo);
    assert_eq!(reply.json()["result"]["content"][0]["text"], "Echo: after");
}

/// The fixture server in its Streamable HTTP mode; killed when dropped.
struct HttpServer(std::process::Child, u16);

impl HttpServer {
    fn start(audit: &Path) -> HttpServer {
        let port = free_port();
        let mut child = Command::new(peers().join("venv/bin/python"))
            .arg(fixture("server.py"))
            .args(["http", &port.to_string()])
            .env("AML_STATELESS_AUDIT", audit)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return HttpServer(child, port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("the fixture server did not listen on {port} within 10 s");
    }
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.1)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn http_to_http_the_gate_relays_2026_07_28_to_a_remote_server_without_a_session() {
    let dir = work("stateless-http-http");
    write_config(&dir);
    let server = HttpServer::start(&dir.join("audit.jsonl"));
    let mut args = gate_args(&dir);
    args.extend([
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--upstream".into(),
        server.url(),
    ]);
    let gate = Gate::start(&args);
    let gated = python_client(&gate.url, "", "auto");
    assert_eq!(gated["protocol_version"], MODERN, "{gated}");
    assert_eq!(gated["tools"], json!(["countdown", "crash", "echo", "slow_echo"]));
    assert_eq!(gated["echo"]["text"], json!(["Echo: héllo"]));
    assert_eq!(gated["echo"]["verdict"]["mcp_result_status"], "returned");
    assert_eq!(gated["progress"].as_array().unwrap().len(), 3, "{gated}");
    assert_eq!(gated["secret"]["verdict"]["receipt"]["reason"], "no_exact_rule");
    let audit = read(&dir, "audit.jsonl");
    assert_eq!(audit.lines().count(), 2, "{audit}");
    assert!(!audit.contains("secret"), "{audit}");
}

#[test]
fn an_rmcp_client_speaks_2026_07_28_through_the_gate() {
    use rmcp::model::{CallToolRequestParams, ProtocolVersion};
    use rmcp::transport::streamable_http_client::{
        StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
    };
    use rmcp::{ClientLifecycleMode, ClientServiceExt};

    let dir = work("stateless-rmcp");
    let gate = gate(&dir, &[]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            let config = StreamableHttpClientTransportConfig::with_uri(gate.url.as_str());
            let transport = StreamableHttpClientTransport::with_client(rmcp_http::HyperClient, config);
            let lifecycle = ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            };
            let client = ().serve_with_lifecycle(transport, lifecycle).await.unwrap();
            let mut tools: Vec<String> = client
                .list_all_tools()
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.name.to_string())
                .collect();
            tools.sort();
            let arguments = json!({"message": "from rmcp"}).as_object().unwrap().clone();
            let echo = client
                .call_tool(CallToolRequestParams::new("echo").with_arguments(arguments))
                .await
                .unwrap();
            let secret = client
                .call_tool(CallToolRequestParams::new("secret"))
                .await
                .unwrap();
            let _ = client.cancel().await;
            json!({"tools": tools, "echo": echo, "secret": secret})
        })
        .await
        .expect("the rmcp client finished within 60 s")
    });
    assert_eq!(
        report["tools"],
        json!(["countdown", "crash", "echo", "slow_echo"]),
        "{report}"
    );
    assert_eq!(
        report["echo"]["content"][0]["text"], "Echo: from rmcp",
        "{report}"
    );
    let verdict = "aml.action-boundary/verdict";
    assert_eq!(report["echo"]["_meta"][verdict]["mcp_result_status"], "returned");
    assert_eq!(report["secret"]["isError"], true);
    assert_eq!(
        report["secret"]["_meta"][verdict]["receipt"]["reason"],
        "no_exact_rule"
    );
    let reached = read(&dir, "reached.log");
    assert!(
        reached.contains("\"server/discover\"") && !reached.contains("\"initialize\""),
        "{reached}"
    );
    let audit = read(&dir, "audit.jsonl");
    assert!(
        audit.contains("from rmcp") && !audit.contains("secret"),
        "{audit}"
    );
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
        let deadline = Instant::now() + Duration::from_secs(10);
        while !read(&dir, "audit.jsonl").contains("first") {
            assert!(
                Instant::now() < deadline,
                "the first call never reached the server"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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
    let deadline = Instant::now() + Duration::from_secs(20);
    let echo = call(json!(4), "echo", json!({"message": "again"}), None);
    loop {
        let reply = request(addr, "POST", &call_headers("echo", JSON_ONLY), &echo);
        if reply.status == 200 && reply.json()["result"]["content"][0]["text"] == "Echo: again" {
            break;
        }
        // Until the old relay has ended (its grace period), requests are refused.
        assert!(
            Instant::now() < deadline,
            "no new server: {} {}",
            reply.status,
            reply.body
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(gate);
    let crashed = receipts(&dir)
        .into_iter()
        .filter(|r| r["tool"] == "crash")
        .map(|r| r["receipt"]["execution_status"].clone())
        .collect::<Vec<_>>();
    assert_eq!(crashed, [json!("unknown")]);
}

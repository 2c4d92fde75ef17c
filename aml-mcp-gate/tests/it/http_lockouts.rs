//! What a peer without a token (or with one, abusing it) can no longer do to `--listen`:
//! hold connections with half-sent headers or short bodies, fill the connection table or
//! the session slots, use another token's session, or drive the gate from a web page.
//! Raw sockets on the wire, and the official Python MCP SDK client where a real client must
//! still get through.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// How long a test waits for the gate to do something it must do at once or within a
/// one-second limit.
const PROMPTLY: Duration = Duration::from_secs(10);

/// A gate in front of server-everything over HTTP, with `extra` flags.
fn gate(dir: &std::path::Path, server: &ListeningChild, extra: &[&str]) -> Gate {
    let mut command = Command::new(GATE);
    command.args(gate_command(dir, server, extra));
    Gate::start_command(command)
}

fn gate_command(dir: &std::path::Path, server: &ListeningChild, extra: &[&str]) -> Vec<String> {
    write_everything_config(dir);
    let mut args = gate_args(dir);
    args.extend(["--listen", "127.0.0.1:0", "--upstream", &server.url()].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// A connection that wrote `head` and nothing more.
fn half_sent(addr: SocketAddr, head: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

/// Everything the gate sends on `stream` until it closes it, and how long that took; fails
/// if the gate keeps it open past `PROMPTLY`.
fn until_closed(stream: &mut TcpStream) -> (String, Duration) {
    let started = Instant::now();
    stream.set_read_timeout(Some(PROMPTLY)).unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => seen.extend_from_slice(&chunk[..n]),
            // Reset instead of closed: closed all the same.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the gate kept the connection open {:?} (sent {:?}): {e}",
                started.elapsed(),
                String::from_utf8_lossy(&seen)
            ),
        }
    }
    (String::from_utf8_lossy(&seen).into_owned(), started.elapsed())
}

#[test]
fn half_sent_headers_and_short_bodies_are_cut_off_and_a_wrong_token_is_refused_before_its_body() {
    let dir = work("cutoff");
    let server = EverythingHttp::start();
    let gate = gate(
        &dir,
        &server,
        &[
            "--tokens",
            &dir.join("tokens").display().to_string(),
            "--header-timeout",
            "1",
            "--body-timeout",
            "1",
            "--sse-keep-alive",
            "1",
        ],
    );
    let addr = gate.addr;

    // Headers that never end: the connection is closed after the header limit, unanswered.
    let mut stalled = half_sent(addr, "POST /mcp HTTP/1.1\r\nhost: gate\r\nauthorization: Bearer ");
    let (sent, took) = until_closed(&mut stalled);
    assert_eq!(sent, "", "no answer: there was no request");
    assert!(took >= Duration::from_millis(900), "{took:?}");

    // A body shorter than its Content-Length: 408 with a JSON-RPC error once the body limit
    // passes, and the connection closed.
    let mut short = half_sent(
        addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nhost: gate\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\naccept: application/json\r\ncontent-length: 100\r\n\r\n{{\"jsonrpc\""
        ),
    );
    let (sent, _) = until_closed(&mut short);
    assert!(sent.starts_with("HTTP/1.1 408 "), "{sent}");
    let body: Value = serde_json::from_str(sent.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(body["error"]["code"], -32000, "{body}");

    // A wrong token with a large body announced (and asked to be invited): 401 at once, no
    // `100 Continue`, no byte of the body read, the connection closed.
    let mut wrong = half_sent(
        addr,
        "POST /mcp HTTP/1.1\r\nhost: gate\r\nauthorization: Bearer wrong-token-0123456789abcdef\r\ncontent-type: application/json\r\nexpect: 100-continue\r\ncontent-length: 1000000\r\n\r\n",
    );
    let (sent, took) = until_closed(&mut wrong);
    assert!(sent.starts_with("HTTP/1.1 401 "), "{sent}");
    assert!(
        took < Duration::from_millis(900),
        "not held for the body limit: {took:?}"
    );

    // A kept-alive connection that sends no next request is closed after the header limit.
    let mut kept = half_sent(
        addr,
        &format!("GET /mcp HTTP/1.1\r\nhost: gate\r\nauthorization: Bearer {TOKEN}\r\naccept: text/event-stream\r\n\r\n"),
    );
    let (sent, _) = until_closed(&mut kept);
    assert!(sent.starts_with("HTTP/1.1 400 "), "no session named: {sent}");
    assert_eq!(sent.matches("HTTP/1.1").count(), 1, "{sent}");

    // An answer that takes longer than the header limit is not cut: a session's GET stream
    // still gets its keep-alive comments (one a second) three seconds on.
    let bearer = format!("Bearer {TOKEN}");
    let session = open_session(addr, &[("authorization", &bearer)]);
    let mut stream = send(
        addr,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("authorization", &bearer),
            ("mcp-session-id", &session),
        ],
        "",
    );
    stream.set_read_timeout(Some(PROMPTLY)).unwrap();
    let mut seen = String::new();
    let mut chunk = [0u8; 1024];
    while seen.matches(": keep-alive").count() < 3 {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "the stream was closed: {seen}");
        seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
    assert!(seen.starts_with("HTTP/1.1 200 "), "{seen}");
}

/// Runs the Python SDK client's `calls N` against `url` with the test token; its report, or
/// a failure after `within`.
fn python_calls(url: &str, calls: usize, within: Duration) -> Value {
    let script = repo().join("scripts/interop/mcp_http_client.py");
    let target = json!({"url": url, "token": TOKEN}).to_string();
    let child = Child::spawn(
        "the Python SDK client",
        Command::new(python())
            .arg(script)
            .args([target, "calls".into(), calls.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    report_of(&child.output(within))
}

/// The pace of the flood: a new half-sent connection every 10 ms (100 a second).
const FLOOD_PACE: Duration = Duration::from_millis(10);

/// Sets the flag when dropped: a failing test stops its helper threads too.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_flood_of_half_sent_headers_does_not_shut_out_a_client_with_the_token() {
    let dir = work("flood");
    let server = EverythingHttp::start();
    // The setting: the gate may open 256 files, and 375 connections send half their
    // headers and hold them. The header limit is long, so what lets the client in is the
    // connection cap, not the timer.
    let mut command = Command::new("sh");
    command
        .args(["-c", "ulimit -n 256 && exec \"$0\" \"$@\"", GATE])
        .args(gate_command(
            &dir,
            &server,
            &[
                "--tokens",
                &dir.join("tokens").display().to_string(),
                "--max-sessions",
                "8",
                "--header-timeout",
                "600",
            ],
        ));
    let gate = Gate::start_command(command);
    let head = "POST /mcp HTTP/1.1\r\nhost: gate\r\ncontent-type: application/json\r\n";
    let mut held: Vec<TcpStream> = (0..375).map(|_| half_sent(gate.addr, head)).collect();
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        // And more of them while the client works (100 a second, at most 1,000), until
        // the client is done or a connection is not accepted within 5 s.
        let flooder = s.spawn(|| {
            let mut more = Vec::new();
            for _ in 0..1000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut stream) = TcpStream::connect_timeout(&gate.addr, Duration::from_secs(5)) else {
                    break;
                };
                let _ = stream.write_all(head.as_bytes());
                more.push(stream);
                std::thread::sleep(FLOOD_PACE); // the flood's pace, not a wait
            }
            more
        });
        let _stop = StopOnDrop(&stop);
        let report = python_calls(&gate.url, 3, Duration::from_secs(60));
        drop(_stop);
        held.extend(flooder.join().unwrap());
        report
    });
    assert_eq!(
        report["calls"],
        json!(["Echo: call 0", "Echo: call 1", "Echo: call 2"]),
        "{report}"
    );
    assert!(held.len() >= 375);
}

/// A second client's token, beside the test's own (`TOKEN`, the first in the file).
const OTHER_TOKEN: &str = "other-token-fedcba9876543210";

/// Adds [`OTHER_TOKEN`] to `dir/tokens`; the file's path.
fn two_tokens(dir: &std::path::Path) -> String {
    let path = dir.join("tokens");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(OTHER_TOKEN);
    text.push('\n');
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The headers of a request in `session` with `authorization`.
fn in_session<'a>(authorization: &'a str, session: &'a str) -> [(&'a str, &'a str); 4] {
    [
        JSON_AND_SSE,
        CONTENT_JSON,
        ("authorization", authorization),
        ("mcp-session-id", session),
    ]
}

fn list_tools(id: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}).to_string()
}

#[test]
fn abandoned_initializes_fill_only_their_clients_quota_and_free_it_soon() {
    let dir = work("quota");
    let tokens = two_tokens(&dir);
    let server = EverythingHttp::start();
    let gate = gate(
        &dir,
        &server,
        &["--tokens", &tokens, "--unused-session-timeout", "2"],
    );
    let other = format!("Bearer {OTHER_TOKEN}");
    let as_other = [JSON_ONLY, CONTENT_JSON, ("authorization", other.as_str())];
    // One session of the other client is used (a request after initialize).
    let used = open_session(gate.addr, &[("authorization", &other)]);
    let in_used = in_session(&other, &used);
    assert_eq!(request(gate.addr, "POST", &in_used, &list_tools(2)).status, 200);
    // Then it abandons initializes, as many as the gate has session slots (64): only its
    // quota (16) opens, the rest get 429 with their own id.
    let mut opened = 1;
    for n in 1..64 {
        let reply = request(gate.addr, "POST", &as_other, &initialize_body(100 + n));
        match reply.status {
            200 => opened += 1,
            429 => assert_eq!(reply.json()["id"], 100 + n, "{}", reply.body),
            other => panic!("initialize {n}: {other} {}", reply.body),
        }
    }
    assert_eq!(opened, 16, "the other client's quota");
    // A real client with its own token is served all the same.
    let report = python_calls(&gate.url, 2, Duration::from_secs(60));
    assert_eq!(
        report["calls"],
        json!(["Echo: call 0", "Echo: call 1"]),
        "{report}"
    );
    // The abandoned sessions close after the short limit (2 s, not the 600 s idle one):
    // the other client's initialize is taken again.
    wait_until(
        "the unused sessions to be closed",
        Duration::from_secs(15),
        || {
            let reply = request(gate.addr, "POST", &as_other, &initialize_body(1));
            if reply.status == 200 {
                return Some(());
            }
            assert_eq!(reply.status, 429, "{}", reply.body);
            None
        },
    );
    // The used session was idle as long, and is still open.
    let reply = request(gate.addr, "POST", &in_used, &list_tools(3));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.json()["result"]["tools"].is_array());
}

#[test]
fn a_session_serves_only_the_token_that_opened_it_and_its_id_stays_out_of_the_info_log() {
    let dir = work("owner");
    let tokens = two_tokens(&dir);
    let server = EverythingHttp::start();
    let log = std::fs::File::create(dir.join("gate.log")).unwrap();
    let mut command = Command::new(GATE);
    command
        .args(gate_command(&dir, &server, &["--tokens", &tokens]))
        .env("RUST_LOG", "info")
        .stderr(log);
    let mut gate = Gate::start_command(command);
    let mine = format!("Bearer {TOKEN}");
    let theirs = format!("Bearer {OTHER_TOKEN}");
    let session = open_session(gate.addr, &[("authorization", &mine)]);
    let other = in_session(&theirs, &session);
    // The other token cannot use, listen to, or end the session: 404, as if there were none.
    assert_eq!(request(gate.addr, "POST", &other, &list_tools(2)).status, 404);
    assert_eq!(request(gate.addr, "GET", &other, "").status, 404);
    assert_eq!(request(gate.addr, "DELETE", &other, "").status, 404);
    // Its owner still can.
    let own = in_session(&mine, &session);
    let reply = request(gate.addr, "POST", &own, &list_tools(3));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(request(gate.addr, "DELETE", &own, "").status, 204);
    assert!(gate.stop().success());
    let log = std::fs::read_to_string(dir.join("gate.log")).unwrap();
    assert!(log.contains("belongs to token #1"), "{log}");
    assert!(!log.contains(&session), "the session id at info: {log}");
}

#[test]
fn without_tokens_a_page_on_another_local_port_cannot_drive_the_gate() {
    let dir = work("origin");
    let start = |extra: &[&str]| gate_logging_what_reaches_the_server(&dir, extra);
    let gate = start(&[]);
    // What a page's `fetch(gate, {method: "POST", mode: "no-cors", body})` sends: a
    // "simple" request, so the browser sends it without asking first.
    let from = |origin: &str, addr: SocketAddr| {
        request(
            addr,
            "POST",
            &[
                JSON_AND_SSE,
                ("content-type", "text/plain;charset=UTF-8"),
                ("origin", origin),
            ],
            &initialize_body(1),
        )
    };
    let next_port = format!("http://127.0.0.1:{}", gate.addr.port() + 1);
    for page in [
        "http://localhost:5173",
        "http://[::1]:8000",
        next_port.as_str(),
        "null",
    ] {
        let reply = from(page, gate.addr);
        assert_eq!(reply.status, 403, "{page}: {}", reply.body);
        assert_eq!(reply.json()["error"]["code"], -32000);
    }
    assert_eq!(reached(&dir), "", "no page's request reached the server");
    // The gate's own origin (a page it served, under either name) passes.
    let own = format!("http://localhost:{}", gate.addr.port());
    assert_eq!(from(&own, gate.addr).status, 200);
    assert!(reached(&dir).contains("\"initialize\""));
    // So does a page the host names.
    let listed = start(&["--allow-origin", "http://localhost:5173"]);
    assert_eq!(from("http://localhost:5173", listed.addr).status, 200);
    assert_eq!(from("http://localhost:5174", listed.addr).status, 403);
}

#[test]
fn listen_takes_localhost_and_a_client_reaches_the_gate_by_that_name() {
    let dir = work("localhost");
    let server = EverythingHttp::start();
    let mut args = gate_args(&dir);
    write_everything_config(&dir);
    args.extend(["--listen", "localhost:0", "--upstream", &server.url()].map(String::from));
    let gate = Gate::start(&args);
    assert!(gate.addr.ip().is_loopback(), "{}", gate.addr);
    let url = format!("http://localhost:{}/mcp", gate.addr.port());
    let report = python_calls(&url, 1, Duration::from_secs(60));
    assert_eq!(report["calls"], json!(["Echo: call 0"]), "{report}");
    // A page of the gate's own origin under that name passes the Origin check.
    let own = format!("http://localhost:{}", gate.addr.port());
    let reply = request(
        gate.addr,
        "POST",
        &[JSON_ONLY, CONTENT_JSON, ("origin", &own)],
        &initialize_body(1),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
}

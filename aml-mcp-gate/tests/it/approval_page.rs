//! The approval page's connection limits, set from the gate's command line and config
//! file: how many connections without the token it holds (the oldest gives way), how long
//! one has to show the token, and how many requests with the token it serves at once. The
//! page live through the gate: its stream, its API, its notification command
//! (`--approval-notify`), and its history kept in the state across a restart (SQLite and
//! PostgreSQL). Driven as a user runs it: the official Python MCP SDK client starts the
//! gate (see `session`), and raw sockets reach the page the gate announces.

use crate::cli_support;
use crate::session;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use session::*;

/// How long the page took to close `stream` (bounded by `within`).
fn closed_after(stream: &mut TcpStream, started: Instant, within: Duration) -> Duration {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return started.elapsed(),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!("the page kept the connection open past {within:?}")
            }
            Err(_) => return started.elapsed(),
        }
    }
}

fn status(response: &str) -> &str {
    response.get(9..12).unwrap_or("")
}

#[test]
fn the_page_limits_come_from_the_gate_flags() {
    let dir = work("page-limits");
    let session = Session::start(
        &dir,
        Some(true),
        &[
            "--approve",
            "web",
            "--approval-max-unauthenticated",
            "2",
            "--approval-max-authenticated",
            "1",
            "--approval-token-timeout",
            "5",
        ],
    );
    let (origin, token) = page(&session);

    // Two places for connections without the token: a third makes the oldest give way at
    // once, long before any timeout.
    let started = Instant::now();
    let mut oldest = TcpStream::connect(&origin).unwrap();
    // The page has taken it (it answers a request on a later connection only after
    // accepting this one: the kernel hands connections over in order).
    let probe = http(
        &origin,
        format!("GET /?t=wrong HTTP/1.1\r\nHost: {origin}\r\n\r\n"),
    );
    assert_eq!(status(&probe), "403", "{probe}");
    let mut younger = TcpStream::connect(&origin).unwrap();
    let _third = TcpStream::connect(&origin).unwrap();
    let oldest_for = closed_after(&mut oldest, started, Duration::from_secs(4));
    assert!(
        oldest_for < Duration::from_secs(4),
        "the oldest connection was kept {oldest_for:?}"
    );
    // The token timeout is 5 s (not the default 2 s): the younger idle connection outlives
    // the default and is closed when its own timeout runs out.
    let younger_for = closed_after(&mut younger, started, Duration::from_secs(20));
    assert!(
        younger_for >= Duration::from_millis(4500),
        "closed after {younger_for:?}, before the configured token timeout"
    );

    // One place for requests with the token: a form whose body is slow holds it, and a
    // second request with the token is told to wait.
    let mut holding = TcpStream::connect(&origin).unwrap();
    holding
        .write_all(
            format!(
                "POST /decide?t={token} HTTP/1.1\r\nHost: {origin}\r\nOrigin: http://{origin}\r\n\
                 Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let get = format!("GET /pending.json?t={token} HTTP/1.1\r\nHost: {origin}\r\n\r\n");
    // Bounded: until the page has read the holder's head (then every later request waits).
    let busy = wait_until("the slow form to hold the place", WAIT, || {
        let response = http(&origin, get.clone());
        if status(&response) == "503" {
            return Some(response);
        }
        assert_eq!(status(&response), "200", "{response}");
        None
    });
    assert!(busy.contains("too many requests with the token"), "{busy}");
    drop(holding);
    wait_until("the place to be freed", WAIT, || {
        (status(&http(&origin, get.clone())) == "200").then_some(())
    });
    session.close();
}

#[test]
fn page_limits_need_the_page_and_values_in_range_from_flags_and_config() {
    let policy = cli_support::temp(
        "page-limits-policy.json",
        r#"{"protocol": "aml-action-policy/1", "rules": []}"#,
    );
    let config = |name: &str, approval: &str| {
        cli_support::temp(
            name,
            &format!("policy = {policy:?}\nserver = [\"true\"]\n[approval]\nchannel = \"web\"\n{approval}\n"),
        )
    };
    let zero = config("page-limits-zero.toml", "max_unauthenticated_connections = 0");
    let long = config("page-limits-long.toml", "token_timeout_seconds = 61");
    let no_streams = config("page-limits-streams.toml", "max_streams = 0");
    let no_notifier = config(
        "page-limits-notify.toml",
        "notify = \"no-such-notifier-anywhere\"",
    );
    let cases: [(Vec<&str>, &str); 10] = [
        (
            vec![
                "--policy",
                &policy,
                "--approval-max-unauthenticated",
                "8",
                "--",
                "s",
            ],
            "--approval-max-unauthenticated needs --approve web",
        ),
        (
            vec![
                "--policy",
                &policy,
                "--approve",
                "tty",
                "--approval-token-timeout",
                "3",
                "--",
                "s",
            ],
            "--approval-token-timeout needs --approve web",
        ),
        (
            vec![
                "--policy",
                &policy,
                "--approve",
                "web",
                "--approval-max-authenticated",
                "0",
                "--",
                "s",
            ],
            "invalid value '0' for '--approval-max-authenticated <N>'",
        ),
        (
            vec!["--config", &zero],
            "--approval-max-unauthenticated must be between 1 and 10000, not 0",
        ),
        (
            vec!["--config", &long],
            "--approval-token-timeout must be between 1 and 60, not 61",
        ),
        (
            vec!["--policy", &policy, "--approval-notify", "true", "--", "s"],
            "--approval-notify needs --approve web",
        ),
        (
            vec![
                "--policy",
                &policy,
                "--approve",
                "web",
                "--approval-notify",
                "/no/such/notifier",
                "--",
                "s",
            ],
            "--approval-notify /no/such/notifier: no such program",
        ),
        (
            vec![
                "--policy",
                &policy,
                "--approve",
                "web",
                "--approval-max-streams",
                "0",
                "--",
                "s",
            ],
            "invalid value '0' for '--approval-max-streams <N>'",
        ),
        (
            vec!["--config", &no_streams],
            "--approval-max-streams must be between 1 and 1024, not 0",
        ),
        (
            vec!["--config", &no_notifier],
            "--approval-notify no-such-notifier-anywhere: no such program",
        ),
    ];
    for (args, says) in cases {
        let out = cli_support::gate(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty());
    }
}

/// The page's live stream, read as HTTP/1.0 (no chunking: the body runs until the page
/// closes it); each event's name and data.
struct Stream(BufReader<TcpStream>);

impl Stream {
    fn open(origin: &str, token: &str) -> Stream {
        let mut stream = TcpStream::connect(origin).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        write!(
            stream,
            "GET /api/v1/events?t={token} HTTP/1.0\r\nHost: {origin}\r\n\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(
            status.starts_with("HTTP/1.0 200") || status.starts_with("HTTP/1.1 200"),
            "{status}"
        );
        Stream(reader)
    }

    /// The next event called `name` (bounded by the read timeout).
    fn next(&mut self, name: &str) -> Value {
        let mut event = String::new();
        loop {
            let mut line = String::new();
            assert!(
                self.0.read_line(&mut line).unwrap() > 0,
                "the stream ended before {name:?}"
            );
            if let Some(n) = line.strip_prefix("event: ") {
                event = n.trim().to_owned();
            } else if let Some(data) = line.strip_prefix("data: ") {
                if event == name {
                    return serde_json::from_str(data).unwrap();
                }
            }
        }
    }
}

/// A request to the page's API with the token as a bearer token: status and JSON body.
fn api(origin: &str, token: &str, method: &str, path: &str, body: Option<&Value>) -> (String, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let response = http(
        origin,
        format!(
            "{method} {path} HTTP/1.1\r\nHost: {origin}\r\nAuthorization: Bearer {token}\r\nOrigin: http://{origin}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    let status = status(&response).to_owned();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// A call through the gate, seen live on the page's stream, notified to the command,
/// approved through the API; then a new gate on the same state lists it in its history.
fn live_notified_and_remembered(tag: &str, state: &str) {
    let dir = work(tag);
    let notified = dir.join("notified");
    let script = dir.join("tell.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {out}.tmp && mv {out}.tmp {out}\n",
            out = notified.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = script.display().to_string();
    let mut session = Session::start(
        &dir,
        Some(true),
        &["--approve", "web", "--state", state, "--approval-notify", &script],
    );
    let (origin, token) = page(&session);
    let mut stream = Stream::open(&origin, &token);
    assert_eq!(stream.next("snapshot")["pending"], json!([]));
    session.send();
    let arrived = stream.next("pending");
    let pending = &arrived["pending"];
    assert_eq!(pending["tool"], "send_notice");
    // Who asks: the stdio caller, and the client as its initialize named itself (the exact
    // name is http_requester.rs's to check).
    assert_eq!(pending["requester"]["caller"], "local", "{pending}");
    assert!(pending["requester"]["client_name"].is_string(), "{pending}");
    let (grant, digest) = (
        pending["grant_id"].as_str().unwrap().to_owned(),
        pending["proposal_sha256"].as_str().unwrap().to_owned(),
    );
    // The notification command ran with the page's address, the digest and the tool.
    let args = wait_until("the notification command to run", WAIT, || {
        std::fs::read_to_string(&notified).ok()
    });
    assert_eq!(
        args.lines().collect::<Vec<_>>(),
        [
            format!("http://{origin}/#m-{grant}"),
            digest.clone(),
            "send_notice".into()
        ]
    );
    let decision = json!({"grant_id": grant, "proposal_sha256": digest, "decision": "approve"});
    let (status, decided) = api(&origin, &token, "POST", "/api/v1/decide", Some(&decision));
    assert_eq!(status, "200", "{decided}");
    assert_eq!(
        outcome(&session.answer()),
        pair("dispatched", "host_dispatch_returned")
    );
    assert_eq!(stream.next("outcome")["outcome"]["outcome"], "approved");
    let (status, replayed) = api(&origin, &token, "POST", "/api/v1/decide", Some(&decision));
    assert_eq!(
        (status.as_str(), replayed["error"].as_str()),
        ("409", Some("already_decided"))
    );
    session.close();

    // Another run of the gate on the same state: the decision is in its history.
    let session = Session::start(&dir, Some(true), &["--approve", "web", "--state", state]);
    let (origin, token) = page(&session);
    let (status, history) = api(&origin, &token, "GET", "/api/v1/history?limit=500", None);
    assert_eq!(status, "200", "{history}");
    let ours = history["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["grant_id"] == grant.as_str())
        .unwrap_or_else(|| panic!("the decision is not in the history after a restart: {history}"));
    assert_eq!(ours["outcome"], "approved");
    assert_eq!(ours["decided_by"], "aml-mcp-gate-session");
    assert_eq!(ours["tool"], "send_notice");
    session.close();
}

#[test]
fn the_page_is_live_notifies_and_keeps_its_history_in_sqlite() {
    let file = work("page-history-sqlite-file").join("state.sqlite3");
    live_notified_and_remembered("page-history-sqlite", &file.display().to_string());
}

#[test]
fn the_page_keeps_its_history_in_postgresql() {
    live_notified_and_remembered("page-history-postgres", &postgres_url());
}

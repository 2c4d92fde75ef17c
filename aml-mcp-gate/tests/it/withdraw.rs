//! A call waiting for a person's approval when its MCP client closes the gate's input is
//! withdrawn, as gRPC withdraws a call whose caller went away (ADR 006): the approval page no
//! longer offers it, a decision posted for it approves nothing, the server never sees it,
//! and its record says the caller went away while approval was pending.

use crate::raw;

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::{json, Value};

use raw::{gate_options, raw_server, read_lines, records, wait_for, write_config, StdioGate, WAIT};

/// Posts an approval of `proposal` as the page's form does: the HTTP reply, or `None` when
/// the page is gone (the gate has exited).
fn try_approve(origin: &str, token: &str, proposal: &Value) -> Option<String> {
    let form = format!(
        "t={token}&grant_id={}&proposal_sha256={}&decision=approve",
        proposal["grant_id"].as_str().unwrap(),
        proposal["proposal_sha256"].as_str().unwrap()
    );
    let mut stream = TcpStream::connect(origin).ok()?;
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let request = format!(
        "POST /decide HTTP/1.1\r\nHost: {origin}\r\nOrigin: http://{origin}\r\nConnection: close\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
        form.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

#[test]
fn a_call_waiting_for_approval_when_the_client_closes_stdin_is_withdrawn_and_never_runs() {
    let dir = raw::work("withdraw");
    write_config(&dir);
    let mut options = gate_options(&dir);
    options.extend(["--approve", "web"].map(String::from));
    let mut gate = StdioGate::start(&dir, &options, &raw_server(&dir));
    gate.initialize();
    // A call the server never answers keeps the gate draining (and its page up) after EOF.
    gate.send_json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"hang": true}}}));
    wait_for("the server taking up the hanging call", || {
        read_lines(&dir.join("ran.log")).len() == 1
    });
    gate.send_json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "send", "arguments": {"to": "team"}}}));
    wait_for("the approval page's URL", || {
        gate.stderr().contains(" at http://")
    });
    let stderr = gate.stderr();
    let url = stderr
        .split(" at http://")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim();
    let (origin, token) = url.split_once("/?t=").unwrap();
    let proposal = raw::pending(origin, token);
    assert_eq!(proposal["tool"], "send", "{proposal}");

    gate.close();
    wait_for("the withdrawal", || {
        gate.stderr().contains("it was withdrawn and never sent")
    });
    // The page offers it no more, and approving it now approves nothing.
    let listed = raw::http(
        origin,
        format!("GET /pending.json?t={token} HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n"),
    );
    assert!(listed.ends_with("\r\n\r\n[]"), "{listed}");
    let reply = try_approve(origin, token, &proposal).expect("the page is still up while the gate drains");
    assert!(reply.starts_with("HTTP/1.1 409"), "{reply}");
    assert!(
        reply.contains("This call was withdrawn") && reply.contains("nothing was approved"),
        "{reply}"
    );
    // MCP clients send SIGTERM after closing the input; it ends the drain at once.
    raw::signal(&gate, "TERM");
    assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());

    let raw = read_lines(&dir.join("raw.log"));
    assert!(
        !raw.iter().any(|l| l.contains("\"send\"")),
        "the call reached the server: {raw:?}"
    );
    assert_eq!(
        read_lines(&dir.join("ran.log")).len(),
        1,
        "only the hanging echo ran"
    );
    let calls = records(&dir);
    let send: Vec<&Value> = calls.iter().filter(|c| c["tool"] == "send").collect();
    assert_eq!(send.len(), 1, "{calls:?}");
    assert_eq!(send[0]["receipt"]["execution_status"], "blocked", "{}", send[0]);
    assert!(
        send[0]["detail"]
            .as_str()
            .unwrap()
            .contains("the caller went away while approval was pending"),
        "{}",
        send[0]
    );
}

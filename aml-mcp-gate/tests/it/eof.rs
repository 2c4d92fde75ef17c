//! A client that writes its requests and closes the gate's input at once (`printf … |
//! aml-mcp-gate … -- server`) gets an answer to each of them before the gate exits, not only
//! to its calls: the server alone would answer them all.

use crate::raw;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use raw::{gate_options, raw_server, write_config, Child, WAIT};

#[test]
fn every_request_written_before_end_of_input_is_answered_before_the_gate_exits() {
    let dir = raw::work("eof");
    write_config(&dir);
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "printf", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/list"}),
    ];
    let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
    let mut child = Child::spawn(
        "the gate",
        Command::new(raw::GATE)
            .args(gate_options(&dir))
            .arg("--")
            .args(raw_server(&dir))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    // Everything at once, then end of input, as `printf … |` does.
    child.stdin().write_all(input.as_bytes()).unwrap();
    let out = child.output(WAIT);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
    assert_eq!(ids.len(), 4, "{answers:?}");
    for id in 1..=4 {
        assert!(ids.contains(&&json!(id)), "no answer for {id}: {answers:?}");
    }
    let by_id = |id: i64| answers.iter().find(|a| a["id"] == id).unwrap();
    assert_eq!(by_id(1)["result"]["serverInfo"]["name"], "raw-stdin-server");
    assert_eq!(by_id(2)["result"]["tools"][0]["name"], "send");
    assert_eq!(by_id(3)["result"], json!({}));
    assert_eq!(by_id(4)["error"]["code"], -32601, "the server's own answer");
}

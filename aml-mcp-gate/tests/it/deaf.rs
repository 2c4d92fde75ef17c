//! A server that stops reading its input but stays alive is taken as gone at the first
//! write that fails: the call written then ends at once (not at the upstream timeout), and
//! later calls are refused `upstream_gone`, never written into a pipe nobody reads.

use crate::raw;

use serde_json::json;

use raw::{gate_options, raw_server, read_lines, write_config, StdioGate};

#[test]
fn a_server_that_closed_its_input_is_gone_at_the_first_failed_write() {
    let dir = raw::work("deaf-server");
    write_config(&dir);
    // The upstream timeout is left at its default, far beyond the test's wait: no answer
    // below can come from it.
    let mut gate = StdioGate::start(&dir, &gate_options(&dir), &raw_server(&dir));
    gate.initialize();
    let call = |id: u64, arguments: serde_json::Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "echo", "arguments": arguments}})
    };
    gate.send_json(&call(2, json!({"close_input": true})));
    let answered = gate.recv();
    assert_eq!(answered["id"], 2, "{answered}");
    assert_eq!(answered["result"]["isError"], json!(null), "{answered}");
    // Written into a closed pipe: the write fails and the server is taken as gone.
    gate.send_json(&call(3, json!({"m": "into a closed pipe"})));
    let first = gate.recv();
    assert_eq!(first["id"], 3, "{first}");
    assert_eq!(first["result"]["isError"], true, "{first}");
    gate.send_json(&call(4, json!({"m": "after it went"})));
    let later = gate.recv();
    assert_eq!(later["id"], 4, "{later}");
    let verdict = &later["result"]["_meta"]["aml.action-boundary/verdict"];
    assert_eq!(verdict["rejection"], "upstream_gone", "{later}");
    let ran = read_lines(&dir.join("ran.log")).join("\n");
    assert!(
        !ran.contains("a closed pipe") && !ran.contains("after it went"),
        "{ran}"
    );
    let stderr = std::fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default();
    assert!(stderr.contains("the server cannot be written to"), "{stderr}");
    gate.close();
    gate.wait();
}

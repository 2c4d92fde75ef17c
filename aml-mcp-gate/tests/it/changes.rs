//! What docs/GATE.md says the gate changes in a message, checked against what the server
//! (`scripts/interop/mcp_raw_stdin_server.py`, which logs every raw line) reads: a relayed
//! request keeps its bytes but for its id, `tools/call` arrives re-encoded as the canonical
//! JSON that was approved with the client's `_meta` as sent, and a client message the strict
//! parser refuses never arrives, whatever its method.

use crate::raw;

use raw::{gate_options, raw_server, read_lines, write_config, StdioGate};

#[test]
fn relayed_requests_keep_their_bytes_but_for_the_id_and_tools_call_is_re_encoded() {
    let dir = raw::work("changes");
    write_config(&dir);
    let mut gate = StdioGate::start(&dir, &gate_options(&dir), &raw_server(&dir));
    let initialize = r#"{ "params" : {"protocolVersion":"2025-11-25","capabilities":{"x.example":{"n":1.50}},"clientInfo":{"name":"c","version":"1"}}, "method":"initialize", "jsonrpc":"2.0", "id":"init-1" }"#;
    gate.send(initialize);
    assert_eq!(gate.recv()["id"], "init-1");
    let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"b": 1.50, "a": [1e2, "\u00e9"]},"_meta":{"progressToken": "p", "k": 2.0}}}"#;
    gate.send(call);
    assert_eq!(gate.recv()["id"], 7);
    let duplicated = r#"{"jsonrpc":"2.0","id":8,"method":"resources/read","params":{"uri":"a","uri":"b"}}"#;
    gate.send(duplicated);
    let refused = gate.recv();
    assert_eq!(refused["error"]["code"], -32700, "{refused}");
    gate.close();
    assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());

    let seen = read_lines(&dir.join("raw.log"));
    // The initialize as the client wrote it (spaces, member order, `1.50`), with the gate's id.
    let relayed = seen.iter().find(|l| l.contains("initialize")).unwrap();
    let id_at = relayed.find("\"id\":").unwrap() + 5;
    let id_end = id_at + relayed[id_at..].find(' ').unwrap();
    assert!(relayed[id_at..id_end].parse::<u64>().is_ok(), "{relayed}");
    assert_eq!(
        format!("{}\"init-1\"{}", &relayed[..id_at], &relayed[id_end..]),
        initialize
    );
    // The call as the gate wrote it: canonical arguments, the client's `_meta` as sent.
    let forwarded = seen.iter().find(|l| l.contains("tools/call")).unwrap();
    assert!(
        forwarded.ends_with(r#","method":"tools/call","params":{"name":"echo","arguments":{"a":[100,"é"],"b":1.5},"_meta":{"progressToken": "p", "k": 2.0}}}"#),
        "{forwarded}"
    );
    assert!(!seen.iter().any(|l| l.contains("resources/read")), "{seen:?}");
}

//! 2026-07-28's `Mcp-Param-*` headers through the gate, HTTP to HTTP. The fixture server
//! (official Python SDK) declares `x-mcp-header: Region` on `regional`'s `region` and refuses
//! a call whose `Mcp-Param-Region` is missing or disagrees: the gate sends the header it
//! computes from the body it forwards. The host's tools file declares it too, so the gate's
//! listing does: the Python SDK client then sends it, and the front refuses a request whose
//! header disagrees with its body (`-32020`) before anything reaches the server.

use serde_json::{json, Value};

use crate::common::*;
use crate::stateless::*;

/// Adds `regional` to the host's tools and policy (what `write_config` wrote).
fn add_regional(dir: &std::path::Path) {
    let edit = |file: &str, key: &str, entry: Value| {
        let path = dir.join(file);
        let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        doc[key].as_array_mut().unwrap().push(entry);
        std::fs::write(path, doc.to_string()).unwrap();
    };
    edit(
        "tools.json",
        "tools",
        json!({"name": "regional", "effect": "read", "purpose": "Greet a region", "resource": {"fixed": "fixture"},
               "input_schema": {"type": "object", "required": ["region", "note"],
                                "properties": {"region": {"type": "string", "x-mcp-header": "Region"},
                                               "note": {"type": "string"}}}}),
    );
    edit(
        "policy.json",
        "rules",
        json!({"tool": "regional", "effect": "read", "resource": "fixture", "requires_approval": false}),
    );
}

/// POSTs `regional` with `body_region` in the body and `header` as `Mcp-Param-Region`.
fn post_regional(gate: &Gate, id: u64, body_region: &str, header: Option<&str>) -> Reply {
    let body = call(
        json!(id),
        "regional",
        json!({"region": body_region, "note": "raw"}),
        None,
    );
    let mut headers = call_headers("regional", JSON_ONLY);
    if let Some(header) = header {
        headers.push(("mcp-param-region", header));
    }
    request(gate.addr, "POST", &headers, &body)
}

fn error_code(reply: &Reply) -> Option<i64> {
    serde_json::from_str::<Value>(&reply.body).ok()?["error"]["code"].as_i64()
}

#[test]
fn mcp_param_headers_are_sent_to_the_server_and_checked_at_the_front() {
    let dir = work("stateless-param-headers");
    write_config(&dir);
    add_regional(&dir);
    let server = HttpServer::start_with(&dir.join("audit.jsonl"), &[("AML_STATELESS_REGIONAL", "1")]);
    let gate = gate_to(&dir, server.url());

    // The server does refuse a call without the header (so a call through the gate that runs
    // proves the gate sent it).
    let direct_body = call(
        json!(1),
        "regional",
        json!({"region": "eu-west", "note": "direct"}),
        None,
    );
    let port: u16 = server.1;
    let direct = request(
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        "POST",
        &call_headers("regional", JSON_AND_SSE),
        &direct_body,
    );
    assert_eq!(
        error_code(&direct),
        Some(-32020),
        "{} {}",
        direct.status,
        direct.body
    );

    // The Python SDK client lists (the server's declaration comes through) and calls: the
    // server, which checks Mcp-Param-Region, runs the call the gate forwarded.
    let report = python_client(&gate.url, "", "regional");
    assert_eq!(report["protocol_version"], MODERN, "{report}");
    assert_eq!(
        report["schema"]["properties"]["region"]["x-mcp-header"], "Region",
        "{report}"
    );
    assert_eq!(
        report["regional"]["text"],
        json!(["hello in eu-west"]),
        "{report}"
    );
    assert_eq!(
        report["regional"]["verdict"]["mcp_result_status"], "returned",
        "{report}"
    );

    // Raw POSTs, after that listing: a header that agrees passes (base64 form too) ...
    let agrees = post_regional(&gate, 1, "eu-west", Some("eu-west"));
    assert_eq!(agrees.status, 200, "{}", agrees.body);
    assert!(agrees.body.contains("raw in eu-west"), "{}", agrees.body);
    let encoded = post_regional(&gate, 2, "Zürich", Some("=?base64?WsO8cmljaA==?="));
    assert_eq!(encoded.status, 200, "{}", encoded.body);
    // ... one that disagrees, is missing, or is not canonical base64 (unpadded, or with stray
    // bits in its last symbol: a lenient decoder would read both as the body's "eu-west") is
    // refused at the front with -32020.
    for (id, header) in [
        (3, Some("us-east")),
        (4, None),
        (5, Some("=?base64?not base64?=")),
        (20, Some("=?base64?ZXUtd2VzdA?=")),
        (21, Some("=?base64?ZXUtd2VzdB==?=")),
    ] {
        let refused = post_regional(&gate, id, "eu-west", header);
        assert_eq!(refused.status, 400, "{header:?}: {}", refused.body);
        assert_eq!(error_code(&refused), Some(-32020), "{header:?}: {}", refused.body);
        assert!(
            refused.body.contains("Mcp-Param") || refused.body.contains("mcp-param"),
            "{}",
            refused.body
        );
    }

    // Every other shape the wire allows, each with a header that disagrees with its body:
    // answered at once, and none reaches the server as a call.
    let mut wrong = call_headers("regional", JSON_ONLY);
    wrong.push(("mcp-param-region", "us-east"));
    // A notification: 202, dropped (2026-07-28 defines none from client to server).
    let note = modern(
        json!(null),
        "notifications/progress",
        json!({"progressToken": 1, "progress": 1}),
    );
    let note = note.replacen("\"id\":null,", "", 1);
    assert_eq!(request(gate.addr, "POST", &wrong, &note).status, 202);
    // A tools/call without an id: 202, and the relay drops it (and records it), never forwards it.
    let idless = call(
        json!(null),
        "regional",
        json!({"region": "eu-west", "note": "idless"}),
        None,
    )
    .replacen("\"id\":null,", "", 1);
    assert!(!idless.contains("\"id\""), "{idless}");
    assert_eq!(request(gate.addr, "POST", &wrong, &idless).status, 202);
    // A batch: 400, as every 2026-07-28 batch.
    let batch = format!(
        "[{}]",
        call(
            json!(6),
            "regional",
            json!({"region": "eu-west", "note": "batch"}),
            None
        )
    );
    let refused = request(gate.addr, "POST", &wrong, &batch);
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(error_code(&refused), Some(-32600), "{}", refused.body);
    // The handshake era has no Mcp-Param-* headers: one sent there is not read, and the call
    // is gated, and runs, by its body (the server runs it with the body's region).
    let session = open_session(gate.addr, &[]);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "regional", "arguments": {"region": "eu-west", "note": "session"}}})
    .to_string();
    let headers = [
        JSON_ONLY,
        CONTENT_JSON,
        ("mcp-session-id", session.as_str()),
        ("mcp-param-region", "us-east"),
    ];
    let handshake = request(gate.addr, "POST", &headers, &body);
    assert_eq!(handshake.status, 200, "{}", handshake.body);
    assert!(
        handshake.body.contains("session in eu-west"),
        "{}",
        handshake.body
    );

    // The server ran the SDK's call, the two that agreed and the session's; nothing refused
    // or dropped reached it.
    let audit = read(&dir, "audit.jsonl");
    let regions: Vec<String> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["tool"] == "regional")
        .map(|l| l["arguments"]["region"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(regions, ["eu-west", "eu-west", "Zürich", "eu-west"], "{audit}");
    let notes: Vec<String> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["tool"] == "regional")
        .map(|l| l["arguments"]["note"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(notes, ["hello", "raw", "raw", "session"], "{audit}");
}

//! Per-tool scopes from outside: the tools file says `send_notice` needs `notices:send`; a
//! JWT without it may open a session and list tools, but its `tools/call` of `send_notice`
//! gets `403 insufficient_scope` naming every scope it needs (the gate's own and the tool's),
//! and reaches nothing, in every shape (request, batch, id-less, 2026-07-28); with the scope the call runs. A static token is the host's own and
//! is not scoped.

use serde_json::{json, Value};

use crate::http_oauth::{forge, probe, reached, setup, Gate, Server};
use crate::session::TO;

#[test]
fn a_tools_scopes_are_asked_of_its_callers_token() {
    let dir = setup("oauth-tool-scopes", "alice");
    let tools_path = dir.join("tools.json");
    let mut tools: Value = serde_json::from_str(&std::fs::read_to_string(&tools_path).unwrap()).unwrap();
    tools["tools"][0]["scopes"] = json!(["notices:send"]);
    std::fs::write(&tools_path, tools.to_string()).unwrap();
    std::fs::write(dir.join("tokens"), "host-token-0123456789abcdef\n").unwrap();
    let server = Server::start(&dir);
    let tokens_file = dir.join("tokens").display().to_string();
    let gate = Gate::start(
        &dir,
        &server.issuer,
        &["--auth-scopes", "mcp:tools", "--tokens", &tokens_file],
    );
    let claims = |scope: &str| json!({"sub": "alice", "iss": server.issuer, "aud": gate.url, "scope": scope});
    let tokens = forge(
        &dir,
        json!([
            {"name": "narrow", "claims": claims("mcp:tools")},
            {"name": "wide", "claims": claims("mcp:tools notices:send")},
        ]),
    );
    let token = |name: &str| tokens[name].as_str().unwrap().to_owned();
    let call = |n: u64| {
        json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
               "params": {"name": "send_notice", "arguments": {"to": TO, "body": "Scoped."}}})
    };
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let opened = probe(
        &dir,
        &gate.url,
        vec![json!({"name": "initialize", "token": token("narrow")})],
    );
    assert_eq!(opened[0]["status"], 200, "{opened:?}");
    let session = opened[0]["session"].as_str().unwrap().to_owned();
    let on_session = |name: &str, token: String, body: Value| json!({"name": name, "token": token, "body": body, "headers": {"Mcp-Session-Id": session}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answers = probe(
        &dir,
        &gate.url,
        vec![
            on_session("initialized", token("narrow"), initialized),
            on_session("list", token("narrow"), list),
            on_session("narrow call", token("narrow"), call(3)),
        ],
    );
    assert_eq!(
        answers[1]["status"], 200,
        "listing needs no tool scope: {:?}",
        answers[1]
    );
    let refused = &answers[2];
    assert_eq!(refused["status"], 403, "{refused}");
    let metadata = gate
        .url
        .replace("/mcp", "/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        refused["www_authenticate"],
        format!("Bearer error=\"insufficient_scope\", scope=\"mcp:tools notices:send\", resource_metadata=\"{metadata}\""),
        "{refused}"
    );
    assert_eq!(
        reached(&dir),
        0,
        "a call without the tool's scope reached the server"
    );
    // Every other shape the wire allows: a batch with another request, a tools/call without
    // an id (a notification's shape) and a 2026-07-28 request (no session): each gets the
    // same 403 and reaches nothing.
    let mut idless = call(6);
    idless.as_object_mut().unwrap().remove("id");
    let mut modern = call(7);
    modern["params"]["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let modern_headers = json!({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
                                "Mcp-Name": "send_notice"});
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    let shapes = probe(
        &dir,
        &gate.url,
        vec![
            on_session("batch", token("narrow"), json!([call(8), ping])),
            on_session("id-less", token("narrow"), idless),
            json!({"name": "2026-07-28", "token": token("narrow"), "body": modern, "headers": modern_headers}),
        ],
    );
    for shape in &shapes {
        assert_eq!(shape["status"], 403, "{shape}");
        assert_eq!(shape["www_authenticate"], refused["www_authenticate"], "{shape}");
    }
    assert_eq!(reached(&dir), 0, "no shape of the call reached the server");
    let allowed = probe(
        &dir,
        &gate.url,
        vec![on_session("wide call", token("wide"), call(4))],
    );
    assert_eq!(allowed[0]["status"], 200, "{allowed:?}");
    assert_eq!(reached(&dir), 1);
    let log = gate.log.so_far().join("\n");
    assert!(log.contains("needs scope notices:send"), "{log}");
}

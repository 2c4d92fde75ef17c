//! Protocol 2026-07-28 over the gate's HTTP front (no sessions, a `_meta` envelope on every
//! request), with SDK clients: the official Python SDK's negotiates it with `server/discover`
//! and its calls are gated like any (allowed and dispatched once, denied and never sent),
//! HTTP to a stdio server and HTTP to an HTTP server; the handshake era still works on the
//! same gate; rmcp's Streamable HTTP client transport (on a hyper client of the test's own)
//! speaks it too.
//!
//! The server is built with the Python SDK (`tests/stateless/server.py`); on stdio it is
//! behind `tee`, so the test sees every byte that reached it. `scripts/interop-setup`
//! installs the SDK into `target/interop`.

use crate::common;
#[path = "stateless/rmcp_http.rs"]
mod rmcp_http;
use crate::stateless;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use stateless::*;

#[test]
fn the_python_sdk_client_speaks_2026_07_28_through_the_gate_and_the_handshake_era_still_works() {
    let dir = work("stateless-python");
    let tokens = dir.join("tokens").display().to_string();
    let gate = gate(&dir, &["--tokens", &tokens]);
    // Without the token a 2026-07-28 request is refused first, like any other, and reaches
    // nothing (no server is even started for it).
    let body = call(json!(1), "echo", json!({"message": "no token"}), None);
    let reply = request(gate.addr, "POST", &call_headers("echo", JSON_AND_SSE), &body);
    assert_eq!(reply.status, 401, "{}", reply.body);
    let bearer = format!("Bearer {TOKEN}");
    let mut foreign = call_headers("echo", JSON_AND_SSE);
    foreign.extend([
        ("authorization", bearer.as_str()),
        ("origin", "http://evil.example"),
    ]);
    assert_eq!(request(gate.addr, "POST", &foreign, &body).status, 403);
    assert_eq!(read(&dir, "reached.log"), "");

    let modern = python_client(&gate.url, TOKEN, "auto");
    assert_eq!(modern["protocol_version"], MODERN, "{modern}");
    // The host lists what it registered and can allow.
    assert_eq!(
        modern["tools"],
        json!(["announce", "countdown", "crash", "echo", "slow_echo"])
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
fn a_2026_07_28_subscription_through_the_gate_brings_the_servers_list_changed() {
    let dir = work("stateless-listen");
    let gate = gate(&dir, &[]);
    let report = python_client(&gate.url, "", "listen");
    assert_eq!(report["protocol_version"], MODERN, "{report}");
    assert_eq!(report["honored"]["toolsListChanged"], true, "{report}");
    assert_eq!(
        report["announce"]["verdict"]["mcp_result_status"], "returned",
        "{report}"
    );
    // The notification came on the subscription's stream, named by the client's own id
    // (the SDK drops one it cannot match to its subscription).
    assert_eq!(report["event"], "ToolsListChanged", "{report}");
    let reached = read(&dir, "reached.log");
    assert!(reached.contains("\"subscriptions/listen\""), "{reached}");
}

#[test]
fn http_to_http_the_gate_relays_2026_07_28_to_a_remote_server_without_a_session() {
    let dir = work("stateless-http-http");
    write_config(&dir);
    let server = HttpServer::start(&dir.join("audit.jsonl"));
    let gate = gate_to(&dir, server.url());
    let gated = python_client(&gate.url, "", "auto");
    assert_eq!(gated["protocol_version"], MODERN, "{gated}");
    assert_eq!(
        gated["tools"],
        json!(["announce", "countdown", "crash", "echo", "slow_echo"])
    );
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
        json!(["announce", "countdown", "crash", "echo", "slow_echo"]),
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

//! `[[servers]]` (ADR 033) behind `--listen`, in protocol 2026-07-28 (no sessions, a `_meta`
//! envelope on every request): two servers built with the official Python SDK, `x` (names
//! bare, `never`) and `y` (prefixed). The official Python SDK client negotiates 2026-07-28
//! with `server/discover`, lists both servers' tools, calls and gets progress from `x`; a
//! raw 2026-07-28 `tools/list` gets `y`'s page by the gate's cursor, and raw calls of `y`'s
//! tools reach `y` alone, its progress under the caller's own token. Records name each
//! call's server. When `y` crashes, the relay the callers share ends soon after, and the
//! next request starts both servers again.

use crate::common;
use crate::stateless;

use common::*;
use serde_json::{json, Value};
use stateless::*;

/// `gate.toml`, `tools.json` and `policy.json` for servers `x` and `y`, each the fixture
/// server recording its calls in `audit-x.jsonl` / `audit-y.jsonl`.
fn two_fixtures(dir: &std::path::Path) -> Vec<String> {
    write_config(dir);
    let read = |file: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap()
    };
    let (mut tools, mut policy) = (read("tools.json"), read("policy.json"));
    let mut listed = Vec::new();
    for server in ["x", "y"] {
        for tool in tools["tools"].as_array().unwrap() {
            let mut tool = tool.clone();
            tool["server"] = json!(server);
            listed.push(tool);
        }
    }
    tools["tools"] = Value::Array(listed);
    let rules = policy["rules"].as_array_mut().unwrap();
    let for_y: Vec<Value> = rules
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r["tool"] = json!(format!("y__{}", r["tool"].as_str().unwrap()));
            r
        })
        .collect();
    rules.extend(for_y);
    std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
    std::fs::write(dir.join("policy.json"), policy.to_string()).unwrap();
    let mut config = String::from("policy = \"policy.json\"\ntools = \"tools.json\"\nstate = \"memory\"\nreceipts = \"receipts.jsonl\"\n");
    for (server, names) in [("x", "never"), ("y", "prefix")] {
        let run = format!(
            "AML_STATELESS_AUDIT='{}' exec '{}' '{}'",
            dir.join(format!("audit-{server}.jsonl")).display(),
            python().display(),
            fixture("server.py").display()
        );
        let command = serde_json::to_string(&["sh", "-c", run.as_str()]).unwrap();
        config.push_str(&format!(
            "\n[[servers]]\nname = \"{server}\"\nnames = \"{names}\"\ncommand = {command}\n"
        ));
    }
    std::fs::write(dir.join("gate.toml"), config).unwrap();
    let tokens = dir.join("tokens").display().to_string();
    vec![
        "--config".into(),
        dir.join("gate.toml").display().to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--tokens".into(),
        tokens,
    ]
}

#[test]
fn protocol_2026_07_28_reaches_each_of_two_servers_through_one_gate() {
    let dir = work("servers-stateless");
    let gate = Gate::start(&two_fixtures(&dir));
    let client = python_client(&gate.url, TOKEN, "auto");
    assert_eq!(client["protocol_version"], MODERN, "{client}");
    // The client reads the first page: x's tools, bare.
    let bare = ["announce", "countdown", "crash", "echo", "slow_echo"];
    assert_eq!(client["tools"], json!(bare), "{client}");
    assert_eq!(client["echo"]["text"], json!(["Echo: héllo"]));
    assert_eq!(client["progress"].as_array().map(Vec::len), Some(3), "{client}");

    // The next page, by the gate's cursor: y's tools, prefixed.
    let bearer = format!("Bearer {TOKEN}");
    let list = |id: u64, cursor: Option<&Value>| {
        let params = cursor.map_or_else(|| json!({}), |c| json!({"cursor": c}));
        let headers = [
            JSON_ONLY,
            CONTENT_JSON,
            ("mcp-protocol-version", MODERN),
            ("mcp-method", "tools/list"),
            ("authorization", bearer.as_str()),
        ];
        request(
            gate.addr,
            "POST",
            &headers,
            &modern(json!(id), "tools/list", params),
        )
        .json()
    };
    let first = list(1, None);
    let cursor = first["result"]["nextCursor"].clone();
    assert!(cursor.is_string(), "{first}");
    let second = list(2, Some(&cursor));
    let names: Vec<&str> = second["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let prefixed: Vec<String> = bare.iter().map(|t| format!("y__{t}")).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, prefixed, "{second}");
    assert!(second["result"].get("nextCursor").is_none(), "{second}");

    let mut headers = call_headers("y__echo", JSON_ONLY);
    headers.push(("authorization", bearer.as_str()));
    let body = call(json!("to-y"), "y__echo", json!({"message": "to y"}), None);
    let reply = request(gate.addr, "POST", &headers, &body);
    assert_eq!(
        reply.json()["result"]["content"][0]["text"],
        "Echo: to y",
        "{}",
        reply.body
    );
    // Progress of y's tool reaches the caller under the caller's own token.
    let mut headers = call_headers("y__countdown", JSON_AND_SSE);
    headers.push(("authorization", bearer.as_str()));
    let body = call(
        json!("cd"),
        "y__countdown",
        json!({"steps": 2}),
        Some(json!("tok")),
    );
    let reply = request(gate.addr, "POST", &headers, &body);
    let messages = events(&reply.body);
    let progress: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 2, "{}", reply.body);
    assert!(
        progress.iter().all(|p| p["params"]["progressToken"] == "tok"),
        "{progress:?}"
    );
    let last = messages.last().unwrap();
    assert_eq!(last["result"]["content"][0]["text"], "done", "{}", reply.body);

    // y crashes: its call is `unknown`. The relay callers share ends soon after, and the
    // next request starts every server again: y serves once more.
    let mut headers = call_headers("y__crash", JSON_ONLY);
    headers.push(("authorization", bearer.as_str()));
    let reply = request(
        gate.addr,
        "POST",
        &headers,
        &call(json!("c"), "y__crash", json!({}), None),
    );
    let verdict = &reply.json()["result"]["_meta"]["aml.action-boundary/verdict"];
    assert_eq!(
        verdict["receipt"]["execution_status"], "unknown",
        "{}",
        reply.body
    );
    let mut headers = call_headers("y__echo", JSON_ONLY);
    headers.push(("authorization", bearer.as_str()));
    let again = call(json!("again"), "y__echo", json!({"message": "back"}), None);
    wait_until("y to serve again", std::time::Duration::from_secs(15), || {
        let reply = request(gate.addr, "POST", &headers, &again);
        (reply.json()["result"]["content"][0]["text"] == "Echo: back").then_some(())
    });
    drop(gate);

    let ran = |server: &str| -> Vec<String> {
        read(&dir, &format!("audit-{server}.jsonl"))
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["tool"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(
        ran("y"),
        ["echo", "countdown", "crash", "echo"],
        "y ran only its own calls, under its own names"
    );
    assert!(ran("x").contains(&"echo".to_owned()) && !ran("x").is_empty());
    for record in receipts(&dir)
        .iter()
        .filter(|r| r["record"] == "aml-call-record/1")
    {
        let tool = record["tool"].as_str().unwrap();
        let server = if tool.starts_with("y__") { "y" } else { "x" };
        assert_eq!(record["server"], server, "{record}");
    }
}

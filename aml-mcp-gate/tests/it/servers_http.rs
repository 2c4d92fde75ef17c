//! `[[servers]]` with a server over Streamable HTTP (`url`, ADR 033) beside two raw-stdin
//! servers: `init --config` reads all three into one tools file, and the gate, edited as
//! the next steps say, sends each call to its own server, the HTTP one included, whose
//! records name it. When the HTTP server stops, only its calls fail; the others serve on.

use crate::common::EverythingHttp;
use crate::raw;
use crate::servers::{call, calls_read, layout};

use serde_json::{json, Value};

use raw::StdioGate;

#[test]
fn a_server_over_http_in_the_list_is_read_by_init_and_gets_only_its_own_calls() {
    let dir = raw::work("servers-http");
    layout(&dir);
    let web = EverythingHttp::start();
    let mut config = std::fs::read_to_string(dir.join("gate.toml")).unwrap();
    config.push_str(&format!(
        "\n[[servers]]\nname = \"web\"\nurl = \"{}\"\nheaders = [\"X-Gate: aml\"]\n",
        web.url()
    ));
    std::fs::write(dir.join("gate.toml"), config).unwrap();

    let out = std::process::Command::new(crate::common::GATE)
        .args(["init", "--out", &dir.join("gen").display().to_string()])
        .args(["--config", &dir.join("gate.toml").display().to_string()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("web__echo") && stdout.contains("a__echo"),
        "{stdout}"
    );
    let gen = dir.join("gen");
    let text = std::fs::read_to_string(gen.join("tools.json")).unwrap();
    let mut tools: Value = serde_json::from_str(&text).unwrap();
    // The host keeps two tools, one of the HTTP server and one of a raw one.
    let keep = |t: &Value| t["name"] == "echo" && (t["server"] == "web" || t["server"] == "a");
    let kept: Vec<Value> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| keep(t))
        .cloned()
        .collect();
    assert_eq!(kept.len(), 2, "{text}");
    tools["tools"] = Value::Array(kept);
    let edited = tools
        .to_string()
        .replace("CHOOSE ONE: read | write | send | pay | delete", "read");
    std::fs::write(gen.join("tools.json"), edited).unwrap();
    let rule =
        |tool: &str| json!({"tool": tool, "effect": "read", "resource": tool, "requires_approval": false});
    let policy = json!({"protocol": "aml-action-policy/1", "rules": [rule("web__echo"), rule("a__echo")]});
    std::fs::write(gen.join("policy.json"), policy.to_string()).unwrap();
    let line = stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("aml-mcp-gate --config"))
        .unwrap();
    let options: Vec<String> = line.split_whitespace().skip(1).map(str::to_owned).collect();

    let mut gate = StdioGate::start(&dir, &options, &[]);
    gate.initialize();
    let echoed = call(&mut gate, "c1", "web__echo", json!({"message": "over http"}));
    assert_eq!(
        echoed["result"]["content"][0]["text"], "Echo: over http",
        "{echoed}"
    );
    let raw = call(&mut gate, "c2", "a__echo", json!({"n": 2}));
    assert_eq!(raw["result"]["content"][0]["text"], r#"{"n": 2}"#, "{raw}");
    assert!(calls_read(&dir, "b").is_empty());
    assert_eq!(calls_read(&dir, "a").len(), 1, "only its own call");

    // The HTTP server stops: its call fails; the raw server serves on.
    drop(web);
    let failed = call(&mut gate, "c3", "web__echo", json!({"message": "gone"}));
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let raw = call(&mut gate, "c4", "a__echo", json!({"n": 4}));
    assert_eq!(raw["result"]["content"][0]["text"], r#"{"n": 4}"#, "{raw}");
    // The failed request took the HTTP server out of the session: later calls to it are
    // refused before anything is sent.
    let refused = call(&mut gate, "c5", "web__echo", json!({"message": "later"}));
    let verdict = &refused["result"]["_meta"]["aml.action-boundary/verdict"];
    assert_eq!(verdict["rejection"], "upstream_gone", "{refused}");
    gate.close();
    let status = gate.wait();
    let stderr = gate.stderr();
    assert!(status.success(), "{status:?}: {stderr}");

    let records: Vec<Value> = raw::read_lines(&gen.join("../receipts.jsonl"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &Value| r["record"] == "aml-call-record/1")
        .collect();
    let named: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|r| {
            let status = r["receipt"]["execution_status"].as_str().unwrap_or("none");
            (r["tool"].as_str().unwrap(), r["server"].as_str().unwrap(), status)
        })
        .collect();
    assert_eq!(named.len(), 5, "{named:?}");
    assert_eq!(named[0], ("web__echo", "web", "dispatched"));
    assert_eq!(named[1], ("a__echo", "a", "dispatched"));
    assert_eq!((named[2].0, named[2].1), ("web__echo", "web"));
    assert_ne!(named[2].2, "dispatched", "{named:?}");
    assert_eq!(named[3], ("a__echo", "a", "dispatched"));
    assert_eq!(
        (named[4].0, named[4].1),
        ("web__echo", "web"),
        "refused, and recorded"
    );
}

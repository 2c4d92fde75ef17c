//! What the 2026-07-28 HTTP tests share: the fixture server (`server.py`) behind the gate,
//! the host's registry for it, the Python SDK client (`client.py`), and 2026-07-28 request
//! bodies and headers.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::common::*;

pub const MODERN: &str = "2026-07-28";

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/stateless")
        .join(name)
}

/// The host's registry: five tools allowed, `secret` registered but allowed by no rule.
pub fn write_config(dir: &Path) {
    let tools = [
        ("echo", json!({"message": {"type": "string"}}), vec!["message"]),
        (
            "slow_echo",
            json!({"message": {"type": "string"}, "seconds": {"type": "number"}}),
            vec!["message", "seconds"],
        ),
        ("countdown", json!({"steps": {"type": "integer"}}), vec!["steps"]),
        ("crash", json!({}), vec![]),
        ("announce", json!({}), vec![]),
        ("secret", json!({}), vec![]),
    ];
    let registry: Vec<Value> = tools
        .iter()
        .map(|(name, properties, required)| {
            json!({"name": name, "effect": "read", "purpose": format!("Use {name} for the user"),
                   "resource": {"fixed": "fixture"},
                   "input_schema": {"type": "object", "properties": properties, "required": required,
                                    "additionalProperties": false}})
        })
        .collect();
    std::fs::write(dir.join("tools.json"), json!({"tools": registry}).to_string()).unwrap();
    let rules: Vec<Value> = tools[..5]
        .iter()
        .map(|(name, ..)| json!({"tool": name, "effect": "read", "resource": "fixture", "requires_approval": false}))
        .collect();
    std::fs::write(
        dir.join("policy.json"),
        json!({"protocol": "aml-action-policy/1", "rules": rules}).to_string(),
    )
    .unwrap();
}

/// The gate in front of the fixture server; what reaches the server is in `dir/reached.log`,
/// the calls it ran in `dir/audit.jsonl`.
pub fn gate(dir: &Path, extra: &[&str]) -> Gate {
    gate_with(dir, extra, true)
}

/// [`gate`], with the server behind `tee` or as the gate's own child (`exec`: its exit is
/// the child's exit).
pub fn gate_with(dir: &Path, extra: &[&str], tee: bool) -> Gate {
    gate_with_policy(dir, "policy.json", extra, tee)
}

/// [`gate_with`], the policy read from `policy` in `dir` (a `.cedar` file is Cedar).
pub fn gate_with_policy(dir: &Path, policy: &str, extra: &[&str], tee: bool) -> Gate {
    write_config(dir);
    let policy = dir.join(policy).display().to_string();
    let mut args: Vec<String> = gate_args(dir)
        .into_iter()
        .map(|arg| {
            if arg.ends_with("policy.json") {
                policy.clone()
            } else {
                arg
            }
        })
        .collect();
    args.extend(["--listen", "127.0.0.1:0"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    let python = python();
    args.extend([
        "--".into(),
        "sh".into(),
        "-c".into(),
        format!(
            "AML_STATELESS_AUDIT='{}' && export AML_STATELESS_AUDIT && {} '{}' '{}'",
            dir.join("audit.jsonl").display(),
            if tee {
                format!("tee -a '{}' |", dir.join("reached.log").display())
            } else {
                "exec".into()
            },
            python.display(),
            fixture("server.py").display()
        ),
    ]);
    Gate::start(&args)
}

/// The gate serving HTTP (`--listen`) in front of the Streamable HTTP server at `url`, with
/// `dir`'s tools and policy.
pub fn gate_to(dir: &Path, url: String) -> Gate {
    let mut args = gate_args(dir);
    args.extend(["--listen".into(), "127.0.0.1:0".into(), "--upstream".into(), url]);
    Gate::start(&args)
}

pub fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default()
}

/// Runs `tests/stateless/client.py URL TOKEN MODE`: its JSON report.
pub fn python_client(url: &str, token: &str, mode: &str) -> Value {
    python_report(&fixture("client.py"), &[url.into(), token.into(), mode.into()])
}

/// A 2026-07-28 request body: `params` plus the per-request envelope.
pub fn modern(id: Value, method: &str, mut params: Value) -> String {
    let meta = params
        .as_object_mut()
        .unwrap()
        .entry("_meta")
        .or_insert_with(|| json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!(MODERN);
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

pub fn call(id: Value, tool: &str, arguments: Value, token: Option<Value>) -> String {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(token) = token {
        params["_meta"] = json!({"progressToken": token});
    }
    modern(id, "tools/call", params)
}

/// The headers a 2026-07-28 client sends with a `tools/call` of `tool`.
pub fn call_headers<'a>(tool: &'a str, accept: (&'a str, &'a str)) -> Vec<(&'a str, &'a str)> {
    vec![
        accept,
        CONTENT_JSON,
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ]
}

/// The JSON messages of an SSE body, in order.
pub fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The fixture server in its Streamable HTTP mode; killed when dropped.
pub struct HttpServer;

impl HttpServer {
    pub fn start(audit: &Path) -> ListeningChild {
        Self::start_with(audit, &[])
    }

    /// [`HttpServer::start`] with more environment (`AML_STATELESS_REGIONAL`).
    pub fn start_with(audit: &Path, env: &[(&str, &str)]) -> ListeningChild {
        let port = free_port();
        let mut command = Command::new(python());
        command
            .arg(fixture("server.py"))
            .args(["http", &port.to_string()])
            .envs(env.iter().copied())
            .env("AML_STATELESS_AUDIT", audit)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        ListeningChild::start(command, port, "the fixture server")
    }
}

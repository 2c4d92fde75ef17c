//! `relay-fixture` (run as `aml-testkit serve-relay-fixture`): a raw JSON-RPC MCP server on
//! stdio that misbehaves on request, for the relay's liveness tests. It answers `ping`,
//! `initialize` and `tools/list`; its tools:
//!
//! | tool | does |
//! |---|---|
//! | `echo` | returns the `arguments` text exactly as received (as text and `structuredContent`) |
//! | `slow` | answers after `arguments.ms` milliseconds, or never once cancelled (unless `arguments.ignore_cancel`) |
//! | `garbage` | writes a line that is not JSON, then nothing |
//! | `garbage_with_id` | writes the start of its answer (with the id) and never ends it |
//! | `silent` | never answers |
//! | `huge` | answers with a text of `arguments.bytes` bytes (default 20,000,000) |
//! | `die` | exits at once (status 3) |
//! | `error` | answers with a JSON-RPC error |
//! | `sample` | asks the client for `sampling/createMessage` and answers with what it got back |
//! | `verbatim` | answers with `arguments.result` (else `arguments.error`), a string, written as the result's (error's) JSON text |
//!
//! Every `tools/call` params text and every `notifications/cancelled` it receives is appended
//! to the file named by `AML_RELAY_AUDIT` (one JSON line each).

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};

#[derive(serde::Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<String>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

#[derive(Default)]
struct Shared {
    out: Mutex<Option<std::io::Stdout>>,
    cancelled: Mutex<HashSet<String>>,
    wake: Condvar,
    audit: Option<std::path::PathBuf>,
}

impl Shared {
    fn write(&self, line: &str) {
        let mut guard = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(out) = guard.as_mut() {
            let _ = out.write_all(line.as_bytes());
            let _ = out.write_all(b"\n");
            let _ = out.flush();
        }
    }

    fn audit(&self, line: &str) {
        if let Some(path) = &self.audit {
            let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
            if let Ok(mut file) = file {
                let _ = file.write_all(format!("{line}\n").as_bytes());
            }
        }
    }

    fn result(&self, id: &str, result: &Value) {
        self.write(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}"
        ));
    }
}

fn tool(name: &str) -> Value {
    json!({"name": name, "description": format!("relay fixture: {name}"), "inputSchema": {"type": "object"}})
}

/// Serves the fixture on stdin/stdout until stdin ends.
pub fn serve() -> ExitCode {
    let shared = Arc::new(Shared {
        out: Mutex::new(Some(std::io::stdout())),
        audit: std::env::var_os("AML_RELAY_AUDIT").map(Into::into),
        ..Shared::default()
    });
    // Calls waiting for the client's answer to a sampling request, by that request's id.
    let mut sampling: HashMap<String, String> = HashMap::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(message) = serde_json::from_str::<Message<'_>>(&line) else {
            continue;
        };
        let id = message.id.map(|id| id.get().to_owned());
        match (message.method.as_deref(), id) {
            (Some("notifications/cancelled"), None) => {
                let params: Value = message
                    .params
                    .and_then(|p| serde_json::from_str(p.get()).ok())
                    .unwrap_or_default();
                shared.audit(&json!({"cancelled": params["requestId"]}).to_string());
                let mut cancelled = shared.cancelled.lock().unwrap_or_else(|p| p.into_inner());
                cancelled.insert(params["requestId"].to_string());
                shared.wake.notify_all();
            }
            (Some(_), None) => {}
            (Some(method), Some(id)) => {
                if let Some(code) = request(&shared, method, &id, message.params, &mut sampling) {
                    return code;
                }
            }
            (None, Some(id)) => {
                if let Some(call) = sampling.remove(&id) {
                    let got = message
                        .result
                        .or(message.error)
                        .map(RawValue::get)
                        .unwrap_or("null");
                    let text = format!("sampling answered: {got}");
                    shared.result(&call, &json!({"content": [{"type": "text", "text": text}]}));
                }
            }
            (None, None) => {}
        }
    }
    ExitCode::SUCCESS
}

fn request(
    shared: &Arc<Shared>,
    method: &str,
    id: &str,
    params: Option<&RawValue>,
    sampling: &mut HashMap<String, String>,
) -> Option<ExitCode> {
    let params_value: Value = params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default();
    match method {
        "ping" => shared.result(id, &json!({})),
        "initialize" => shared.result(
            id,
            &json!({"protocolVersion": params_value["protocolVersion"], "capabilities": {"tools": {}},
                    "serverInfo": {"name": "relay-fixture", "version": env!("CARGO_PKG_VERSION")}}),
        ),
        "tools/list" => {
            let names = [
                "echo", "slow", "garbage", "garbage_with_id", "silent", "huge", "die", "error", "sample", "verbatim", "secret",
            ];
            shared.result(id, &json!({"tools": names.iter().map(|n| tool(n)).collect::<Vec<_>>()}));
        }
        "tools/call" => {
            shared.audit(params.map(RawValue::get).unwrap_or("null"));
            return call(shared, id, params, &params_value, sampling);
        }
        _ => shared.write(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32601,\"message\":\"no method {method}\"}}}}"
        )),
    }
    None
}

fn call(
    shared: &Arc<Shared>,
    id: &str,
    params: Option<&RawValue>,
    params_value: &Value,
    sampling: &mut HashMap<String, String>,
) -> Option<ExitCode> {
    let arguments = &params_value["arguments"];
    match params_value["name"].as_str().unwrap_or_default() {
        "echo" => {
            let raw: Value = params
                .and_then(|p| serde_json::from_str::<HashMap<String, &RawValue>>(p.get()).ok())
                .and_then(|m| m.get("arguments").map(|a| Value::from(a.get())))
                .unwrap_or_default();
            let text = raw.as_str().unwrap_or("null").to_owned();
            shared.write(&format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":{raw}}}],\"structuredContent\":{text}}}}}"
            ));
        }
        "slow" => {
            let (shared, id) = (Arc::clone(shared), id.to_owned());
            let wait = Duration::from_millis(arguments["ms"].as_u64().unwrap_or(1000));
            let ignore = arguments["ignore_cancel"] == true;
            std::thread::spawn(move || {
                let guard = shared.cancelled.lock().unwrap_or_else(|p| p.into_inner());
                // Woken by a cancellation of this call, or done when the time is up.
                let (guard, _) = shared
                    .wake
                    .wait_timeout_while(guard, wait, |c| !c.contains(&id))
                    .unwrap_or_else(|p| p.into_inner());
                let cancelled = guard.contains(&id);
                drop(guard);
                if !cancelled || ignore {
                    shared.result(&id, &json!({"content": [{"type": "text", "text": "slow done"}]}));
                }
            });
        }
        "garbage" => shared.write("this is not json"),
        "garbage_with_id" => shared.write(&format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[")),
        "silent" => {}
        "huge" => {
            let bytes = arguments["bytes"].as_u64().unwrap_or(20_000_000) as usize;
            let text = "x".repeat(bytes);
            shared.result(id, &json!({"content": [{"type": "text", "text": text}]}));
        }
        "die" => return Some(ExitCode::from(3)),
        "error" => shared.write(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32603,\"message\":\"fixture error\"}}}}"
        )),
        "sample" => {
            let request_id = format!("\"sample-{}\"", sampling.len() + 1);
            sampling.insert(request_id.clone(), id.to_owned());
            shared.write(&format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{request_id},\"method\":\"sampling/createMessage\",\"params\":{{\"messages\":[{{\"role\":\"user\",\"content\":{{\"type\":\"text\",\"text\":\"hi\"}}}}],\"maxTokens\":5}}}}"
            ));
        }
        "verbatim" => {
            // Text the test wrote, so that it can hold what no `Value` can (duplicate members).
            let (member, text) = match (arguments["result"].as_str(), arguments["error"].as_str()) {
                (Some(result), _) => ("result", result),
                (None, Some(error)) => ("error", error),
                (None, None) => ("result", "{}"),
            };
            shared.write(&format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"{member}\":{text}}}"));
        }
        other => shared.write(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32602,\"message\":\"no tool {other}\"}}}}"
        )),
    }
    None
}

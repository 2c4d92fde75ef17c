//! Interop: the official A2UI Python SDKs (`a2ui-core` 0.4.0, `a2ui-agent-sdk` 0.9.0,
//! installed by `scripts/interop-setup`) play the host's agent against the `gate_stdio`
//! loop and `examples/host.json`: calls built five ways, with a surface, bindings from the
//! Express format, and every refusal; each answer checked with `a2ui-core`'s models and
//! against its `RpcHandler` given the same call (`scripts/interop/a2ui_sdk.py`).

#[path = "../../examples/gate_stdio/host.rs"]
mod host;

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use aml_a2ui::GateLimits;
use aml_core::MemorySink;
use serde_json::{json, Value};

use host::{capabilities, serve, HostConfig, Log};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    aml_test_support::python()
}

fn script() -> PathBuf {
    root().join("scripts/interop/a2ui_sdk.py")
}

#[test]
fn vendored_current_schemas_are_what_a2ui_core_generates() {
    let out = Command::new(python())
        .arg(script())
        .arg("check-schemas")
        .arg(root().join("fixtures/a2ui-v1.0-current"))
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["differ"], json!([]), "{report}");
    assert_eq!(
        report["checked"],
        json!(["agent_to_renderer.json", "common_types.json"])
    );
    assert!(out.status.success());
}

#[test]
fn the_python_sdks_drive_the_gate_and_accept_every_answer() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("a2ui-sdk-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let tool_log = Arc::new(Mutex::new(Vec::<u8>::new()));
    let log: Log = tool_log.clone();
    let host = HostConfig::load(&root().join("aml-a2ui/examples/host.json"))
        .and_then(|c| c.host(&log))
        .unwrap();
    let records = MemorySink::new();
    let (caps, report) = (tmp.join("capabilities.json"), tmp.join("report.json"));
    std::fs::write(&caps, capabilities(&host.registry).to_string()).unwrap();
    let stderr = std::fs::File::create(tmp.join("agent.stderr")).unwrap();

    let mut agent = Command::new(python())
        .arg(script())
        .args(["agent", "--capabilities"])
        .arg(&caps)
        .arg("--report")
        .arg(&report)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let (to_agent, from_agent) = (agent.stdin.take().unwrap(), agent.stdout.take().unwrap());
    let (done, finished) = mpsc::channel();
    let sink = Arc::new(records.clone());
    std::thread::spawn(move || {
        let limits = GateLimits::default();
        let gate = host.gate(sink).unwrap().with_limits(limits);
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let served = serve(
            &gate,
            limits.max_message_bytes,
            &runtime,
            BufReader::new(from_agent),
            to_agent,
        );
        let _ = done.send(served.map_err(|e| e.to_string()));
    });
    // Bounded: a stuck agent is killed and the test fails.
    let served = finished.recv_timeout(Duration::from_secs(300));
    if served.is_err() {
        let _ = agent.kill();
    }
    let status = agent.wait().unwrap();
    let agent_stderr = std::fs::read_to_string(tmp.join("agent.stderr")).unwrap_or_default();
    assert_eq!(served, Ok(Ok(())), "{agent_stderr}");
    let report: Value = std::fs::read(&report)
        .map_err(|e| e.to_string())
        .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
        .unwrap_or_else(|e| panic!("no report ({e}): {agent_stderr}"));
    assert_eq!(report["failed"], json!([]), "{report:#}");
    assert!(status.success(), "{agent_stderr}");

    let checks: Vec<&Value> = report["checks"].as_array().unwrap().iter().collect();
    let by_name = |name: &str| {
        *checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name}"))
    };
    let expected_codes = [
        ("surface_id", Value::Null),
        ("replayed_call_id", json!("DUPLICATE")),
        ("policy_blocked", json!("ACTION_BLOCKED")),
        ("unknown_function", json!("UNKNOWN_FUNCTION")),
        ("unknown_catalog", json!("UNKNOWN_FUNCTION")),
        ("renderer_only", json!("UNKNOWN_FUNCTION")),
        ("schema_mismatch", json!("INVALID_FUNCTION_CALL")),
        ("args_missing", json!("INVALID_FUNCTION_CALL")),
        ("nested_call", json!("INVALID_FUNCTION_CALL")),
        ("data_binding_from_express", json!("INVALID_FUNCTION_CALL")),
        ("duplicate_key", json!("INVALID_FUNCTION_CALL")),
        ("candidate_form_refused", json!("INVALID_FUNCTION_CALL")),
        ("not_json", json!("INVALID_FUNCTION_CALL")),
        ("message_too_large", json!("MESSAGE_TOO_LARGE")),
        ("call_id_too_long", json!("CALL_ID_TOO_LONG")),
    ];
    for (name, code) in expected_codes {
        assert_eq!(by_name(name)["code"], code, "{name}");
    }
    // Where the reference renderer refuses, it refuses in the same place and shape.
    for name in ["unknown_function", "unknown_catalog", "renderer_only"] {
        let c = by_name(name);
        assert_eq!(
            c["reference"]["rendererFunctionResponse"]["error"]["code"], "INVALID_FUNCTION_CALL",
            "{name}"
        );
        assert_eq!(c["shape"], "error", "{name}");
    }
    // The reference runs what the gate refuses: a binding resolved to nothing, a call
    // without the args its catalog requires.
    for name in ["data_binding_from_express", "args_missing"] {
        assert_eq!(
            by_name(name)["reference"]["rendererFunctionResponse"]["value"],
            json!({"ok": true}),
            "{name}"
        );
    }
    assert_eq!(by_name("candidate_form_refused")["shape"], "top_level_error");

    // Exactly the dispatched calls entered the tool, with the arguments the agent sent.
    let log_text = String::from_utf8(tool_log.lock().unwrap().clone()).unwrap();
    let entries: Vec<Value> = log_text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|v| v.get("tool_entry").cloned())
        .collect();
    let dispatched: Vec<&&Value> = checks.iter().filter(|c| c["shape"] == "value").collect();
    assert_eq!(dispatched.len(), 6, "five ways and one with a surface");
    assert_eq!(entries.len(), dispatched.len(), "{log_text}");
    for entry in &entries {
        assert_eq!(entry["function"], "sendMessage");
        assert_eq!(entry["arguments"]["to"], "team@example.test");
    }
    let records = records.calls();
    assert_eq!(
        Some(records.len() as u64),
        report["sent"].as_u64(),
        "one record per message"
    );
    assert!(records.iter().all(|r| r.adapter == "a2ui"));
    let dispatched_records = records
        .iter()
        .filter(|r| {
            r.receipt
                .as_ref()
                .is_some_and(|r| r.reason().as_str() == "host_dispatch_returned")
        })
        .count();
    assert_eq!(dispatched_records, entries.len());
}

/// `host.json` may name a policy file instead of holding the document: a `.cedar` file is
/// read as Cedar, relative to host.json, and one that does not load stops the host.
#[test]
fn host_json_may_name_a_cedar_policy_file() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("a2ui-cedar-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("aml-a2ui/examples/host.json")).unwrap())
            .unwrap();
    config["policy"] = json!("policy.cedar");
    std::fs::write(tmp.join("host.json"), config.to_string()).unwrap();
    let log: Log = Arc::new(Mutex::new(Vec::<u8>::new()));
    let load = || HostConfig::load(&tmp.join("host.json")).and_then(|c| c.host(&log).map(|_| ()));
    std::fs::write(
        tmp.join("policy.cedar"),
        r#"permit(principal, action == Action::"sendMessage", resource == Resource::"team@example.test");"#,
    )
    .unwrap();
    assert_eq!(load(), Ok(()));
    std::fs::write(tmp.join("policy.cedar"), "permit(principal, action, resource").unwrap();
    let error = load().unwrap_err();
    assert!(error.contains("Cedar syntax error"), "{error}");
    std::fs::remove_file(tmp.join("policy.cedar")).unwrap();
    assert!(load().unwrap_err().contains("cannot read"));
}

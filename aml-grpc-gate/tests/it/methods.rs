//! The tools file against the upstream's descriptors: what the gateway refuses to start
//! with, and the proto3 JSON form a request is decided in.

use crate::support;

use aml_grpc_gate::transcode::{encode, to_json, DecodeError};
use aml_grpc_gate::{Methods, Route};
use prost_reflect::DescriptorPool;
use serde_json::{json, Value};

fn pool(tag: &str) -> DescriptorPool {
    let dir = aml_test_support::scratch_dir("grpc-gate", tag);
    let path = support::descriptor_set(&dir);
    DescriptorPool::decode(std::fs::read(path).unwrap().as_slice()).unwrap()
}

fn tools(entries: Value) -> String {
    json!({"tools": entries}).to_string()
}

fn entry(method: &str, resource: Value) -> Value {
    json!({"name": "t", "method": method, "effect": "read", "purpose": "p", "resource": resource})
}

#[test]
fn a_tools_file_that_does_not_fit_the_descriptors_is_refused_with_its_reason() {
    let pool = pool("methods-refused");
    let cases = [
        (
            tools(json!([entry(
                "payments.v1.Payments/Watch",
                json!({"fixed": "r"})
            )])),
            "streaming method",
        ),
        (
            tools(json!([entry("payments.v1.Payments/Nope", json!({"fixed": "r"}))])),
            "has no method",
        ),
        (
            tools(json!([entry(
                "payments.v9.Payments/Lookup",
                json!({"fixed": "r"})
            )])),
            "no service",
        ),
        (
            tools(json!([entry(
                "payments.v1.Payments.Lookup",
                json!({"fixed": "r"})
            )])),
            "package.Service/Method",
        ),
        (
            tools(json!([entry(
                "payments.v1.Payments/Refund",
                json!({"argument": "customer.phone"})
            )])),
            "no field \"phone\"",
        ),
        (
            tools(json!([entry(
                "payments.v1.Payments/Refund",
                json!({"argument": "order_id.x"})
            )])),
            "not a singular message",
        ),
        (
            json!({"tools": [], "relay_ungated": ["payments.v1.Payments/Lookup"]}).to_string(),
            "is unary",
        ),
        (json!({"tools": [], "extra": 1}).to_string(), "unknown field"),
        (r#"{"tools": [], "tools": []}"#.to_owned(), "duplicate"),
    ];
    for (text, expected) in cases {
        let err = Methods::from_json(&text, &pool).unwrap_err().to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
    let ok = Methods::from_json(
        &json!({"tools": [entry("payments.v1.Payments/Refund", json!({"argument": "customer.email", "as": "email"}))],
                "relay_ungated": ["payments.v1.Payments/Watch"]})
        .to_string(),
        &pool,
    )
    .unwrap();
    assert!(matches!(ok.routes.get("/payments.v1.Payments/Refund"), Some(Route::Gated(m)) if m.tool == "t"));
    assert!(matches!(
        ok.routes.get("/payments.v1.Payments/Watch"),
        Some(Route::Relayed(_))
    ));
    assert_eq!(ok.services.iter().collect::<Vec<_>>(), ["payments.v1.Payments"]);
}

#[test]
fn requests_become_proto3_json_and_back_byte_for_byte() {
    let pool = pool("methods-json");
    let refund = pool.get_message_by_name("payments.v1.RefundRequest").unwrap();
    // order_id "A-1", amount_minor 2^63-1, customer {email "e@x.test"}.
    let mut bytes = vec![0x0a, 0x03, b'A', b'-', b'1', 0x10];
    bytes.extend([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
    bytes.extend([0x1a, 0x0a, 0x0a, 0x08]);
    bytes.extend(b"e@x.test");
    let json = to_json(&refund, &bytes).unwrap();
    let value: Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(
        value,
        json!({"order_id": "A-1", "amount_minor": "9223372036854775807", "customer": {"email": "e@x.test"}})
    );
    let Value::Object(arguments) = value else {
        unreachable!()
    };
    assert_eq!(encode(&refund, arguments).unwrap(), bytes);
    // An unknown field inside the nested message is found too.
    let mut nested = bytes[..bytes.len() - 12].to_vec();
    nested.extend([0x1a, 0x0c, 0x0a, 0x08]);
    nested.extend(b"e@x.test");
    nested.extend([0x78, 0x01]);
    assert!(matches!(
        to_json(&refund, &nested),
        Err(DecodeError::UnknownField { message, number: 15 }) if message == "payments.v1.Customer"
    ));
    // A JSON member the type does not have is refused on the way out.
    let extra = json!({"order_id": "A-1", "bogus": 1})
        .as_object()
        .cloned()
        .unwrap();
    assert!(encode(&refund, extra).unwrap_err().to_string().contains("bogus"));
}

#[test]
fn a_malformed_policy_is_refused_at_start_with_its_reason() {
    let dir = aml_test_support::scratch_dir("grpc-gate", "malformed-policy");
    let descriptors = support::descriptor_set(&dir);
    let blank_resource = r#"{"protocol": "aml-action-policy/1", "rules": [
        {"tool": "t", "effect": "read", "resource": "", "requires_approval": false}]}"#;
    for (name, policy, says) in [
        (
            "cut.json",
            r#"{"protocol": "aml-action-policy/1", "rules": ["#,
            "invalid policy",
        ),
        (
            "blank.json",
            blank_resource,
            "resource must be a non-blank string",
        ),
    ] {
        std::fs::write(dir.join(name), policy).unwrap();
        let policy = dir.join(name);
        let (code, stderr) = refused_at_start(&dir, &descriptors, &["--policy".as_ref(), policy.as_os_str()]);
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(stderr.contains(says) && stderr.contains(name), "{name}: {stderr}");
    }
}

#[test]
fn receipts_that_cannot_be_written_are_refused_at_start_naming_the_path() {
    let dir = aml_test_support::scratch_dir("grpc-gate", "receipts-dir");
    let descriptors = support::descriptor_set(&dir);
    let policy = dir.join("policy.json");
    std::fs::write(&policy, r#"{"protocol": "aml-action-policy/1", "rules": []}"#).unwrap();
    let receipts = dir.join("a-directory");
    std::fs::create_dir_all(&receipts).unwrap();
    let args = [
        "--policy".as_ref(),
        policy.as_os_str(),
        "--receipts".as_ref(),
        receipts.as_os_str(),
    ];
    let (code, stderr) = refused_at_start(&dir, &descriptors, &args);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("--receipts {}", receipts.display())),
        "{stderr}"
    );
}

/// The gateway with the test tools file (written into `dir`), `descriptors` and `args`, in
/// front of an upstream nobody serves.
fn gateway_command(
    dir: &std::path::Path,
    descriptors: &std::path::Path,
    args: &[&std::ffi::OsStr],
) -> std::process::Command {
    let tools = tools(json!([entry(
        "payments.v1.Payments/Lookup",
        json!({"argument": "order_id"})
    )]));
    std::fs::write(dir.join("tools.json"), tools).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_aml-grpc-gate"));
    command
        .args(["--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9"])
        .arg("--tools")
        .arg(dir.join("tools.json"))
        .arg("--descriptors")
        .arg(descriptors)
        .args(args);
    command
}

/// Starts the gateway of [`gateway_command`], which must refuse to start before it
/// listens: its exit code and stderr.
fn refused_at_start(
    dir: &std::path::Path,
    descriptors: &std::path::Path,
    args: &[&std::ffi::OsStr],
) -> (Option<i32>, String) {
    let mut child = gateway_command(dir, descriptors, args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let exited = aml_test_support::wait_until(
        "the gateway to refuse to start",
        std::time::Duration::from_secs(20),
        || child.try_wait().unwrap(),
    );
    let output = child.wait_with_output().unwrap();
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("listening"),
        "it listened"
    );
    (
        exited.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_rule_that_can_allow_nothing_is_warned_of_at_start() {
    let dir = aml_test_support::scratch_dir("grpc-gate", "policy-typos");
    let descriptors = support::descriptor_set(&dir);
    let policy = dir.join("policy.json");
    std::fs::write(
        &policy,
        r#"{"protocol": "aml-action-policy/1", "rules": [
        {"tool": "tt", "effect": "read", "resource": "A-1", "requires_approval": false},
        {"tool": "t", "effect": "write", "resource": "A-1", "requires_approval": false}]}"#,
    )
    .unwrap();
    let stderr = dir.join("stderr.txt");
    let mut command = gateway_command(&dir, &descriptors, &["--policy".as_ref(), policy.as_os_str()]);
    command
        .env("RUST_LOG", "warn")
        .stderr(std::fs::File::create(&stderr).unwrap());
    let gate = support::Running::start(command);
    gate.line_with("listening");
    let log = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        log.contains("\"tt\", which the tools file does not register"),
        "{log}"
    );
    assert!(
        log.contains("\"t\" has effect write, but the tools file registers it with effect read"),
        "{log}"
    );
}

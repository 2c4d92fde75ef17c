//! Interop: a Python `grpcio` client nobody here wrote (installed by
//! `scripts/interop-setup`) calls the gated service over loopback: a dispatched result, a
//! `PERMISSION_DENIED` with `ErrorInfo` reason `no_exact_rule`, the health check, and
//! message types (the service's and `google.rpc.ErrorInfo`) found through server reflection.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use aml_core::{
    tool_fn, ActionBoundary, ArgumentSnapshot, Effect, Policy, ToolCatalog, ToolGate, ToolRegistration,
};
use aml_grpc::{serve, GatedToolService};
use serde_json::{json, Value};

fn python() -> PathBuf {
    aml_test_support::python()
}

#[test]
fn python_grpcio_client_against_the_gated_service() {
    let python = python();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "fetch_record", "effect": "read", "resource": "record:42", "requires_approval": false}]}));
    let fetch = ToolRegistration::new(
        "fetch_record",
        Effect::Read,
        "Inspect record",
        |s: &ArgumentSnapshot| Ok(format!("record:{}", s.get("id").cloned().unwrap_or_default())),
        json!({"type": "object"}),
    )
    .unwrap()
    .with_description("Fetch a record");
    let boundary = ActionBoundary::builder(Arc::new(policy))
        .executor(tool_fn(|call| async move {
            Ok(json!({"record": call.arguments()["id"], "status": "open"}))
        }))
        .build();
    let gate = ToolGate::new(ToolCatalog::new().with(fetch).unwrap(), boundary);
    let service = GatedToolService::new(gate);
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    rt.spawn(serve(listener, service, async {
        let _ = stopped.await;
    }));

    let out = Command::new(python)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/grpc_client.py"))
        .arg(address.to_string())
        .output()
        .unwrap();
    let _ = stop.send(());
    assert!(
        out.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(
        report["dispatched"]["result"],
        json!({"record": 42, "status": "open"})
    );
    assert_eq!(report["dispatched"]["receipt_reason"], "host_dispatch_returned");
    assert_eq!(report["denied"]["code"], "PERMISSION_DENIED");
    assert_eq!(report["denied"]["reason"], "no_exact_rule");
    assert_eq!(report["denied"]["domain"], "aml.action-boundary");
    assert_eq!(report["denied"]["receipt"]["execution_status"], "blocked");
    assert_eq!(report["health"], "SERVING");
    let services: Vec<&str> = report["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        services.contains(&"aml.v1.ToolService") && services.contains(&"grpc.health.v1.Health"),
        "{services:?}"
    );
    // grpcurl and other reflection clients decode the details with this type.
    assert_eq!(
        report["reflected_error_info_fields"],
        json!(["reason", "domain", "metadata"])
    );
}

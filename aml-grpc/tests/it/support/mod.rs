//! A host for the tests: four tools in a catalog, fixture hooks that can be slowed down and
//! watched, and a memory sink for the call records.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aml_core::{
    approval_fn, tool_fn, ActionBoundary, Approval, CallRecord, Effect, MemorySink, Policy, ResourceRule,
    ToolCatalog, ToolError, ToolGate, ToolRegistration,
};
use aml_grpc::{GatedToolService, ServerLimits};
use serde_json::json;
use tokio::sync::Notify;

/// Arguments `send_message` allows (approval required).
pub const SEND: &str = r#"{"to":"team@example.test","body":"hi"}"#;

/// How the fixture hooks behave.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setup {
    pub approval_delay: Duration,
    pub tool_delay: Duration,
    pub error_bytes: usize,
    pub limits: ServerLimits,
}

pub struct Host {
    pub service: GatedToolService,
    pub sink: MemorySink,
    entries: Arc<AtomicUsize>,
    pub approval_asked: Arc<Notify>,
    pub tool_entered: Arc<Notify>,
}

impl Host {
    /// How many times any tool was entered.
    pub fn entries(&self) -> usize {
        self.entries.load(Ordering::SeqCst)
    }

    /// The call records so far.
    pub fn records(&self) -> Vec<CallRecord> {
        self.sink.calls()
    }
}

fn object(properties: serde_json::Value, required: &[&str]) -> serde_json::Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

pub fn host(setup: Setup) -> Host {
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_message", "effect": "send", "resource": "team@example.test", "requires_approval": true},
        {"tool": "fetch_record", "effect": "read", "resource": "records", "requires_approval": false},
        {"tool": "flaky", "effect": "write", "resource": "x", "requires_approval": false},
        {"tool": "mapped", "effect": "write", "resource": "x", "requires_approval": false}]}));
    let catalog = ToolCatalog::new()
        .with(
            ToolRegistration::new(
                "send_message",
                Effect::Send,
                "Send a status update",
                ResourceRule::Argument("to".into()),
                aml_core::testing::send_message_schema(),
            )
            .unwrap(),
        )
        .unwrap()
        .with(
            ToolRegistration::new(
                "fetch_record",
                Effect::Read,
                "Inspect a record",
                ResourceRule::Fixed("records".into()),
                object(json!({"id": {"type": "integer"}}), &["id"]),
            )
            .unwrap(),
        )
        .unwrap()
        .with(
            ToolRegistration::new(
                "flaky",
                Effect::Write,
                "Write x",
                ResourceRule::Fixed("x".into()),
                json!({"type": "object"}),
            )
            .unwrap(),
        )
        .unwrap()
        .with(
            // The schema lets a call without `to` through; the host's own mapper then fails (a
            // host error, where a declared `{"argument": "to"}` would refuse the call).
            ToolRegistration::new(
                "mapped",
                Effect::Write,
                "Write to",
                |s: &aml_core::ArgumentSnapshot| {
                    s.str("to")
                        .map(str::to_owned)
                        .ok_or_else(|| aml_core::MapperError::new("the host's directory has no entry"))
                },
                json!({"type": "object"}),
            )
            .unwrap(),
        )
        .unwrap();
    let entries = Arc::new(AtomicUsize::new(0));
    let approval_asked = Arc::new(Notify::new());
    let tool_entered = Arc::new(Notify::new());
    let sink = MemorySink::new();
    let asked = Arc::clone(&approval_asked);
    let approver = approval_fn(move |request| {
        let asked = Arc::clone(&asked);
        async move {
            asked.notify_one();
            tokio::time::sleep(setup.approval_delay).await; // a slow approver (simulated)
            Ok(Approval::approve(request.proposal().digest()))
        }
    });
    let (count, entered) = (Arc::clone(&entries), Arc::clone(&tool_entered));
    let tool = tool_fn(move |call| {
        count.fetch_add(1, Ordering::SeqCst);
        entered.notify_one();
        async move {
            tokio::time::sleep(setup.tool_delay).await; // a slow tool (simulated)
            if call.proposal().tool() == "flaky" {
                return Err(ToolError::new("E".repeat(setup.error_bytes.max(1))));
            }
            Ok(json!({"tool": call.proposal().tool(), "arguments": call.arguments()}))
        }
    });
    let boundary = ActionBoundary::builder(Arc::new(policy))
        .approval(approver)
        .executor(tool)
        .sink(sink.clone())
        .build();
    let service = GatedToolService::new(ToolGate::new(catalog, boundary)).with_limits(setup.limits);
    Host {
        service,
        sink,
        entries,
        approval_asked,
        tool_entered,
    }
}

/// Serves `service` on loopback until the returned sender is dropped.
pub async fn start(service: GatedToolService) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(aml_grpc::serve(listener, service, async {
        let _ = stopped.await;
    }));
    (address, stop)
}

/// A multi-threaded runtime for tests over real sockets.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

//! A2UI `callRendererFunction` handling: each line of the input is one agent message to one
//! renderer session's gate. Never panics; every message leaves exactly one record; a message
//! that decodes is answered in its own form for its own call id; the tool runs only for a
//! call the boundary dispatched.
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

use aml_a2ui::wire::decode;
use aml_a2ui::{FunctionGate, FunctionRegistry, HostCatalog, HostFunction, Invocation};
use aml_core::{tool_fn, ActionBoundary, ArgumentSnapshot, Effect, MemorySink, Policy, ToolRegistration};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

const CATALOG: &str = "https://example.test/catalog/action.json";

/// How many times the tool was entered.
static ENTERED: Mutex<usize> = Mutex::new(0);

fn registry() -> Arc<FunctionRegistry> {
    static REGISTRY: OnceLock<Arc<FunctionRegistry>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            let send = ToolRegistration::new(
                "send_message",
                Effect::Send,
                "Send a status update",
                |a: &ArgumentSnapshot| {
                    a.str("to")
                        .map(str::to_owned)
                        .ok_or_else(|| aml_core::MapperError::new("no to"))
                },
                json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {}},
                       "required": ["to"], "additionalProperties": false}),
            )
            .unwrap()
            .with_executor(Arc::new(tool_fn(|_call| async {
                *ENTERED.lock().unwrap() += 1;
                Ok(json!({"sent": true}))
            })));
            let catalog = HostCatalog::new(CATALOG, "fuzz")
                .with_function(HostFunction::agent_callable("sendMessage", "Send", send))
                .with_function(
                    HostFunction::renderer_only("copy", "Copy", json!({"type": "object"})).unwrap(),
                );
            Arc::new(FunctionRegistry::new().with_catalog(catalog))
        })
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_message", "effect": "send", "resource": "team", "requires_approval": false}]}));
    let sink = MemorySink::new();
    let boundary = ActionBoundary::builder(Arc::new(policy))
        .sink(sink.clone())
        .build();
    let gate = FunctionGate::new(registry(), boundary).unwrap();
    let runtime = aml_fuzz::paused_runtime();
    for (n, message) in data.split(|&b| b == b'\n').take(8).enumerate() {
        let entered_before = *ENTERED.lock().unwrap();
        let decoded = decode(message).ok().map(|c| (c.form, c.function_call_id.clone()));
        if decoded.is_some() {
            // Objects at every level: never serde's array form of a struct.
            let v: Value = serde_json::from_slice(message).expect("a decoded message is JSON");
            assert!(
                v["callRendererFunction"]["callFunction"].is_object(),
                "decoded: {v}"
            );
        }
        let handled = runtime.block_on(gate.handle(message));
        assert_eq!(sink.calls().len(), n + 1, "one record per message");
        let entered = *ENTERED.lock().unwrap() - entered_before;
        match handled {
            Ok(outcome) => {
                let answer: Value = serde_json::from_slice(&outcome.response.to_bytes()).unwrap();
                assert!(answer.is_object());
                if let Some((form, id)) = decoded {
                    assert_eq!(outcome.form, form);
                    assert_eq!(outcome.response.function_call_id(), Some(id.as_str()));
                }
                let dispatched = outcome
                    .receipt
                    .as_ref()
                    .is_some_and(|r| r.execution_status() != aml_core::ExecutionStatus::Blocked);
                assert_eq!(entered, usize::from(dispatched), "the tool ran {entered} times");
                if outcome.invocation != Invocation::Claimed {
                    assert_eq!(entered, 0);
                }
            }
            Err(e) => {
                assert!(decoded.is_none(), "a decoded call was not answered");
                assert_eq!(e.function_call_id, None);
                assert_eq!(entered, 0);
                let answer: Value = serde_json::from_slice(&e.response().to_bytes()).unwrap();
                assert!(answer.is_object());
            }
        }
    }
});

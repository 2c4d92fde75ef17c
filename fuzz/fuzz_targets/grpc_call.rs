//! gRPC `CallTool`: `grpc-timeout` header bytes, tool name bytes and `arguments_json` bytes
//! (split at 0xFF), through prost's encoding and the service's handler. Never panics; every
//! call leaves exactly one record; the tool runs at most once, only for arguments the strict
//! parser accepts, and receives them as parsed.
#![no_main]

use std::sync::{Arc, Mutex};

use aml_core::{
    tool_fn, ActionBoundary, Effect, MemorySink, Policy, ResourceRule, ToolCatalog, ToolGate,
    ToolRegistration,
};
use aml_fuzz::{same, split_ff};
use aml_grpc::pb::tool_service_server::ToolService;
use aml_grpc::{pb, GatedToolService};
use libfuzzer_sys::fuzz_target;
use prost::Message;
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let (timeout, rest) = split_ff(data);
    let (tool, arguments) = split_ff(rest);
    let request = pb::CallToolRequest {
        tool: tool.to_vec(),
        arguments_json: arguments.to_vec(),
    };
    let decoded =
        pb::CallToolRequest::decode(request.encode_to_vec().as_slice()).expect("prost reads its own bytes");
    assert_eq!(decoded, request);

    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen_by_tool = Arc::clone(&seen);
    let send = ToolRegistration::new(
        "send",
        Effect::Send,
        "Send a note",
        ResourceRule::Argument("to".into()),
        json!({"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}),
    )
    .unwrap()
    .with_executor(Arc::new(tool_fn(move |call| {
        let seen = Arc::clone(&seen_by_tool);
        async move {
            seen.lock().unwrap().push(Value::Object(call.arguments().clone()));
            Ok(json!({"sent": true}))
        }
    })));
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send", "effect": "send", "resource": "team", "requires_approval": false}]}));
    let sink = MemorySink::new();
    let boundary = ActionBoundary::builder(Arc::new(policy))
        .sink(sink.clone())
        .build();
    let service = GatedToolService::new(ToolGate::new(ToolCatalog::new().with(send).unwrap(), boundary));

    let mut call = tonic::Request::new(decoded);
    let header = tonic::metadata::AsciiMetadataValue::try_from(timeout)
        .ok()
        .filter(|_| !timeout.is_empty());
    if let Some(value) = header.clone() {
        call.metadata_mut().insert("grpc-timeout", value);
    }
    let answer = aml_fuzz::paused_runtime().block_on(service.call_tool(call));
    assert_eq!(sink.calls().len(), 1, "one record per call");
    let seen = seen.lock().unwrap();
    assert!(seen.len() <= 1, "the tool ran {} times", seen.len());
    let bad_timeout = header.is_some_and(|h| aml_grpc::parse_grpc_timeout(h.as_bytes()).is_err());
    let parsed = aml_core::strict::parse_slice(arguments);
    if bad_timeout || parsed.is_err() || tool != b"send" {
        assert!(
            seen.is_empty(),
            "the tool ran for a call that should not reach it"
        );
        assert!(answer.is_err());
    }
    if let Ok(response) = answer {
        assert_eq!(seen.len(), 1);
        assert!(
            same(&seen[0], &parsed.unwrap()),
            "the tool received other arguments"
        );
        let result: Value = serde_json::from_str(&response.get_ref().result_json).unwrap();
        assert_eq!(result, json!({"sent": true}));
    }
});

//! A real tonic server and client on loopback: status codes, ErrorInfo, deadlines, limits,
//! health and reflection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aml_core::{
    approval_fn, tool_fn, Approval, ArgumentSnapshot, Effect, GuardedTool, LivePolicy, MapperError, Policy,
    ToolError,
};
use aml_grpc::{serve, GatedToolService, ServerLimits, ToolClient};
use serde_json::json;
use tonic::Code;

struct Host {
    calls: Arc<AtomicUsize>,
    address: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

fn policy() -> LivePolicy {
    LivePolicy::new(Policy::from_value(
        &json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_message", "effect": "send", "resource": "team@example.test", "requires_approval": true},
        {"tool": "fetch_record", "effect": "read", "resource": "record:42", "requires_approval": false},
        {"tool": "flaky", "effect": "write", "resource": "x", "requires_approval": false}]}),
    ))
}

fn to(s: &ArgumentSnapshot) -> Result<String, MapperError> {
    s.str("to")
        .map(str::to_owned)
        .ok_or_else(|| MapperError::new("no to"))
}

async fn start(approval_delay: Duration) -> Host {
    let calls = Arc::new(AtomicUsize::new(0));
    let counting = {
        let calls = Arc::clone(&calls);
        move || {
            let calls = Arc::clone(&calls);
            tool_fn(move |call| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move { Ok(json!({"sent_to": call.arguments().get("to")})) }
            })
        }
    };
    let send = GuardedTool::builder("send_message", Effect::Send, "Send a status update", policy())
        .resource_for(to)
        .approval(approval_fn(move |req| async move {
            tokio::time::sleep(approval_delay).await;
            Ok(Approval::approve(req.proposal().digest()))
        }))
        .executor(counting())
        .build()
        .unwrap();
    let fetch = GuardedTool::builder("fetch_record", Effect::Read, "Inspect record", policy())
        .resource_for(|s: &ArgumentSnapshot| {
            Ok(format!("record:{}", s.get("id").cloned().unwrap_or_default()))
        })
        .executor(counting())
        .build()
        .unwrap();
    let flaky = GuardedTool::builder("flaky", Effect::Write, "Write x", policy())
        .resource_for(|_: &ArgumentSnapshot| Ok("x".to_owned()))
        .executor(tool_fn(|_| async {
            Err(ToolError::new("connection reset after write"))
        }))
        .build()
        .unwrap();
    let object = json!({"type": "object"});
    let service = GatedToolService::new()
        .with_tool(
            "send_message",
            "Send",
            json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                                                  "required": ["to", "body"], "additionalProperties": false}),
            Arc::new(send),
        )
        .unwrap()
        .with_tool("fetch_record", "Fetch", object.clone(), Arc::new(fetch))
        .unwrap()
        .with_tool("flaky", "Flaky", object, Arc::new(flaky))
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let limits = ServerLimits {
        max_request_bytes: 64 * 1024,
        ..ServerLimits::default()
    };
    tokio::spawn(serve(listener, service, limits, async {
        let _ = stopped.await;
    }));
    Host {
        calls,
        address,
        _stop: stop,
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn outcomes_map_to_actionable_codes_with_error_info_and_receipt() {
    rt().block_on(async {
        let host = start(Duration::ZERO).await;
        let client = ToolClient::connect(format!("http://{}", host.address))
            .await
            .unwrap();

        let sent = client
            .call_tool("send_message", r#"{"to":"team@example.test","body":"hi"}"#, None)
            .await
            .unwrap();
        assert_eq!(sent.result, json!({"sent_to": "team@example.test"}));
        assert_eq!(sent.receipt.reason().as_str(), "host_dispatch_returned");

        let cases = [
            (
                "send_message",
                r#"{"to":"other@example.test","body":"hi"}"#,
                Code::PermissionDenied,
                "no_exact_rule",
                true,
            ),
            (
                "send_message",
                r#"{"to":"team@example.test","body":"hi"}"#,
                Code::FailedPrecondition,
                "approval_reused_or_expired",
                true,
            ),
            (
                "send_message",
                r#"{"to":"team@example.test"}"#,
                Code::InvalidArgument,
                "invalid_arguments",
                false,
            ),
            (
                "send_message",
                r#"{"to":"team@example.test","to":"x","body":"b"}"#,
                Code::InvalidArgument,
                "AML_JSON_DUPLICATE_KEY",
                true,
            ),
            (
                "delete_all",
                "{}",
                Code::InvalidArgument,
                "invalid_or_unregistered_call",
                false,
            ),
            ("flaky", "{}", Code::Unknown, "host_dispatch_error", true),
        ];
        for (tool, args, code, reason, has_receipt) in cases {
            let refused = client.call_tool(tool, args, None).await.unwrap_err();
            assert_eq!(refused.code(), code, "{tool} {args}");
            let report = refused.report.expect("ErrorInfo");
            assert_eq!(report.reason, reason);
            assert_eq!(report.receipt.is_some(), has_receipt, "{reason}");
            if let Some(receipt) = report.receipt {
                assert_eq!(receipt.reason().as_str(), reason);
                assert_eq!(report.plan.unwrap().proposal_sha256(), receipt.proposal_sha256());
            }
        }
        assert_eq!(host.calls.load(Ordering::SeqCst), 1);
        let tools = client.list_tools().await.unwrap();
        assert_eq!(
            tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["fetch_record", "flaky", "send_message"]
        );
        assert_eq!(tools[2].effect, "send");
    });
}

#[test]
fn deadlines_are_never_dispatched_past() {
    rt().block_on(async {
        let host = start(Duration::from_millis(1500)).await;
        let client = ToolClient::connect(format!("http://{}", host.address))
            .await
            .unwrap();
        // Approval takes longer than the caller is willing to wait.
        let late = client
            .call_tool(
                "send_message",
                r#"{"to":"team@example.test","body":"hi"}"#,
                Some(Duration::from_millis(50)),
            )
            .await
            .unwrap_err();
        // The client's own timer gives up first (tonic reports it as CANCELLED or
        // DEADLINE_EXCEEDED); either way nothing is dispatched.
        assert!(
            matches!(late.code(), Code::Cancelled | Code::DeadlineExceeded),
            "{:?}",
            late.status
        );
        tokio::time::sleep(Duration::from_millis(1600)).await;
        assert_eq!(host.calls.load(Ordering::SeqCst), 0);

        // A client that only sends the deadline header gets the server's own answer.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", host.address))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut raw = aml_grpc::pb::tool_service_client::ToolServiceClient::new(channel);
        let mut request = tonic::Request::new(aml_grpc::pb::CallToolRequest {
            tool: "send_message".into(),
            arguments_json: r#"{"to":"team@example.test","body":"hi"}"#.into(),
        });
        request
            .metadata_mut()
            .insert("grpc-timeout", "500m".parse().unwrap());
        let status = raw.call_tool(request).await.unwrap_err();
        assert_eq!(status.code(), Code::DeadlineExceeded);
        let report = aml_grpc::report_of(&status).unwrap();
        assert_eq!(report.receipt.unwrap().reason().as_str(), "approval_error");
        assert_eq!(host.calls.load(Ordering::SeqCst), 0);
        // A deadline that is already over when the request arrives.
        let mut request = tonic::Request::new(aml_grpc::pb::CallToolRequest {
            tool: "fetch_record".into(),
            arguments_json: r#"{"id":42}"#.into(),
        });
        request
            .metadata_mut()
            .insert("grpc-timeout", "1n".parse().unwrap());
        let expired = raw.call_tool(request).await.unwrap_err();
        // Refused by this service's arrival check, or by tonic's timeout layer before it.
        assert!(
            matches!(expired.code(), Code::DeadlineExceeded | Code::Cancelled),
            "{expired:?}"
        );
        assert_eq!(host.calls.load(Ordering::SeqCst), 0);
        let ok = client
            .call_tool("fetch_record", r#"{"id":42}"#, Some(Duration::from_secs(5)))
            .await
            .unwrap();
        assert_eq!(ok.receipt.reason().as_str(), "host_dispatch_returned");
    });
}

#[test]
fn oversized_requests_are_refused_before_the_handler() {
    rt().block_on(async {
        let host = start(Duration::ZERO).await;
        let client = ToolClient::connect(format!("http://{}", host.address))
            .await
            .unwrap();
        let big = format!(r#"{{"id":42,"pad":"{}"}}"#, "x".repeat(100 * 1024));
        let refused = client.call_tool("fetch_record", &big, None).await.unwrap_err();
        assert!(
            matches!(refused.code(), Code::OutOfRange | Code::ResourceExhausted),
            "{:?}",
            refused.status
        );
        assert_eq!(host.calls.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn health_reports_the_tool_service_serving() {
    rt().block_on(async {
        let host = start(Duration::ZERO).await;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", host.address))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: "aml.v1.ToolService".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(
            status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
    });
}

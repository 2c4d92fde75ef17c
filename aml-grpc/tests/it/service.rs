//! A real tonic server and client on loopback: status codes, ErrorInfo, one record per
//! call, transport-level refusals, health, a host's own tower layer, and the typed client.

use crate::support;

use std::time::Duration;

use aml_grpc::{CallError, ServerLimits, ToolClient, DETAIL_LIMIT};
use serde_json::json;
use support::{host, rt, start, Setup, SEND};
use tonic::Code;

/// One row: a call, the code it gets, its ErrorInfo reason, whether a receipt comes back.
struct Case {
    tool: &'static str,
    args: String,
    code: Code,
    reason: &'static str,
    receipt: bool,
}

fn case(tool: &'static str, args: &str, code: Code, reason: &'static str, receipt: bool) -> Case {
    Case {
        tool,
        args: args.to_owned(),
        code,
        reason,
        receipt,
    }
}

#[test]
fn every_refusal_has_an_actionable_code_error_info_and_one_record() {
    rt().block_on(async {
        let host = host(Setup {
            limits: ServerLimits {
                max_request_bytes: 64 * 1024,
                ..ServerLimits::default()
            },
            ..Setup::default()
        });
        let (address, _stop) = start(host.service.clone()).await;
        let client = ToolClient::connect(format!("http://{address}")).await.unwrap();

        let sent = client.call_tool("send_message", SEND, None).await.unwrap();
        assert_eq!(
            sent.result["arguments"],
            json!({"to": "team@example.test", "body": "hi"})
        );
        assert_eq!(sent.receipt.reason().as_str(), "host_dispatch_returned");

        let cases = [
            case(
                "send_message",
                r#"{"to":"o@example.test","body":"hi"}"#,
                Code::PermissionDenied,
                "no_exact_rule",
                true,
            ),
            case(
                "send_message",
                SEND,
                Code::FailedPrecondition,
                "approval_reused_or_expired",
                true,
            ),
            case(
                "send_message",
                r#"{"to":"team@example.test"}"#,
                Code::InvalidArgument,
                "invalid_arguments",
                false,
            ),
            case(
                "send_message",
                r#"{"to":"a","to":"b","body":"c"}"#,
                Code::InvalidArgument,
                "AML_JSON_DUPLICATE_KEY",
                true,
            ),
            case(
                "delete_all",
                "{}",
                Code::InvalidArgument,
                "invalid_or_unregistered_call",
                false,
            ),
            // An empty request: no tool name, no arguments.
            case(
                "",
                "",
                Code::InvalidArgument,
                "invalid_or_unregistered_call",
                false,
            ),
            // Beyond 2^53 a double no longer holds every integer: refused, never rounded.
            case(
                "fetch_record",
                r#"{"id":9007199254740993}"#,
                Code::InvalidArgument,
                "inexact_number",
                false,
            ),
            case("mapped", "{}", Code::Internal, "host_error", false),
            case("flaky", "{}", Code::Unknown, "host_dispatch_error", true),
            case(
                "fetch_record",
                &format!(r#"{{"id":1,"pad":"{}"}}"#, "x".repeat(100 * 1024)),
                Code::ResourceExhausted,
                "request_too_large",
                false,
            ),
        ];
        for c in &cases {
            let refused = client.call_tool(c.tool, &c.args, None).await.unwrap_err();
            assert_eq!(
                refused.code(),
                c.code,
                "{} {:.60}: {:?}",
                c.tool,
                c.args,
                refused.status()
            );
            let report = refused.report().expect("ErrorInfo");
            assert_eq!(report.reason, c.reason);
            assert_eq!(report.receipt.is_some(), c.receipt, "{}", c.reason);
            if let Some(receipt) = &report.receipt {
                assert_eq!(receipt.reason().as_str(), c.reason);
                assert_eq!(
                    report.plan.as_ref().unwrap().proposal_sha256(),
                    receipt.proposal_sha256()
                );
            }
            assert!(
                report.detail.is_some() || report.receipt.is_some(),
                "{}",
                c.reason
            );
            // Only the tool that was entered is of unknown outcome.
            let unknown = matches!(refused, CallError::OutcomeUnknown { .. });
            assert_eq!(unknown, c.reason == "host_dispatch_error", "{}", c.reason);
        }
        assert_eq!(host.entries(), 2, "send_message once and flaky once");

        // Exactly one record per call, in order, with the same reason the client saw.
        let records = host.records();
        assert_eq!(records.len(), cases.len() + 1);
        assert!(records.iter().all(|r| r.adapter == "grpc"));
        for (record, c) in records[1..].iter().zip(&cases) {
            let reason = record
                .receipt
                .as_ref()
                .map(|r| r.reason().as_str().to_owned())
                .or(record.refusal.map(|r| r.as_str().to_owned()))
                .or(record.host_error.as_ref().map(|_| "host_error".to_owned()))
                .or(record
                    .detail
                    .as_ref()
                    .and_then(|d| d.split(':').next().map(str::to_owned)));
            assert_eq!(reason.as_deref(), Some(c.reason), "{record:?}");
        }

        let tools = client.list_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["fetch_record", "flaky", "mapped", "send_message"]);
        assert_eq!(tools[3].effect, "send");
        let schema: serde_json::Value = serde_json::from_str(&tools[3].input_schema_json).unwrap();
        assert_eq!(schema, aml_core::testing::send_message_schema());
    });
}

#[test]
fn text_that_is_not_utf8_reaches_the_boundary_instead_of_internal() {
    rt().block_on(async {
        let host = host(Setup::default());
        let (address, _stop) = start(host.service.clone()).await;
        let mut raw =
            aml_grpc::pb::tool_service_client::ToolServiceClient::connect(format!("http://{address}"))
                .await
                .unwrap();
        let bad_arguments = aml_grpc::pb::CallToolRequest {
            tool: b"fetch_record".to_vec(),
            arguments_json: b"{\"id\": \"\xff\"}".to_vec(),
        };
        let status = raw.call_tool(bad_arguments).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        let report = aml_grpc::report_of(&status).unwrap();
        assert_eq!(report.receipt.unwrap().reason().as_str(), "AML_JSON_INVALID_UTF8");

        let bad_name = aml_grpc::pb::CallToolRequest {
            tool: b"fetch_\xc0record".to_vec(),
            arguments_json: b"{}".to_vec(),
        };
        let status = raw.call_tool(bad_name).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            aml_grpc::report_of(&status).unwrap().reason,
            "invalid_or_unregistered_call"
        );
        assert_eq!(host.entries(), 0);
        let records = host.records();
        assert_eq!(records.len(), 2);
        assert_eq!(
            records[1].refusal.map(|r| r.as_str()),
            Some("invalid_or_unregistered_call")
        );
    });
}

#[test]
fn a_tool_failing_with_100_kb_of_error_text_is_unknown_with_a_capped_error_info() {
    rt().block_on(async {
        let host = host(Setup {
            error_bytes: 100 * 1024,
            ..Setup::default()
        });
        let (address, _stop) = start(host.service.clone()).await;
        let client = ToolClient::connect(format!("http://{address}")).await.unwrap();
        let failed = client.call_tool("flaky", "{}", None).await.unwrap_err();
        assert_eq!(failed.code(), Code::Unknown, "{:?}", failed.status());
        let CallError::OutcomeUnknown {
            report: Some(report), ..
        } = &failed
        else {
            panic!("{failed:?}");
        };
        assert_eq!(report.reason, "host_dispatch_error");
        assert_eq!(
            report.receipt.as_ref().unwrap().execution_status().as_str(),
            "unknown"
        );
        assert!(report.detail_truncated);
        assert_eq!(report.detail.as_deref(), Some("E".repeat(DETAIL_LIMIT).as_str()));
        // The host's record keeps the whole text.
        let record = &host.records()[0];
        assert_eq!(record.detail.as_ref().map(String::len), Some(100 * 1024));
    });
}

#[test]
fn the_typed_client_says_when_the_outcome_is_unknown() {
    rt().block_on(async {
        let host = host(Setup {
            tool_delay: Duration::from_secs(1),
            ..Setup::default()
        });
        let (address, _stop) = start(host.service.clone()).await;
        let client = ToolClient::connect(format!("http://{address}")).await.unwrap();
        // The client's own deadline fires while the tool runs: it cannot know the outcome.
        let late = client
            .call_tool("fetch_record", r#"{"id":1}"#, Some(Duration::from_millis(200)))
            .await
            .unwrap_err();
        assert!(matches!(late, CallError::OutcomeUnknown { .. }), "{late:?}");
        assert_eq!(late.code(), Code::DeadlineExceeded);
        let blocked = client
            .call_tool("send_message", r#"{"to":"o@example.test","body":"b"}"#, None)
            .await
            .unwrap_err();
        assert!(matches!(blocked, CallError::NotRun { .. }), "{blocked:?}");
    });
}

#[test]
fn hosts_compose_the_routes_with_their_own_layers_and_clients_with_their_own_stack() {
    rt().block_on(async {
        let host = host(Setup::default());
        let routes = host.service.clone().routes().await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        // A host's own authentication layer in front of every service.
        let require_token = |request: tonic::Request<()>| match request.metadata().get("authorization") {
            Some(token) if token == "Bearer host-token" => Ok(request),
            _ => Err(tonic::Status::unauthenticated("no token")),
        };
        tokio::spawn(
            tonic::transport::Server::builder()
                .layer(tonic::service::InterceptorLayer::new(require_token))
                .add_routes(routes)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let anonymous = ToolClient::new(channel.clone());
        assert_eq!(
            anonymous.list_tools().await.unwrap_err().code(),
            Code::Unauthenticated
        );
        let add_token = |mut request: tonic::Request<()>| {
            request
                .metadata_mut()
                .insert("authorization", "Bearer host-token".parse().unwrap());
            Ok(request)
        };
        let authorized = ToolClient::new(tonic::codegen::InterceptedService::new(channel, add_token));
        let done = authorized
            .call_tool("fetch_record", r#"{"id":3}"#, None)
            .await
            .unwrap();
        assert_eq!(done.result["arguments"], json!({"id": 3}));
        assert_eq!(host.entries(), 1);
    });
}

#[test]
fn two_hundred_identical_approved_calls_dispatch_exactly_once() {
    rt().block_on(async {
        let host = host(Setup::default());
        let (address, _stop) = start(host.service.clone()).await;
        let client = ToolClient::connect(format!("http://{address}")).await.unwrap();
        let calls = (0..200).map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call_tool("send_message", SEND, None).await })
        });
        let mut dispatched = 0;
        for call in calls {
            match tokio::time::timeout(Duration::from_secs(30), call)
                .await
                .unwrap()
                .unwrap()
            {
                Ok(_) => dispatched += 1,
                Err(e) => assert_eq!(
                    e.report().map(|r| r.reason.as_str()),
                    Some("approval_reused_or_expired"),
                    "{e:?}"
                ),
            }
        }
        assert_eq!(dispatched, 1);
        assert_eq!(host.entries(), 1);
        assert_eq!(host.records().len(), 200);
    });
}

#[test]
fn health_reports_the_tool_service_serving() {
    rt().block_on(async {
        let host = host(Setup::default());
        let (address, _stop) = start(host.service.clone()).await;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
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

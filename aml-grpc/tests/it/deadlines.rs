//! Deadlines and cancellation on tokio's paused clock, calling the service's handler
//! directly: a caller that goes away or runs out of time before the one-use claim never
//! reaches the tool; from the claim on, the dispatch completes and is recorded.

use crate::support;

use std::time::Duration;

use aml_grpc::pb::tool_service_server::ToolService;
use aml_grpc::pb::CallToolRequest;
use aml_grpc::{report_of, ServerLimits};
use support::{host, Setup, SEND};
use tokio::time::Instant;
use tonic::{Code, Request};

fn request(tool: &str, args: &str, timeout: Option<&str>) -> Request<CallToolRequest> {
    let mut request = Request::new(CallToolRequest::new(tool, args));
    if let Some(timeout) = timeout {
        request
            .metadata_mut()
            .insert("grpc-timeout", timeout.parse().unwrap());
    }
    request
}

/// Waits for the slow tool to finish: its dispatch's record (on the paused clock, the
/// wait's polls advance time to the tool's end).
async fn finished_tool_records(host: &support::Host) -> Vec<aml_core::CallRecord> {
    aml_test_support::wait_until_async("the finished tool's record", Duration::from_secs(10), || async {
        let records = host.records();
        (!records.is_empty()).then_some(records)
    })
    .await
}

fn slow_approval() -> Setup {
    Setup {
        approval_delay: Duration::from_secs(3),
        ..Setup::default()
    }
}

/// Holds past the moment the slow approval would have answered (3 s; on the paused clock
/// this takes no real time): the deadline these tests are about, after which they check
/// that the tool was still never entered. Nothing observable happens at that moment — the
/// approval was abandoned — so there is no event to wait for instead.
async fn past_the_slow_approval() {
    tokio::time::sleep(Duration::from_secs(10)).await;
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_goes_away_during_approval_never_reaches_the_tool() {
    let host = host(slow_approval());
    let mut call = Box::pin(host.service.call_tool(request("send_message", SEND, None)));
    tokio::select! {
        done = &mut call => panic!("ended during approval: {:?}", done.map(|_| ())),
        () = host.approval_asked.notified() => {}
    }
    // tonic drops the handler when the client cancels or its connection closes.
    drop(call);
    let records = host.records();
    assert_eq!(records.len(), 1);
    let receipt = records[0].receipt.as_ref().unwrap();
    assert_eq!(receipt.execution_status().as_str(), "blocked");
    assert_eq!(receipt.reason().as_str(), "approval_error");
    assert_eq!(
        records[0].detail.as_deref(),
        Some("the caller went away before the tool was entered")
    );
    // Long after the approval would have arrived, nothing has run.
    past_the_slow_approval().await;
    assert_eq!(host.entries(), 0);
    assert_eq!(host.records().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_callers_deadline_ends_approval_with_a_receipt_and_no_dispatch() {
    let host = host(slow_approval());
    let start = Instant::now();
    let status = host
        .service
        .call_tool(request("send_message", SEND, Some("500m")))
        .await
        .unwrap_err();
    // Answered a fifth of the budget early, so the answer still reaches the caller.
    assert_eq!(start.elapsed(), Duration::from_millis(400));
    assert_eq!(status.code(), Code::DeadlineExceeded);
    let report = report_of(&status).unwrap();
    let receipt = report.receipt.unwrap();
    assert_eq!(receipt.reason().as_str(), "approval_error");
    assert_eq!(receipt.execution_status().as_str(), "blocked");
    assert!(report.detail.unwrap().contains("deadline passed"));
    past_the_slow_approval().await;
    assert_eq!(host.entries(), 0);
    assert_eq!(host.records().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_default_timeout_bounds_approval_for_calls_without_a_deadline() {
    let host = host(Setup {
        limits: ServerLimits {
            default_timeout: Some(Duration::from_millis(500)),
            ..ServerLimits::default()
        },
        ..slow_approval()
    });
    let start = Instant::now();
    let status = host
        .service
        .call_tool(request("send_message", SEND, None))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(400));
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(report_of(&status).unwrap().reason, "approval_error");
    past_the_slow_approval().await;
    assert_eq!(host.entries(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_default_timeout_answers_a_running_tool_and_its_receipt_is_still_recorded() {
    let host = host(Setup {
        tool_delay: Duration::from_secs(2),
        limits: ServerLimits {
            default_timeout: Some(Duration::from_millis(500)),
            ..ServerLimits::default()
        },
        ..Setup::default()
    });
    let start = Instant::now();
    let status = host
        .service
        .call_tool(request("fetch_record", r#"{"id":1}"#, None))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(400));
    assert_eq!(status.code(), Code::DeadlineExceeded);
    let report = report_of(&status).unwrap();
    assert_eq!(report.reason, "dispatch_in_progress");
    assert!(!report.not_run());
    assert!(report.plan.is_some());
    assert_eq!(host.entries(), 1);
    assert!(host.records().is_empty(), "the tool is still running");
    let records = finished_tool_records(&host).await;
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].receipt.as_ref().unwrap().reason().as_str(),
        "host_dispatch_returned"
    );
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_goes_away_during_the_tool_leaves_a_recorded_dispatch() {
    let host = host(Setup {
        tool_delay: Duration::from_secs(2),
        ..Setup::default()
    });
    let mut call = Box::pin(host.service.call_tool(request("send_message", SEND, None)));
    tokio::select! {
        done = &mut call => panic!("ended during the tool: {:?}", done.map(|_| ())),
        () = host.tool_entered.notified() => {}
    }
    drop(call);
    assert!(host.records().is_empty(), "the tool is still running");
    let records = finished_tool_records(&host).await;
    assert_eq!(records.len(), 1);
    let receipt = records[0].receipt.as_ref().unwrap();
    assert_eq!(receipt.reason().as_str(), "host_dispatch_returned");
    assert!(records[0].result.is_some());
    assert_eq!(host.entries(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_request_that_arrives_after_its_deadline_is_not_planned() {
    let host = host(Setup::default());
    for timeout in ["0n", "0m", "0S"] {
        let status = host
            .service
            .call_tool(request("fetch_record", r#"{"id":1}"#, Some(timeout)))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::DeadlineExceeded, "{timeout}");
        let report = report_of(&status).unwrap();
        assert_eq!(report.reason, "deadline_exceeded");
        assert!(report.plan.is_none() && report.not_run());
    }
    assert_eq!(host.entries(), 0);
    let records = host.records();
    assert_eq!(records.len(), 3);
    // The core refused them (ADR 019): the same record every adapter writes.
    assert!(records
        .iter()
        .all(|r| r.refusal == Some(aml_core::Refusal::DeadlinePassed)
            && r.detail.as_deref() == Some("the deadline had passed when the request arrived")));
}

#[tokio::test(start_paused = true)]
async fn hostile_timeouts_are_refused_and_the_largest_valid_one_saturates() {
    let host = host(Setup::default());
    let hostile = [
        "18446744073709551615S",
        "999999999S",
        "S",
        "5",
        "-5S",
        "5s",
        "1.5S",
        "5 S",
    ];
    for value in hostile {
        let status = host
            .service
            .call_tool(request("fetch_record", r#"{"id":1}"#, Some(value)))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{value}");
        assert_eq!(report_of(&status).unwrap().reason, "invalid_grpc_timeout");
    }
    // 99,999,999 hours is valid: a deadline beyond any call.
    let done = host
        .service
        .call_tool(request("fetch_record", r#"{"id":1}"#, Some("99999999H")))
        .await
        .unwrap();
    assert_eq!(
        done.into_inner().receipt.unwrap().reason,
        "host_dispatch_returned"
    );
    assert_eq!(host.records().len(), hostile.len() + 1);
    assert_eq!(host.entries(), 1);
}

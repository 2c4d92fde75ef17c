//! The HTTP wire as a peer meets it: status codes, replies, refusals of requests that are
//! not well-formed calls, limits and timeouts, and one record per call in the host's sink.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use aml_core::testing::{self, CountingTool};
use aml_core::{
    approval_fn, tool_fn, ActionBoundary, Approval, ApprovalError, ApprovalHook, CallRecord, Effect,
    MemorySink, ReceiptReason, Refusal, ResourceRule, ToolCatalog, ToolExecutor, ToolGate, ToolRegistration,
};
use aml_http_example::{serve, HttpToolClient, HttpToolServer, ReplyStatus, ServerLimits};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A test's bound on any one wait.
const BOUND: Duration = Duration::from_secs(10);
const TEAM_MESSAGE: &str = r#"{"to": "team@example.test", "body": "Build passed."}"#;

struct Running {
    addr: SocketAddr,
    sink: MemorySink,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    fn client(&self) -> HttpToolClient {
        HttpToolClient::new(self.addr).with_timeout(BOUND)
    }

    fn calls(&self) -> Vec<CallRecord> {
        self.sink.calls()
    }

    async fn stop(mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
        if let Some(task) = self.task.take() {
            tokio::time::timeout(BOUND, task).await.unwrap().unwrap();
        }
    }
}

/// `send_message` (resource = `to`) under the documented one-rule policy, with `tool`.
async fn start(
    requires_approval: bool,
    approval: Option<Arc<dyn ApprovalHook>>,
    tool: impl ToolExecutor + 'static,
    limits: ServerLimits,
) -> Running {
    let sink = MemorySink::new();
    let mut builder = ActionBoundary::builder(testing::send_message_policy(requires_approval))
        .executor(tool)
        .sink(sink.clone());
    if let Some(hook) = approval {
        builder = builder.approval_arc(hook);
    }
    let registration = ToolRegistration::new(
        testing::SEND_MESSAGE,
        Effect::Send,
        testing::SEND_MESSAGE_PURPOSE,
        ResourceRule::Argument("to".into()),
        testing::send_message_schema(),
    )
    .unwrap();
    let gate = ToolGate::new(ToolCatalog::new().with(registration).unwrap(), builder.build());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = HttpToolServer::new(gate).with_limits(limits);
    let task = tokio::spawn(serve(listener, server, async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        sink,
        stop: Some(stop),
        task: Some(task),
    }
}

async fn allow(tool: impl ToolExecutor + 'static) -> Running {
    start(false, None, tool, ServerLimits::default()).await
}

fn with_approval(hook: impl ApprovalHook + 'static) -> Option<Arc<dyn ApprovalHook>> {
    Some(Arc::new(hook))
}

/// Sends `request` as is and reads the whole answer (the request asks the server to close).
async fn raw(addr: SocketAddr, request: &[u8]) -> (u16, String, Value) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(BOUND, stream.read_to_end(&mut answer))
        .await
        .expect("the server answers within the bound")
        .unwrap();
    let text = String::from_utf8(answer).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (
        code,
        head.to_owned(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn post(path: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn an_allowed_call_answers_200_with_plan_receipt_and_result() {
    let tool = CountingTool::new();
    let host = allow(tool.clone()).await;
    let answer = host.client().call("send_message", TEAM_MESSAGE).await.unwrap();
    assert_eq!(answer.status, 200);
    let reply = answer.reply;
    assert_eq!(reply.status, ReplyStatus::Dispatched);
    assert_eq!(reply.reason, "host_dispatch_returned");
    assert_eq!(
        reply.receipt.unwrap().proposal_sha256(),
        Some(testing::send_message_digest())
    );
    assert_eq!(reply.result.unwrap()["arguments"]["to"], "team@example.test");
    assert_eq!(tool.entries(), 1);
    let calls = host.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].adapter, "http");
    assert!(calls[0].result.is_some());
    host.stop().await;
}

#[tokio::test]
async fn policy_and_argument_outcomes_map_to_their_codes_and_leave_one_record_each() {
    let tool = CountingTool::new();
    let host = allow(tool.clone()).await;
    let client = host.client();
    let cases: &[(&str, &str, u16, ReplyStatus, &str)] = &[
        (
            "send_message",
            r#"{"to": "other@example.test", "body": "x"}"#,
            403,
            ReplyStatus::Blocked,
            "no_exact_rule",
        ),
        (
            "send_message",
            r#"{"to": "team@example.test"}"#,
            422,
            ReplyStatus::Refused,
            "invalid_arguments",
        ),
        (
            "send_message",
            r#"{"to": "team@example.test", "body": "x", "priority": 1e999}"#,
            422,
            ReplyStatus::Blocked,
            "AML_CANONICAL_JSON_NON_FINITE_NUMBER",
        ),
        (
            "send_message",
            r#"{"to": "team@example.test", "body": "x""#,
            400,
            ReplyStatus::Blocked,
            "AML_JSON_SYNTAX",
        ),
        (
            "send_message",
            r#"{"to": "a", "to": "b", "body": "x"}"#,
            400,
            ReplyStatus::Blocked,
            "AML_JSON_DUPLICATE_KEY",
        ),
        (
            "delete_everything",
            "{}",
            404,
            ReplyStatus::Refused,
            "invalid_or_unregistered_call",
        ),
    ];
    for (tool_name, body, code, status, reason) in cases {
        let answer = client.call(tool_name, body.to_string()).await.unwrap();
        assert_eq!(
            (
                answer.status.as_u16(),
                answer.reply.status,
                answer.reply.reason.as_str()
            ),
            (*code, *status, *reason),
            "{body}"
        );
        assert!(answer.reply.result.is_none());
    }
    assert_eq!(tool.entries(), 0);
    let calls = host.calls();
    assert_eq!(calls.len(), cases.len());
    assert_eq!(calls[5].refusal, Some(Refusal::InvalidOrUnregisteredCall));
    assert_eq!(calls[5].tool, "delete_everything");
    host.stop().await;
}

#[tokio::test]
async fn requests_that_are_not_well_formed_calls_are_refused_and_recorded() {
    let host = allow(CountingTool::new()).await;
    let get = b"GET /tools/send_message HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
    let (code, head, body) = raw(host.addr, get).await;
    assert_eq!(code, 405);
    assert!(head.to_ascii_lowercase().contains("allow: post"), "{head}");
    assert_eq!(
        (body["status"].as_str(), body["reason"].as_str()),
        (Some("refused"), Some("malformed_request"))
    );

    let (code, _, body) = raw(
        host.addr,
        &post("/tools/send_message", "text/plain", TEAM_MESSAGE),
    )
    .await;
    assert_eq!(code, 415);
    assert_eq!(body["reason"], "malformed_request");
    assert!(body["detail"].as_str().unwrap().contains("application/json"));

    let (code, _, body) = raw(
        host.addr,
        &post("/tools/send%FFmessage", "application/json", "{}"),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(body["detail"], "the tool name is not UTF-8");

    // Not a call: answered, nothing to record.
    let (code, _, body) = raw(host.addr, &post("/nothing/here", "application/json", "{}")).await;
    assert_eq!(code, 404);
    assert_eq!(body["error"], "not_found");

    let calls = host.calls();
    assert_eq!(calls.len(), 3);
    assert!(calls
        .iter()
        .all(|c| c.refusal == Some(Refusal::MalformedRequest) && c.plan.is_none()));
    assert_eq!(calls[0].tool, "send_message");
    assert_eq!(calls[2].tool, "send\u{FFFD}message");
    host.stop().await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_unread_or_cut_off() {
    let mut limits = ServerLimits::default();
    limits.max_body_bytes = 64;
    let host = start(false, None, CountingTool::new(), limits).await;
    let big = format!(r#"{{"to": "team@example.test", "body": "{}"}}"#, "x".repeat(100));
    let (code, _, body) = raw(host.addr, &post("/tools/send_message", "application/json", &big)).await;
    assert_eq!((code, body["reason"].as_str()), (413, Some("request_too_large")));
    // Chunked: no declared length, cut off at the limit while reading.
    let chunked = format!(
        "POST /tools/send_message HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
        big.len()
    );
    let (code, _, body) = raw(host.addr, chunked.as_bytes()).await;
    assert_eq!((code, body["reason"].as_str()), (413, Some("request_too_large")));
    let calls = host.calls();
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c.refusal == Some(Refusal::RequestTooLarge)));
    host.stop().await;
}

#[tokio::test]
async fn slow_peers_are_cut_off_within_the_read_timeout() {
    let mut limits = ServerLimits::default();
    limits.read_timeout = Duration::from_millis(300);
    let host = start(false, None, CountingTool::new(), limits).await;

    // A body that never arrives: answered 408 and recorded.
    let mut stream = TcpStream::connect(host.addr).await.unwrap();
    let head = "POST /tools/send_message HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\
                Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"to\":";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(BOUND, stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(host.calls()[0].refusal, Some(Refusal::MalformedRequest));

    // A head that never ends: the connection is closed.
    let mut stream = TcpStream::connect(host.addr).await.unwrap();
    stream
        .write_all(b"POST /tools/send_message HTTP/1.1\r\nHost: te")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(BOUND, stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the connection was not closed within the bound");
    assert_eq!(
        host.calls().len(),
        1,
        "an unread head names no tool: no call record"
    );
    host.stop().await;
}

#[tokio::test]
async fn approval_that_never_comes_blocks_by_the_call_timeout_without_entering_the_tool() {
    let mut limits = ServerLimits::default();
    limits.call_timeout = Duration::from_millis(200);
    let tool = CountingTool::new();
    let never = approval_fn(|_req| std::future::pending::<Result<Approval, ApprovalError>>());
    let host = start(true, with_approval(never), tool.clone(), limits).await;
    let answer = host.client().call("send_message", TEAM_MESSAGE).await.unwrap();
    assert_eq!(answer.status, 403);
    assert_eq!(answer.reply.status, ReplyStatus::Blocked);
    assert_eq!(answer.reply.reason, "approval_error");
    assert!(answer.reply.deadline_passed);
    assert_eq!(tool.entries(), 0);
    assert_eq!(host.calls().len(), 1);
    host.stop().await;
}

#[tokio::test]
async fn a_tool_still_running_at_the_deadline_is_answered_504_and_still_recorded() {
    let mut limits = ServerLimits::default();
    limits.call_timeout = Duration::from_millis(200);
    // A slow tool: it runs until the test lets it finish, after the deadline's answer.
    let finish = Arc::new(tokio::sync::Notify::new());
    let may_finish = Arc::clone(&finish);
    let slow = tool_fn(move |_call| {
        let may_finish = Arc::clone(&may_finish);
        async move {
            may_finish.notified().await;
            Ok(json!({"late": true}))
        }
    });
    let host = start(false, None, slow, limits).await;
    let answer = host.client().call("send_message", TEAM_MESSAGE).await.unwrap();
    assert_eq!(answer.status, 504);
    assert_eq!(answer.reply.status, ReplyStatus::Unknown);
    assert_eq!(answer.reply.reason, "dispatch_in_progress");
    assert!(answer.reply.plan.is_some() && answer.reply.receipt.is_none());
    finish.notify_one();
    // The dispatch completes on its own task and its receipt reaches the sink.
    let recorded =
        aml_test_support::wait_until_async("the finished dispatch to be recorded", BOUND, || async {
            host.calls().into_iter().next()
        })
        .await;
    assert_eq!(
        recorded.receipt.unwrap().reason(),
        ReceiptReason::HostDispatchReturned
    );
    host.stop().await;
}

#[tokio::test]
async fn a_tool_that_fails_after_entry_is_502_unknown_and_the_grant_stays_spent() {
    let tool = CountingTool::failing();
    let host = start(
        true,
        with_approval(testing::approve_all()),
        tool.clone(),
        ServerLimits::default(),
    )
    .await;
    let client = host.client();
    let first = client.call("send_message", TEAM_MESSAGE).await.unwrap();
    assert_eq!(
        (first.status.as_u16(), first.reply.status),
        (502, ReplyStatus::Unknown)
    );
    assert_eq!(first.reply.reason, "host_dispatch_error");
    assert!(!first.reply.status.not_run());
    // The approval's one-use grant is spent: the same call again is not run again.
    let again = client.call("send_message", TEAM_MESSAGE).await.unwrap();
    assert_eq!(again.status, 409);
    assert_eq!(again.reply.reason, "approval_reused_or_expired");
    assert_eq!(tool.entries(), 1);
    host.stop().await;
}

#[tokio::test]
async fn tool_names_travel_percent_encoded_and_the_catalog_is_listed() {
    let host = allow(CountingTool::new()).await;
    let answer = host.client().call("send message/../x", "{}").await.unwrap();
    assert_eq!(answer.status, 404);
    assert_eq!(answer.reply.tool, "send message/../x");
    assert_eq!(host.calls()[0].tool, "send message/../x");

    let (code, _, listing) = raw(
        host.addr,
        b"GET /tools HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(listing["tools"][0]["name"], "send_message");
    assert_eq!(listing["tools"][0]["effect"], "send");
    assert_eq!(
        listing["tools"][0]["input_schema"],
        testing::send_message_schema()
    );
    host.stop().await;
}

#[tokio::test]
async fn connections_over_the_cap_are_answered_503_unread() {
    let mut limits = ServerLimits::default();
    limits.max_connections = 1;
    let host = start(false, None, CountingTool::new(), limits).await;
    // Accepted first (the accept queue keeps arrival order), it holds the one permit.
    let _held = TcpStream::connect(host.addr).await.unwrap();
    let (code, head, body) = raw(
        host.addr,
        &post("/tools/send_message", "application/json", TEAM_MESSAGE),
    )
    .await;
    assert_eq!(code, 503, "{head}");
    assert_eq!(body["error"], "busy");
    assert!(host.calls().is_empty());
    host.stop().await;
}

/// Python's standard `urllib`, a client nobody here wrote, makes its calls and prints what
/// it got back.
const PYTHON_CLIENT: &str = r#"
import json, sys, urllib.request, urllib.error
base, calls = sys.argv[1], json.loads(sys.argv[2])
out = []
for method, path, body in calls:
    data = body.encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            code, reply = answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        code, reply = refused.code, json.loads(refused.read())
    out.append({"code": code, "status": reply.get("status"), "reason": reply.get("reason"),
                "result": reply.get("result")})
print(json.dumps(out))
"#;

#[tokio::test]
async fn python_urllib_meets_the_same_wire() {
    let tool = CountingTool::new();
    let host = start(
        true,
        with_approval(testing::approve_all()),
        tool.clone(),
        ServerLimits::default(),
    )
    .await;
    let calls = json!([
        ["POST", "/tools/send_message", TEAM_MESSAGE],
        ["POST", "/tools/send_message", TEAM_MESSAGE],
        [
            "POST",
            "/tools/send_message",
            r#"{"to": "all@example.test", "body": "x"}"#
        ],
        ["POST", "/tools/send_message", "{"],
        ["GET", "/tools/send_message", null],
        ["POST", "/tools/delete_everything", "{}"],
    ]);
    let mut python = tokio::process::Command::new("python3");
    python
        .args([
            "-c",
            PYTHON_CLIENT,
            &format!("http://{}", host.addr),
            &calls.to_string(),
        ])
        .kill_on_drop(true);
    let out = tokio::time::timeout(BOUND, python.output())
        .await
        .expect("python3 answered within the bound")
        .expect("python3 is installed (scripts/test needs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let seen: Vec<(u64, &str, &str)> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["code"].as_u64().unwrap(),
                c["status"].as_str().unwrap(),
                c["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (200, "dispatched", "host_dispatch_returned"),
            (409, "blocked", "approval_reused_or_expired"),
            (403, "blocked", "no_exact_rule"),
            (400, "blocked", "AML_JSON_SYNTAX"),
            (405, "refused", "malformed_request"),
            (404, "refused", "invalid_or_unregistered_call"),
        ]
    );
    assert_eq!(got[0]["result"]["sent"], true);
    assert_eq!(tool.entries(), 1);
    assert_eq!(host.calls().len(), 6);
    host.stop().await;
}

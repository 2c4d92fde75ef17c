//! A Cedar policy through the HTTP adapter: the adapter holds no policy, so a `.cedar` file
//! the host loads decides calls, listings and records exactly as exact rules do.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::{
    approval_fn, tool_fn, ActionBoundary, Approval, ApprovalError, CallRecord, Effect, MemorySink, Policy,
    ReceiptReason, ResourceRule, Sha256Digest, ToolCatalog, ToolGate, ToolRegistration,
};
use aml_http_example::{serve, HttpToolClient, HttpToolServer, ReplyStatus};
use serde_json::json;

const BOUND: Duration = Duration::from_secs(10);

/// Reads under `docs/`, writes under `out/` with approval, never anything under a `drafts/`.
const POLICY: &str = r#"
@id("read-docs")
permit(principal, action == Action::"read_file", resource)
when { context.resource like "docs/*" };

@id("write-out")
@approval("required")
permit(principal, action == Action::"write_file", resource)
when { context.resource like "out/*" };

@id("no-drafts")
forbid(principal, action, resource) when { context.resource like "*/drafts/*" };
"#;

/// The tools the host ran, as `(tool, path)`, in order.
type Ran = Arc<Mutex<Vec<(String, String)>>>;

struct Host {
    addr: SocketAddr,
    sink: MemorySink,
    ran: Ran,
    /// The digests the approver was asked about.
    asked: Arc<Mutex<Vec<Sha256Digest>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Host {
    fn client(&self) -> HttpToolClient {
        HttpToolClient::new(self.addr).with_timeout(BOUND)
    }

    fn ran(&self) -> Vec<(String, String)> {
        self.ran.lock().unwrap().clone()
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

fn tool(name: &str, effect: Effect) -> ToolRegistration {
    let schema = json!({"type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path"], "additionalProperties": false});
    ToolRegistration::new(
        name,
        effect,
        format!("{name} for the test"),
        ResourceRule::Argument("path".into()),
        schema,
    )
    .unwrap()
}

/// `read_file`, `write_file` and `delete_file` (which no permit names) behind [`POLICY`],
/// loaded from a `.cedar` file as a host loads it; with an approver that approves the exact
/// digest it is shown when `approver` is set, else none.
async fn start(tag: &str, policy: &str, approver: bool) -> Host {
    let dir = aml_test_support::scratch_dir("http-example-cedar", tag);
    let path = dir.join("policy.cedar");
    std::fs::write(&path, policy).unwrap();
    let policy = Policy::read_file(&path).unwrap();
    assert!(policy.is_cedar(), "read as Cedar");
    assert!(policy.error().is_none(), "{:?}", policy.error());

    let ran = Ran::default();
    let seen = Arc::clone(&ran);
    let executor = tool_fn(move |call| {
        let seen = Arc::clone(&seen);
        async move {
            let entry = (
                call.proposal().tool().to_owned(),
                call.arguments()["path"].as_str().unwrap().to_owned(),
            );
            seen.lock().unwrap().push(entry);
            Ok(json!({"done": true}))
        }
    });
    let sink = MemorySink::new();
    let mut builder = ActionBoundary::builder(Arc::new(policy))
        .executor(executor)
        .sink(sink.clone());
    let asked = Arc::new(Mutex::new(Vec::new()));
    if approver {
        let asked = Arc::clone(&asked);
        builder = builder.approval(approval_fn(move |req| {
            let digest = req.proposal().digest();
            asked.lock().unwrap().push(digest);
            async move { Ok::<_, ApprovalError>(Approval::approve(digest)) }
        }));
    }
    let catalog = ToolCatalog::new()
        .with(tool("read_file", Effect::Read))
        .unwrap()
        .with(tool("write_file", Effect::Write))
        .unwrap()
        .with(tool("delete_file", Effect::Delete))
        .unwrap();
    let gate = ToolGate::new(catalog, builder.build());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, HttpToolServer::new(gate), async {
        let _ = stopped.await;
    }));
    Host {
        addr,
        sink,
        ran,
        asked,
        stop: Some(stop),
        task: Some(task),
    }
}

/// `(HTTP status, reply status, reason)` of one call.
async fn call(host: &Host, tool: &str, path: &str) -> (u16, ReplyStatus, String) {
    let body = json!({"path": path, "content": "x"}).to_string();
    let answer = host.client().call(tool, body).await.unwrap();
    (answer.status.as_u16(), answer.reply.status, answer.reply.reason)
}

fn blocked(reason: &str) -> (u16, ReplyStatus, String) {
    (403, ReplyStatus::Blocked, reason.to_owned())
}

#[tokio::test]
async fn a_cedar_policy_decides_calls_through_the_http_adapter() {
    let host = start("decide", POLICY, false).await;

    // A permit allows: dispatched once.
    let ran = call(&host, "read_file", "docs/a.txt").await;
    assert_eq!(
        ran,
        (200, ReplyStatus::Dispatched, "host_dispatch_returned".to_owned())
    );
    assert_eq!(host.ran(), [("read_file".to_owned(), "docs/a.txt".to_owned())]);

    // No permit covers a read elsewhere, nor any call of delete_file.
    assert_eq!(call(&host, "read_file", "secret.txt").await, blocked("no_permit"));
    assert_eq!(
        call(&host, "delete_file", "docs/a.txt").await,
        blocked("no_permit")
    );
    // A forbid beats read-docs.
    assert_eq!(
        call(&host, "read_file", "docs/drafts/b.txt").await,
        blocked("policy_forbid")
    );
    // write-out asks, and this gate has nobody to ask.
    assert_eq!(
        call(&host, "write_file", "out/r.md").await,
        blocked("approval_unavailable")
    );
    assert_eq!(host.ran().len(), 1, "only the permitted read ran");

    // The record of each call names the policies that determined it.
    let records: Vec<(String, Option<ReceiptReason>, Vec<String>)> = host
        .calls()
        .into_iter()
        .map(|c| (c.tool, c.receipt.map(|r| r.reason()), c.policies))
        .collect();
    let names = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect::<Vec<_>>();
    assert_eq!(
        records,
        [
            (
                "read_file".into(),
                Some(ReceiptReason::HostDispatchReturned),
                names(&["read-docs"])
            ),
            ("read_file".into(), Some(ReceiptReason::NoPermit), names(&[])),
            ("delete_file".into(), Some(ReceiptReason::NoPermit), names(&[])),
            (
                "read_file".into(),
                Some(ReceiptReason::PolicyForbid),
                names(&["no-drafts"])
            ),
            (
                "write_file".into(),
                Some(ReceiptReason::ApprovalUnavailable),
                names(&["write-out"])
            ),
        ]
    );
    assert!(host.calls().iter().all(|c| c.adapter == "http"));
    host.stop().await;
}

#[tokio::test]
async fn an_approval_required_permit_dispatches_the_approved_digest_once() {
    let host = start("approve", POLICY, true).await;
    let body = json!({"path": "out/r.md", "content": "x"}).to_string();
    let answer = host.client().call("write_file", body).await.unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.reply.status, ReplyStatus::Dispatched);
    let receipt = answer.reply.receipt.unwrap();
    assert_eq!(receipt.reason(), ReceiptReason::HostDispatchReturned);
    // The approver saw exactly the digest the receipt names.
    assert_eq!(*host.asked.lock().unwrap(), [receipt.proposal_sha256().unwrap()]);
    assert_eq!(host.ran(), [("write_file".to_owned(), "out/r.md".to_owned())]);
    // Approval does not widen the permit: a write outside out/ is never put to the approver.
    assert_eq!(
        call(&host, "write_file", "docs/a.txt").await,
        blocked("no_permit")
    );
    assert_eq!(host.asked.lock().unwrap().len(), 1);
    assert_eq!(host.ran().len(), 1);
    let calls = host.calls();
    assert_eq!(calls[0].policies, ["write-out"]);
    host.stop().await;
}

#[tokio::test]
async fn the_listing_shows_only_tools_some_permit_admits() {
    let host = start("listing", POLICY, false).await;
    assert_eq!(
        host.client().list_tools().await.unwrap(),
        ["read_file", "write_file"]
    );
    host.stop().await;
    // The same catalog under a policy that also permits delete_file lists all three (the
    // catalog's order is by name).
    let wider = format!(
        "{POLICY}\n@id(\"delete-out\")\npermit(principal, action == Action::\"delete_file\", resource);"
    );
    let host = start("listing-wider", &wider, false).await;
    assert_eq!(
        host.client().list_tools().await.unwrap(),
        ["delete_file", "read_file", "write_file"]
    );
    host.stop().await;
}

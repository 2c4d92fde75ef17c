//! A host with the approval page in front of one counting tool, and a small HTTP client
//! that speaks to the page the way a browser's requests look on the wire.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_approval::{
    ApproverKey, Keyring, SignedApprovalHook, SignedStatement, WebApprovals, WebApprovalsBuilder,
};
use aml_core::testing;
use aml_core::{tool_fn, GuardedTool, ReceiptReason, Sha256Digest};
use aml_grants::MemoryGrants;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) struct Host {
    pub(crate) page: WebApprovals,
    pub(crate) tool: Arc<GuardedTool>,
    pub(crate) calls: Arc<AtomicUsize>,
    pub(crate) signed: Arc<Mutex<Vec<SignedStatement>>>,
}

/// A host whose page is configured by `configure`.
pub(crate) async fn host_with(configure: impl FnOnce(WebApprovalsBuilder) -> WebApprovalsBuilder) -> Host {
    host_custom(configure, |hook| hook).await
}

/// A host whose page is configured by `configure` and whose hook by `hook`.
pub(crate) async fn host_custom(
    configure: impl FnOnce(WebApprovalsBuilder) -> WebApprovalsBuilder,
    hook: impl FnOnce(SignedApprovalHook) -> SignedApprovalHook,
) -> Host {
    let approver = ApproverKey::generate("alice").unwrap();
    let keyring = Keyring::new().with_approver(&approver).unwrap();
    let signed: Arc<Mutex<Vec<SignedStatement>>> = Arc::default();
    let log = Arc::clone(&signed);
    let builder = WebApprovals::builder(approver).on_decision(move |s| log.lock().unwrap().push(s.clone()));
    let page = configure(builder).start().await.unwrap();
    let grants = Arc::new(MemoryGrants::default());
    let hook = hook(
        SignedApprovalHook::new(keyring, Arc::new(page.clone()), grants.clone())
            .with_timeout(Duration::from_secs(60)),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let tool = testing::send_message(testing::send_message_policy(true))
        .approval(hook)
        .grants_arc(grants)
        .executor(tool_fn(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({"sent": true})) }
        }))
        .build()
        .unwrap();
    Host {
        page,
        tool: Arc::new(tool),
        calls,
        signed,
    }
}

pub(crate) async fn host() -> Host {
    host_with(|b| b).await
}

impl Host {
    pub(crate) fn propose(&self, body: &str) -> tokio::task::JoinHandle<ReceiptReason> {
        let tool = Arc::clone(&self.tool);
        let args = json!({"to": "team@example.test", "body": body});
        tokio::spawn(async move { tool.call(&args).await.unwrap().receipt().reason() })
    }

    pub(crate) async fn wait_for_pending(&self, n: usize) -> Vec<Sha256Digest> {
        aml_test_support::wait_until_async(
            &format!("{n} pending proposals"),
            Duration::from_secs(10),
            || async {
                let digests = self.page.pending_digests();
                (digests.len() == n).then_some(digests)
            },
        )
        .await
    }

    /// One API request with the page's token as a bearer token (and the page's `Origin`
    /// for a POST): its status and JSON body.
    pub(crate) async fn api(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let bearer = format!("Bearer {}", self.token());
        let origin = format!("http://{}", self.authority());
        let mut headers = vec![("Authorization", bearer.as_str())];
        if method == "POST" {
            headers.extend([("Origin", origin.as_str()), ("Content-Type", "application/json")]);
        }
        let text = body.map(Value::to_string).unwrap_or_default();
        let response = self.request(method, path, &headers, &text).await;
        split_json(&response)
    }

    /// Decides the first pending request through the API (`reason` for a deny): the
    /// status and the answer.
    pub(crate) async fn decide_first(&self, decision: &str, reason: Option<&str>) -> (u16, Value) {
        let (_, listed) = self.api("GET", "/api/v1/pending", None).await;
        let first = &listed["pending"][0];
        let mut decided = json!({"grant_id": first["grant_id"], "proposal_sha256": first["proposal_sha256"],
                                 "decision": decision});
        if let Some(reason) = reason {
            decided["reason"] = json!(reason);
        }
        self.api("POST", "/api/v1/decide", Some(&decided)).await
    }

    /// A call proposed, and then withdrawn (its caller goes away) once it is pending.
    pub(crate) async fn propose_and_withdraw(&self, body: &str) {
        let call = self.propose(body);
        self.wait_for_pending(1).await;
        call.abort();
        let _ = call.await;
        self.wait_for_pending(0).await;
    }

    /// `host:port` of the page.
    pub(crate) fn authority(&self) -> String {
        self.page.address().to_string()
    }

    pub(crate) fn token(&self) -> String {
        self.page.url().split_once("?t=").unwrap().1.to_owned()
    }

    /// The pending proposals, as the page lists them in `/pending.json`.
    pub(crate) async fn pending_json(&self) -> Value {
        let response = self
            .request("GET", &format!("/pending.json?t={}", self.token()), &[], "")
            .await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        serde_json::from_str(response.split_once("\r\n\r\n").unwrap().1).unwrap()
    }

    /// Clicks `decision` for the first pending proposal, as the page's own form would.
    pub(crate) async fn click(&self, decision: &str) -> String {
        let pending = self.pending_json().await;
        let first = &pending[0];
        let form = format!(
            "t={}&grant_id={}&proposal_sha256={}&decision={decision}",
            self.token(),
            first["grant_id"].as_str().unwrap(),
            first["proposal_sha256"].as_str().unwrap()
        );
        let origin = format!("http://{}", self.authority());
        self.request(
            "POST",
            "/decide",
            &[
                ("Origin", origin.as_str()),
                ("Sec-Fetch-Site", "same-origin"),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            &form,
        )
        .await
    }

    /// Submits the first proposal's form on `page` (a response to `GET /`) with `decision`,
    /// as a browser would: to the form's action, with its hidden fields.
    pub(crate) async fn decide_from_page(&self, page: &str, decision: &str) -> String {
        let form = page
            .split("<form ")
            .nth(1)
            .and_then(|f| f.split("</form>").next())
            .unwrap_or_else(|| panic!("no form on the page: {page}"));
        let attribute = |tag: &str, name: &str| {
            tag.split(&format!("{name}=\""))
                .nth(1)
                .and_then(|v| v.split('"').next())
                .map(|v| v.replace("&amp;", "&"))
        };
        let action = attribute(form, "action").expect("the form has an action");
        let mut fields: Vec<String> = form
            .split("<input ")
            .skip(1)
            .filter(|input| input.contains("type=\"hidden\""))
            .map(|input| {
                format!(
                    "{}={}",
                    attribute(input, "name").unwrap(),
                    attribute(input, "value").unwrap()
                )
            })
            .collect();
        fields.push(format!("decision={decision}"));
        let origin = format!("http://{}", self.authority());
        self.request(
            "POST",
            &action,
            &[
                ("Origin", origin.as_str()),
                ("Sec-Fetch-Site", "same-origin"),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            &fields.join("&"),
        )
        .await
    }

    /// One HTTP/1.1 request with `Host` set to the page's address; the whole response.
    pub(crate) async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> String {
        // From a thread of its own: the way a browser (another process) writes its request
        // the moment the connection is up, whatever this process's runtime is busy with.
        let (address, request) = (self.authority(), self.http(method, path, headers, body));
        tokio::task::spawn_blocking(move || raw_blocking(&address, &request))
            .await
            .unwrap()
    }

    /// The bytes of one HTTP/1.1 request with `Host` set to the page's address.
    fn http(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.authority(),
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        format!("{head}\r\n{body}")
    }
}

/// Like [`raw`], blocking the calling thread.
pub(crate) fn raw_blocking(address: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends `request` as is and reads until the server closes (at most 10 s).
pub(crate) async fn raw(address: &str, request: &str) -> String {
    tokio::time::timeout(Duration::from_secs(10), async {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .expect("the page answers within 10 s")
}

/// Held by the tests that load the machine on purpose (the floods), so that no two of
/// them run at once in this binary: each one's time bounds assume it floods alone.
pub(crate) fn flooding_alone() -> std::sync::MutexGuard<'static, ()> {
    static FLOODS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    FLOODS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// This test binary again, to run only the ignored test `role` (its path in this binary,
/// `module::name`; a child role of a test:
/// another process, so that its sockets and scheduling are not the host's).
pub(crate) fn child_role(role: &str) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.args([role, "--exact", "--ignored", "--nocapture", "--test-threads=1"]);
    command
}

/// The number after `name=` in a child's report line `a=1 b=2`.
pub(crate) fn report_field(report: &str, name: &str) -> i64 {
    report
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing in {report:?}"))
}

/// The status and JSON body of a whole response.
pub(crate) fn split_json(response: &str) -> (u16, Value) {
    let status = response.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let value = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
    (status, value)
}

/// A live stream (`GET /api/v1/events`) read off the socket as the page sends it: the head,
/// then each event (chunked transfer decoded).
pub(crate) struct Events {
    stream: tokio::io::BufReader<tokio::net::TcpStream>,
    pub(crate) head: String,
    buffered: String,
}

impl Events {
    /// Opens the stream at `path` (query included) with `headers`.
    pub(crate) async fn open(host: &Host, path: &str, headers: &[(&str, &str)]) -> Events {
        Events::connect(&host.authority(), &host.http("GET", path, headers, "")).await
    }

    /// Opens a stream at `address` with `request` (a whole request head).
    pub(crate) async fn connect(address: &str, request: &str) -> Events {
        use tokio::io::AsyncBufReadExt;
        let stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let mut stream = tokio::io::BufReader::new(stream);
        stream.get_mut().write_all(request.as_bytes()).await.unwrap();
        let mut head = String::new();
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let mut line = String::new();
                if stream.read_line(&mut line).await.unwrap() == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
        })
        .await
        .expect("the stream's head within 10 s");
        Events {
            stream,
            head,
            buffered: String::new(),
        }
    }

    pub(crate) fn status(&self) -> u16 {
        self.head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    /// The next event (name, data) within `within`, comments and `retry:` skipped; `None`
    /// if the stream ended first.
    pub(crate) async fn next(&mut self, within: Duration) -> Option<(String, Value)> {
        tokio::time::timeout(within, self.next_event())
            .await
            .unwrap_or_else(|_| panic!("no event within {within:?}"))
    }

    /// The next event named `name`, skipping others, within `within`.
    pub(crate) async fn next_named(&mut self, name: &str, within: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some((n, data)) if n == name => return data,
                Some(_) => {}
                None => panic!("the stream ended before a {name:?} event"),
            }
        }
    }

    async fn next_event(&mut self) -> Option<(String, Value)> {
        loop {
            while let Some(end) = self.buffered.find("\n\n") {
                let block: String = self.buffered.drain(..end + 2).collect();
                let mut name = "message".to_owned();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = n.to_owned();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data.push_str(d);
                    }
                }
                if !data.is_empty() {
                    return Some((name, serde_json::from_str(&data).unwrap()));
                }
            }
            let chunk = self.chunk().await?;
            self.buffered.push_str(&chunk);
        }
    }

    /// One chunk of the chunked body; `None` at its end or when the socket closes.
    async fn chunk(&mut self) -> Option<String> {
        use tokio::io::AsyncBufReadExt;
        let mut size = String::new();
        if self.stream.read_line(&mut size).await.ok()? == 0 {
            return None;
        }
        let size = usize::from_str_radix(size.trim(), 16).ok()?;
        if size == 0 {
            return None;
        }
        let mut bytes = vec![0u8; size + 2];
        self.stream.read_exact(&mut bytes).await.ok()?;
        bytes.truncate(size);
        Some(String::from_utf8(bytes).unwrap())
    }
}

/// How the tabs' child role reports: `AML_TABS_RESULT tabs=… open=… pending_min=…`.
const TABS_RESULT: &str = "AML_TABS_RESULT ";

/// Child role (run through `--ignored` by the flood and lockout tests): the tabs.
#[test]
#[ignore = "a child role of the flood and lockout tests"]
fn child_tabs() {
    tabs_role();
}

/// Child role (run by `child_tabs`): `AML_TABS_N` browser tabs on the page at
/// `AML_TABS_ADDR` with token `AML_TABS_TOKEN`, each with its live stream open (the page's
/// view); prints `AML_TABS_READY` once every stream sent its snapshot. Then reads one line
/// `PENDING OUTCOMES` from stdin: the changes every tab should see; waits (at most 20 s)
/// until each tab saw that many, and prints how many streams are still open and the fewest
/// `pending` and `outcome` events any tab saw.
pub(crate) fn tabs_role() {
    use std::sync::atomic::AtomicU64;
    let address = std::env::var("AML_TABS_ADDR").expect("started by a test");
    let token = std::env::var("AML_TABS_TOKEN").unwrap();
    let n: usize = std::env::var("AML_TABS_N").unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let request = format!(
            "GET /api/v1/events?view=page&t={token} HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n\
             Sec-Fetch-Site: same-origin\r\n\r\n"
        );
        let mut tabs = Vec::new();
        for _ in 0..n {
            let mut tab = Events::connect(&address, &request).await;
            assert_eq!(tab.status(), 200, "{}", tab.head);
            tab.next_named("snapshot", Duration::from_secs(10)).await;
            tabs.push(tab);
        }
        println!("AML_TABS_READY");
        // Per tab: pending events, outcome events, 1 while its stream is open.
        let seen: Vec<Arc<[AtomicU64; 3]>> = (0..n).map(|_| Arc::new([0, 0, 1].map(AtomicU64::new))).collect();
        for (mut tab, counts) in tabs.into_iter().zip(seen.iter().cloned()) {
            tokio::spawn(async move {
                while let Some((name, _)) = tab.next_event().await {
                    match name.as_str() {
                        "pending" => counts[0].fetch_add(1, Ordering::SeqCst),
                        "outcome" => counts[1].fetch_add(1, Ordering::SeqCst),
                        _ => 0,
                    };
                }
                counts[2].store(0, Ordering::SeqCst);
            });
        }
        let expected = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            line
        })
        .await
        .unwrap();
        let mut wanted = expected.split_whitespace().map(|n| n.parse::<u64>().unwrap_or(0));
        let (pending, outcomes) = (wanted.next().unwrap_or(0), wanted.next().unwrap_or(0));
        let min = |i: usize| seen.iter().map(|c| c[i].load(Ordering::SeqCst)).min().unwrap_or(0);
        // Bounded without a panic, so that the report goes out either way and the parent's
        // assertions name the shortfall.
        let every_tab_saw_them = aml_test_support::wait_until_async(
            "every tab to see the changes",
            Duration::MAX,
            || async { (min(0) >= pending && min(1) >= outcomes).then_some(()) },
        );
        let _ = tokio::time::timeout(Duration::from_secs(20), every_tab_saw_them).await;
        let open = seen.iter().filter(|c| c[2].load(Ordering::SeqCst) == 1).count();
        println!("{TABS_RESULT}tabs={n} open={open} pending_min={} outcome_min={}", min(0), min(1));
    });
}

/// Tabs with their live streams open, in another process (see [`tabs_role`]).
pub(crate) struct Tabs {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Tabs {
    /// Opens `n` tabs on `host`'s page; returns once every stream is open.
    pub(crate) fn open(host: &Host, n: usize) -> Tabs {
        use std::io::BufRead;
        let mut child = child_role("common::child_tabs")
            .env("AML_TABS_ADDR", host.authority())
            .env("AML_TABS_TOKEN", host.token())
            .env("AML_TABS_N", n.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let tabs = Tabs { child, lines };
        tabs.wait_for("AML_TABS_READY", Duration::from_secs(60));
        tabs
    }

    fn wait_for(&self, prefix: &str, within: Duration) -> String {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(prefix) => {
                    return line.split(prefix).nth(1).unwrap_or_default().to_owned()
                }
                Ok(_) => {}
                Err(e) => panic!("no {prefix} line from the tabs within {within:?}: {e}"),
            }
        }
    }

    /// Closes the tabs once each saw `pending` proposals and `outcomes` outcomes (or 20 s
    /// passed), and checks that every tab kept its stream and saw them all.
    pub(crate) fn close_having_seen(self, pending: usize, outcomes: usize) {
        let seen = self.close(pending, outcomes);
        let tabs = report_field(&seen, "tabs");
        assert_eq!(
            report_field(&seen, "open"),
            tabs,
            "every tab kept its stream: {seen}"
        );
        assert_eq!(
            report_field(&seen, "pending_min"),
            pending as i64,
            "every tab saw every proposal: {seen}"
        );
        assert_eq!(
            report_field(&seen, "outcome_min"),
            outcomes as i64,
            "and every outcome: {seen}"
        );
    }

    /// Closes the tabs once each saw `pending` proposals and `outcomes` outcomes (or 20 s
    /// passed); their report (`tabs= open= pending_min= outcome_min=`).
    fn close(mut self, pending: usize, outcomes: usize) -> String {
        use std::io::Write;
        let mut stdin = self.child.stdin.take().unwrap();
        writeln!(stdin, "{pending} {outcomes}").unwrap();
        drop(stdin);
        let report = self.wait_for(TABS_RESULT, Duration::from_secs(30));
        self.child.wait().unwrap();
        report
    }
}

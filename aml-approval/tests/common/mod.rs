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
    let approver = ApproverKey::generate("alice").unwrap();
    let keyring = Keyring::new().with_approver(&approver).unwrap();
    let signed: Arc<Mutex<Vec<SignedStatement>>> = Arc::default();
    let log = Arc::clone(&signed);
    let builder = WebApprovals::builder(approver).on_decision(move |s| log.lock().unwrap().push(s.clone()));
    let page = configure(builder).start().await.unwrap();
    let grants = Arc::new(MemoryGrants::default());
    let hook = SignedApprovalHook::new(keyring, Arc::new(page.clone()), grants.clone())
        .with_timeout(Duration::from_secs(60));
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
        for _ in 0..1000 {
            let digests = self.page.pending_digests();
            if digests.len() == n {
                return digests;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "expected {n} pending proposals, have {}",
            self.page.pending_count()
        );
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

    /// One HTTP/1.1 request with `Host` set to the page's address; the whole response.
    pub(crate) async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> String {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.authority(),
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        raw(&self.authority(), &format!("{head}\r\n{body}")).await
    }
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

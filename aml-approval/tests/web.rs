//! The approval page over HTTP, the way browsers and hostile peers reach it: token and host
//! checks, cross-origin refusals, security headers, bodies (chunked, oversized, slow), slow
//! and idle clients, the connection cap, escapes of invisible characters, and shutdown.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use aml_core::ReceiptReason;
use common::{host, host_with, raw};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn status(response: &str) -> &str {
    response.get(9..12).unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_answers_only_with_its_token_and_to_its_own_host() {
    let host = host().await;
    for path in ["/", "/?t=wrong", "/pending.json", "/pending.json?t=0000"] {
        let response = host.request("GET", path, &[], "").await;
        assert_eq!(status(&response), "403", "{path}: {response}");
    }
    let token = host.token();
    let ok = host
        .request("GET", &format!("/pending.json?t={token}"), &[], "")
        .await;
    assert_eq!(status(&ok), "200", "{ok}");
    // Another Host (a DNS-rebinding page, say), even with the token: refused.
    let rebound = raw(
        &host.authority(),
        &format!("GET /pending.json?t={token} HTTP/1.1\r\nHost: evil.example:80\r\n\r\n"),
    )
    .await;
    assert_eq!(status(&rebound), "421", "{rebound}");
    let port = host.page.address().port();
    let localhost = raw(
        &host.authority(),
        &format!("GET /pending.json?t={token} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n"),
    )
    .await;
    assert_eq!(status(&localhost), "200", "{localhost}");
}

/// A page on another origin can make the approver's browser POST a form to the approval
/// page; if it knows the token, only the origin headers tell the page apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_origin_post_carrying_the_token_decides_nothing() {
    let host = host().await;
    let call = host.propose("Build passed.");
    host.wait_for_pending(1).await;
    let pending = host.pending_json().await;
    let form = format!(
        "t={}&grant_id={}&proposal_sha256={}&decision=approve",
        host.token(),
        pending[0]["grant_id"].as_str().unwrap(),
        pending[0]["proposal_sha256"].as_str().unwrap()
    );
    let own = format!("http://{}", host.authority());
    let form_type = ("Content-Type", "application/x-www-form-urlencoded");
    let attempts: [&[(&str, &str)]; 5] = [
        &[
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "cross-site"),
            form_type,
        ],
        &[("Origin", "null"), ("Sec-Fetch-Site", "cross-site"), form_type],
        &[
            ("Origin", own.as_str()),
            ("Sec-Fetch-Site", "cross-site"),
            form_type,
        ],
        &[
            ("Origin", own.as_str()),
            ("Sec-Fetch-Site", "same-site"),
            form_type,
        ],
        &[form_type],
    ];
    for headers in attempts {
        let response = host.request("POST", "/decide", headers, &form).await;
        assert_eq!(status(&response), "403", "{headers:?}: {response}");
    }
    assert_eq!(host.page.pending_count(), 1, "nothing was decided");
    assert!(host.signed.lock().unwrap().is_empty());
    // The page's own form (same origin) decides.
    let response = host.click("approve").await;
    assert_eq!(status(&response), "200", "{response}");
    assert_eq!(call.await.unwrap(), ReceiptReason::HostDispatchReturned);
    assert_eq!(host.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_forbid_sniffing_framing_and_caching() {
    let host = host().await;
    let page = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    let refused = host.request("GET", "/", &[], "").await;
    for response in [&page, &refused] {
        let head = response.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
        for header in [
            "x-content-type-options: nosniff",
            "cache-control: no-store",
            "x-frame-options: deny",
            "referrer-policy: same-origin",
        ] {
            assert!(head.contains(header), "{header} missing: {head}");
        }
        assert!(
            head.contains("content-security-policy: default-src 'none';")
                && head.contains("frame-ancestors 'none'"),
            "{head}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_bodies_decide_and_oversized_or_slow_bodies_are_refused() {
    let host = host_with(|b| b.request_timeout(Duration::from_millis(500))).await;
    let call = host.propose("Chunked.");
    host.wait_for_pending(1).await;
    let pending = host.pending_json().await;
    let form = format!(
        "t={}&grant_id={}&proposal_sha256={}&decision=deny",
        host.token(),
        pending[0]["grant_id"].as_str().unwrap(),
        pending[0]["proposal_sha256"].as_str().unwrap()
    );
    let origin = format!("http://{}", host.authority());
    let head = |extra: &str| {
        format!(
            "POST /decide HTTP/1.1\r\nHost: {}\r\nOrigin: {origin}\r\nContent-Type: application/x-www-form-urlencoded\r\n{extra}\r\n",
            host.authority()
        )
    };
    // Too large: refused before it is read whole.
    let big = "x".repeat(20_000);
    let response = raw(
        &host.authority(),
        &format!("{}{big}", head(&format!("Content-Length: {}\r\n", big.len()))),
    )
    .await;
    assert_eq!(status(&response), "413", "{response}");
    // Announced but never sent: cut off after the request timeout.
    let started = Instant::now();
    let response = raw(&host.authority(), &head("Content-Length: 100\r\n")).await;
    assert_eq!(status(&response), "408", "{response}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // Chunked: decides.
    let (first, second) = form.split_at(form.len() / 2);
    let chunked = format!(
        "{}{:x}\r\n{first}\r\n{:x}\r\n{second}\r\n0\r\n\r\n",
        head("Transfer-Encoding: chunked\r\n"),
        first.len(),
        second.len()
    );
    let response = raw(&host.authority(), &chunked).await;
    assert_eq!(status(&response), "200", "{response}");
    assert!(response.contains("Denied."), "{response}");
    assert_eq!(call.await.unwrap(), ReceiptReason::ApprovalMissingOrMismatched);
}

/// Reads from `stream` until the server closes it; how long that took (at most 10 s).
async fn closed_after(stream: &mut tokio::net::TcpStream, started: Instant) -> Duration {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the server closes the connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_clients_are_cut_off_and_over_the_cap_get_503() {
    let host = host_with(|b| b.request_timeout(Duration::from_millis(500)).max_connections(2)).await;
    let started = Instant::now();
    let mut idle = tokio::net::TcpStream::connect(host.authority()).await.unwrap();
    let mut slow = tokio::net::TcpStream::connect(host.authority()).await.unwrap();
    let dripping = tokio::spawn(async move {
        // Slowloris: a header line a little at a time, never the end of the head.
        let _ = slow.write_all(b"GET / HTTP/1.1\r\nX-Slow: ").await;
        for _ in 0..50 {
            if slow.write_all(b"a").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        closed_after(&mut slow, started).await
    });
    // Wait (bounded) until the page holds both connections.
    for _ in 0..500 {
        if host.page.open_connections() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(host.page.open_connections(), 2);
    // Both slots are taken: a third connection is told so at once.
    let busy = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    assert_eq!(status(&busy), "503", "{busy}");
    let idle_for = closed_after(&mut idle, started).await;
    let slow_for = dripping.await.unwrap();
    assert!(
        idle_for < Duration::from_secs(3),
        "idle connection held {idle_for:?}"
    );
    assert!(slow_for < Duration::from_secs(3), "slow client held {slow_for:?}");
    // The slots are free again.
    let ok = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    assert_eq!(status(&ok), "200", "{ok}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_and_bidi_characters_appear_on_the_page_as_escapes() {
    let host = host().await;
    let call = host.propose("pay \u{9B}31mNOW \u{202E}cod.exe\u{2066}");
    host.wait_for_pending(1).await;
    let page = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    for hidden in ['\u{9B}', '\u{202E}', '\u{2066}'] {
        assert!(!page.contains(hidden), "{hidden:?} reached the page raw");
    }
    assert!(
        page.contains(r"pay \u{009B}31mNOW \u{202E}cod.exe\u{2066}"),
        "{page}"
    );
    assert!(page.contains("class=\"warning\""), "{page}");
    host.click("deny").await;
    assert_eq!(call.await.unwrap(), ReceiptReason::ApprovalMissingOrMismatched);
    // An ordinary proposal shows no warning.
    let call = host.propose("Build passed.");
    host.wait_for_pending(1).await;
    let page = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    assert!(!page.contains("class=\"warning\""));
    host.click("deny").await;
    call.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_blocks_pending_calls_and_stops_accepting() {
    let host = host().await;
    let call = host.propose("Waiting when the page stops.");
    host.wait_for_pending(1).await;
    tokio::time::timeout(Duration::from_secs(10), host.page.shutdown())
        .await
        .expect("shutdown finishes");
    assert_eq!(call.await.unwrap(), ReceiptReason::ApprovalError);
    assert!(tokio::net::TcpStream::connect(host.authority()).await.is_err());
    // Later calls block at once.
    let later = host.propose("After shutdown.");
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), later)
            .await
            .unwrap()
            .unwrap(),
        ReceiptReason::ApprovalError
    );
    assert_eq!(host.calls.load(Ordering::SeqCst), 0);
}

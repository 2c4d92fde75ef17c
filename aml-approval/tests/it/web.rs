//! The approval page over HTTP, the way browsers and hostile peers reach it: token and host
//! checks, cross-origin refusals, security headers, bodies (chunked, oversized, slow), slow
//! and idle clients, the connection cap, escapes of invisible characters, and shutdown.

use crate::common;

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

/// Waits (bounded) until the page holds `n` connections.
async fn until_open(host: &common::Host, n: usize) {
    aml_test_support::wait_until_async(
        &format!("the page to hold {n} connections"),
        Duration::from_secs(5),
        || async { (host.page.open_connections() == n).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_clients_are_cut_off_and_the_oldest_gives_way_to_the_approver() {
    let host = host_with(|b| b.token_timeout(Duration::from_millis(500)).max_unauthenticated(2)).await;
    let started = Instant::now();
    let mut idle = tokio::net::TcpStream::connect(host.authority()).await.unwrap();
    until_open(&host, 1).await;
    let mut slow = tokio::net::TcpStream::connect(host.authority()).await.unwrap();
    let dripping = tokio::spawn(async move {
        // Slowloris: a header line a little at a time, never the end of the head.
        let _ = slow.write_all(b"GET / HTTP/1.1\r\nX-Slow: ").await;
        for _ in 0..50 {
            if slow.write_all(b"a").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await; // the slowloris's pace (simulated)
        }
        closed_after(&mut slow, started).await
    });
    until_open(&host, 2).await;
    // Both places for connections without the token are taken: the approver's connection
    // is served, and the oldest of the two gives way to it.
    let ok = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    assert_eq!(status(&ok), "200", "{ok}");
    let idle_for = closed_after(&mut idle, started).await;
    let slow_for = dripping.await.unwrap();
    assert!(
        idle_for < Duration::from_millis(500),
        "the oldest connection was kept {idle_for:?}, not closed to make room"
    );
    assert!(
        slow_for < Duration::from_secs(3),
        "a slow client without the token was held {slow_for:?}"
    );
    assert_eq!(host.page.open_connections(), 0);
}

/// Connections that have shown the token have places of their own: more of them than
/// their cap are told to wait, and connections without the token never take them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_with_the_token_have_their_own_cap() {
    let host = host_with(|b| {
        b.max_authenticated(1)
            .max_unauthenticated(1)
            .request_timeout(Duration::from_secs(5))
    })
    .await;
    // The approver's form whose body is slow to come: it holds the one place.
    let mut holding = tokio::net::TcpStream::connect(host.authority()).await.unwrap();
    let head = format!(
        "POST /decide?t={} HTTP/1.1\r\nHost: {}\r\nOrigin: http://{}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n",
        host.token(),
        host.authority(),
        host.authority()
    );
    holding.write_all(head.as_bytes()).await.unwrap();
    until_open(&host, 1).await;
    // Connections without the token come and go; the approver's place stays taken.
    let mut idle = tokio::net::TcpStream::connect(host.authority()).await.unwrap();
    until_open(&host, 2).await;
    let wrong = host.request("GET", "/?t=wrong", &[], "").await;
    assert_eq!(status(&wrong), "403", "{wrong}");
    let idle_for = closed_after(&mut idle, Instant::now()).await;
    assert!(idle_for < Duration::from_secs(3), "{idle_for:?}");
    // A second request with the token while the first holds the place: told to wait.
    let busy = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    assert_eq!(status(&busy), "503", "{busy}");
    drop(holding);
    until_open(&host, 0).await;
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

/// A call whose caller goes away while it waits leaves the pending list and is shown as
/// withdrawn among the decided ones, without buttons; a click from a page loaded before
/// says so and approves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_caller_left_is_shown_withdrawn() {
    let host = host().await;
    let call = host.propose("Left while waiting.");
    let [digest] = host.wait_for_pending(1).await[..] else {
        unreachable!()
    };
    let loaded = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    // The caller goes away (as when an MCP client closes its input mid-call).
    call.abort();
    let _ = call.await;
    host.wait_for_pending(0).await;
    assert_eq!(host.page.withdrawn_digests(), [digest]);

    let page = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    let withdrawn = page
        .split("<li class=\"outcome withdrawn\"")
        .nth(1)
        .unwrap_or_else(|| panic!("the call is not shown withdrawn: {page}"));
    let withdrawn = withdrawn.split("</li>").next().unwrap();
    assert!(
        withdrawn.contains(&format!("data-digest=\"{digest}\"")),
        "{withdrawn}"
    );
    assert!(
        withdrawn.contains("<span class=\"badge\">Withdrawn</span>")
            && withdrawn.contains("stopped waiting before anyone decided it; nothing was approved"),
        "{withdrawn}"
    );
    assert!(!withdrawn.contains("<button"), "{withdrawn}");
    assert!(
        !page.contains("class=\"member\""),
        "no request is shown pending: {page}"
    );
    assert!(page.contains("Nothing is waiting for a decision."), "{page}");
    let listed = host
        .request("GET", &format!("/withdrawn.json?t={}", host.token()), &[], "")
        .await;
    let listed: serde_json::Value = serde_json::from_str(listed.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(listed[0]["proposal_sha256"], digest.to_string());

    // The page loaded before it was withdrawn still has its form: clicking approves nothing.
    let response = host.decide_from_page(&loaded, "approve").await;
    assert_eq!(status(&response), "409", "{response}");
    assert!(
        response.contains("This call was withdrawn") && response.contains("nothing was approved"),
        "{response}"
    );
    assert_eq!(host.calls.load(Ordering::SeqCst), 0);
    assert!(host.signed.lock().unwrap().is_empty(), "nothing was signed");

    // A decided call is not shown withdrawn.
    let decided = host.propose("Decided.");
    host.wait_for_pending(1).await;
    host.click("deny").await;
    decided.await.unwrap();
    assert_eq!(host.page.withdrawn_digests(), [digest]);
}

/// Identical pending proposals share one card (the proposal shown once); each request in it
/// has its own requester block ("not known" when the host does not say), countdown and
/// buttons, and is decided on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_pending_proposals_are_grouped_and_each_request_is_decided_on_its_own() {
    let host = host().await;
    let first = host.propose("Same words.");
    host.wait_for_pending(1).await;
    let second = host.propose("Same words.");
    let digests = host.wait_for_pending(2).await;
    assert_eq!(digests[0], digests[1], "identical proposals");
    let page = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    assert_eq!(page.matches("<section class=\"proposal\"").count(), 1, "{page}");
    assert_eq!(page.matches("<li class=\"member\"").count(), 2, "{page}");
    assert!(
        page.contains("<p class=\"same\"><span class=\"n\">2</span> identical requests"),
        "{page}"
    );
    assert_eq!(
        page.matches("<dd class=\"unknown\">not known</dd>").count(),
        8,
        "caller, client, session and server of each: {page}"
    );
    assert_eq!(page.matches("data-expires-at-ms=\"").count(), 2, "{page}");
    assert!(page.contains(":59 left") || page.contains("1:00 left"), "{page}");
    assert!(
        page.contains("<span class=\"key\">body</span>: <span class=\"str\">\"Same words.\"</span>"),
        "{page}"
    );

    // One request approved from its own form; the other still waits, alone in its card.
    let response = host.decide_from_page(&page, "approve").await;
    assert_eq!(status(&response), "200", "{response}");
    assert_eq!(first.await.unwrap(), ReceiptReason::HostDispatchReturned);
    host.wait_for_pending(1).await;
    let page = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    assert_eq!(page.matches("<li class=\"member\"").count(), 1, "{page}");
    assert!(page.contains("<p class=\"same\" hidden>"), "{page}");
    host.click("deny").await;
    assert_eq!(second.await.unwrap(), ReceiptReason::ApprovalMissingOrMismatched);
    assert_eq!(host.calls.load(Ordering::SeqCst), 1);
}

/// The page runs no inline script or style: its own files only, under a CSP that allows
/// nothing else; they need the token like everything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_has_no_inline_script_or_style() {
    let host = host().await;
    let call = host.propose("Build passed.");
    host.wait_for_pending(1).await;
    let token = host.token();
    let page = host.request("GET", &format!("/?t={token}"), &[], "").await;
    let (head, body) = page.split_once("\r\n\r\n").unwrap();
    let csp = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-security-policy: ")
                .map(str::to_owned)
        })
        .unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("style-src 'self'"),
        "{csp}"
    );
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(body.matches("<script").count(), 1, "{body}");
    assert!(
        body.contains(&format!("<script src=\"/app.js?t={token}\"></script>")),
        "{body}"
    );
    assert!(body.contains(&format!("<link rel=\"stylesheet\" href=\"/app.css?t={token}\">")));
    let handler = body.match_indices(" on").any(|(at, _)| {
        let rest = &body[at + 3..];
        let name = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_lowercase()).len();
        name > 0 && rest[name..].starts_with('=')
    });
    assert!(
        !body.contains("<style") && !body.contains(" style=") && !handler,
        "{body}"
    );
    for (path, kind) in [("/app.js", "text/javascript"), ("/app.css", "text/css")] {
        let asset = host.request("GET", &format!("{path}?t={token}"), &[], "").await;
        assert_eq!(status(&asset), "200");
        assert!(asset.contains(&format!("content-type: {kind}")), "{asset}");
        let refused = host.request("GET", path, &[], "").await;
        assert_eq!(status(&refused), "403");
    }
    host.click("deny").await;
    call.await.unwrap();
}

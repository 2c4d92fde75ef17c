//! The live stream (`GET /api/v1/events`), read off the socket as a browser's EventSource
//! reads it: a snapshot, then every change in order (arrived, approved, denied, withdrawn,
//! expired), the page's HTML with each in the page's view; the token and origin checks;
//! streams that never take the places page loads and decisions need; the streams' cap and
//! shutdown.

use crate::common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use aml_core::ReceiptReason;
use common::{host, host_custom, host_with, Events};
use serde_json::json;

const WITHIN: Duration = Duration::from_secs(1);

async fn stream(host: &common::Host, query: &str) -> Events {
    let events = Events::open(host, &format!("/api/v1/events?t={}{query}", host.token()), &[]).await;
    assert_eq!(events.status(), 200, "{}", events.head);
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_arrives_in_order_within_a_second() {
    let host = host().await;
    let mut events = stream(&host, "").await;
    assert!(
        events
            .head
            .to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{}",
        events.head
    );
    let snapshot = events.next_named("snapshot", WITHIN).await;
    assert_eq!(snapshot["seq"], 0);
    assert_eq!(snapshot["pending"], json!([]));
    assert!(snapshot.get("html").is_none(), "the API view has no HTML");

    let started = Instant::now();
    let call = host.propose("Build passed.");
    let arrived = events.next_named("pending", WITHIN).await;
    let took = started.elapsed();
    assert_eq!(arrived["seq"], 1);
    let pending = &arrived["pending"];
    let digest = pending["proposal_sha256"].as_str().unwrap().to_owned();
    assert_eq!(host.page.pending_digests()[0].to_string(), digest);
    assert!(took < WITHIN, "{took:?}");

    let decision = json!({"grant_id": pending["grant_id"], "proposal_sha256": digest, "decision": "approve"});
    let (status, _) = host.api("POST", "/api/v1/decide", Some(&decision)).await;
    assert_eq!(status, 200);
    let left = events.next_named("outcome", WITHIN).await;
    assert_eq!(left["seq"], 2);
    assert_eq!(left["outcome"]["outcome"], "approved");
    assert_eq!(left["outcome"]["grant_id"], pending["grant_id"]);
    assert_eq!(call.await.unwrap(), ReceiptReason::HostDispatchReturned);

    let call = host.propose("Never mind.");
    let arrived = events.next_named("pending", WITHIN).await;
    assert_eq!(arrived["seq"], 3);
    call.abort();
    let _ = call.await;
    let left = events.next_named("outcome", WITHIN).await;
    assert_eq!(
        (left["seq"].as_u64(), left["outcome"]["outcome"].as_str()),
        (Some(4), Some("withdrawn"))
    );
    assert_eq!(host.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_view_carries_the_html_and_a_call_whose_wait_runs_out_leaves_expired() {
    let host = host_custom(|page| page, |hook| hook.with_timeout(Duration::from_millis(700))).await;
    let mut events = stream(&host, "&view=page").await;
    let snapshot = events.next_named("snapshot", WITHIN).await;
    assert_eq!(
        (snapshot["html"].as_str(), snapshot["count"].as_u64()),
        (Some(""), Some(0))
    );
    let call = host.propose("pay \u{202E}now");
    let arrived = events.next_named("pending", WITHIN).await;
    let member = arrived["member_html"].as_str().unwrap();
    let group = arrived["group_html"].as_str().unwrap();
    assert!(member.starts_with("<li class=\"member\""), "{member}");
    assert!(group.contains(member), "a new group holds its first request");
    assert!(
        group.contains(r"pay \u{202E}now") && !group.contains('\u{202E}'),
        "{group}"
    );
    assert!(group.contains("class=\"warning\""), "{group}");
    // No decision: its wait runs out, and it leaves as expired.
    assert_eq!(call.await.unwrap(), ReceiptReason::ApprovalError);
    let left = events.next_named("outcome", Duration::from_secs(5)).await;
    assert_eq!(left["outcome"]["outcome"], "expired", "{left}");
    let row = left["history_html"].as_str().unwrap();
    assert!(row.contains("<span class=\"badge\">Expired</span>"), "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_needs_the_token_and_the_pages_origin() {
    let host = host().await;
    let token = host.token();
    type Case<'a> = (String, Vec<(&'a str, &'a str)>, u16);
    let cases: [Case; 4] = [
        ("/api/v1/events".into(), vec![], 401),
        ("/api/v1/events?t=00ff".into(), vec![], 401),
        (
            format!("/api/v1/events?t={token}"),
            vec![("Origin", "http://evil.example")],
            403,
        ),
        (
            format!("/api/v1/events?t={token}"),
            vec![("Sec-Fetch-Site", "cross-site")],
            403,
        ),
    ];
    for (path, headers, want) in cases {
        let response = host.request("GET", &path, &headers, "").await;
        assert_eq!(
            response.get(9..12),
            Some(want.to_string().as_str()),
            "{path} {headers:?}: {response}"
        );
    }
    assert_eq!(host.page.open_streams(), 0);
}

/// Tabs left open hold streams, not the places the approver's page loads and decisions
/// need: with one such place, twenty streams open, the page still loads and decides, and
/// every stream sees the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_streams_never_take_the_places_of_page_loads_and_decisions() {
    let host = host_with(|b| b.max_authenticated(1)).await;
    let mut tabs = Vec::new();
    for _ in 0..20 {
        let mut events = stream(&host, "").await;
        events.next_named("snapshot", WITHIN).await;
        tabs.push(events);
    }
    assert_eq!(host.page.open_streams(), 20);
    let call = host.propose("With twenty tabs open.");
    host.wait_for_pending(1).await;
    let page = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    // The page load's connection gives its one place back as it closes, which the server
    // sees a moment after the client has read the page: a browser would reuse it instead.
    aml_test_support::wait_until_async(
        "the page load's place given back",
        Duration::from_secs(10),
        || async { (host.page.open_connections() == 20).then_some(()) },
    )
    .await;
    let response = host.decide_from_page(&page, "approve").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(call.await.unwrap(), ReceiptReason::HostDispatchReturned);
    for tab in &mut tabs {
        tab.next_named("pending", WITHIN).await;
        assert_eq!(
            tab.next_named("outcome", WITHIN).await["outcome"]["outcome"],
            "approved"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_streams_cap_the_oldest_closes_and_shutdown_ends_them_all() {
    let host = host_with(|b| b.max_streams(2)).await;
    let mut oldest = stream(&host, "").await;
    oldest.next_named("snapshot", WITHIN).await;
    let mut second = stream(&host, "").await;
    second.next_named("snapshot", WITHIN).await;
    let mut third = stream(&host, "").await;
    third.next_named("snapshot", WITHIN).await;
    let bye = oldest.next_named("bye", WITHIN).await;
    assert!(
        bye["why"].as_str().unwrap().contains("closed to make room"),
        "{bye}"
    );
    assert!(oldest.next(WITHIN).await.is_none(), "and it ends");
    assert_eq!(host.page.open_streams(), 2);
    tokio::time::timeout(Duration::from_secs(10), host.page.shutdown())
        .await
        .expect("shutdown finishes");
    for tab in [&mut second, &mut third] {
        let bye = tab.next_named("bye", WITHIN).await;
        assert_eq!(bye["why"], "the approval page stopped");
        assert!(tab.next(WITHIN).await.is_none());
    }
}

/// Other connections last at most the token timeout plus twice the request timeout; a
/// stream lasts as long as its tab.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_outlives_the_connection_deadline() {
    use tokio::io::AsyncReadExt;
    let limit = Duration::from_millis(200);
    let host = host_with(|b| b.token_timeout(limit).request_timeout(limit)).await;
    let started = Instant::now();
    let mut events = stream(&host, "").await;
    events.next_named("snapshot", WITHIN).await;
    // The connections' timers run: an idle connection opened now is cut at the token
    // timeout.
    let mut idle = tokio::net::TcpStream::connect(host.authority()).await.unwrap();
    let cut = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut [0u8; 16])).await;
    assert!(
        matches!(cut, Ok(Ok(0)) | Ok(Err(_))),
        "the idle connection was not cut"
    );
    // Past the whole-connection deadline (token timeout + 2 × request timeout = 600 ms):
    // let it pass, then the stream still delivers.
    let deadline = limit * 3;
    let past_the_deadline = (deadline + Duration::from_millis(400)).saturating_sub(started.elapsed());
    tokio::time::sleep(past_the_deadline).await; // holds past the deadline this test is about
    let call = host.propose("Later.");
    assert_eq!(events.next_named("pending", WITHIN).await["seq"], 1);
    assert!(started.elapsed() > deadline);
    call.abort();
}

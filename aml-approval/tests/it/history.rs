//! The history of decided proposals kept in a durable store (`ReceiptHistory` over the
//! SQLite file of `aml-grants`): it survives a restart of the page, lists newest first, and
//! reaches back as far as its window.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use aml_approval::{ApprovalHistory, HistoryQuery, ReceiptHistory};
use aml_grants::{Clock, ManualClock, SqliteStore, SystemClock};
use common::host_with;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_survives_a_restart_of_the_page() {
    let dir = aml_test_support::scratch_dir("approval", "history");
    let file = dir.join("state.sqlite3");
    {
        let store = Arc::new(SqliteStore::open(&file).unwrap());
        let host = host_with(|b| b.history(Arc::new(ReceiptHistory::new(store)))).await;
        for (body, decision, reason) in [
            ("First.", "approve", None),
            ("Second.", "deny", Some("Not today.")),
        ] {
            let call = host.propose(body);
            host.wait_for_pending(1).await;
            let (status, answer) = host.decide_first(decision, reason).await;
            assert_eq!(status, 200, "{answer}");
            call.await.unwrap();
        }
        host.propose_and_withdraw("Third.").await;
        // The withdrawn call's outcome is written from a task: wait (bounded) until stored.
        let history = ReceiptHistory::new(Arc::new(SqliteStore::open(&file).unwrap()));
        aml_test_support::wait_until_async(
            "the third outcome to be stored",
            Duration::from_secs(5),
            || async { (history.search(&HistoryQuery::newest(10)).await.unwrap().len() == 3).then_some(()) },
        )
        .await;
        host.page.shutdown().await;
    }
    // Another page (another process would do the same) on the same file.
    let store = Arc::new(SqliteStore::open(&file).unwrap());
    let host = host_with(|b| b.history(Arc::new(ReceiptHistory::new(store.clone())))).await;
    let (status, history) = host.api("GET", "/api/v1/history", None).await;
    assert_eq!(status, 200, "{history}");
    let listed: Vec<(String, String)> = history["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["outcome"].as_str().unwrap().to_owned(),
                e["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [("withdrawn", ""), ("denied", "Not today."), ("approved", "")]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    assert_eq!(history["history"][2]["decided_by"], "alice");
    let page = host
        .request("GET", &format!("/?t={}", host.token()), &[], "")
        .await;
    assert_eq!(page.matches("<li class=\"outcome ").count(), 3, "{page}");
    assert!(page.contains("<q class=\"why\">Not today.</q>"), "{page}");

    // The search reaches back as far as its window, no further.
    let later = |days: i64| -> Arc<dyn Clock> {
        Arc::new(ManualClock::new(SystemClock.now_ms() + days * 86_400_000))
    };
    let week = ReceiptHistory::new(store.clone()).with_clock(later(3));
    assert_eq!(
        week.search(&HistoryQuery::newest(10)).await.unwrap().len(),
        3,
        "within the week's window"
    );
    let day = ReceiptHistory::new(store)
        .with_window(Duration::from_secs(86_400))
        .with_clock(later(3));
    assert!(
        day.search(&HistoryQuery::newest(10)).await.unwrap().is_empty(),
        "beyond a one-day window"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

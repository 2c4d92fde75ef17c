//! The JSON API beside the page (`/api/v1/`), driven as an integration drives it with curl:
//! the page's token as `Authorization: Bearer`, list, fetch and decide (with a deny
//! reason); refused with a wrong or missing token, from a foreign origin, when replayed or
//! stale; the history of what was decided, searchable by caller.

use crate::common;

use std::sync::atomic::Ordering;

use aml_approval::{Requester, SignedStatement};
use aml_core::ReceiptReason;
use common::{host_custom, split_json};
use serde_json::{json, Value};

/// A host whose hook names the caller after the body's first word (`alice: …`), so calls
/// from different callers can be told apart.
async fn host() -> common::Host {
    host_custom(
        |page| page,
        |hook| {
            hook.with_requester(|request| {
                let arguments = request.proposal().arguments();
                let body = arguments["body"].as_str().unwrap_or_default();
                let caller = body.split(':').next().unwrap_or_default();
                Requester::unknown()
                    .with_caller(format!("agent {caller}"))
                    .with_client("inspector", "0.9")
            })
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_fetch_and_decide_with_the_bearer_token() {
    let host = host().await;
    let call = host.propose("alice: Build passed.");
    let [digest] = host.wait_for_pending(1).await[..] else {
        unreachable!()
    };

    let (status, listed) = host.api("GET", "/api/v1/pending", None).await;
    assert_eq!(status, 200, "{listed}");
    let first = &listed["pending"][0];
    assert_eq!(first["proposal_sha256"], digest.to_string());
    assert_eq!(first["tool"], "send_message");
    assert_eq!(first["resource"], "team@example.test");
    assert_eq!(first["requester"]["caller"], "agent alice");
    assert_eq!(first["requester"]["client_name"], "inspector");
    assert_eq!(first["requester"]["session"], Value::Null, "not known");
    assert_eq!(first["arguments"]["body"], "alice: Build passed.");
    let (asked, expires) = (
        first["asked_at_ms"].as_i64().unwrap(),
        first["expires_at_ms"].as_i64().unwrap(),
    );
    assert!(
        (59_000..=61_000).contains(&(expires - asked)),
        "the hook waits 60 s: {first}"
    );
    assert_eq!(listed["seq"], 1, "{listed}");

    let grant = first["grant_id"].as_str().unwrap();
    let (status, one) = host.api("GET", &format!("/api/v1/pending/{grant}"), None).await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["pending"]["grant_id"], grant);

    let decision = json!({"grant_id": grant, "proposal_sha256": digest.to_string(), "decision": "approve"});
    let (status, decided) = host.api("POST", "/api/v1/decide", Some(&decision)).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["outcome"]["outcome"], "approved");
    assert_eq!(decided["outcome"]["decided_by"], "alice");
    let statement = SignedStatement::from_json(&decided["statement"].to_string()).unwrap();
    assert_eq!(statement.statement().grant_id(), grant);
    assert_eq!(call.await.unwrap(), ReceiptReason::HostDispatchReturned);
    assert_eq!(host.calls.load(Ordering::SeqCst), 1);

    // Replayed: the same decision again decides nothing.
    let (status, replayed) = host.api("POST", "/api/v1/decide", Some(&decision)).await;
    assert_eq!(status, 409, "{replayed}");
    assert_eq!(replayed["error"], "already_decided", "{replayed}");
    let (status, gone) = host.api("GET", &format!("/api/v1/pending/{grant}"), None).await;
    assert_eq!(status, 404, "{gone}");
    assert_eq!(
        gone["outcome"]["outcome"], "approved",
        "it says what became of it: {gone}"
    );
    assert_eq!(host.calls.load(Ordering::SeqCst), 1);
    assert_eq!(host.signed.lock().unwrap().len(), 1, "one signed decision");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_carries_its_reason_in_the_signed_statement() {
    let host = host().await;
    let call = host.propose("bob: Tell everyone.");
    let [digest] = host.wait_for_pending(1).await[..] else {
        unreachable!()
    };
    let (_, listed) = host.api("GET", "/api/v1/pending", None).await;
    let grant = listed["pending"][0]["grant_id"].as_str().unwrap().to_owned();
    let decide = |decision: &str, reason: &str| json!({"grant_id": grant, "proposal_sha256": digest.to_string(), "decision": decision, "reason": reason});
    // A reason is for a deny only, and must read as its bytes.
    let (status, refused) = host
        .api("POST", "/api/v1/decide", Some(&decide("approve", "fine")))
        .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (400, Some("bad_reason")),
        "{refused}"
    );
    let (status, refused) = host
        .api("POST", "/api/v1/decide", Some(&decide("deny", "rtl\u{202E}")))
        .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (400, Some("bad_reason")),
        "{refused}"
    );
    assert_eq!(host.page.pending_count(), 1, "nothing was decided");

    let (status, denied) = host
        .api(
            "POST",
            "/api/v1/decide",
            Some(&decide("deny", "Not to the whole team.")),
        )
        .await;
    assert_eq!(status, 200, "{denied}");
    assert_eq!(denied["outcome"]["reason"], "Not to the whole team.");
    assert_eq!(call.await.unwrap(), ReceiptReason::ApprovalMissingOrMismatched);
    // The reason is in the statement the hook verified (and journals, and the host's
    // decision log receives).
    let signed = host.signed.lock().unwrap()[0].clone();
    assert_eq!(signed.statement().reason(), Some("Not to the whole team."));
    assert_eq!(host.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_a_foreign_origin_and_a_stale_digest_decide_nothing() {
    let host = host().await;
    let call = host.propose("carol: Please wait.");
    let [digest] = host.wait_for_pending(1).await[..] else {
        unreachable!()
    };
    let (_, listed) = host.api("GET", "/api/v1/pending", None).await;
    let grant = listed["pending"][0]["grant_id"].as_str().unwrap().to_owned();
    let decision =
        json!({"grant_id": grant, "proposal_sha256": digest.to_string(), "decision": "approve"}).to_string();
    let own = format!("http://{}", host.authority());
    let bearer = format!("Bearer {}", host.token());
    let json_type = ("Content-Type", "application/json");
    type Attempt<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, u16, &'a str);
    let attempts: [Attempt; 9] = [
        ("GET", "/api/v1/pending", vec![], 401, "unauthorized"),
        (
            "GET",
            "/api/v1/pending",
            vec![("Authorization", "Bearer 00ff")],
            401,
            "unauthorized",
        ),
        (
            "GET",
            "/api/v1/pending",
            vec![("Authorization", "Basic YTpi")],
            401,
            "unauthorized",
        ),
        (
            "GET",
            "/api/v1/pending",
            vec![("Authorization", &bearer), ("Origin", "http://evil.example")],
            403,
            "foreign_origin",
        ),
        (
            "GET",
            "/api/v1/pending",
            vec![("Authorization", &bearer), ("Sec-Fetch-Site", "cross-site")],
            403,
            "foreign_origin",
        ),
        (
            "POST",
            "/api/v1/decide",
            vec![("Authorization", "Bearer 00ff"), ("Origin", &own), json_type],
            401,
            "unauthorized",
        ),
        (
            "POST",
            "/api/v1/decide",
            vec![
                ("Authorization", &bearer),
                ("Origin", "http://evil.example"),
                json_type,
            ],
            403,
            "foreign_origin",
        ),
        (
            "POST",
            "/api/v1/decide",
            vec![("Authorization", &bearer), json_type],
            403,
            "foreign_origin",
        ),
        (
            "POST",
            "/api/v1/decide",
            vec![
                ("Authorization", &bearer),
                ("Origin", &own),
                ("Content-Type", "text/plain"),
            ],
            415,
            "unsupported_media_type",
        ),
    ];
    for (method, path, headers, want, code) in attempts {
        let (status, body) = split_json(&host.request(method, path, &headers, &decision).await);
        assert_eq!(
            (status, body["error"].as_str()),
            (want, Some(code)),
            "{method} {headers:?}: {body}"
        );
    }
    let (status, www) = (
        host.request("GET", "/api/v1/pending", &[], "").await,
        "www-authenticate: bearer",
    );
    assert!(status.to_ascii_lowercase().contains(www), "{status}");
    // Malformed, and for another digest (a proposal that changed since it was shown).
    let (status, body) = split_json(
        &host
            .request(
                "POST",
                "/api/v1/decide",
                &[("Authorization", &bearer), ("Origin", &own), json_type],
                "{\"grant_id\":",
            )
            .await,
    );
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    let stale = json!({"grant_id": grant, "proposal_sha256": "0".repeat(64), "decision": "approve"});
    let (status, body) = host.api("POST", "/api/v1/decide", Some(&stale)).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("changed")), "{body}");
    assert_eq!(host.page.pending_count(), 1, "nothing was decided");
    assert!(host.signed.lock().unwrap().is_empty());
    let (status, _) = host.api("DELETE", "/api/v1/pending", None).await;
    assert_eq!(status, 405);
    call.abort();
    let _ = call.await;
    host.wait_for_pending(0).await;
    // Withdrawn meanwhile: a decision for it says so.
    let (status, body) = host
        .api(
            "POST",
            "/api/v1/decide",
            Some(&serde_json::from_str(&decision).unwrap()),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("withdrawn")),
        "{body}"
    );
    assert_eq!(host.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_lists_decisions_newest_first_searchable_by_tool_and_caller() {
    let host = host().await;
    for (body, decision) in [
        ("alice: one", "approve"),
        ("bob: two", "deny"),
        ("alice: three", "deny"),
    ] {
        let call = host.propose(body);
        host.wait_for_pending(1).await;
        let (status, answer) = host.decide_first(decision, None).await;
        assert_eq!(status, 200, "{answer}");
        call.await.unwrap();
    }
    host.propose_and_withdraw("carol: four").await;

    let outcomes = |history: &Value| -> Vec<(String, String)> {
        history["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["outcome"].as_str().unwrap().to_owned(),
                    e["requester"]["caller"].as_str().unwrap_or("?").to_owned(),
                )
            })
            .collect()
    };
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    };
    let (status, all) = host.api("GET", "/api/v1/history", None).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(
        outcomes(&all),
        pairs(&[
            ("withdrawn", "agent carol"),
            ("denied", "agent alice"),
            ("denied", "agent bob"),
            ("approved", "agent alice")
        ])
    );
    assert_eq!(all["history"][3]["decided_by"], "alice");
    assert_eq!(all["history"][0]["decided_by"], Value::Null);
    let (_, alice) = host.api("GET", "/api/v1/history?caller=ALICE", None).await;
    assert_eq!(
        outcomes(&alice),
        pairs(&[("denied", "agent alice"), ("approved", "agent alice")])
    );
    let (_, tool) = host.api("GET", "/api/v1/history?tool=send&limit=2", None).await;
    assert_eq!(outcomes(&tool).len(), 2);
    let (_, none) = host.api("GET", "/api/v1/history?tool=delete", None).await;
    assert_eq!(outcomes(&none), pairs(&[]));
    let (status, bad) = host.api("GET", "/api/v1/history?limit=0", None).await;
    assert_eq!(status, 400, "{bad}");
    // The page lists them too, and its search form filters.
    let page = host
        .request("GET", &format!("/?t={}&caller=bob", host.token()), &[], "")
        .await;
    assert_eq!(page.matches("<li class=\"outcome ").count(), 1, "{page}");
    assert!(page.contains("<span class=\"badge\">Denied</span>"), "{page}");
}

/// The curl commands docs/APPROVAL.md shows, run against a page as written (only the URL
/// line is this page's): each answers as the docs say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_curl_commands_work() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/APPROVAL.md")).unwrap();
    let block = docs
        .split("```sh\nURL='http://127.0.0.1:8765/?t=5f3c…'\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/APPROVAL.md shows the curl commands");
    assert!(
        std::process::Command::new("curl")
            .arg("--version")
            .output()
            .is_ok(),
        "curl is missing: the documented commands need it"
    );
    let host = host().await;
    let call = host.propose("erin: To everyone.");
    let [digest] = host.wait_for_pending(1).await[..] else {
        unreachable!()
    };
    let (_, listed) = host.api("GET", "/api/v1/pending", None).await;
    let grant = listed["pending"][0]["grant_id"].as_str().unwrap().to_owned();
    let script = format!("URL='{}'\n{block}", host.page.url());
    let ran = tokio::process::Command::new("sh")
        .arg("-ec")
        .arg(&script)
        .env("GRANT", &grant)
        .env("DIGEST", digest.to_string())
        .output()
        .await
        .unwrap();
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    let answers: Vec<Value> = serde_json::Deserializer::from_slice(&ran.stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap();
    let [pending, one, decided, history] = &answers[..] else {
        panic!("four answers expected: {answers:?}")
    };
    assert_eq!(pending["pending"][0]["grant_id"], grant.as_str());
    assert_eq!(one["pending"]["proposal_sha256"], digest.to_string());
    assert_eq!(decided["outcome"]["outcome"], "denied", "{decided}");
    assert_eq!(decided["outcome"]["reason"], "Not to the whole team.");
    assert_eq!(history["history"][0]["grant_id"], grant.as_str(), "{history}");
    assert_eq!(call.await.unwrap(), ReceiptReason::ApprovalMissingOrMismatched);
}

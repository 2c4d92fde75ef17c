//! The client credentials token source: the wire format without a network, then against a
//! loopback token endpoint and upstream written here.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_mcp::relay::Inbound;
use bytes::Bytes;
use hyper::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client::{ClientAuth, ClientCredentials, TokenSource};
use super::wire::{self, read_answer, refresh_after};

#[test]
fn the_form_and_basic_authentication_follow_rfc_6749() {
    assert_eq!(wire::form_encode("a b+c/é~"), "a+b%2Bc%2F%C3%A9%7E");
    assert_eq!(
        wire::form(&[("grant_type", "client_credentials"), ("scope", "mcp:tools x")]),
        "grant_type=client_credentials&scope=mcp%3Atools+x"
    );
    // RFC 7617's example, then an id and secret that need form encoding first (§2.3.1).
    assert_eq!(
        wire::basic("Aladdin", "open sesame"),
        "Basic QWxhZGRpbjpvcGVuK3Nlc2FtZQ=="
    );
    assert_eq!(wire::basic("a", "b"), "Basic YTpi");
    assert_eq!(wire::basic("ab:", "c"), "Basic YWIlM0E6Yw==");
}

#[test]
fn a_bearer_answer_is_read_and_everything_else_is_a_clear_refusal() {
    let ok = |body: &str| read_answer(StatusCode::OK, body.as_bytes());
    let issued = ok(r#"{"access_token":"abc.DEF-_~+/=","token_type":"bearer","expires_in":3}"#).unwrap();
    assert_eq!(issued.header, "Bearer abc.DEF-_~+/=");
    assert_eq!(issued.lifetime, Duration::from_secs(3));
    let issued = ok(r#"{"access_token":"t","token_type":"Bearer","expires_in":"120"}"#).unwrap();
    assert_eq!(issued.lifetime, Duration::from_secs(120));
    let issued = ok(r#"{"access_token":"t","token_type":"BEARER"}"#).unwrap();
    assert_eq!(issued.lifetime, wire::DEFAULT_LIFETIME);
    assert_eq!(
        ok(r#"{"access_token":"t","token_type":"bearer","expires_in":-5}"#)
            .unwrap()
            .lifetime,
        Duration::ZERO
    );
    let refused = |status: StatusCode, body: &str| read_answer(status, body.as_bytes()).unwrap_err();
    let error = refused(
        StatusCode::UNAUTHORIZED,
        r#"{"error":"invalid_client","error_description":"bad\nsecret\u0000"}"#,
    );
    assert_eq!(
        error,
        "refused (HTTP 401 Unauthorized): invalid_client: badsecret"
    );
    assert!(refused(StatusCode::OK, r#"{"error":"invalid_scope"}"#).contains("invalid_scope"));
    assert_eq!(
        refused(StatusCode::BAD_GATEWAY, "<html>"),
        "answered HTTP 502 Bad Gateway"
    );
    assert_eq!(refused(StatusCode::OK, "<html>"), "the answer is not JSON");
    assert!(refused(StatusCode::OK, "[1]").contains("no access_token"));
    assert!(refused(StatusCode::OK, r#"{"token_type":"bearer"}"#).contains("no access_token"));
    assert!(refused(StatusCode::OK, r#"{"access_token":7,"token_type":"bearer"}"#).contains("not a string"));
    assert!(refused(StatusCode::OK, r#"{"access_token":"t","token_type":"mac"}"#).contains("not Bearer"));
    assert!(refused(StatusCode::OK, r#"{"access_token":"t"}"#).contains("no token_type"));
    assert!(
        refused(StatusCode::OK, r#"{"access_token":"a b","token_type":"bearer"}"#)
            .contains("not a bearer token")
    );
    let huge = format!(
        r#"{{"access_token":"{}","token_type":"bearer"}}"#,
        "a".repeat(20_000)
    );
    assert!(refused(StatusCode::OK, &huge).contains("not a bearer token"));
    assert!(refused(
        StatusCode::OK,
        r#"{"access_token":"t","token_type":"bearer","expires_in":[]}"#
    )
    .contains("expires_in"));
    let long = format!(r#"{{"error":"x","error_description":"{}"}}"#, "d".repeat(10_000));
    assert!(refused(StatusCode::BAD_REQUEST, &long).len() < 300);
}

#[test]
fn a_token_is_fetched_again_before_it_expires_but_not_for_every_request() {
    let s = Duration::from_secs;
    assert_eq!(refresh_after(s(3600)), s(2880), "80% of an hour");
    assert_eq!(refresh_after(s(120)), s(60), "60 s before");
    assert_eq!(refresh_after(s(100)), s(50), "never before half");
    assert_eq!(refresh_after(s(3)), Duration::from_millis(1500));
    assert_eq!(refresh_after(Duration::ZERO), Duration::ZERO);
}

#[test]
fn the_secret_is_checked_and_never_shown() {
    let url = "http://127.0.0.1:9/token";
    assert!(ClientCredentials::new(url, "", "s").is_err());
    assert!(ClientCredentials::new(url, "id", "").is_err());
    assert!(ClientCredentials::new(url, "id", "s\n").is_err());
    assert!(ClientCredentials::new("ftp://as/token", "id", "s").is_err());
    let credentials = ClientCredentials::new(url, "id", "hunter2-secret").unwrap();
    assert!(credentials.clone().with_scopes(vec!["a b".into()]).is_err());
    assert!(credentials.clone().with_resource("mcp").is_err());
    assert!(credentials.clone().with_resource("http://x/mcp#f").is_err());
    let source = TokenSource::new(credentials).unwrap();
    assert!(!format!("{source:?}").contains("hunter2"));
}

/// A loopback HTTP server: each request's text is kept, and `answer` gives each one's
/// status and JSON body. Every answer closes its connection.
fn serve(
    answer: impl Fn(&str, usize) -> (u16, String) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (kept, answer) = (seen.clone(), Arc::new(answer));
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (kept, answer) = (kept.clone(), answer.clone());
            tokio::spawn(async move {
                let mut text = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = stream.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    text.extend_from_slice(&buf[..n]);
                    let head = String::from_utf8_lossy(&text).into_owned();
                    let Some(end) = head.find("\r\n\r\n") else {
                        continue;
                    };
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if text.len() >= end + 4 + length {
                        break;
                    }
                }
                let request = String::from_utf8_lossy(&text).into_owned();
                let n = {
                    let mut seen = kept.lock().unwrap();
                    seen.push(request.clone());
                    seen.len()
                };
                let (status, body) = answer(&request, n);
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    (base, seen)
}

fn bearer(token: &str, expires_in: u64) -> (u16, String) {
    (
        200,
        format!(r#"{{"access_token":"{token}","token_type":"Bearer","expires_in":{expires_in}}}"#),
    )
}

#[tokio::test]
async fn the_token_is_cached_fetched_once_for_concurrent_requests_and_refreshed() {
    let (base, seen) = serve(|_, n| bearer(&format!("t{n}"), 3));
    let credentials = ClientCredentials::new(&format!("{base}/token"), "gate one", "p@ss:word")
        .unwrap()
        .with_scopes(vec!["mcp:tools".into(), "b".into()])
        .unwrap()
        .with_resource("http://up.test/mcp")
        .unwrap();
    let source = Arc::new(TokenSource::new(credentials).unwrap());
    let asks: Vec<_> = (0..8)
        .map(|_| {
            let source = source.clone();
            tokio::spawn(async move { source.authorization().await })
        })
        .collect();
    for ask in asks {
        assert_eq!(ask.await.unwrap().unwrap(), "Bearer t1");
    }
    assert_eq!(source.fetches().await, 1, "one fetch for eight requests");
    let request = seen.lock().unwrap()[0].clone();
    assert!(request.starts_with("POST /token HTTP/1.1\r\n"), "{request}");
    assert!(
        request.contains("authorization: Basic Z2F0ZStvbmU6cCU0MHNzJTNBd29yZA==\r\n"),
        "{request}"
    );
    assert!(request.ends_with(
        "grant_type=client_credentials&client_id=gate+one&scope=mcp%3Atools+b&resource=http%3A%2F%2Fup.test%2Fmcp"
    ));
    // Half of the 3 s lifetime later, a new one: the sleep is the token aging, not a wait.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(source.authorization().await.unwrap(), "Bearer t2");
    assert_eq!(source.authorization().await.unwrap(), "Bearer t2");
    // A 401 for an older token leaves the newer one; for the current one, a new fetch.
    source.refused(&"Bearer t1".parse().unwrap()).await;
    assert_eq!(source.authorization().await.unwrap(), "Bearer t2");
    source.refused(&"Bearer t2".parse().unwrap()).await;
    assert_eq!(source.authorization().await.unwrap(), "Bearer t3");
    assert_eq!(source.fetches().await, 3);
}

#[tokio::test]
async fn post_authentication_puts_the_secret_in_the_form() {
    let (base, seen) = serve(|_, _| bearer("t", 60));
    let credentials = ClientCredentials::new(&format!("{base}/token"), "id", "s e")
        .unwrap()
        .with_client_auth(ClientAuth::Post);
    let source = TokenSource::new(credentials).unwrap();
    source.authorization().await.unwrap();
    let request = seen.lock().unwrap()[0].to_ascii_lowercase();
    assert!(!request.contains("authorization:"), "{request}");
    assert!(request.ends_with("grant_type=client_credentials&client_id=id&client_secret=s+e"));
}

#[tokio::test]
async fn an_endpoint_that_is_down_or_refuses_is_a_clear_error_without_the_secret() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let source =
        TokenSource::new(ClientCredentials::new(&format!("http://{closed}/token"), "id", "s3cr3t").unwrap())
            .unwrap();
    let started = std::time::Instant::now();
    let why = source.authorization().await.unwrap_err();
    assert!(why.contains("cannot connect"), "{why}");
    // Within the retry delay: refused again without asking.
    assert_eq!(source.authorization().await.unwrap_err(), why);
    assert_eq!(source.fetches().await, 1);
    assert!(started.elapsed() < Duration::from_secs(2));

    let (base, _) = serve(|_, _| {
        (
            401,
            r#"{"error":"invalid_client","error_description":"secret s3cr3t is wrong"}"#.into(),
        )
    });
    let source =
        TokenSource::new(ClientCredentials::new(&format!("{base}/token"), "id", "s3cr3t").unwrap()).unwrap();
    let why = source.authorization().await.unwrap_err();
    assert!(why.contains("invalid_client"), "{why}");
    assert!(!why.contains("s3cr3t"), "{why}");
}

#[tokio::test]
async fn the_upstream_gets_the_token_and_a_401_fetches_a_new_one_once() {
    let (base, seen) = serve(|request, n| {
        if request.starts_with("POST /token") {
            return bearer(&format!("t{n}"), 300);
        }
        match request.contains("authorization: Bearer t1\r\n") {
            true => (401, String::new()),
            false => (200, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.into()),
        }
    });
    let credentials = ClientCredentials::new(&format!("{base}/token"), "id", "s").unwrap();
    let config = crate::UpstreamConfig::default()
        .with_client_credentials(credentials)
        .unwrap();
    assert!(matches!(
        crate::http_upstream(&format!("{base}/mcp"), config.clone().with_bearer_token("x")),
        Err(crate::UpstreamError::TwoAuthorizations)
    ));
    let mut upstream = crate::http_upstream(&format!("{base}/mcp"), config).unwrap();
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    upstream
        .connection
        .outgoing
        .send(Bytes::from(call))
        .await
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), upstream.connection.incoming.recv())
        .await
        .unwrap();
    let Some(Inbound::Message(answer)) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(&answer[..], br#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
    let seen = seen.lock().unwrap().clone();
    let lines: Vec<&str> = seen.iter().map(|r| r.lines().next().unwrap()).collect();
    assert_eq!(
        lines,
        [
            "POST /token HTTP/1.1",
            "POST /mcp HTTP/1.1",
            "POST /token HTTP/1.1",
            "POST /mcp HTTP/1.1"
        ]
    );
    assert!(seen[3].contains("authorization: Bearer t3\r\n"), "{}", seen[3]);
}

#[tokio::test]
async fn a_request_without_a_token_is_answered_with_an_error_and_the_upstream_stays() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (base, seen) = serve(|_, _| (200, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.into()));
    let credentials = ClientCredentials::new(&format!("http://{closed}/token"), "id", "s").unwrap();
    let config = crate::UpstreamConfig::default()
        .with_client_credentials(credentials)
        .unwrap();
    let mut upstream = crate::http_upstream(&format!("{base}/mcp"), config).unwrap();
    let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#;
    upstream
        .connection
        .outgoing
        .send(Bytes::from(call))
        .await
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), upstream.connection.incoming.recv())
        .await
        .unwrap();
    let Some(Inbound::Message(answer)) = answer else {
        panic!("{answer:?}")
    };
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["id"], 7);
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("cannot get an access token"), "{message}");
    assert!(seen.lock().unwrap().is_empty(), "nothing reached the server");
    assert!(upstream.exited.try_recv().is_err(), "the upstream is not gone");
}

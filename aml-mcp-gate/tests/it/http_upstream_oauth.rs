//! The gate authenticates to its `--upstream` as itself, never with its clients' tokens
//! (issue 33). A chain: the official Python SDK client signs in as `alice` (authorization
//! code + PKCE) and calls through a front gate (an OAuth resource server), whose upstream
//! client gets its own token by client credentials from the same authorization server
//! (`scripts/interop/oauth_as.py`: the MCP SDK's auth components, the client credentials
//! grant as glue in front of its /token), and reaches a back gate (a resource server whose
//! audience is its own URL) in front of the SDK notice server. Between the two gates a
//! logging proxy (`scripts/interop/logging_proxy.py`) keeps every byte the back gate receives.

use crate::session;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use session::*;

const CLIENT: &str = "front-gate";
const SECRET: &str = "cc-secret-7f3a9d1e5b2c";
/// The client credentials tokens' lifetime: short, so that a few calls see a refresh.
const TOKEN_SECONDS: &str = "3";

/// A child ended when dropped, with what it printed first and its stderr.
struct Peer {
    child: Child,
    first: String,
    log: Lines,
}

impl Drop for Peer {
    fn drop(&mut self) {
        if self.child.exited().is_none() {
            self.child.signal("TERM");
            let _ = self.child.wait_within(WAIT);
        }
    }
}

impl Peer {
    fn start(what: &str, command: &mut Command) -> Peer {
        let mut child = Child::spawn(what, command.stdout(Stdio::piped()).stderr(Stdio::piped()));
        let first = child.stdout_lines().next(WAIT);
        let log = child.stderr_lines();
        Peer { child, first, log }
    }

    fn stop(mut self) -> String {
        self.child.signal("TERM");
        let _ = self.child.wait_within(WAIT);
        self.log
            .rest_within(WAIT)
            .unwrap_or_else(|so_far| so_far)
            .join("\n")
    }
}

fn free_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/mcp")
}

/// A gate in `dir` serving `url`, accepting the issuer's tokens for it; `extra` before the
/// server command (the notice server, unless `--upstream` is among them).
fn gate(dir: &Path, url: &str, issuer: &str, extra: &[&str], audit: &Path) -> Peer {
    let path = |file: &str| dir.join(file).display().to_string();
    let listen = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let mut command = Command::new(GATE);
    command
        .args(["--policy", &path("policy.cedar"), "--tools", &path("tools.json")])
        .args(["--receipts", &path("receipts.jsonl"), "--state", "memory"])
        .args([
            "--listen",
            listen,
            "--auth-issuer",
            issuer,
            "--auth-audience",
            url,
        ])
        .args(["--auth-scopes", "mcp:tools"])
        .args(extra)
        .env("AML_NOTICE_AUDIT", audit)
        .env("RUST_LOG", "warn,aml_mcp_http=info")
        .stdin(Stdio::null());
    if !extra.contains(&"--upstream") {
        command
            .arg("--")
            .arg(python())
            .arg(repo().join("scripts/interop/mcp_notice_server.py"));
    }
    let gate = Peer::start("a gate", &mut command);
    assert_eq!(gate.first.trim(), format!("aml-mcp-gate: MCP at {url}"));
    gate
}

/// A folder for one gate: the notice tool, and a policy that permits `caller` only.
fn gate_dir(dir: &Path, name: &str, caller: &str) -> PathBuf {
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).unwrap();
    write_config(&sub, None);
    let policy = format!("permit(principal == Caller::\"{caller}\", action, resource);\n");
    std::fs::write(sub.join("policy.cedar"), policy).unwrap();
    sub
}

struct Chain {
    dir: PathBuf,
    server: Peer,
    issuer: String,
    back: Peer,
    proxy: Peer,
    front: Peer,
    front_url: String,
}

/// The authorization server, the back gate, the proxy and the front gate, whose token
/// endpoint is `token_url` (`None`: the authorization server's).
fn chain(tag: &str, token_url: Option<&str>) -> Chain {
    let dir = work(tag);
    let secret = dir.join("client-secret.txt");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let server = Peer::start(
        "the authorization server",
        Command::new(python())
            .arg(repo().join("scripts/interop/oauth_as.py"))
            .arg(dir.join("as-key.pem"))
            .args(["--client", CLIENT, &secret.display().to_string(), "basic"])
            .args(["--client-token-seconds", TOKEN_SECONDS]),
    );
    let issuer = server
        .first
        .strip_prefix("oauth-as: ")
        .expect("the issuer")
        .to_owned();
    let audit = dir.join("audit.jsonl");
    let back_url = free_url();
    let back = gate(&gate_dir(&dir, "back", CLIENT), &back_url, &issuer, &[], &audit);
    let target = back_url.trim_start_matches("http://").trim_end_matches("/mcp");
    let proxy = Peer::start(
        "the logging proxy",
        Command::new(python())
            .arg(repo().join("scripts/interop/logging_proxy.py"))
            .arg(dir.join("upstream-requests.log"))
            .arg(target),
    );
    let proxied = format!(
        "{}/mcp",
        proxy.first.strip_prefix("logging-proxy: ").unwrap().trim()
    );
    let token_url = token_url.map_or_else(|| format!("{issuer}token"), str::to_owned);
    let front_url = free_url();
    let front = gate(
        &gate_dir(&dir, "front", "alice"),
        &front_url,
        &issuer,
        &[
            "--upstream",
            &proxied,
            "--upstream-token-url",
            &token_url,
            "--upstream-client-id",
            CLIENT,
            "--upstream-client-secret-file",
            &secret.display().to_string(),
            "--upstream-scopes",
            "mcp:tools",
            "--upstream-resource",
            &back_url,
        ],
        &audit,
    );
    Chain {
        dir,
        server,
        issuer,
        back,
        proxy,
        front,
        front_url,
    }
}

impl Chain {
    /// The SDK client signs in as alice and makes `calls` calls, `pause` seconds apart.
    fn client(&self, calls: u32, pause: &str) -> Value {
        let arguments = json!({"to": TO, "body": "Build passed."}).to_string();
        let client = Child::spawn(
            "the Python SDK OAuth client",
            Command::new(python())
                .arg(repo().join("scripts/interop/mcp_oauth_client.py"))
                .args(["oauth", &self.front_url, "alice", "send_notice", &arguments])
                .args([&calls.to_string(), pause])
                .stdout(Stdio::piped()),
        );
        let out = client.output(Duration::from_secs(120));
        assert!(out.status.success(), "the client failed");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn reached(&self) -> usize {
        std::fs::read_to_string(self.dir.join("audit.jsonl")).map_or(0, |t| t.lines().count())
    }

    fn upstream_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("upstream-requests.log")).unwrap_or_default()
    }
}

fn callers(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("receipts.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["record"] == "aml-call-record/1")
        .map(|r| r["caller"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The client credentials tokens the authorization server issued, in order.
fn issued(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.strip_prefix(&format!("oauth-as: client_credentials {CLIENT} ")))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_upstream_sees_the_gates_own_token_never_the_clients_and_it_is_refreshed() {
    let chain = chain("upstream-cc", None);
    let started = Instant::now();
    let report = chain.client(6, "0.8");
    let elapsed = started.elapsed();
    let calls = report["calls"].as_array().unwrap_or_else(|| panic!("{report}"));
    assert_eq!(calls.len(), 6, "{report}");
    for call in calls {
        assert_eq!(
            outcome(call),
            pair("dispatched", "host_dispatch_returned"),
            "{report}"
        );
    }
    assert_eq!(chain.reached(), 6, "each call reached the server once");
    let alice = report["access_token"].as_str().unwrap().to_owned();
    assert_eq!(report["token_claims"]["aud"], chain.front_url.as_str());

    let Chain {
        dir,
        server,
        issuer,
        back,
        proxy,
        front,
        ..
    } = chain;
    let front_log = front.stop();
    back.stop();
    drop(proxy);
    let tokens = issued(&server.stop());
    let upstream = std::fs::read_to_string(dir.join("upstream-requests.log")).unwrap();

    // What the back gate received: the gate's own token on every request, never alice's.
    let signature = alice.rsplit('.').next().unwrap();
    assert!(
        !upstream.contains(&alice) && !upstream.contains(signature),
        "alice's token reached the upstream"
    );
    assert!(
        !upstream.contains(SECRET) && !front_log.contains(SECRET),
        "the client secret leaked"
    );
    // Only requests are logged, each with its request line (a body runs into the next one).
    let requests = upstream.matches(" HTTP/1.1\r\n").count();
    let presented: Vec<&str> = upstream
        .split("\r\n")
        .filter_map(|l| l.strip_prefix("authorization: Bearer "))
        .collect();
    assert_eq!(presented.len(), requests, "one token per request:\n{upstream}");
    assert!(
        presented.iter().all(|t| tokens.iter().any(|i| i == t)),
        "only issued tokens"
    );
    assert!(
        requests >= 9,
        "initialize, initialized and six calls at least: {requests}"
    );

    // Refreshed (3 s tokens, fetched again after half), but not per request.
    let bound = (elapsed.as_secs_f64() / 1.5).ceil() as usize + 2;
    assert!(
        tokens.len() >= 2,
        "no refresh in {elapsed:?}: {} tokens",
        tokens.len()
    );
    assert!(
        tokens.len() <= bound && tokens.len() < requests,
        "{} tokens for {requests} requests in {elapsed:?}",
        tokens.len()
    );
    let used: std::collections::BTreeSet<&str> = presented.iter().copied().collect();
    assert!(used.len() >= 2, "the refreshed token was used");

    // The back gate knows the front gate by its client id, the front gate knows alice.
    assert_eq!(callers(&dir.join("back")), vec![CLIENT; 6]);
    assert_eq!(callers(&dir.join("front")), vec!["alice"; 6]);
    let claims = claims(&tokens[0]);
    assert_eq!(claims["sub"], CLIENT);
    assert_eq!(claims["iss"], issuer.as_str());
    assert!(
        front_log.contains("got an access token for the upstream"),
        "{front_log}"
    );
}

#[test]
fn a_token_endpoint_that_is_down_refuses_the_call_and_nothing_reaches_the_server() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let token_url = format!("http://{closed}/token");
    let chain = chain("upstream-cc-down", Some(&token_url));
    let started = Instant::now();
    let report = chain.client(1, "0");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    let error = report["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {report}"));
    assert!(error.contains("cannot get an access token"), "{report}");
    assert_eq!(chain.reached(), 0, "the server saw nothing");
    assert_eq!(chain.upstream_log(), "", "nothing reached the upstream");
    let line = chain
        .front
        .log
        .wait_for("cannot get an access token for the upstream from", WAIT);
    assert!(line.contains(&token_url) && !line.contains(SECRET), "{line}");
    let log = chain.front.stop();
    assert!(!log.contains(SECRET), "the secret is in the log");
}

/// A JWT's claims, read without checking (the token is the test's own).
fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    let script = "import base64, sys; p = sys.argv[1]; print(base64.urlsafe_b64decode(p + '=' * (-len(p) % 4)).decode())";
    let out = Command::new(python())
        .args(["-c", script, payload])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

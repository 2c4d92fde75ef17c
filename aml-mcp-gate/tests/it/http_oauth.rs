//! The gate as an OAuth 2.1 resource server, from outside. An authorization server built from
//! the official Python MCP SDK's auth server components (`scripts/interop/oauth_as.py`) issues
//! RS256 JWT access tokens; the SDK's own client finds it through the gate's 401 and
//! metadata, registers, signs in (authorization code + PKCE) and calls a tool; the token's
//! `sub` is the Cedar principal and the record's `caller`. Hostile tokens (forged with PyJWT,
//! `scripts/interop/oauth_forge.py`) are each refused and reach nothing; a key set that is
//! down or garbage fails closed.

use crate::session;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use session::*;

/// The authorization server; ended when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) issuer: String,
    /// Read as it comes, so the server never blocks on a full pipe.
    _log: Lines,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.terminate(WAIT);
    }
}

impl Server {
    pub(crate) fn start(dir: &Path) -> Server {
        let mut child = Child::spawn(
            "the authorization server",
            Command::new(python())
                .arg(repo().join("scripts/interop/oauth_as.py"))
                .arg(dir.join("as-key.pem"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let issuer = child
            .stdout_lines()
            .next(WAIT)
            .strip_prefix("oauth-as: ")
            .expect("the server's issuer")
            .to_owned();
        let log = child.stderr_lines();
        Server {
            child,
            issuer,
            _log: log,
        }
    }

    /// How many times others (the gate) fetched the key set so far: the server counts on
    /// the answer to a fetch of the test's own, which it serves after every earlier one.
    fn jwks_served(&self) -> usize {
        let addr = self.issuer.trim_start_matches("http://").trim_end_matches('/');
        let answer = http(
            addr,
            format!("GET /jwks HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        );
        let count = answer
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("x-jwks-served: ")
                    .map(str::to_owned)
            })
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or_else(|| panic!("no count in the server's answer: {answer}"));
        count - 1
    }
}

/// A gate on `127.0.0.1:port` whose resource URI is its own MCP URL; ended when dropped.
pub(crate) struct Gate {
    child: Child,
    pub(crate) url: String,
    pub(crate) log: Lines,
}

impl Drop for Gate {
    fn drop(&mut self) {
        if self.child.exited().is_none() {
            self.child.signal("TERM");
            let _ = self.child.wait_within(WAIT);
        }
    }
}

impl Gate {
    pub(crate) fn start(dir: &Path, issuer: &str, extra: &[&str]) -> Gate {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/mcp");
        let path = |file: &str| dir.join(file).display().to_string();
        let mut child = Child::spawn(
            "the gate",
            Command::new(GATE)
                .args(["--policy", &path("policy.cedar"), "--tools", &path("tools.json")])
                .args(["--receipts", &path("receipts.jsonl"), "--state", "memory"])
                .args(["--listen", &format!("127.0.0.1:{port}")])
                .args(["--auth-issuer", issuer, "--auth-audience", &url])
                .args(extra)
                .arg("--")
                .arg(python())
                .arg(repo().join("scripts/interop/mcp_notice_server.py"))
                .env("AML_NOTICE_AUDIT", dir.join("audit.jsonl"))
                .env("RUST_LOG", "warn,aml_mcp_http=info")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let line = child.stdout_lines().next(WAIT);
        assert_eq!(line.trim(), format!("aml-mcp-gate: MCP at {url}"));
        let log = child.stderr_lines();
        Gate { child, url, log }
    }
}

pub(crate) fn setup(tag: &str, subject: &str) -> std::path::PathBuf {
    let dir = work(tag);
    write_config(&dir, None);
    let policy = format!("permit(principal == Caller::\"{subject}\", action, resource);\n");
    std::fs::write(dir.join("policy.cedar"), policy).unwrap();
    dir
}

pub(crate) fn reached(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("audit.jsonl")).map_or(0, |t| t.lines().count())
}

fn run_client(args: &[&str]) -> Value {
    let client = Child::spawn(
        "the Python SDK OAuth client",
        Command::new(python())
            .arg(repo().join("scripts/interop/mcp_oauth_client.py"))
            .args(args)
            .stdout(Stdio::piped()),
    );
    let out = client.output(Duration::from_secs(120));
    assert!(out.status.success(), "the client failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Tokens from `oauth_forge.py`, by name.
pub(crate) fn forge(dir: &Path, specs: Value) -> Value {
    let (input, output) = (dir.join("specs.json"), dir.join("forged.json"));
    std::fs::write(&input, specs.to_string()).unwrap();
    let forger = Child::spawn(
        "the token forger",
        Command::new(python())
            .arg(repo().join("scripts/interop/oauth_forge.py"))
            .arg(dir.join("as-key.pem"))
            .args([&input, &output]),
    );
    assert!(forger.output(WAIT).status.success());
    serde_json::from_str(&std::fs::read_to_string(output).unwrap()).unwrap()
}

/// One raw POST per probe; the gate's answers.
pub(crate) fn probe(dir: &Path, url: &str, probes: Vec<Value>) -> Vec<Value> {
    let file = dir.join("probes.json");
    std::fs::write(&file, Value::Array(probes).to_string()).unwrap();
    let report = run_client(&["probe", url, &file.display().to_string()]);
    report.as_array().unwrap().clone()
}

fn records(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("receipts.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["record"] == "aml-call-record/1")
        .collect()
}

#[test]
fn the_sdk_signs_in_through_the_gates_metadata_and_the_policy_sees_the_tokens_subject() {
    let dir = setup("oauth-flow", "alice");
    let server = Server::start(&dir);
    let gate = Gate::start(&dir, &server.issuer, &["--auth-scopes", "mcp:tools"]);
    let arguments = json!({"to": TO, "body": "Build passed."}).to_string();
    let alice = run_client(&["oauth", &gate.url, "alice", "send_notice", &arguments]);
    assert_eq!(
        outcome(&alice),
        pair("dispatched", "host_dispatch_returned"),
        "{alice}"
    );
    let claims = &alice["token_claims"];
    assert_eq!(claims["sub"], "alice");
    assert_eq!(
        claims["aud"],
        gate.url.as_str(),
        "the token is bound to this gate (RFC 8707)"
    );
    assert_eq!(claims["iss"], server.issuer.as_str());
    let bob = run_client(&["oauth", &gate.url, "bob", "send_notice", &arguments]);
    assert_eq!(outcome(&bob), pair("blocked", "no_permit"), "{bob}");
    assert_eq!(reached(&dir), 1, "only alice's call reached the server");
    drop(gate);
    let records = records(&dir);
    let callers: Vec<&str> = records
        .iter()
        .map(|r| r["caller"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(callers, ["alice", "bob"]);
}

#[test]
fn hostile_tokens_are_refused_and_reach_nothing() {
    let dir = setup("oauth-hostile", "alice");
    let server = Server::start(&dir);
    // No --auth-jwks: the key set is found through the server's RFC 8414 metadata.
    let gate = Gate::start(&dir, &server.issuer, &["--auth-scopes", "mcp:tools"]);
    let good = json!({"sub": "alice", "iss": server.issuer, "aud": gate.url, "scope": "mcp:tools"});
    let with = |change: Value| {
        let mut claims = good.clone();
        claims
            .as_object_mut()
            .unwrap()
            .extend(change.as_object().unwrap().clone());
        claims
    };
    let unknown_kids: Vec<Value> = (0..5)
        .map(|n| json!({"name": format!("unknown kid {n}"), "claims": good, "kid": format!("made-up-{n}")}))
        .collect();
    let mut specs = vec![
        json!({"name": "valid", "claims": good}),
        json!({"name": "bob", "claims": with(json!({"sub": "bob"}))}),
        json!({"name": "no scope", "claims": with(json!({"scope": "mcp:other"}))}),
        json!({"name": "wrong audience", "claims": with(json!({"aud": "http://127.0.0.1:1/mcp"}))}),
        json!({"name": "wrong issuer", "claims": with(json!({"iss": "http://127.0.0.1:1/"}))}),
        json!({"name": "expired", "claims": good, "exp_in": -120}),
        json!({"name": "not yet valid", "claims": good, "nbf_in": 120}),
        json!({"name": "alg none", "claims": good, "key": "none"}),
        json!({"name": "HS256 with the public key", "claims": good, "key": "public-as-hmac"}),
        json!({"name": "another key", "claims": good, "key": "other"}),
        json!({"name": "100 KB", "claims": good, "pad": 100_000}),
        json!({"name": "1 MB", "claims": good, "pad": 1 << 20}),
    ];
    specs.extend(unknown_kids.iter().cloned());
    let tokens = forge(&dir, Value::Array(specs));
    let token = |name: &str| tokens[name].as_str().unwrap().to_owned();
    let opened = probe(
        &dir,
        &gate.url,
        vec![json!({"name": "initialize", "token": token("valid")})],
    );
    assert_eq!(opened[0]["status"], 200, "{opened:?}");
    let session = opened[0]["session"].as_str().unwrap().to_owned();
    assert_eq!(
        server.jwks_served(),
        1,
        "the key set was fetched for the first token"
    );
    let call = |n: u64| json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "send_notice", "arguments": {"to": TO, "body": "Forged."}}});
    let on_session = |name: &str, token: Option<String>, n: u64| json!({"name": name, "token": token, "body": call(n), "headers": {"Mcp-Session-Id": session}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let mut probes = vec![
        json!({"name": "initialized", "token": token("valid"), "body": initialized, "headers": {"Mcp-Session-Id": session}}),
    ];
    let hostile = [
        "wrong audience",
        "wrong issuer",
        "expired",
        "not yet valid",
        "alg none",
        "HS256 with the public key",
        "another key",
        "100 KB",
    ];
    for (n, name) in hostile.iter().enumerate() {
        probes.push(on_session(name, Some(token(name)), n as u64 + 10));
    }
    let truncated = token("valid")[..token("valid").len() - 20].to_owned();
    probes.push(on_session("truncated", Some(truncated), 30));
    probes.push(on_session("no token", None, 31));
    probes.push(on_session("no scope", Some(token("no scope")), 32));
    probes.push(on_session("bob", Some(token("bob")), 33));
    let answers = probe(&dir, &gate.url, probes);
    assert_eq!(answers[0]["status"], 202, "{:?}", answers[0]);
    let metadata_url = gate
        .url
        .replace("/mcp", "/.well-known/oauth-protected-resource/mcp");
    let challenge = |a: &Value| a["www_authenticate"].as_str().unwrap_or_default().to_owned();
    for answer in &answers[1..answers.len() - 3] {
        assert_eq!(answer["status"], 401, "{answer}");
        let expected = format!(
            "Bearer error=\"invalid_token\", scope=\"mcp:tools\", resource_metadata=\"{metadata_url}\""
        );
        assert_eq!(challenge(answer), expected, "{answer}");
    }
    let none = &answers[answers.len() - 3];
    assert_eq!(none["status"], 401);
    assert_eq!(
        challenge(none),
        format!("Bearer scope=\"mcp:tools\", resource_metadata=\"{metadata_url}\"")
    );
    let scope = &answers[answers.len() - 2];
    assert_eq!(scope["status"], 403, "{scope}");
    assert_eq!(
        challenge(scope),
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"mcp:tools\", resource_metadata=\"{metadata_url}\""
        )
    );
    let bob = &answers[answers.len() - 1];
    assert_eq!(bob["status"], 404, "alice's session is not bob's: {bob}");
    // A 1 MB header is refused by the HTTP server's own header limit, before any handler.
    let huge = probe(&dir, &gate.url, vec![on_session("1 MB", Some(token("1 MB")), 40)]);
    assert!(
        huge[0]["status"] == 431 || huge[0]["status"].is_null(),
        "{huge:?}"
    );
    // Tokens naming keys the set lacks: at most one more fetch for all of them.
    let kids: Vec<Value> = unknown_kids
        .iter()
        .enumerate()
        .map(|(n, spec)| {
            on_session(
                spec["name"].as_str().unwrap(),
                Some(token(spec["name"].as_str().unwrap())),
                50 + n as u64,
            )
        })
        .collect();
    for answer in probe(&dir, &gate.url, kids) {
        assert_eq!(answer["status"], 401, "{answer}");
    }
    // The test's own fetch above counts too: one for the first token, one of its own, and at
    // most one more for all the unknown key ids.
    let fetched = server.jwks_served();
    assert!(fetched <= 3, "fetched {fetched} times");
    assert_eq!(reached(&dir), 0, "no refused request reached the server");
    // The session still works for its own subject.
    let ok = probe(
        &dir,
        &gate.url,
        vec![on_session("valid", Some(token("valid")), 60)],
    );
    assert_eq!(ok[0]["status"], 200, "{ok:?}");
    assert_eq!(reached(&dir), 1);
    // Every refusal was logged, and no token was.
    let log = gate.log.so_far().join("\n");
    for needle in [
        "not for this resource",
        "wrong issuer",
        "expired",
        "nbf",
        "not allowed",
        "bad signature",
        "over 16384",
        "lacks scope",
        "belongs to",
        "lacks",
    ] {
        assert!(log.contains(needle), "no {needle:?} in the gate's log:\n{log}");
    }
    for (_, forged) in tokens.as_object().unwrap() {
        let forged = forged.as_str().unwrap();
        assert!(
            !log.contains(&forged[forged.len() - 40..]),
            "a token reached the log"
        );
    }
}

#[test]
fn a_key_set_that_is_down_or_garbage_fails_closed() {
    let dir = setup("oauth-jwks-down", "alice");
    let server = Server::start(&dir);
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let down = format!("http://{closed}/jwks");
    // JSON, but not a key set.
    let garbage = format!("{}.well-known/oauth-authorization-server", server.issuer);
    for jwks in [&down, &garbage] {
        let gate = Gate::start(&dir, &server.issuer, &["--auth-jwks", jwks]);
        let tokens = forge(
            &dir,
            json!([{"name": "valid", "claims": {"sub": "alice", "iss": server.issuer, "aud": gate.url}}]),
        );
        let started = Instant::now();
        let answers = probe(
            &dir,
            &gate.url,
            vec![
                json!({"name": "valid", "token": tokens["valid"]}),
                json!({"name": "again", "token": tokens["valid"]}),
            ],
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "took {:?}",
            started.elapsed()
        );
        for answer in &answers {
            assert_eq!(answer["status"], 503, "{answer}");
        }
        let line = gate.log.wait_for("cannot get the token issuer's keys", WAIT);
        assert!(line.contains(jwks.as_str()), "{line}");
        assert_eq!(reached(&dir), 0);
    }
}

#[test]
fn the_metadata_is_served_without_a_token() {
    let dir = setup("oauth-metadata", "alice");
    let server = Server::start(&dir);
    let gate = Gate::start(&dir, &server.issuer, &["--auth-scopes", "mcp:tools,mcp:admin"]);
    let origin = gate
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let answer = http(
            &origin,
            format!("GET {path} HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n"),
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({"resource": gate.url, "authorization_servers": [server.issuer], "scopes_supported": ["mcp:tools", "mcp:admin"], "bearer_methods_supported": ["header"]})
        );
    }
}

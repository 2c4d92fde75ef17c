//! What all the gate's tests share: the gate's binary, the bound of every wait, and the
//! shared test support (scratch folders, children, the interop peers); then what the HTTP
//! tests share: the gate started with `--listen`, raw HTTP requests, and the host's registry
//! for server-everything.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub use aml_test_support::{node_bin, python, repo, scratch_dir, wait_until, Child, Lines};
use serde_json::{json, Value};

pub const GATE: &str = env!("CARGO_BIN_EXE_aml-mcp-gate");
pub const TOKEN: &str = "test-token-0123456789abcdef";
/// How long any wait of these tests may take before it fails.
pub const WAIT: Duration = Duration::from_secs(30);

pub fn everything() -> PathBuf {
    node_bin("mcp-server-everything")
}

pub fn work(tag: &str) -> PathBuf {
    let dir = scratch_dir("gate-http", tag);
    std::fs::write(dir.join("tokens"), format!("# the test client\n{TOKEN}\n")).unwrap();
    dir
}

/// server-everything's tools the host registers: five allowed, `get-env` registered but
/// allowed by no rule (denied, never sent).
pub fn write_everything_config(dir: &Path) {
    let object = json!({"type": "object"});
    let tools = [
        (
            "echo",
            json!({"type": "object", "properties": {"message": {"type": "string"}},
                         "required": ["message"], "additionalProperties": false}),
        ),
        (
            "get-sum",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                            "required": ["a", "b"], "additionalProperties": false}),
        ),
        ("get-structured-content", object.clone()),
        ("trigger-long-running-operation", object.clone()),
        ("trigger-sampling-request", object.clone()),
        ("get-env", object),
    ];
    let registry: Vec<Value> = tools
        .iter()
        .map(|(name, schema)| {
            json!({"name": name, "effect": "read", "purpose": format!("Use {name} for the user"),
                   "resource": {"fixed": "everything"}, "input_schema": schema})
        })
        .collect();
    std::fs::write(dir.join("tools.json"), json!({"tools": registry}).to_string()).unwrap();
    let rules: Vec<Value> = tools[..5]
        .iter()
        .map(|(name, _)| json!({"tool": name, "effect": "read", "resource": "everything", "requires_approval": false}))
        .collect();
    std::fs::write(
        dir.join("policy.json"),
        json!({"protocol": "aml-action-policy/1", "rules": rules}).to_string(),
    )
    .unwrap();
}

/// The gate's arguments before its own extra ones: policy, tools, receipts in `dir`.
pub fn gate_args(dir: &Path) -> Vec<String> {
    ["policy.json", "tools.json"]
        .iter()
        .zip(["--policy", "--tools"])
        .flat_map(|(file, flag)| [flag.to_string(), dir.join(file).display().to_string()])
        .chain([
            "--receipts".into(),
            dir.join("receipts.jsonl").display().to_string(),
            // Never the user's own state folder.
            "--state".into(),
            dir.join("state.sqlite3").display().to_string(),
        ])
        .collect()
}

/// The gate with `--listen 127.0.0.1:0` and `extra` flags, its server-everything children
/// logging what they receive to `dir/reached.log` (read with [`reached`]).
pub fn gate_logging_what_reaches_the_server(dir: &Path, extra: &[&str]) -> Gate {
    write_everything_config(dir);
    let mut args = gate_args(dir);
    args.extend(["--listen", "127.0.0.1:0"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    let log = dir.join("reached.log");
    args.extend([
        "--".into(),
        "sh".into(),
        "-c".into(),
        format!("tee -a '{}' | '{}'", log.display(), everything().display()),
    ]);
    Gate::start(&args)
}

/// What reached the servers of [`gate_logging_what_reaches_the_server`].
pub fn reached(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("reached.log")).unwrap_or_default()
}

/// A gate serving HTTP; ended with SIGTERM (so its receipts are flushed) when dropped.
pub struct Gate {
    pub child: Child,
    pub addr: SocketAddr,
    pub url: String,
    /// Its output after the line that says where it listens.
    pub out: Lines,
}

impl Gate {
    /// Starts `aml-mcp-gate ARGS` (which include `--listen 127.0.0.1:0`) and reads where it
    /// listens from its first line of output.
    pub fn start(args: &[String]) -> Gate {
        let mut command = Command::new(GATE);
        command.args(args);
        Gate::start_command(command)
    }

    /// [`Gate::start`] with the command given whole (a wrapper that sets limits first, for
    /// instance); it must end in the gate's `exec`.
    pub fn start_command(mut command: Command) -> Gate {
        command.stdin(Stdio::null()).stdout(Stdio::piped());
        let mut child = Child::spawn("the HTTP gate", &mut command);
        let out = child.stdout_lines();
        // Its readiness line.
        let line = out.next(WAIT);
        let url = line
            .trim()
            .strip_prefix("aml-mcp-gate: MCP at ")
            .unwrap_or_else(|| panic!("the gate did not say where it listens: {line:?}"))
            .to_string();
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .parse()
            .unwrap();
        Gate {
            child,
            addr,
            url,
            out,
        }
    }

    /// SIGTERM, then waits (bounded) for the exit; its status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        self.child.terminate(Duration::from_secs(15))
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if self.child.exited().is_none() {
            self.stop();
        }
    }
}

/// One HTTP/1.1 exchange (the connection is closed after it): status, headers (lower-case
/// names), body as text.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    /// The body's JSON (a JSON body, or the data of the first SSE event).
    pub fn json(&self) -> Value {
        let text = match self.body.find("data: ") {
            Some(at) if self.header("content-type") == Some("text/event-stream") => {
                self.body[at + 6..].lines().next().unwrap_or("")
            }
            _ => self.body.as_str(),
        };
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }
}

/// Sends a request; `headers` are added as given.
pub fn request(addr: SocketAddr, method: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut stream = send(addr, method, headers, body);
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    parse(&raw)
}

/// Sends a request and returns the open connection (for a reply not read yet).
pub fn send(addr: SocketAddr, method: &str, headers: &[(&str, &str)], body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut text = format!(
        "{method} /mcp HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    stream.write_all(text.as_bytes()).unwrap();
    stream
}

fn parse(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap_or("")
        .split(' ')
        .nth(1)
        .unwrap_or("0")
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_string() };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

pub const JSON_AND_SSE: (&str, &str) = ("accept", "application/json, text/event-stream");
pub const JSON_ONLY: (&str, &str) = ("accept", "application/json");
pub const CONTENT_JSON: (&str, &str) = ("content-type", "application/json");

pub fn initialize_body(id: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "1"}}})
    .to_string()
}

/// Opens a session (initialize, then notifications/initialized) with the given extra
/// headers; its id.
pub fn open_session(addr: SocketAddr, extra: &[(&str, &str)]) -> String {
    let mut headers = vec![JSON_ONLY, CONTENT_JSON];
    headers.extend_from_slice(extra);
    let reply = request(addr, "POST", &headers, &initialize_body(1));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let session = reply.header("mcp-session-id").expect("a session id").to_string();
    headers.push(("mcp-session-id", &session));
    let done = request(
        addr,
        "POST",
        &headers,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(done.status, 202, "{}", done.body);
    session
}

/// Runs `scripts/interop/mcp_http_client.py TARGET SCENARIO ARGS`: its JSON report.
pub fn http_client(target: &Value, scenario: &[&str]) -> Value {
    let script = repo().join("scripts/interop/mcp_http_client.py");
    let mut args = vec![target.to_string()];
    args.extend(scenario.iter().map(|a| a.to_string()));
    python_report(&script, &args)
}

/// Runs a Python script of the interop venv with `args`; its stdout as a JSON report.
pub fn python_report(script: &Path, args: &[String]) -> Value {
    let mut command = Command::new(python());
    command
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    report_of(&Child::spawn("a Python client", &mut command).output(Duration::from_secs(300)))
}

/// A Python client's JSON report on stdout; fails, showing its stderr, if it failed.
pub fn report_of(out: &std::process::Output) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python client failed ({}): {stderr}",
        out.status
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// The receipts the gate has written whole so far (a line it is part way through waits).
pub fn receipts(dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("receipts.jsonl")).unwrap_or_default();
    let whole = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    whole.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A free port on loopback (for a server that takes its port from the environment).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process serving HTTP on a loopback port; killed when dropped.
pub struct ListeningChild(pub Child, pub u16);

impl ListeningChild {
    /// Starts `command` and waits (up to 10 s) until `port` accepts connections (these
    /// servers print no line that says they listen).
    pub fn start(mut command: Command, port: u16, what: &str) -> ListeningChild {
        let child = Child::spawn(what, &mut command);
        wait_until(
            &format!("{what} to listen on {port}"),
            Duration::from_secs(10),
            || TcpStream::connect(("127.0.0.1", port)).ok(),
        );
        ListeningChild(child, port)
    }
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.1)
    }
}

/// server-everything in its Streamable HTTP mode; killed when dropped.
pub struct EverythingHttp;

impl EverythingHttp {
    pub fn start() -> ListeningChild {
        let port = free_port();
        let mut command = Command::new(everything());
        command
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        ListeningChild::start(command, port, "server-everything")
    }
}

//! The raw JSON-RPC clients the state and relay benches drive the gate with: a process on
//! stdio, and a Streamable HTTP session of a gate started with `--listen`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use aml_mcp::relay::Inbound;
use aml_mcp_http::{http_upstream, UpstreamConfig};
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// A `tools/call` of the notice fixture, after `{"jsonrpc":"2.0","id":N,`.
pub(crate) const CALL: &str = r#""method":"tools/call","params":{"name":"send_notice","arguments":{"to":"team@example.test","body":"Build passed."}}}"#;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"aml-bench","version":"1"}}}"#;

/// A process spoken to with newline-delimited JSON-RPC on its stdin and stdout.
pub(crate) struct Peer {
    pub(crate) name: &'static str,
    pub(crate) child: Child,
    input: BufWriter<ChildStdin>,
    output: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Peer {
    pub(crate) async fn start(name: &'static str, program: &Path, args: &[String], audit: &Path) -> Peer {
        let mut child = Command::new(program)
            .args(args)
            .env("AML_NOTICE_AUDIT", audit)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let input = BufWriter::new(child.stdin.take().unwrap());
        let output = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut peer = Peer {
            name,
            child,
            input,
            output,
            next_id: 1,
        };
        peer.send(INITIALIZE).await;
        peer.answer(0).await;
        peer.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        peer
    }

    async fn send(&mut self, line: &str) {
        self.input.write_all(line.as_bytes()).await.unwrap();
        self.input.write_all(b"\n").await.unwrap();
        self.input.flush().await.unwrap();
    }

    /// Reads until the answer to `id` (skipping notifications); checks it is a result.
    async fn answer(&mut self, id: u64) {
        loop {
            let line = self
                .output
                .next_line()
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{} closed", self.name));
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                assert!(message.get("result").is_some(), "{}: {message}", self.name);
                assert_ne!(message["result"]["isError"], true, "{}: {message}", self.name);
                return;
            }
        }
    }

    /// One `tools/call`, answered.
    pub(crate) async fn call(&mut self) -> Duration {
        let id = self.next_id;
        self.next_id += 1;
        let start = Instant::now();
        self.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},{CALL}"#)).await;
        self.answer(id).await;
        start.elapsed()
    }

    /// `n` calls written at once while the answers are read; the time until the last answer.
    pub(crate) async fn pipelined(&mut self, n: usize) -> Duration {
        let first = self.next_id;
        self.next_id += n as u64;
        let mut requests = String::new();
        for id in first..first + n as u64 {
            requests.push_str(&format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},{CALL}\n"));
        }
        let Peer {
            input, output, name, ..
        } = self;
        let start = Instant::now();
        let write = async {
            input.write_all(requests.as_bytes()).await.unwrap();
            input.flush().await.unwrap();
        };
        let read = async {
            let mut answered = 0;
            while answered < n {
                let line = output
                    .next_line()
                    .await
                    .unwrap()
                    .unwrap_or_else(|| panic!("{name} closed"));
                let message: Value = serde_json::from_str(&line).unwrap();
                if message.get("id").is_some() {
                    assert!(message.get("result").is_some(), "{name}: {message}");
                    answered += 1;
                }
            }
        };
        tokio::join!(write, read);
        start.elapsed()
    }
}

/// `calls` calls through each of `peers` in turn (uncounted: a warm-up, when the samples
/// are dropped); each peer's round trips, in order.
pub(crate) async fn interleaved<const N: usize>(peers: &mut [Peer; N], calls: usize) -> [Vec<Duration>; N] {
    let mut samples: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::with_capacity(calls));
    for _ in 0..calls {
        for (peer, samples) in peers.iter_mut().zip(&mut samples) {
            samples.push(peer.call().await);
        }
    }
    samples
}

/// The notice fixture's policy and catalog in a directory, and the gate's arguments.
pub(crate) struct Setup {
    pub(crate) dir: PathBuf,
    pub(crate) fixture: PathBuf,
}

impl Setup {
    /// Writes the policy (one allow rule) and the catalog into `dir`.
    pub(crate) fn new(dir: PathBuf) -> Setup {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("policy.json"),
            json!({"protocol": "aml-action-policy/1", "rules": [
                {"tool": "send_notice", "effect": "send", "resource": "team@example.test", "requires_approval": false}]})
            .to_string(),
        )
        .unwrap();
        let schema = json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                            "required": ["to", "body"], "additionalProperties": false});
        std::fs::write(
            dir.join("tools.json"),
            json!({"tools": [{"name": "send_notice", "effect": "send", "purpose": "Send a local notice",
                              "resource": {"argument": "to"}, "input_schema": schema}]})
            .to_string(),
        )
        .unwrap();
        Setup {
            fixture: PathBuf::from(env!("CARGO_BIN_EXE_aml-testkit")),
            dir,
        }
    }

    /// The fixture server's command line (after the program).
    pub(crate) fn serve(&self) -> Vec<String> {
        vec!["serve-notice-fixture".to_owned()]
    }

    /// The gate's arguments as users give them: policy, tools and state, nothing else (with a
    /// database the records go there; with `memory`, as JSON lines to stderr, here nowhere).
    pub(crate) fn gate_args(&self, state: &str, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--policy".into(),
            self.dir.join("policy.json").display().to_string(),
            "--tools".into(),
            self.dir.join("tools.json").display().to_string(),
            "--state".into(),
            state.into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend([
            "--".into(),
            self.fixture.display().to_string(),
            "serve-notice-fixture".into(),
        ]);
        args
    }
}

/// A gate serving Streamable HTTP (`--listen`), one fixture server per session.
pub(crate) struct ListeningGate {
    pub(crate) child: Child,
    pub(crate) url: String,
}

impl ListeningGate {
    /// Starts the release gate on `state`; with `cpus`, held to those CPUs (`taskset -c`).
    pub(crate) async fn start(setup: &Setup, state: &str, cpus: Option<&str>) -> ListeningGate {
        let args = setup.gate_args(
            state,
            &[
                "--listen",
                "127.0.0.1:0",
                "--max-sessions",
                "128",
                "--max-sessions-per-client",
                "128",
            ],
        );
        let mut command = match cpus {
            Some(cpus) => {
                let mut command = Command::new("taskset");
                command.arg("-c").arg(cpus).arg(super::gate_binary());
                command
            }
            None => Command::new(super::gate_binary()),
        };
        let mut child = command
            .args(&args)
            .env("AML_NOTICE_AUDIT", setup.dir.join("http-audit.jsonl"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = out
            .next_line()
            .await
            .unwrap()
            .expect("the gate says where it listens");
        let url = line
            .trim()
            .strip_prefix("aml-mcp-gate: MCP at ")
            .unwrap_or_else(|| panic!("{line}"))
            .to_owned();
        ListeningGate { child, url }
    }

    /// Stops the gate as an operator would (SIGTERM), waiting up to 20 s.
    pub(crate) async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await;
    }
}

/// One HTTP session of the gate: initialized, ready for calls.
pub(crate) struct Session {
    outgoing: tokio::sync::mpsc::Sender<Bytes>,
    incoming: tokio::sync::mpsc::Receiver<Inbound>,
}

impl Session {
    pub(crate) async fn open(url: &str) -> Session {
        let upstream = http_upstream(url, UpstreamConfig::default()).unwrap();
        let mut session = Session {
            outgoing: upstream.connection.outgoing,
            incoming: upstream.connection.incoming,
        };
        session.exchange(INITIALIZE.into()).await;
        session
            .outgoing
            .send(Bytes::from_static(
                b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
            ))
            .await
            .unwrap();
        session
    }

    async fn exchange(&mut self, message: String) -> Value {
        self.outgoing.send(Bytes::from(message)).await.unwrap();
        loop {
            let inbound = tokio::time::timeout(Duration::from_secs(30), self.incoming.recv())
                .await
                .expect("an answer within 30 s")
                .expect("the session stays open");
            if let Inbound::Message(bytes) = inbound {
                let value: Value = serde_json::from_slice(&bytes).unwrap();
                if value.get("id").is_some() {
                    assert!(value.get("result").is_some(), "{value}");
                    return value;
                }
            }
        }
    }

    /// `n` calls one after another.
    pub(crate) async fn calls(mut self, n: usize) -> Session {
        for id in 1..=n {
            self.exchange(format!(r#"{{"jsonrpc":"2.0","id":{id},{CALL}"#))
                .await;
        }
        self
    }
}

/// Calls per second with `sessions` HTTP sessions of `gate` calling at once, `calls` each:
/// the median of `runs` runs.
pub(crate) async fn http_throughput(gate: &ListeningGate, sessions: usize, calls: usize, runs: usize) -> f64 {
    let mut open = Vec::new();
    for _ in 0..sessions {
        open.push(Session::open(&gate.url).await);
    }
    let mut rates = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        let running: Vec<_> = open.drain(..).map(|s| tokio::spawn(s.calls(calls))).collect();
        for task in running {
            open.push(task.await.unwrap());
        }
        rates.push((sessions * calls) as f64 / start.elapsed().as_secs_f64());
    }
    median(rates)
}

/// The median of `values`.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

//! What `--metrics` and `--otlp-endpoint` add to a call's CPU: the relay's `tools/call` round
//! trip over channels (as `aml-mcp`'s `relay` bench), as the gate runs it without either,
//! with `--metrics` (the counting sink, the timing forward wrapper, the labels), and with
//! both (and the relay's call observer queueing one span per call, batched, encoded and
//! posted as OTLP/HTTP protobuf by the gate's exporter task to a local receiver that reads and
//! discards the bodies; and, as with `--upstream`, each forward's `traceparent` made and
//! handed to the server's side). Every variant keeps records (the gate always has a receipt sink).
//!
//! After criterion's measurements, prints the process CPU time per call of each (every
//! thread of the gate's: the exporter too, its round's spans flushed within the round;
//! the local receiver's own thread time is the collector's and is taken off) and the
//! differences, measured in alternating rounds (the goal: at most 2 µs for both together).
#![allow(missing_docs, dead_code, unreachable_pub)]

#[path = "../src/sinks.rs"]
mod sinks;
#[path = "../../aml-testkit/benches/support/summary.rs"]
mod summary;
#[allow(unused_imports)]
#[path = "../src/telemetry/mod.rs"]
mod telemetry;

use std::sync::Arc;
use std::time::Duration;

use aml_core::{sink_fn, ActionBoundary, Policy, ReceiptSink, Record};
use aml_mcp::relay::{
    run, CallObserver, Connection, DeferredSink, ForwardWrapper, Inbound, OutboundTraces, Peer, RelayConfig,
    RelayTools, Upstream,
};
use bytes::Bytes;
use criterion::{criterion_group, Criterion};
use nix::time::{clock_gettime, ClockId};
use serde_json::json;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

/// One relay in front of an in-process server, and the client's ends of it.
struct Relay {
    to_relay: mpsc::Sender<Inbound>,
    from_relay: mpsc::Receiver<Bytes>,
    /// The tracer, when the relay makes spans.
    traces: Option<Arc<telemetry::Traces>>,
}

/// What the gate runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    Metrics,
    MetricsAndTraces,
}

fn relay(rt: &Runtime, mode: Mode) -> Relay {
    let observed = mode != Mode::Off;
    let catalog = json!({"tools": [{"name": "send_notice", "effect": "send", "purpose": "Send a local notice",
        "resource": {"argument": "to"}, "input_schema": {"type": "object",
        "properties": {"to": {"type": "string"}, "body": {"type": "string"}}, "required": ["to", "body"],
        "additionalProperties": false}}]});
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_notice", "effect": "send", "resource": "team@example.test", "requires_approval": false}]}));
    let _guard = rt.enter();
    let kept: Arc<dyn ReceiptSink> = Arc::new(sink_fn(|record: &Record| {
        std::hint::black_box(record);
    }));
    let telemetry = Arc::new(telemetry::Telemetry::new("http://127.0.0.1:3001/mcp"));
    telemetry.metrics.set_tools(["send_notice".to_string()]);
    let sink: Arc<dyn ReceiptSink> = match observed {
        true => Arc::new(telemetry::Observed {
            inner: kept,
            telemetry: Arc::clone(&telemetry),
        }),
        false => kept,
    };
    let (deferred, _records) = DeferredSink::spawn(sink);
    let boundary = ActionBoundary::builder(Arc::new(policy)).sink(deferred).build();
    let mut tools = RelayTools::from_json(&catalog.to_string(), boundary).unwrap();
    if observed {
        let wrapper = telemetry::TimedForward {
            journal: None,
            telemetry,
        };
        tools = tools.with_forward_wrapper(Arc::new(wrapper) as Arc<dyn ForwardWrapper>);
    }
    let mut traces = None;
    let outbound = OutboundTraces::default();
    if mode == Mode::MetricsAndTraces {
        let url = format!("http://{}/v1/traces", otlp_receiver());
        let tracer = Arc::new(
            telemetry::Traces::start(&url, "http://127.0.0.1:3001/mcp".into(), rt.handle().clone()).unwrap(),
        );
        tools = tools.with_call_observer(Arc::clone(&tracer) as Arc<dyn CallObserver>);
        // As with --upstream: each forward's trace context is made and handed to the
        // server's transport (taken below, as the HTTP client takes it for its header).
        tools = tools.with_outbound_traces(outbound.clone());
        traces = Some(tracer);
    }
    let (client, Peer { to_relay, from_relay }) = Connection::in_memory(16);
    let (
        upstream,
        Peer {
            to_relay: server_in,
            from_relay: mut server_out,
        },
        exit,
    ) = Upstream::in_memory(16);
    rt.spawn(run(tools, RelayConfig::default(), client, upstream, Vec::new()));
    rt.spawn(async move {
        let _exit = exit;
        while let Some(request) = server_out.recv().await {
            let request: serde_json::Value = serde_json::from_slice(&request).unwrap();
            if let Some(id) = request["id"].as_u64() {
                std::hint::black_box(outbound.take(id));
            }
            let answer = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":"recorded locally; no notice sent"}}]}}}}"#,
                request["id"]
            );
            if server_in.send(Inbound::Message(Bytes::from(answer))).await.is_err() {
                break;
            }
        }
    });
    Relay {
        to_relay,
        from_relay,
        traces,
    }
}

/// Bytes of OTLP bodies received, posts, and the receiver's own CPU time (ns), which is
/// the collector's cost, not the gate's: it is taken off the process's CPU.
static RECEIVED: [std::sync::atomic::AtomicU64; 3] = [const { std::sync::atomic::AtomicU64::new(0) }; 3];

fn thread_cpu() -> Duration {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

/// A minimal OTLP/HTTP endpoint on a thread of its own: reads each POST, answers 200.
fn otlp_receiver() -> std::net::SocketAddr {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::atomic::Ordering;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut counted = thread_cpu();
                let mut count = move || {
                    let now = thread_cpu();
                    RECEIVED[2].fetch_add((now - counted).as_nanos() as u64, Ordering::Relaxed);
                    counted = now;
                };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':') {
                            if name.eq_ignore_ascii_case("content-length") {
                                length = value.trim().parse().unwrap_or(0);
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    RECEIVED[0].fetch_add(length as u64, Ordering::Relaxed);
                    RECEIVED[1].fetch_add(1, Ordering::Relaxed);
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if writer.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                    count();
                }
            });
        }
    });
    addr
}

const CALL: &[u8] = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"send_notice","arguments":{"to":"team@example.test","body":"Build passed."}}}"#;

fn one_call(rt: &Runtime, relay: &mut Relay) {
    rt.block_on(async {
        relay
            .to_relay
            .send(Inbound::Message(Bytes::from_static(CALL)))
            .await
            .unwrap();
        let answer = relay.from_relay.recv().await.unwrap();
        assert!(answer.starts_with(br#"{"jsonrpc":"2.0","id":7,"result""#));
    })
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    for (name, mode) in [
        ("telemetry/off", Mode::Off),
        ("telemetry/metrics", Mode::Metrics),
        ("telemetry/metrics+traces", Mode::MetricsAndTraces),
    ] {
        let mut relay = relay(&rt, mode);
        c.bench_function(name, |b| b.iter(|| one_call(&rt, &mut relay)));
    }
}

fn cpu() -> Duration {
    clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

/// Process CPU time per call, off and on, in alternating rounds; the best round of each
/// (the least disturbed by the rest of the machine).
fn compare() {
    const CALLS: u32 = 20_000;
    const ROUNDS: usize = 7;
    let rt = runtime();
    let mut relays = [
        relay(&rt, Mode::Off),
        relay(&rt, Mode::Metrics),
        relay(&rt, Mode::MetricsAndTraces),
    ];
    let mut best = [Duration::MAX; 3];
    let received = || {
        RECEIVED
            .each_ref()
            .map(|r| r.load(std::sync::atomic::Ordering::Relaxed))
    };
    let before = received();
    for relay in &mut relays {
        for _ in 0..2_000 {
            one_call(&rt, relay);
        }
    }
    for _ in 0..ROUNDS {
        for (which, relay) in relays.iter_mut().enumerate() {
            let started = (cpu(), received()[2]);
            for _ in 0..CALLS {
                one_call(&rt, relay);
            }
            // The round's spans are encoded and posted within the round.
            if let Some(traces) = &relay.traces {
                rt.block_on(traces.flush());
            }
            let receiver = Duration::from_nanos(received()[2] - started.1);
            best[which] = best[which].min((cpu() - started.0).saturating_sub(receiver) / CALLS);
        }
    }
    let [off, on, traced] = best.map(|d| d.as_nanos() as f64 / 1000.0);
    println!(
        "telemetry CPU per call (best of {ROUNDS} rounds of {CALLS}): off {off:.2} µs, metrics {on:.2} µs (+{:.2}), metrics and traces {traced:.2} µs (+{:.2}; goal: at most 2 µs)",
        on - off,
        traced - off
    );
    let rows = [("off", off), ("metrics", on), ("metrics and traces", traced)]
        .map(|(name, cpu)| serde_json::json!({"name": name, "cpu_per_call_us": cpu, "added_cpu_us": cpu - off}))
        .to_vec();
    let goals = vec![
        serde_json::json!({"goal": "--metrics adds <= 2 µs CPU per call", "measured": format!("+{:.2} µs", on - off), "met": on - off <= 2.0}),
        serde_json::json!({"goal": "--metrics with --otlp-endpoint adds <= 2 µs CPU per call", "measured": format!("+{:.2} µs", traced - off), "met": traced - off <= 2.0}),
    ];
    summary::write_summary("telemetry", rows, goals);
    // Spans the batch processor dropped (a full queue) would show as fewer bytes per call.
    let calls = u64::from(CALLS) * ROUNDS as u64 + 2_000;
    let [bytes, posts, receiver] = [0, 1, 2].map(|i| received()[i] - before[i]);
    println!(
        "otlp: {bytes} bytes in {posts} posts so far for {calls} traced calls ({:.0} bytes per call); the receiver's CPU, not counted: {:.2} µs per call",
        bytes as f64 / calls as f64,
        receiver as f64 / 1000.0 / calls as f64
    );
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    compare();
}

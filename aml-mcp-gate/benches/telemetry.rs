//! What `--metrics` adds to a call's CPU: the relay's `tools/call` round trip over channels
//! (as `aml-mcp`'s `relay` bench), once as the gate runs it without `--metrics` and once
//! with the gate's own hooks (the counting sink, the timing forward wrapper, the labels).
//! Both variants keep records (the gate always has a receipt sink).
//!
//! After criterion's two measurements, prints the process CPU time per call of each and the
//! difference, measured in alternating rounds (the goal: at most 2 µs).
#![allow(missing_docs, dead_code, unreachable_pub)]

#[path = "../src/sinks.rs"]
mod sinks;
#[allow(unused_imports)]
#[path = "../src/telemetry/mod.rs"]
mod telemetry;

use std::sync::Arc;
use std::time::Duration;

use aml_core::{sink_fn, ActionBoundary, Policy, ReceiptSink, Record};
use aml_mcp::relay::{
    run, Connection, DeferredSink, ForwardWrapper, Inbound, RelayConfig, RelayTools, Upstream,
};
use bytes::Bytes;
use criterion::{criterion_group, Criterion};
use nix::time::{clock_gettime, ClockId};
use serde_json::json;
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};

/// One relay in front of an in-process server, and the client's ends of it.
struct Relay {
    to_relay: mpsc::Sender<Inbound>,
    from_relay: mpsc::Receiver<Bytes>,
}

fn relay(rt: &Runtime, observed: bool) -> Relay {
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
    let (to_relay, incoming) = mpsc::channel(16);
    let (outgoing, from_relay) = mpsc::channel::<Bytes>(16);
    let (server_in, up_incoming) = mpsc::channel(16);
    let (up_outgoing, mut server_out) = mpsc::channel::<Bytes>(16);
    let (exit, exited) = oneshot::channel::<String>();
    let upstream = Upstream {
        connection: Connection {
            incoming: up_incoming,
            outgoing: up_outgoing,
        },
        exited,
    };
    rt.spawn(run(
        tools,
        RelayConfig::default(),
        Connection { incoming, outgoing },
        upstream,
        Vec::new(),
    ));
    rt.spawn(async move {
        let _exit = exit;
        while let Some(request) = server_out.recv().await {
            let request: serde_json::Value = serde_json::from_slice(&request).unwrap();
            let answer = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":"recorded locally; no notice sent"}}]}}}}"#,
                request["id"]
            );
            if server_in.send(Inbound::Message(Bytes::from(answer))).await.is_err() {
                break;
            }
        }
    });
    Relay { to_relay, from_relay }
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
    for (name, observed) in [("telemetry/off", false), ("telemetry/on", true)] {
        let mut relay = relay(&rt, observed);
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
    let mut relays = [relay(&rt, false), relay(&rt, true)];
    let mut best = [Duration::MAX; 2];
    for relay in &mut relays {
        for _ in 0..2_000 {
            one_call(&rt, relay);
        }
    }
    for _ in 0..ROUNDS {
        for (which, relay) in relays.iter_mut().enumerate() {
            let started = cpu();
            for _ in 0..CALLS {
                one_call(&rt, relay);
            }
            best[which] = best[which].min((cpu() - started) / CALLS);
        }
    }
    let [off, on] = best.map(|d| d.as_nanos() as f64 / 1000.0);
    println!(
        "telemetry CPU per call (best of {ROUNDS} rounds of {CALLS}): off {off:.2} µs, on {on:.2} µs, added {:.2} µs (goal: at most 2 µs)",
        on - off
    );
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    compare();
}

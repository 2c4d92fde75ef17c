//! Issue 34's goal beside its yardstick: one `tools/call` at a time from a raw JSON-RPC
//! client on one thread to the rmcp notice fixture, directly, through `aml-mcp-gate` in front
//! of that one server, and through `aml-mcp-gate` in front of three (`[[servers]]`, the
//! fixture three times, the call's tool the third server's), the three interleaved call by
//! call; five repetitions with fresh processes, pooled. It prints each gate's p50 and p99 and
//! what each adds to the direct call.
//!
//! Needs the release gate: `cargo build --release -p aml-mcp-gate`.
#![allow(missing_docs)]

mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use support::peer::{self, Peer, Setup};
use support::summary::micros as us;

const REPETITIONS: usize = 5;
const CALLS: usize = 2000;
const WARM_UP: usize = 200;

/// `gate.toml` for three fixture servers, `send_notice` registered as the third's under
/// its own name (the one-server gate's policy then serves both).
fn three_servers(setup: &Setup) -> Vec<String> {
    let dir = &setup.dir;
    let tools: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tools.json")).unwrap()).unwrap();
    let mut tool = tools["tools"][0].clone();
    tool["server"] = json!("notes");
    std::fs::write(dir.join("tools3.json"), json!({"tools": [tool]}).to_string()).unwrap();
    let fixture = format!("{:?}", setup.fixture.display().to_string());
    let mut config = String::from("policy = \"policy.json\"\ntools = \"tools3.json\"\nstate = \"memory\"\n");
    for (name, names) in [("mail", "prefix"), ("files", "prefix"), ("notes", "never")] {
        config.push_str(&format!(
            "\n[[servers]]\nname = \"{name}\"\nnames = \"{names}\"\ncommand = [{fixture}, \"serve-notice-fixture\"]\n"
        ));
    }
    std::fs::write(dir.join("gate3.toml"), config).unwrap();
    vec!["--config".into(), dir.join("gate3.toml").display().to_string()]
}

async fn repetition(setup: &Setup, three: &[String]) -> [Vec<Duration>; 3] {
    let audit = setup.dir.join("audit.jsonl");
    let gate = support::gate_binary();
    let mut peers = [
        Peer::start("direct", &setup.fixture, &setup.serve(), &audit).await,
        Peer::start("gate, one server", &gate, &setup.gate_args("memory", &[]), &audit).await,
        Peer::start("gate, three servers", &gate, three, &audit).await,
    ];
    peer::interleaved(&mut peers, WARM_UP).await;
    peer::interleaved(&mut peers, CALLS).await
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("servers-hop-{}", std::process::id()));
    let setup = Setup::new(dir.clone());
    let three = three_servers(&setup);
    println!("servers_hop (load average {}):", support::load_average());
    let mut pooled: [Vec<Duration>; 3] = Default::default();
    for rep in 1..=REPETITIONS {
        let samples = rt.block_on(repetition(&setup, &three));
        let [d, one, many] = samples.clone().map(support::percentiles);
        println!(
            "  repetition {rep}: p50 direct {:.1} µs, one server {:.1} µs, three servers {:.1} µs ({:.3}x)",
            us(d.0),
            us(one.0),
            us(many.0),
            us(many.0) / us(one.0).max(1e-3)
        );
        for (all, some) in pooled.iter_mut().zip(samples) {
            all.extend(some);
        }
    }
    let [d, one, many] = pooled.map(support::percentiles);
    let ratio = us(many.0) / us(one.0).max(1e-3);
    let added = |p: Duration| us(p.saturating_sub(d.0));
    println!("  pooled, {REPETITIONS} x {CALLS} calls each:");
    println!(
        "    direct:               p50 {:.1} µs p99 {:.1} µs",
        us(d.0),
        us(d.1)
    );
    println!(
        "    gate, one server:     p50 {:.1} µs p99 {:.1} µs (adds {:.1} µs)",
        us(one.0),
        us(one.1),
        added(one.0)
    );
    println!(
        "    gate, three servers:  p50 {:.1} µs p99 {:.1} µs (adds {:.1} µs)",
        us(many.0),
        us(many.1),
        added(many.0)
    );
    let met = ratio <= 1.10;
    println!(
        "  goal (issue 34): a call through three servers {ratio:.3}x one through one server <= 1.10x: {}",
        if met { "met" } else { "NOT met" }
    );
    let rows = vec![
        json!({"name": "direct", "p50_us": us(d.0), "p99_us": us(d.1)}),
        json!({"name": "aml-mcp-gate, one server", "p50_us": us(one.0), "p99_us": us(one.1), "added_p50_us": added(one.0)}),
        json!({"name": "aml-mcp-gate, three servers", "p50_us": us(many.0), "p99_us": us(many.1), "added_p50_us": added(many.0)}),
    ];
    let goals = vec![
        json!({"goal": "a call through three servers <= 1.10 x one through one server (p50)",
                            "measured": format!("{ratio:.3} x"), "met": met}),
    ];
    support::summary::write_summary("servers_hop", rows, goals);
    let _ = std::fs::remove_dir_all(&dir);
}

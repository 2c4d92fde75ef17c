//! N unary `CallTool`s of one variant and nothing else, for counting what a call costs
//! (instructions under `valgrind --tool=callgrind`, system calls under `strace -c`) rather
//! than timing it on a noisy machine:
//!
//! ```text
//! cargo bench -p aml-grpc --bench unary_calls --no-run
//! valgrind --tool=callgrind target/release/deps/unary_calls-HASH VARIANT N
//! ```
//!
//! Variants: `no_gate` and `gated` on the same bare tonic server and generated client over
//! loopback (their difference is the gate, transport included), the gated one mounted as
//! hosts do (`into_route`); `gated_generated_server`, the gated service on the generated
//! server alone; `no_gate_sized`, the ungated tool answering with a gated-size plan and
//! receipt; `gated_serve`, `serve` and `ToolClient`; `no_gate_handler` and
//! `gated_handler`, the same two handlers called in process (the handler alone). Run two
//! values of N and divide the difference by the difference of N, so set-up cancels out.
#![allow(missing_docs)]

mod common;

use std::sync::Arc;

use aml_core::NoSink;
use aml_grpc::pb;
use aml_grpc::pb::tool_service_server::ToolService;
use common::{bare, bare_route, call_bare, gated, Ungated, ARGUMENTS};
use serde_json::Value;

fn call_handler<S: ToolService>(rt: &tokio::runtime::Runtime, service: &S) {
    let request = tonic::Request::new(pb::CallToolRequest::new("fetch_record", ARGUMENTS));
    let response = rt.block_on(service.call_tool(request)).unwrap();
    let result: Value = serde_json::from_str(&response.into_inner().result_json).unwrap();
    assert_eq!(result["record"], 42);
}

fn main() {
    // `cargo bench` passes `--bench`; only the positional arguments count.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let (Some(variant), Some(n)) = (args.first(), args.get(1).and_then(|n| n.parse::<usize>().ok())) else {
        eprintln!("usage: unary_calls no_gate|gated|gated_generated_server|no_gate_sized|gated_serve|no_gate_handler|gated_handler N");
        std::process::exit(2);
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let run: Box<dyn Fn()> = match variant.as_str() {
        "no_gate" => {
            let client = bare(&rt, Ungated { sized: false });
            Box::new(move || call_bare(&rt, &client))
        }
        "no_gate_sized" => {
            let client = bare(&rt, Ungated { sized: true });
            Box::new(move || call_bare(&rt, &client))
        }
        "gated" => {
            let client = bare_route(&rt, gated(Arc::new(NoSink)).into_route());
            Box::new(move || call_bare(&rt, &client))
        }
        "gated_generated_server" => {
            let client = bare(&rt, gated(Arc::new(NoSink)));
            Box::new(move || call_bare(&rt, &client))
        }
        "gated_serve" => {
            let client = rt.block_on(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let address = listener.local_addr().unwrap();
                let service = gated(Arc::new(NoSink));
                tokio::spawn(aml_grpc::serve(listener, service, std::future::pending()));
                aml_grpc::ToolClient::connect(format!("http://{address}"))
                    .await
                    .unwrap()
            });
            Box::new(move || {
                let done = rt
                    .block_on(client.call_tool("fetch_record", ARGUMENTS, None))
                    .unwrap();
                assert_eq!(done.result["record"], 42);
            })
        }
        "no_gate_handler" => Box::new(move || call_handler(&rt, &Ungated { sized: false })),
        "gated_handler" => {
            let service = gated(Arc::new(NoSink));
            Box::new(move || call_handler(&rt, &service))
        }
        other => {
            eprintln!("unknown variant {other:?}");
            std::process::exit(2);
        }
    };
    for _ in 0..n {
        run();
    }
}

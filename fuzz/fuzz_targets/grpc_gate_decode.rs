//! The gRPC gateway's decode path (`aml_grpc_gate::transcode`): the first byte picks a
//! message type of the test API (`aml-grpc-gate/tests/proto/payments.proto`, compiled with
//! protox on first use), the rest is the request message. Never
//! panics; a message that decodes is written as JSON the core's strict parser reads, with no
//! number it would refuse as inexact; that JSON re-encodes, and the re-encoded message
//! decodes to the same JSON (what the upstream receives is what was decided).
#![no_main]

use std::sync::OnceLock;

use aml_grpc_gate::transcode::{encode, to_json};
use libfuzzer_sys::fuzz_target;
use prost_reflect::{DescriptorPool, MessageDescriptor};

fn messages() -> &'static [MessageDescriptor] {
    static MESSAGES: OnceLock<Vec<MessageDescriptor>> = OnceLock::new();
    MESSAGES.get_or_init(|| {
        let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/../aml-grpc-gate/tests/proto");
        let set = protox::compile(["payments.proto"], [proto]).expect("the test API compiles");
        let pool = DescriptorPool::from_file_descriptor_set(set).expect("the test API's descriptors");
        pool.all_messages().collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((pick, bytes)) = data.split_first() else { return };
    let all = messages();
    let desc = &all[usize::from(*pick) % all.len()];
    let Ok(json) = to_json(desc, bytes) else { return };
    let value = aml_core::strict::parse_slice(&json).expect("the decode path writes strict JSON");
    assert!(aml_core::strict::first_inexact_number(&json).is_none(), "an inexact number in {value}");
    let serde_json::Value::Object(arguments) = value.clone() else { panic!("not an object: {value}") };
    let again = encode(desc, arguments).expect("a decoded message re-encodes");
    let round = to_json(desc, &again).expect("a re-encoded message decodes");
    let round: serde_json::Value = serde_json::from_slice(&round).unwrap();
    assert!(aml_fuzz::same(&round, &value), "the re-encoded message is another: {round} vs {value}");
});

//! The fuzz target `grpc_gate_decode`'s property on a fixed, seeded set of inputs, so CI on
//! stable checks it too: valid messages of every type of the test API, each mutated
//! (bytes flipped, cut, inserted) and random bytes. Decoding never panics; a message that
//! decodes is strict JSON with no inexact number, re-encodes, and decodes to the same JSON.

use crate::support;

use aml_grpc_gate::transcode::{encode, to_json};
use prost_reflect::{DescriptorPool, MessageDescriptor};
use serde_json::Value;

/// A small deterministic generator (xorshift), so a failure names a reproducible input.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn check(desc: &MessageDescriptor, bytes: &[u8]) -> bool {
    let Ok(json) = to_json(desc, bytes) else {
        return false;
    };
    let value = aml_core::strict::parse_slice(&json).unwrap_or_else(|e| panic!("{bytes:02x?}: {e}"));
    assert!(
        aml_core::strict::first_inexact_number(&json).is_none(),
        "{bytes:02x?}: {value}"
    );
    let Value::Object(arguments) = value.clone() else {
        panic!("{bytes:02x?}: not an object")
    };
    let again = encode(desc, arguments).unwrap_or_else(|e| panic!("{bytes:02x?}: {e}"));
    let round: Value = serde_json::from_slice(&to_json(desc, &again).unwrap()).unwrap();
    assert_eq!(round, value, "{bytes:02x?}");
    true
}

#[test]
fn mutated_and_random_messages_decode_to_json_that_re_encodes_or_are_refused() {
    let dir = aml_test_support::scratch_dir("grpc-gate", "decode-property");
    let pool =
        DescriptorPool::decode(std::fs::read(support::descriptor_set(&dir)).unwrap().as_slice()).unwrap();
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        (
            "payments.v1.LookupRequest",
            b"\x0a\x03A-1\x10\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x1a\x01x\x1a\x01y".to_vec(),
        ),
        (
            "payments.v1.RefundRequest",
            b"\x0a\x03A-1\x10\x80\x01\x1a\x0a\x0a\x08e@x.test".to_vec(),
        ),
        ("payments.v1.WatchRequest", b"\x0a\x03A-1\x10\x03".to_vec()),
        (
            "payments.v1.OrderEvent",
            b"\x0a\x00\x10\xff\xff\xff\xff\x0f".to_vec(),
        ),
        (
            "payments.v1.Customer",
            b"\x0a\x08e@x.test\x12\x02\xc3\xa9".to_vec(),
        ),
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut decoded, mut refused) = (0, 0);
    for (name, seed) in &seeds {
        let desc = pool.get_message_by_name(name).unwrap();
        assert!(check(&desc, seed), "the seed {name} decodes");
        for _ in 0..4000 {
            let mut bytes = seed.clone();
            for _ in 0..=rng.below(3) {
                match rng.below(4) {
                    0 if !bytes.is_empty() => {
                        let i = rng.below(bytes.len());
                        bytes[i] ^= 1 << rng.below(8);
                    }
                    1 => bytes.truncate(rng.below(bytes.len() + 1)),
                    2 => {
                        let i = rng.below(bytes.len() + 1);
                        bytes.insert(i, rng.next() as u8);
                    }
                    _ => bytes = (0..rng.below(24)).map(|_| rng.next() as u8).collect(),
                }
            }
            if check(&desc, &bytes) {
                decoded += 1;
            } else {
                refused += 1;
            }
        }
    }
    // Both sides of the property were exercised.
    assert!(
        decoded > 1000 && refused > 1000,
        "decoded {decoded}, refused {refused}"
    );
}

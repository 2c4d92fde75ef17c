//! Differential test: our canonical JSON and digests against node's own
//! `JSON.stringify` over objects rebuilt with `Object.keys(v).sort()` — what the reference
//! does — on generated documents.
//!
//! Needs `node` on PATH (the project's machines have it). Without it this test fails
//! loudly rather than skipping.

use std::io::Write;
use std::process::{Command, Stdio};

use aml_core::canonical::to_canonical_string;
use aml_core::Sha256Digest;
use serde_json::{json, Map, Value};

const REFERENCE: &str = r#"
const crypto = require('crypto');
const rl = require('readline').createInterface({ input: process.stdin });
function sortKeys(v) {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object') {
    const out = {};
    for (const k of Object.keys(v).sort()) out[k] = sortKeys(v[k]);
    return out;
  }
  return v;
}
rl.on('line', (line) => {
  const text = JSON.stringify(sortKeys(JSON.parse(line)));
  const hex = crypto.createHash('sha256').update(text, 'utf8').digest('hex');
  process.stdout.write(hex + ' ' + text + '\n');
});
"#;

/// xorshift64*: deterministic documents, no extra dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }

    fn key(&mut self) -> String {
        match self.below(4) {
            0 => self.below(20).to_string(),
            1 => self
                .pick(&[
                    "01",
                    "-1",
                    "1.5",
                    "4294967294",
                    "4294967295",
                    "",
                    "a",
                    "B",
                    "é",
                    "😀",
                    "\u{ffff}",
                    "\u{e000}",
                    "\u{fb33}",
                    "\n",
                ])
                .to_owned(),
            _ => self.string(),
        }
    }

    fn string(&mut self) -> String {
        let pieces = [
            "a", "Z", "0", " ", "\"", "\\", "\u{0}", "\u{1f}", "\u{7f}", "\u{2028}", "é", "€", "😀",
            "\u{ffff}", "\t", "/",
        ];
        (0..self.below(6)).map(|_| self.pick(&pieces)).collect()
    }

    fn number(&mut self) -> Value {
        match self.below(5) {
            0 => json!(self.next() as i64 >> self.below(64)),
            1 => json!(self.next()),
            2 => {
                let x = f64::from_bits(self.next());
                if x.is_finite() {
                    json!(x)
                } else {
                    json!(0.5)
                }
            }
            3 => json!(
                [
                    1e21,
                    1e-7,
                    1e20,
                    123e-20,
                    0.1,
                    5e-324,
                    1.7976931348623157e308,
                    9007199254740993.0
                ][self.below(8) as usize]
            ),
            _ => json!((self.next() % 2_000_000) as f64 / 1000.0 - 1000.0),
        }
    }

    fn value(&mut self, depth: u32) -> Value {
        let kinds = if depth >= 4 { 4 } else { 6 };
        match self.below(kinds) {
            0 => Value::Null,
            1 => Value::Bool(self.below(2) == 1),
            2 => self.number(),
            3 => Value::String(self.string()),
            4 => Value::Array((0..self.below(5)).map(|_| self.value(depth + 1)).collect()),
            _ => {
                let mut map = Map::new();
                for _ in 0..self.below(7) {
                    map.insert(self.key(), self.value(depth + 1));
                }
                Value::Object(map)
            }
        }
    }
}

#[test]
fn canonical_json_and_digests_match_node_json_stringify() {
    let node = which_node();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let docs: Vec<Value> = (0..2000)
        .map(|_| {
            let mut map = Map::new();
            for _ in 0..(1 + rng.below(6)) {
                map.insert(rng.key(), rng.value(0));
            }
            Value::Object(map)
        })
        .collect();
    let input: String = docs
        .iter()
        .map(|d| serde_json::to_string(d).unwrap() + "\n")
        .collect();

    let mut child = Command::new(node)
        .arg("-e")
        .arg(REFERENCE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start node");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("node output");
    writer.join().unwrap().unwrap();
    assert!(output.status.success(), "node failed");
    let lines: Vec<&str> = std::str::from_utf8(&output.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), docs.len());

    let mut index_keyed = 0;
    for (doc, line) in docs.iter().zip(lines) {
        let (hex, expected) = line.split_once(' ').unwrap();
        let ours = to_canonical_string(doc).unwrap();
        assert_eq!(ours, expected, "document {doc}");
        assert_eq!(Sha256Digest::of(ours.as_bytes()).to_string(), hex);
        index_keyed += usize::from(
            doc.as_object()
                .unwrap()
                .keys()
                .any(|k| aml_core::canonical::array_index(k).is_some()),
        );
    }
    assert!(
        index_keyed > 500,
        "the generator must exercise array-index keys ({index_keyed})"
    );
}

fn which_node() -> String {
    let ok = Command::new("node")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "node is required for the differential test and was not found on PATH"
    );
    "node".to_owned()
}

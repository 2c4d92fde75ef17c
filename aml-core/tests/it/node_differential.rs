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

    let output = run_node(&node, input);
    let lines: Vec<&str> = output.lines().collect();
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

/// Runs the reference over newline-separated JSON texts; its output lines.
fn run_node(node: &str, input: String) -> String {
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
    String::from_utf8(output.stdout).unwrap()
}

/// JSON *text* with the tricky spellings the value generator above never writes: keys and
/// strings as `\u` escapes (surrogate pairs included, so UTF-16 order is tested on escaped
/// keys too), escaped array-index keys, number literals in every ES form (`1E2`, `-0`,
/// `0.1e1`, `100e-2`, past 2^53), and whitespace. Our strict parser then canonical writer
/// must give what `JSON.parse` then the reference's stringify gives.
struct TextGen(Rng);

impl TextGen {
    /// A key as (its value, its JSON spelling).
    fn key(&mut self) -> (String, String) {
        const KEYS: &[(&str, &str)] = &[
            ("a", r#""\u0061""#),
            ("a", r#""a""#),
            ("é", r#""\u00e9""#),
            ("é", r#""é""#),
            ("😀", r#""\ud83d\ude00""#),
            ("😀", r#""\uD83D\uDE00""#),
            ("\u{ffff}", r#""\uffff""#),
            ("\u{e000}", r#""\ue000""#),
            ("\u{fb33}", r#""\ufb33""#),
            ("1", r#""\u0031""#),
            ("10", r#""10""#),
            ("2", r#""2""#),
            ("0", r#""0""#),
            ("01", r#""01""#),
            ("4294967294", r#""4294967294""#),
            ("4294967295", r#""4294967295""#),
            ("-1", r#""-1""#),
            ("", r#""""#),
            ("\n", r#""\n""#),
            ("/", r#""\/""#),
            ("\u{0}", r#""\u0000""#),
            ("B", r#""B""#),
        ];
        let (value, text) = KEYS[self.0.below(KEYS.len() as u64) as usize];
        (value.to_owned(), text.to_owned())
    }

    fn number(&mut self) -> &'static str {
        const NUMBERS: &[&str] = &[
            "0",
            "-0",
            "-0.0",
            "0e0",
            "1E2",
            "1e+2",
            "0.1e1",
            "1.50",
            "100e-2",
            "5e-324",
            "1e21",
            "1e20",
            "999999999999999999999",
            "1e-7",
            "1E-7",
            "-1e-7",
            "0.000001",
            "1e-6",
            "123e-20",
            "9007199254740993",
            "9007199254740992",
            "18446744073709551616",
            "-9223372036854775809",
            "1.7976931348623157e308",
            "2.2250738585072014e-308",
            "4.35",
            "0.1",
            "0.30000000000000004",
            "1234567890123456789012",
            "12345678901234567",
        ];
        NUMBERS[self.0.below(NUMBERS.len() as u64) as usize]
    }

    fn string(&mut self) -> String {
        const PIECES: &[&str] = &[
            "a",
            r"\u0041",
            r"\/",
            r"\b",
            r"\f",
            r"\n",
            r"\r",
            r"\t",
            r"\u0000",
            r"\u001f",
            r"\u007f",
            r"\u2028",
            r"\u2029",
            r#"\""#,
            r"\\",
            "é",
            r"\u00e9",
            "😀",
            r"\ud83d\ude00",
            r"\uffff",
            r"\uFEFF",
            "€",
            " ",
        ];
        let body: String = (0..self.0.below(5))
            .map(|_| PIECES[self.0.below(PIECES.len() as u64) as usize])
            .collect();
        format!("\"{body}\"")
    }

    fn ws(&mut self) -> &'static str {
        // No raw `\r`: node's readline would split the line there.
        [" ", "", "\t", "  "][self.0.below(4) as usize]
    }

    fn value(&mut self, depth: u32) -> String {
        match self.0.below(if depth >= 3 { 4 } else { 6 }) {
            0 => ["null", "true", "false"][self.0.below(3) as usize].to_owned(),
            1 | 2 => self.number().to_owned(),
            3 => self.string(),
            4 => {
                let items: Vec<String> = (0..self.0.below(4)).map(|_| self.value(depth + 1)).collect();
                format!("[{}]", items.join(&format!(",{}", self.ws())))
            }
            _ => self.object(depth + 1),
        }
    }

    fn object(&mut self, depth: u32) -> String {
        let mut seen = std::collections::HashSet::new();
        let mut members = Vec::new();
        for _ in 0..self.0.below(7) {
            let (value, text) = self.key();
            // A key spelled twice is a duplicate the strict parser refuses (by design).
            if seen.insert(value) {
                let ws = self.ws();
                members.push(format!("{ws}{text}{ws}:{}{}", self.ws(), self.value(depth)));
            }
        }
        format!("{{{}}}", members.join(","))
    }
}

#[test]
fn strictly_parsed_text_canonicalizes_as_json_parse_then_node_json_stringify() {
    let node = which_node();
    let mut generator = TextGen(Rng(0x2545_F491_4F6C_DD1D));
    let texts: Vec<String> = (0..3000).map(|_| generator.object(0)).collect();
    let output = run_node(&node, texts.iter().map(|t| format!("{t}\n")).collect());
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines.len(), texts.len());
    let (mut escaped_keys, mut es_numbers) = (0, 0);
    for (text, line) in texts.iter().zip(lines) {
        let (hex, expected) = line.split_once(' ').unwrap();
        let value = aml_core::strict::parse_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let ours = to_canonical_string(&value).unwrap();
        assert_eq!(ours, expected, "text {text}");
        assert_eq!(Sha256Digest::of(ours.as_bytes()).to_string(), hex);
        escaped_keys += usize::from(text.contains(r#"{"\u"#) || text.contains(r#","\u"#));
        es_numbers += usize::from(
            ["1E2", "-0", "e-7", "9007199254740993"]
                .iter()
                .any(|n| text.contains(n)),
        );
    }
    assert!(
        escaped_keys > 500,
        "the generator must exercise escaped keys ({escaped_keys})"
    );
    assert!(
        es_numbers > 500,
        "the generator must exercise ES number forms ({es_numbers})"
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

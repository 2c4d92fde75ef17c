use super::*;
use serde_json::json;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn canon(v: &Value) -> String {
    to_canonical_string(v).unwrap()
}

fn jcs(name: &str) -> (String, Vec<u8>) {
    let dir = fixtures().join("jcs");
    let input = std::fs::read_to_string(dir.join("input").join(format!("{name}.json"))).unwrap();
    let value = crate::strict::parse_str(&input).unwrap();
    let expected = std::fs::read(dir.join("output").join(format!("{name}.json"))).unwrap();
    (canon(&value), expected)
}

#[test]
fn rfc8785_files_without_index_keys_match_byte_for_byte() {
    for name in ["arrays", "french", "unicode", "values"] {
        let (ours, expected) = jcs(name);
        assert_eq!(ours.as_bytes(), expected.as_slice(), "{name}");
    }
}

#[test]
fn rfc8785_outhex_agrees_with_output_files() {
    for name in ["arrays", "french", "structures", "unicode", "values", "weird"] {
        let dir = fixtures().join("jcs");
        let hex = std::fs::read_to_string(dir.join("outhex").join(format!("{name}.txt"))).unwrap();
        let bytes: Vec<u8> = hex
            .split_whitespace()
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        assert_eq!(
            bytes,
            std::fs::read(dir.join("output").join(format!("{name}.json"))).unwrap()
        );
    }
}

/// `structures` and `weird` hold index-like keys ("1", "10", "111"). The reference puts
/// them first, as ECMAScript enumerates array indices; RFC 8785 sorts them among the rest.
/// Everything else about the two outputs is identical.
#[test]
fn rfc8785_files_with_index_keys_differ_only_by_ecmascript_order() {
    let (ours, rfc) = jcs("structures");
    let rfc = String::from_utf8(rfc).unwrap();
    assert_eq!(
        rfc,
        r#"{"":"empty","1":{"\n":56,"f":{"F":5,"f":"hi"}},"10":{},"111":[{"E":"no","e":"yes"}],"A":{},"a":{}}"#
    );
    assert_eq!(
        ours,
        r#"{"1":{"\n":56,"f":{"F":5,"f":"hi"}},"10":{},"111":[{"E":"no","e":"yes"}],"":"empty","A":{},"a":{}}"#
    );

    let (ours, rfc) = jcs("weird");
    let rfc = String::from_utf8(rfc).unwrap();
    // RFC 8785 puts "1" after "\r"; ECMAScript moves it to the front. The rest, including
    // U+1F602 before U+FB33 (UTF-16 order), is the same.
    let moved = rfc
        .replacen(r#","1":"One""#, "", 1)
        .replacen('{', r#"{"1":"One","#, 1);
    assert_ne!(moved, rfc);
    assert_eq!(ours, moved);
    assert!(ours.find('\u{1F602}').unwrap() < ours.find('\u{FB33}').unwrap());
}

#[test]
fn es6_number_vectors_format_like_number_to_string() {
    let text = std::fs::read_to_string(fixtures().join("jcs/numbers/es6testfile10k.txt")).unwrap();
    let mut checked = 0;
    for line in text.lines() {
        let (hex, expected) = line.split_once(',').unwrap();
        let x = f64::from_bits(u64::from_str_radix(hex, 16).unwrap());
        let mut out = String::new();
        write_f64(x, &mut out).unwrap();
        assert_eq!(out, expected, "bits {hex}");
        checked += 1;
    }
    assert_eq!(checked, 10_000);
}

#[test]
fn numbers_follow_ecmascript() {
    let v = json!([
        1e21,
        1e-7,
        0.1,
        -0.0,
        9007199254740993u64,
        u64::MAX,
        -5,
        100,
        1.5e300
    ]);
    assert_eq!(
        canon(&v),
        "[1e+21,1e-7,0.1,0,9007199254740992,18446744073709552000,-5,100,1.5e+300]"
    );
}

#[test]
fn non_finite_numbers_are_refused_with_the_reference_code() {
    let mut out = String::new();
    for x in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let e = write_f64(x, &mut out).unwrap_err();
        assert_eq!(e.code(), JsonErrorCode::NonFiniteNumber);
        assert_eq!(e.code().as_str(), "AML_CANONICAL_JSON_NON_FINITE_NUMBER");
    }
}

#[test]
fn strings_escape_only_what_json_stringify_escapes() {
    let v = json!("\"\\\u{0}\u{1f}\u{7f}\u{2028}\u{2029}/\u{8}\u{c}\n\r\té😀");
    assert_eq!(
        canon(&v),
        "\"\\\"\\\\\\u0000\\u001f\u{7f}\u{2028}\u{2029}/\\b\\f\\n\\r\\té😀\""
    );
}

#[test]
fn index_keys_come_first_in_numeric_order() {
    let v = json!({"9": 1, "10": 2, "a": 3, "-1": 4, "0": 5, "01": 6, "1.5": 7,
                   "4294967294": 8, "4294967295": 9});
    assert_eq!(
        canon(&v),
        r#"{"0":5,"9":1,"10":2,"4294967294":8,"-1":4,"01":6,"1.5":7,"4294967295":9,"a":3}"#
    );
}

#[test]
fn keys_sort_by_utf16_code_units_not_code_points() {
    let v = json!({"\u{ffff}": 1, "\u{1F600}": 2, "\u{e000}": 3, "z": 4});
    assert_eq!(
        canon(&v),
        "{\"z\":4,\"\u{1F600}\":2,\"\u{e000}\":3,\"\u{ffff}\":1}"
    );
}

#[test]
fn array_index_recognises_only_canonical_decimals() {
    assert_eq!(array_index("0"), Some(0));
    assert_eq!(array_index("4294967294"), Some(4_294_967_294));
    for not in [
        "",
        "01",
        "-1",
        "1.5",
        "4294967295",
        "99999999999",
        "+1",
        " 1",
        "1e3",
    ] {
        assert_eq!(array_index(not), None, "{not:?}");
    }
}

#[test]
fn depth_past_the_limit_is_refused() {
    let mut v = json!(0);
    for _ in 0..MAX_DEPTH {
        v = json!([v]);
    }
    assert!(to_canonical_string(&v).is_ok());
    let e = to_canonical_string(&json!({ "x": v })).unwrap_err();
    assert_eq!(e.code(), JsonErrorCode::TooDeep);
}

#[test]
fn display_writes_canonical_text() {
    assert_eq!(Canonical(&json!({"b":1,"a":[]})).to_string(), r#"{"a":[],"b":1}"#);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-c]{0,3}",
            "[0-9]{1,3}",
            any::<String>(),
            Just("\u{ffff}".to_owned()),
            Just("\u{1F600}".to_owned())
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(|x| json!(x)),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..6)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    /// Writes `v` as JSON text with every object's keys in reverse byte order.
    fn reversed_text(v: &Value) -> String {
        match v {
            Value::Object(map) => {
                let members: Vec<String> = map
                    .iter()
                    .rev()
                    .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), reversed_text(v)))
                    .collect();
                format!("{{{}}}", members.join(","))
            }
            Value::Array(items) => format!(
                "[{}]",
                items.iter().map(reversed_text).collect::<Vec<_>>().join(",")
            ),
            other => serde_json::to_string(other).unwrap(),
        }
    }

    /// A byte near one of the escape tests' edges, or any byte.
    fn edge_byte() -> impl Strategy<Value = u8> {
        prop_oneof![
            prop::sample::select(vec![
                0x00, 0x01, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff
            ]),
            any::<u8>(),
        ]
    }

    proptest! {
        #[test]
        fn the_word_test_finds_exactly_the_bytes_to_escape(bytes in prop::array::uniform8(edge_byte())) {
            let expected = bytes.iter().any(|&b| super::super::NEEDS_ESCAPE[b as usize]);
            prop_assert_eq!(super::super::word_needs_escape(u64::from_le_bytes(bytes)), expected);
        }

        #[test]
        fn strings_are_written_as_serde_json_escapes_them(s in any::<String>(), pad in "[a-z\"\\\n]{0,17}") {
            for text in [s.clone(), format!("{pad}{s}"), format!("{s}{pad}")] {
                let mut out = String::new();
                super::super::write_string(&text, &mut out);
                prop_assert_eq!(out, serde_json::to_string(&text).unwrap());
            }
        }

        #[test]
        fn key_order_is_utf16_order(a in key(), b in key(), prefix in any::<String>()) {
            let (a, b) = (format!("{prefix}{a}"), format!("{prefix}{b}"));
            prop_assert_eq!(super::super::compare_utf16(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
        }

        #[test]
        fn canonical_form_ignores_key_order(v in json_value()) {
            let forward = crate::strict::parse_str(&serde_json::to_string(&v).unwrap()).unwrap();
            let backward = crate::strict::parse_str(&reversed_text(&v)).unwrap();
            prop_assert_eq!(canon(&forward), canon(&backward));
        }

        #[test]
        fn canonicalize_parse_canonicalize_is_identity(v in json_value()) {
            let once = canon(&v);
            let again = canon(&crate::strict::parse_str(&once).unwrap());
            prop_assert_eq!(once, again);
        }

        #[test]
        fn canonical_text_parses_back_to_an_equal_document(v in json_value()) {
            let parsed: Value = serde_json::from_str(&canon(&v)).unwrap();
            // Numbers are doubles on both sides once written; compare in canonical space.
            prop_assert_eq!(canon(&parsed), canon(&v));
        }
    }
}

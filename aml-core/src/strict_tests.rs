use super::*;
use serde_json::json;

fn code(text: &str) -> JsonErrorCode {
    parse_str(text).unwrap_err().code()
}

#[test]
fn accepts_what_rfc_8259_allows() {
    let v = parse_str(" {\"a\" : [1, -0, 2.5e3, true, false, null, \"\\u00e9\\ud83d\\ude00\\/\"]} ").unwrap();
    assert_eq!(v, json!({"a": [1, 0, 2500.0, true, false, null, "é😀/"]}));
    assert_eq!(parse_str("18446744073709551615").unwrap(), json!(u64::MAX));
    assert_eq!(parse_str("-9223372036854775808").unwrap(), json!(i64::MIN));
    assert_eq!(
        parse_str("18446744073709551616").unwrap(),
        json!(18446744073709551616.0)
    );
}

#[test]
fn refuses_duplicate_keys_even_nested() {
    assert_eq!(code(r#"{"a":1,"a":1}"#), JsonErrorCode::DuplicateKey);
    assert_eq!(code(r#"[{"x":{"k":1,"k":2}}]"#), JsonErrorCode::DuplicateKey);
    // Escapes are decoded before comparing: "\u0061" is "a".
    assert_eq!(code(r#"{"a":1,"\u0061":1}"#), JsonErrorCode::DuplicateKey);
}

#[test]
fn refuses_lone_surrogates() {
    assert_eq!(code(r#""\ud800""#), JsonErrorCode::LoneSurrogate);
    assert_eq!(code(r#""\ud800x""#), JsonErrorCode::LoneSurrogate);
    assert_eq!(code(r#""\udc00""#), JsonErrorCode::LoneSurrogate);
    assert_eq!(code(r#""\ud800\u0041""#), JsonErrorCode::LoneSurrogate);
    assert_eq!(code(r#"{"\udfff":1}"#), JsonErrorCode::LoneSurrogate);
}

#[test]
fn refuses_numbers_beyond_a_double() {
    assert_eq!(code("1e400"), JsonErrorCode::NonFiniteNumber);
    assert_eq!(code("-1e309"), JsonErrorCode::NonFiniteNumber);
    assert_eq!(code("[1.7976931348623159e308]"), JsonErrorCode::NonFiniteNumber);
    // Underflow rounds to zero, as in JSON.parse.
    assert_eq!(parse_str("1e-400").unwrap(), json!(0.0));
}

#[test]
fn refuses_nesting_past_the_limit() {
    let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
    assert!(parse_str(&ok).is_ok());
    let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
    assert_eq!(code(&deep), JsonErrorCode::TooDeep);
    // Far past serde_json's own 128 and without exhausting the stack.
    assert_eq!(code(&"{\"a\":".repeat(100_000)), JsonErrorCode::TooDeep);
}

#[test]
fn refuses_oversized_input_before_parsing() {
    let limits = Limits {
        max_bytes: 8,
        max_depth: 4,
    };
    let e = parse_slice_with(b"[1,2,3,4,5]", limits).unwrap_err();
    assert_eq!((e.code(), e.offset()), (JsonErrorCode::TooLarge, 8));
    // Not JSON, but too large is reported first: nothing was parsed.
    assert_eq!(
        parse_slice_with(b"not json at all", limits).unwrap_err().code(),
        JsonErrorCode::TooLarge
    );
}

#[test]
fn refuses_invalid_utf8_and_syntax_errors() {
    assert_eq!(
        parse_slice(b"\"\xff\"").unwrap_err().code(),
        JsonErrorCode::InvalidUtf8
    );
    for bad in [
        "",
        "{",
        "[1,]",
        "{\"a\"}",
        "01",
        "1.",
        ".5",
        "+1",
        "1e",
        "tru",
        "nul",
        "\"\t\"",
        "\"\\x\"",
        "{'a':1}",
        "[1] [2]",
        "NaN",
        "Infinity",
        "\"\\u12\"",
        "{\"a\":1,}",
    ] {
        assert_eq!(code(bad), JsonErrorCode::Syntax, "{bad:?}");
    }
}

#[test]
fn errors_name_code_and_offset() {
    let e = parse_str("[1, 2, x]").unwrap_err();
    assert_eq!(e.offset(), 7);
    assert_eq!(e.to_string(), "AML_JSON_SYNTAX at byte 7: expected a value");
}

mod agreement {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// On any text serde_json accepts without duplicates, deep nesting or overflow, the
        /// strict parser produces the same value.
        #[test]
        fn agrees_with_serde_json_on_its_own_output(s in any::<String>(), n in any::<i64>(), x in any::<f64>()) {
            let doc = json!({"s": s, "n": n, "x": if x.is_finite() { json!(x) } else { Value::Null }, "a": [s, n]});
            let text = serde_json::to_string(&doc).unwrap();
            prop_assert_eq!(parse_str(&text).unwrap(), serde_json::from_str::<Value>(&text).unwrap());
        }

        #[test]
        fn arbitrary_bytes_give_a_value_or_an_in_bounds_error(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            match parse_slice(&bytes) {
                Ok(v) => prop_assert_eq!(parse_str(&v.to_string()).unwrap(), v),
                Err(e) => prop_assert!(e.offset() <= bytes.len()),
            }
        }
    }
}

#[test]
fn exact_numbers_keep_their_value_through_a_double() {
    for exact in [
        "0",
        "-0",
        "1",
        "-1",
        "1.5",
        "2.50e1",
        "1e2",
        "1E+2",
        "100e-2",
        "0.1",
        "123456789012345",
        "9007199254740992",
        "-9007199254740992",
        "1e21",
        "5e-324",
        "1.7976931348623157e308",
        "0.000001",
        "0e99999999999999999999",
    ] {
        assert!(is_exact_number(exact), "{exact}");
    }
    for inexact in [
        "9007199254740993",
        "-9007199254740993",
        "12345678901234567891",
        "18446744073709551615",
        "0.1000000000000000055511",
        "1.00000000000000001",
        "1e-400",
        "4.9e-324",
        "123456789012345678",
        // 2^64 is a double, but it is written 18446744073709552000: another decimal value.
        "18446744073709551616",
    ] {
        assert!(!is_exact_number(inexact), "{inexact}");
    }
}

#[test]
fn the_first_inexact_number_is_found_outside_strings() {
    let text =
        br#"{"s": "9007199254740993", "a": [1, 2.5, {"k": -9007199254740993}], "b": 12345678901234567891}"#;
    let found = first_inexact_number(text).unwrap();
    assert_eq!(found.literal(), "-9007199254740993");
    assert_eq!(found.nearest(), "-9007199254740992");
    assert_eq!(&text[found.offset()..found.offset() + 17], b"-9007199254740993");
    assert!(found.to_string().contains("-9007199254740993"));
    assert!(first_inexact_number(br#"{"s": "a\"9007199254740993", "n": [1e2, -0.5]}"#).is_none());
    // Integers past 2^53 are refused even where the rendering keeps the decimal value (10^23
    // as 1e+23) or the double holds them exactly (2^60, rendered 1152921504606847000).
    for (literal, nearest) in [
        ("100000000000000000000000", "1e+23"),
        ("-100000000000000000000000", "-1e+23"),
        ("1152921504606846976", "1152921504606847000"),
        ("9007199254740994", "9007199254740994"),
    ] {
        let text = format!("[{literal}]");
        let found = first_inexact_number(text.as_bytes()).unwrap();
        assert_eq!((found.literal(), found.nearest()), (literal, nearest));
        assert!(found.to_string().contains("beyond ±2^53"), "{found}");
    }
    for exact in ["9007199254740992", "-9007199254740992", "1e23", "1.5e300", "0.1"] {
        assert!(
            first_inexact_number(format!("[{exact}]").as_bytes()).is_none(),
            "{exact}"
        );
    }
    // What the parser (like JSON.parse) keeps is unchanged: it still reads the rounded value.
    assert_eq!(parse_str("9007199254740993").unwrap(), json!(9007199254740993u64));
}

//! `aml-testkit canonicalize`: one JSON document per line in, `<sha256> <canonical>` or
//! `error <CODE>` per line out, going on after refusals.

use std::io::Write;
use std::process::{Command, Stdio};

use aml_core::canonical::to_canonical_string;
use aml_core::Sha256Digest;

fn canonicalize(input: &str) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_aml-testkit"))
        .arg("canonicalize")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn upstream_vectors_hash_to_their_published_digests() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/upstream-conformance/vectors.json"
    );
    let vectors = aml_core::strict::parse_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = vectors["cases"].as_array().unwrap();
    let input: String = cases.iter().map(|c| format!("{}\n", c["proposal"])).collect();
    let lines = canonicalize(&input);
    assert_eq!(lines.len(), cases.len());
    for (line, case) in lines.iter().zip(cases) {
        let (digest, canonical) = line.split_once(' ').unwrap();
        assert_eq!(digest, case["proposal_sha256"].as_str().unwrap());
        assert_eq!(Sha256Digest::of(canonical.as_bytes()).to_string(), digest);
        assert_eq!(canonical, to_canonical_string(&case["proposal"]).unwrap());
    }
}

#[test]
fn refused_lines_get_their_code_and_the_rest_go_on() {
    let input = concat!(
        "{\"b\":1,\"a\":2}\n",
        "{\"a\":1,\"a\":2}\n",
        "\"\\ud800\"\n",
        "1e999\n",
        "[NaN]\n",
        "\n",
        "{\"10\":0,\"9\":[1e21,-0]}\r\n",
    );
    let lines = canonicalize(input);
    let expect_ok = |line: &str, canonical: &str| {
        assert_eq!(
            line,
            format!("{} {canonical}", Sha256Digest::of(canonical.as_bytes()))
        );
    };
    assert_eq!(lines.len(), 7);
    expect_ok(&lines[0], r#"{"a":2,"b":1}"#);
    assert_eq!(lines[1], "error AML_JSON_DUPLICATE_KEY");
    assert_eq!(lines[2], "error AML_JSON_LONE_SURROGATE");
    assert_eq!(lines[3], "error AML_CANONICAL_JSON_NON_FINITE_NUMBER");
    assert_eq!(lines[4], "error AML_JSON_SYNTAX");
    assert_eq!(lines[5], "error AML_JSON_SYNTAX");
    expect_ok(&lines[6], r#"{"9":[1e+21,0],"10":0}"#);
}

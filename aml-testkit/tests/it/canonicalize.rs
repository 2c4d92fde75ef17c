//! `aml-testkit canonicalize`: one JSON document per line in, `<sha256> <canonical>` or
//! `error <CODE>` per line out, going on after refusals. Exit status 0 when every line was
//! canonicalized, 1 when any was refused, 2 when stdin or stdout fails.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use aml_core::canonical::to_canonical_string;
use aml_core::Sha256Digest;

fn run_with(stdin: Stdio, stdout: Stdio) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_aml-testkit"))
        .arg("canonicalize")
        .env_remove("RUST_LOG")
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn run(input: &str) -> Output {
    let mut child = run_with(Stdio::piped(), Stdio::piped());
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// The output lines and the exit status.
fn canonicalize(input: &str) -> (Vec<String>, Option<i32>) {
    let out = run(input);
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    (lines, out.status.code())
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
    let (lines, status) = canonicalize(&input);
    assert_eq!(status, Some(0));
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
    let (lines, status) = canonicalize(input);
    assert_eq!(status, Some(1), "refused lines make the exit status 1");
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

#[test]
fn the_refusal_count_goes_to_stderr_and_stdout_keeps_only_answers() {
    let out = run("1\n{\"a\":\n[2]\n");
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 3);
    assert_eq!(stdout.lines().nth(1), Some("error AML_JSON_SYNTAX"));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "aml-testkit: 1 line(s) refused\n"
    );
}

#[test]
fn empty_input_is_success_with_no_output() {
    let out = run("");
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

#[cfg(target_os = "linux")]
#[test]
fn a_failing_stdout_exits_2_and_says_so() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let mut child = run_with(Stdio::piped(), Stdio::from(full));
    child.stdin.take().unwrap().write_all(b"[1]\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("aml-testkit: writing output:"), "{stderr}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_failing_stdin_exits_2_and_names_the_line() {
    // Reading a directory fails with EISDIR.
    let dir = std::fs::File::open(env!("CARGO_MANIFEST_DIR")).unwrap();
    let out = run_with(Stdio::from(dir), Stdio::piped())
        .wait_with_output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("aml-testkit: reading line 1:"), "{stderr}");
}

//! `aml-approval`, run as a user runs it: keys, offline signing, verification with its exit
//! codes, usage errors that name the bad argument, help and version, and the commands
//! documented in docs/APPROVAL.md, on the examples in `examples/approval/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use aml_approval::{ApproverKey, Keyring, SignedStatement, Statement, StatementDecision, Validity};
use serde_json::json;

const DIGEST: &str = "f416748534da5982a029d03d6db48adf00b4138e0785d38857f0b1734923776c";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_in(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_aml-approval"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    Run {
        code: out.status.code().expect("exited"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn run(args: &[&str]) -> Run {
    run_in(Path::new("."), args)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn temp(tag: &str) -> PathBuf {
    aml_test_support::scratch_dir("approval-cli", tag)
}

/// A fresh key, its keyring, and a statement file signed by the CLI.
struct Signed {
    dir: PathBuf,
    key: String,
    ring: String,
}

impl Signed {
    fn new(tag: &str) -> Self {
        Self::of("alice", tag)
    }

    fn of(key_id: &str, tag: &str) -> Self {
        let dir = temp(tag);
        let key = dir.join("approver.key").display().to_string();
        let made = run(&["keygen", key_id, &key]);
        assert_eq!(made.code, 0, "{}", made.stderr);
        let entry: serde_json::Value = serde_json::from_str(&made.stdout).unwrap();
        let ring = dir.join("keyring.json");
        std::fs::write(&ring, json!({"keys": [entry]}).to_string()).unwrap();
        Signed {
            key,
            ring: ring.display().to_string(),
            dir,
        }
    }

    /// Signs with `args` after the key file; the statement's path.
    fn sign(&self, name: &str, args: &[&str]) -> String {
        let mut all = vec!["sign", &self.key];
        all.extend_from_slice(args);
        let signed = run(&all);
        assert_eq!(signed.code, 0, "{}", signed.stderr);
        let path = self.dir.join(name);
        std::fs::write(&path, &signed.stdout).unwrap();
        path.display().to_string()
    }

    fn verify(&self, statement: &str, extra: &[&str]) -> Run {
        let mut all = vec!["verify", &self.ring, statement];
        all.extend_from_slice(extra);
        run(&all)
    }
}

#[test]
fn keygen_sign_and_verify_round_trip() {
    let s = Signed::new("round-trip");
    assert_ne!(
        run(&["keygen", "alice", &s.key]).code,
        0,
        "a key file is never overwritten"
    );
    let public = run(&["public", &s.key]);
    assert_eq!(public.code, 0);
    let ring: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&s.ring).unwrap()).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&public.stdout).unwrap(),
        ring["keys"][0],
        "public prints the entry keygen printed"
    );
    let statement = s.sign("approve.json", &[DIGEST, "grant-7", "approve", "--ttl", "60"]);
    let verified = s.verify(&statement, &["--digest", DIGEST, "--grant-id", "grant-7"]);
    assert_eq!(verified.code, 0, "{}", verified.stderr);
    assert!(
        verified.stdout.starts_with(&format!(
            "valid approval: proposal {DIGEST} (= --digest), grant \"grant-7\" (= --grant-id), \
             signed by \"alice\" (in the keyring), "
        )),
        "{}",
        verified.stdout
    );
}

/// A deny may carry the approver's reason: signed with it, shown by verify; refused on an
/// approval and when it holds characters a person would not see (usage errors, exit 2).
#[test]
fn a_deny_carries_a_signed_reason() {
    let s = Signed::new("reason");
    let deny = s.sign(
        "deny.json",
        &[
            DIGEST,
            "grant-7",
            "deny",
            "--reason",
            "Not the whole team, please.",
        ],
    );
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&deny).unwrap()).unwrap();
    assert_eq!(written["reason"], "Not the whole team, please.");
    let verified = s.verify(&deny, &["--digest", DIGEST, "--grant-id", "grant-7"]);
    assert_eq!(verified.code, 5, "{}", verified.stderr);
    assert!(
        verified
            .stderr
            .contains("the approver denied it: \"Not the whole team, please.\" [denied]"),
        "{}",
        verified.stderr
    );
    for (args, says) in [
        (
            vec!["approve", "--reason", "fine"],
            "only a deny carries a reason",
        ),
        (
            vec!["deny", "--reason", "rtl\u{202E}txt"],
            "control, bidirectional or invisible",
        ),
        (vec!["deny", "--reason", " "], "it is empty"),
    ] {
        let mut all = vec!["sign", s.key.as_str(), DIGEST, "grant-7"];
        all.extend(args.iter().copied());
        let refused = run(&all);
        assert_eq!(refused.code, 2, "{args:?}: {}", refused.stderr);
        assert!(
            refused.stderr.contains("invalid value for '--reason <TEXT>'") && refused.stderr.contains(says),
            "{args:?}: {}",
            refused.stderr
        );
        assert!(refused.stdout.is_empty());
    }
}

#[test]
fn verify_exits_zero_only_for_a_valid_current_approval() {
    let s = Signed::new("exit-codes");
    let approve = s.sign("approve.json", &[DIGEST, "grant-7", "approve", "--ttl", "60"]);
    let deny = s.sign("deny.json", &[DIGEST, "grant-7", "deny"]);
    let long = s.sign("long.json", &[DIGEST, "grant-7", "approve", "--ttl", "3600"]);
    let text = std::fs::read_to_string(&approve).unwrap();
    let tampered = s.dir.join("tampered.json");
    std::fs::write(&tampered, text.replace("grant-7", "grant-8")).unwrap();
    let malformed = s.dir.join("malformed.json");
    std::fs::write(&malformed, text.replace("\"decision\"", "\"verdict\"")).unwrap();
    let stranger = Signed::of("bob", "stranger");
    let unknown = stranger.sign("unknown.json", &[DIGEST, "grant-7", "approve"]);
    let (tampered, malformed) = (tampered.display().to_string(), malformed.display().to_string());
    let issued: i64 = serde_json::from_str::<serde_json::Value>(&text).unwrap()["issued_at_ms"]
        .as_i64()
        .unwrap();
    let (later, earlier) = ((issued + 61_000).to_string(), (issued - 3_600_000).to_string());
    let other = "0".repeat(64);
    let this = ["--digest", DIGEST, "--grant-id", "grant-7"];
    let cases: [(&str, &str, Vec<&str>, i32, &str); 9] = [
        ("valid", &approve, this.to_vec(), 0, ""),
        ("deny", &deny, this.to_vec(), 5, "the approver denied it [denied]"),
        (
            "expired",
            &approve,
            [&this[..], &["--at", &later]].concat(),
            6,
            "expired at",
        ),
        (
            "issued in the future",
            &approve,
            [&this[..], &["--at", &earlier]].concat(),
            7,
            "[issued_in_the_future]",
        ),
        (
            "too long",
            &long,
            [&this[..], &["--max-lifetime", "60"]].concat(),
            7,
            "[lifetime_too_long]",
        ),
        (
            "other digest",
            &approve,
            vec!["--digest", &other, "--grant-id", "grant-7"],
            8,
            "[other_proposal]",
        ),
        (
            "other grant",
            &approve,
            vec!["--digest", DIGEST, "--grant-id", "grant-8"],
            8,
            "it names grant \"grant-7\" [other_grant]",
        ),
        (
            "tampered",
            &tampered,
            this.to_vec(),
            4,
            "the signature does not verify",
        ),
        (
            "malformed",
            &malformed,
            this.to_vec(),
            3,
            "not an aml-approval-statement/1 statement",
        ),
    ];
    for (name, statement, extra, code, says) in cases {
        let out = s.verify(statement, &extra);
        assert_eq!(out.code, code, "{name}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{name}: {}", out.stderr);
        assert_eq!(out.stdout.is_empty(), code != 0, "{name}");
    }
    let out = s.verify(&unknown, &this);
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert!(out.stderr.contains("unknown approver key"), "{}", out.stderr);
    let missing = run(&["verify", "/no/such/keyring.json", &approve, "--signature-only"]);
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("cannot read /no/such/keyring.json"),
        "{}",
        missing.stderr
    );
}

#[test]
fn verify_says_when_it_is_given_a_key_file_or_an_entry_instead_of_a_keyring() {
    let s = Signed::new("not-a-keyring");
    let statement = s.sign("approve.json", &[DIGEST, "grant-7", "approve"]);
    let out = run(&["verify", &s.key, &statement, "--signature-only"]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains(&format!(
            "{}: this is an approver key file (it holds a secret key), not a keyring",
            s.key
        )),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("statement"), "{}", out.stderr);
    // keygen's own output, the entry alone.
    let entry = s.dir.join("entry.json");
    std::fs::write(&entry, run(&["public", &s.key]).stdout).unwrap();
    let out = run(&[
        "verify",
        &entry.display().to_string(),
        &statement,
        "--signature-only",
    ]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("this is one keyring entry, not a keyring"),
        "{}",
        out.stderr
    );
    // And the other way round: a keyring where a key file belongs.
    let out = run(&["sign", &s.ring, DIGEST, "g", "approve"]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("not an approver key file"), "{}", out.stderr);
}

#[test]
fn numeric_options_give_range_errors_that_name_the_option() {
    let s = Signed::new("ranges");
    let statement = s.sign("approve.json", &[DIGEST, "g", "approve"]);
    let cases: [(Vec<&str>, &str); 6] = [
        (
            vec!["sign", &s.key, DIGEST, "g", "approve", "--ttl", "18446744073709551615"],
            "invalid value '18446744073709551615' for '--ttl <SECONDS>': 18446744073709551615 is not in 1..=86400",
        ),
        (
            vec!["sign", &s.key, DIGEST, "g", "approve", "--ttl", "9223372036854775"],
            "for '--ttl <SECONDS>'",
        ),
        (
            vec!["sign", &s.key, DIGEST, "g", "approve", "--ttl", "0"],
            "0 is not in 1..=86400",
        ),
        (
            vec!["sign", &s.key, DIGEST, "g", "approve", "--ttl", "99999999999999999999"],
            "for '--ttl <SECONDS>'",
        ),
        (
            vec!["verify", &s.ring, &statement, "--signature-only", "--at", "9007199254740993"],
            "for '--at <MS>'",
        ),
        (
            vec!["verify", &s.ring, &statement, "--signature-only", "--max-lifetime", "-1"],
            "invalid value '-1' for '--max-lifetime <SECONDS>'",
        ),
    ];
    for (args, says) in cases {
        let out = run(&args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains("integral type conversion"), "{}", out.stderr);
    }
}

#[test]
fn usage_errors_exit_2_and_name_what_was_wrong() {
    let cases: [(&[&str], &str); 6] = [
        (&["bogus"], "unrecognized subcommand 'bogus'"),
        (&[], "Usage: aml-approval <COMMAND>"),
        (
            &["sign", "k", "not-a-digest", "g", "approve"],
            "invalid value 'not-a-digest' for '<DIGEST>'",
        ),
        (
            &["sign", "k", DIGEST, "g", "maybe"],
            "invalid value 'maybe' for '<DECISION>'",
        ),
        (&["verify", "ring.json"], "<STATEMENT>"),
        (
            &["keygen", " ", "k"],
            "invalid value ' ' for '<KEY_ID>': must not be blank",
        ),
    ];
    for (args, says) in cases {
        let out = run(args);
        assert_eq!(out.code, 2, "{args:?}");
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn help_after_a_subcommand_and_version() {
    for args in [&["sign", "--help"][..], &["help", "sign"], &["sign", "-h"]] {
        let out = run(args);
        assert_eq!(out.code, 0, "{args:?}");
        assert!(out
            .stdout
            .contains("Usage: aml-approval sign [OPTIONS] <KEY_FILE> <DIGEST> <GRANT_ID> <DECISION>"));
        assert!(out.stdout.contains("--ttl <SECONDS>"));
        assert!(out.stdout.contains("Exit codes:"));
    }
    let verify = run(&["verify", "--help"]);
    assert_eq!(verify.code, 0);
    assert!(verify
        .stdout
        .contains("8  verify: it decides another proposal or grant"));
    let top = run(&["--help"]);
    assert!(["keygen", "public", "sign", "verify"]
        .iter()
        .all(|c| top.stdout.contains(c)));
    let version = run(&["--version"]);
    assert_eq!(version.code, 0);
    assert_eq!(
        version.stdout.trim(),
        format!("aml-approval {}", env!("CARGO_PKG_VERSION"))
    );
}

/// Without `--digest` and `--grant-id`, any valid signed approval would pass, so that
/// `verify && run` would accept an approval of another proposal: both are required unless
/// `--signature-only` says that only the signature is checked, and the output says which.
#[test]
fn verify_requires_the_proposal_and_grant_or_says_it_checked_the_signature_only() {
    let s = Signed::new("requires");
    let approve = s.sign("approve.json", &[DIGEST, "grant-7", "approve"]);
    let deny = s.sign("deny.json", &[DIGEST, "grant-7", "deny"]);
    for (extra, missing) in [
        (vec![], "--digest <DIGEST>"),
        (vec![], "--grant-id <GRANT_ID>"),
        (vec!["--digest", DIGEST], "--grant-id <GRANT_ID>"),
        (vec!["--grant-id", "grant-7"], "--digest <DIGEST>"),
    ] {
        let out = s.verify(&approve, &extra);
        assert_eq!(out.code, 2, "{extra:?}: {}", out.stderr);
        assert!(
            out.stderr
                .contains("the following required arguments were not provided")
                && out.stderr.contains(missing),
            "{extra:?}: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty());
    }
    let only = s.verify(&approve, &["--signature-only"]);
    assert_eq!(only.code, 0, "{}", only.stderr);
    assert_eq!(
        only.stdout.trim(),
        format!(
            "signature valid: signed by \"alice\" (in the keyring); not checked (--signature-only): \
             proposal {DIGEST}, grant \"grant-7\", decision approve, issued and expiry times"
        )
    );
    // Signature only: a denial's signature is valid too, and the output says it denies.
    let denied = s.verify(&deny, &["--signature-only"]);
    assert_eq!(denied.code, 0, "{}", denied.stderr);
    assert!(denied.stdout.contains("decision deny"), "{}", denied.stdout);
    for clash in [
        vec!["--signature-only", "--digest", DIGEST],
        vec!["--signature-only", "--grant-id", "grant-7"],
        vec!["--signature-only", "--at", "1"],
    ] {
        let out = s.verify(&approve, &clash);
        assert_eq!(out.code, 2, "{clash:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("cannot be used with"),
            "{clash:?}: {}",
            out.stderr
        );
    }
}

/// What `verify` prints from a statement (the grant id, the key id) is shown with control
/// and bidirectional characters escaped: an `ESC[2J` in a signed grant id cleared the
/// terminal.
#[test]
fn verify_prints_ids_from_the_statement_escaped() {
    let s = Signed::new("escapes");
    let grant = "g\u{1b}[2J\u{202e}1";
    let statement = s.sign("approve.json", &[DIGEST, grant, "approve"]);
    let shown = "g\\u{001B}[2J\\u{202E}1";
    for args in [
        vec!["--digest", DIGEST, "--grant-id", grant],
        vec!["--signature-only"],
        vec!["--digest", DIGEST, "--grant-id", "other"],
    ] {
        let out = s.verify(&statement, &args);
        let printed = format!("{}{}", out.stdout, out.stderr);
        assert!(
            !printed.contains('\u{1b}') && !printed.contains('\u{202e}'),
            "{args:?}: raw control characters printed: {printed:?}"
        );
        assert!(printed.contains(shown), "{args:?}: {printed}");
    }
    // A statement naming a key the keyring does not have (it cannot be signed by one: keys
    // with such ids are refused), with the key id escaped in the error.
    let mut forged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&statement).unwrap()).unwrap();
    forged["approver_key_id"] = json!("m\u{1b}]0;owned\u{7}");
    let forged_path = s.dir.join("forged.json");
    std::fs::write(&forged_path, forged.to_string()).unwrap();
    let out = s.verify(&forged_path.display().to_string(), &["--signature-only"]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert!(
        !out.stderr.contains('\u{1b}') && !out.stderr.contains('\u{7}'),
        "{:?}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("unknown approver key \"m\\u{001B}]0;owned\\u{0007}\""),
        "{}",
        out.stderr
    );
}

/// Key ids are shown to people: keygen refuses ids with control, bidirectional or
/// invisible characters, naming the character, and writes no key file.
#[test]
fn keygen_refuses_key_ids_that_would_not_read_as_their_bytes() {
    let dir = temp("key-ids");
    for (id, hidden, named) in [
        ("alice\u{202e}gpj", '\u{202e}', "U+202E"),
        ("bob\u{1b}[2J", '\u{1b}', "U+001B"),
        ("carol\u{200b}", '\u{200b}', "U+200B"),
        ("dave\u{9b}31m", '\u{9b}', "U+009B"),
        ("eve\nmallory", '\n', "U+000A"),
    ] {
        let file = dir.join("approver.key");
        let out = run(&["keygen", id, &file.display().to_string()]);
        assert_eq!(out.code, 2, "{id:?}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("contains {named}"))
                && out
                    .stderr
                    .contains("control, bidirectional or invisible character"),
            "{id:?}: {}",
            out.stderr
        );
        assert!(
            !out.stderr.trim_end().contains(hidden),
            "{id:?}: printed raw: {:?}",
            out.stderr
        );
        assert!(!file.exists(), "{id:?}: a key file was written");
        assert!(out.stdout.is_empty());
    }
}

/// An all-zero (or otherwise degenerate) seed makes a key anyone can recompute: a key file
/// that holds one is refused wherever it is loaded.
#[test]
fn key_files_with_a_weak_seed_are_refused() {
    let dir = temp("weak-seeds");
    for seed in ["00".repeat(32), "ff".repeat(32), "abcd".repeat(16)] {
        let file = dir.join("weak.key");
        std::fs::write(&file, json!({"key_id": "alice", "secret_key": seed}).to_string()).unwrap();
        let file = file.display().to_string();
        for args in [vec!["public", &file], vec!["sign", &file, DIGEST, "g", "approve"]] {
            let out = run(&args);
            assert_eq!(out.code, 1, "{seed} {args:?}: {}", out.stderr);
            assert!(
                out.stderr.contains("the secret key is a weak seed"),
                "{seed} {args:?}: {}",
                out.stderr
            );
            assert!(out.stdout.is_empty(), "{seed} {args:?}: signed: {}", out.stdout);
        }
    }
}

/// The example files agree with each other; `AML_BLESS=1` re-signs the statement (and
/// makes the key when it is missing).
#[test]
fn the_examples_are_one_key_its_keyring_and_a_statement_it_signed() {
    let dir = repo().join("examples/approval");
    let key_path = dir.join("example-approver.key");
    if std::env::var_os("AML_BLESS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        if !key_path.exists() {
            let key = ApproverKey::generate("example-approver").unwrap();
            std::fs::write(&key_path, format!("{}\n", key.to_json())).unwrap();
        }
        let key = ApproverKey::from_json(&std::fs::read_to_string(&key_path).unwrap()).unwrap();
        let ring = json!({"keys": [key.public_entry()]});
        std::fs::write(
            dir.join("keyring.json"),
            format!("{}\n", serde_json::to_string_pretty(&ring).unwrap()),
        )
        .unwrap();
        // 2026-01-01T00:00:00Z, valid for five minutes.
        let validity = Validity::new(1_767_225_600_000, 1_767_225_900_000).unwrap();
        let statement = Statement::new(
            DIGEST.parse().unwrap(),
            "example-grant-1",
            key.key_id(),
            StatementDecision::Approve,
            validity,
        )
        .sign(&key)
        .unwrap();
        std::fs::write(dir.join("statement.json"), format!("{}\n", statement.to_value())).unwrap();
    }
    let key = ApproverKey::from_json(&std::fs::read_to_string(&key_path).unwrap()).unwrap();
    let ring = Keyring::from_json(&std::fs::read_to_string(dir.join("keyring.json")).unwrap()).unwrap();
    let statement =
        SignedStatement::from_json(&std::fs::read_to_string(dir.join("statement.json")).unwrap()).unwrap();
    let verified = ring.verify(&statement).unwrap();
    assert_eq!(verified.approver_key_id(), key.key_id());
    assert_eq!(verified.proposal_sha256().to_string(), DIGEST);
    // The signing recipe in the docs shows the exact bytes signed for the example.
    let signed_bytes = String::from_utf8(verified.signing_bytes().unwrap()).unwrap();
    let docs = std::fs::read_to_string(repo().join("docs/APPROVAL.md")).unwrap();
    assert!(
        docs.contains(&signed_bytes),
        "docs/APPROVAL.md must show {signed_bytes}"
    );
}

/// Every `$ aml-approval …` line in a `console` block of docs/APPROVAL.md and of the README
/// runs from the repository root and prints what the block shows after it (stdout, then
/// stderr); a last line `[exit N]` gives the exit code (0 otherwise).
#[test]
fn the_documented_commands_print_what_the_docs_show() {
    let mut ran = 0;
    for doc in ["docs/APPROVAL.md", "README.md"] {
        let text = std::fs::read_to_string(repo().join(doc)).unwrap();
        for (command, expected) in console_commands(&text) {
            let args: Vec<&str> = command.split_whitespace().skip(1).collect();
            let out = run_in(&repo(), &args);
            let mut printed: Vec<String> = out
                .stdout
                .lines()
                .chain(out.stderr.lines())
                .map(str::to_owned)
                .collect();
            if out.code != 0 {
                printed.push(format!("[exit {}]", out.code));
            }
            assert_eq!(printed, expected, "{doc}: $ {command}");
            ran += 1;
        }
    }
    assert!(
        ran >= 3,
        "the docs show at least three aml-approval commands, found {ran}"
    );
}

/// `(command, expected output lines)` for each `$ aml-approval` line in console blocks.
fn console_commands(markdown: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let mut in_console = false;
    let mut current: Option<(String, Vec<String>)> = None;
    let mut continuing = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_console = !in_console && line.trim() == "```console";
            found.extend(current.take());
            continue;
        }
        if !in_console {
            continue;
        }
        if continuing {
            let (command, _) = current.as_mut().unwrap();
            command.push(' ');
            command.push_str(line.trim().trim_end_matches('\\').trim());
            continuing = line.trim_end().ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            found.extend(current.take());
            if command.starts_with("aml-approval ") {
                continuing = command.trim_end().ends_with('\\');
                current = Some((command.trim_end_matches('\\').trim().to_owned(), Vec::new()));
            }
        } else if let Some((_, expected)) = current.as_mut() {
            expected.push(line.to_owned());
        }
    }
    found.extend(current);
    found
}

//! The `aml-testkit` command line as a user meets it: `--version`, help after every
//! subcommand, errors that name the bad argument, exit statuses, and `RUST_LOG`.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn testkit(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aml-testkit"));
    command.args(args).env_remove("RUST_LOG");
    command
}

fn run(args: &[&str]) -> Output {
    testkit(args).stdin(Stdio::null()).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A usage error: exit 2, nothing on stdout, stderr starting with clap's `error:` line.
fn usage_error(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    stderr
}

#[test]
fn version_prints_the_crate_version() {
    for flag in ["--version", "-V"] {
        let out = run(&[flag]);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(
            text(&out.stdout),
            format!("aml-testkit {}\n", env!("CARGO_PKG_VERSION"))
        );
        assert!(out.stderr.is_empty());
    }
}

#[test]
fn an_unknown_subcommand_is_named() {
    let stderr = usage_error(&["frobnicate"]);
    assert!(
        stderr.contains("unrecognized subcommand 'frobnicate'"),
        "{stderr}"
    );
}

#[test]
fn case_without_a_file_names_the_missing_argument() {
    let stderr = usage_error(&["case"]);
    assert!(
        stderr.contains("required arguments were not provided") && stderr.contains("<CASE_FILE>"),
        "{stderr}"
    );
}

#[test]
fn a_misspelled_option_is_named_and_the_right_one_suggested() {
    let stderr = usage_error(&["rehearse", "guarded-tool", "--adaptor", "grpc"]);
    assert!(stderr.contains("unexpected argument '--adaptor'"), "{stderr}");
    assert!(stderr.contains("'--adapter'"), "{stderr}");
}

#[test]
fn an_unknown_adapter_is_named_with_the_possible_values() {
    let stderr = usage_error(&["rehearse", "guarded-tool", "--adapter", "soap"]);
    assert!(
        stderr.contains("invalid value 'soap' for '--adapter <ADAPTER>'"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[possible values: core, mcp, a2ui, grpc, http]"),
        "{stderr}"
    );
}

#[test]
fn extra_arguments_are_named() {
    let stderr = usage_error(&["canonicalize", "input.json"]);
    assert!(stderr.contains("unexpected argument 'input.json'"), "{stderr}");
    let stderr = usage_error(&["rehearse", "everything"]);
    assert!(
        stderr.contains("unrecognized subcommand 'everything'"),
        "{stderr}"
    );
}

#[test]
fn no_subcommand_is_a_usage_error() {
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("Usage: aml-testkit <COMMAND>"));
}

#[test]
fn help_after_every_subcommand_prints_that_subcommand_help() {
    for path in [
        &["rehearse"][..],
        &["rehearse", "guarded-tool"],
        &["rehearse", "a2ui"],
        &["rehearse", "mcp"],
        &["case"],
        &["canonicalize"],
    ] {
        let usage = format!("Usage: aml-testkit {}", path.join(" "));
        for flag in ["--help", "-h"] {
            let args: Vec<&str> = path.iter().copied().chain([flag]).collect();
            let out = run(&args);
            assert_eq!(out.status.code(), Some(0), "{args:?}");
            assert!(out.stderr.is_empty(), "{args:?}: {}", text(&out.stderr));
            let stdout = text(&out.stdout);
            assert!(stdout.contains(&usage), "{args:?}: {stdout}");
            assert!(stdout.contains("Exit status: 0"), "{args:?}: {stdout}");
        }
        // `help <subcommand>` says the same as `<subcommand> --help`.
        let via_help: Vec<&str> = ["help"].into_iter().chain(path.iter().copied()).collect();
        let long: Vec<&str> = path.iter().copied().chain(["--help"]).collect();
        assert_eq!(run(&via_help).stdout, run(&long).stdout, "{via_help:?}");
    }
}

#[test]
fn case_help_never_reads_a_file_named_help() {
    let dir = aml_test_support::scratch_dir("cli", "help");
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/case.json");
    std::fs::copy(example, dir.join("--help")).unwrap();

    let help = testkit(&["case", "--help"]).current_dir(&dir).output().unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).contains("Usage: aml-testkit case <CASE_FILE>"));
    assert!(!text(&help.stdout).contains("\"receipt\""), "the file was read");

    // `--` is how to name such a file.
    let read = testkit(&["case", "--", "--help"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(read.status.code(), Some(0), "{}", text(&read.stderr));
    let result: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(result["protocol"], "aml-action-boundary-result/1");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_level_help_lists_the_commands_and_exit_statuses_but_not_the_fixture_server() {
    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    for line in [
        "rehearse ",
        "case ",
        "canonicalize ",
        "Exit status:",
        "  0  success",
        "  1  rehearse:",
        "  2  bad usage",
        "RUST_LOG",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in {stdout}");
    }
    assert!(!stdout.contains("serve-notice-fixture"));
    // Hidden, not removed: the MCP report starts it by name.
    let fixture = testkit(&["serve-notice-fixture"])
        .env_remove("AML_NOTICE_AUDIT")
        .output()
        .unwrap();
    assert_eq!(fixture.status.code(), Some(2));
    assert!(text(&fixture.stderr).contains("set AML_NOTICE_AUDIT"));
}

#[test]
fn a_case_file_that_cannot_be_read_exits_2_naming_it() {
    let out = run(&["case", "no/such/case.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("aml-testkit: cannot read no/such/case.json:"),
        "{stderr}"
    );
}

#[test]
fn the_guarded_tool_report_exits_0_when_it_matches_its_fixture() {
    let out = run(&["rehearse", "guarded-tool"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["protocol"], "aml-guarded-tool-rehearsal/2");
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

fn canonicalize_with(envs: &[(&str, &str)], input: &str) -> Output {
    let mut command = testkit(&["canonicalize"]);
    command.envs(envs.iter().copied());
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn rust_log_adds_diagnostics_on_stderr_and_leaves_stdout_alone() {
    let input = "{\"b\":1,\"a\":2}\n";
    let quiet = canonicalize_with(&[], input);
    assert_eq!(quiet.status.code(), Some(0));
    assert!(quiet.stderr.is_empty(), "{}", text(&quiet.stderr));

    let logged = canonicalize_with(&[("RUST_LOG", "debug")], input);
    assert_eq!(logged.status.code(), Some(0));
    assert_eq!(logged.stdout, quiet.stdout);
    let stderr = text(&logged.stderr);
    assert!(
        stderr.contains("DEBUG") && stderr.contains("aml-testkit starting"),
        "{stderr}"
    );

    // A filter that excludes the event logs nothing.
    let filtered = canonicalize_with(&[("RUST_LOG", "aml_testkit=info")], input);
    assert_eq!(filtered.stdout, quiet.stdout);
    assert!(filtered.stderr.is_empty(), "{}", text(&filtered.stderr));
}

#[test]
fn a_malformed_rust_log_is_reported_and_changes_nothing_else() {
    let input = "[1]\n";
    let quiet = canonicalize_with(&[], input);
    let out = canonicalize_with(&[("RUST_LOG", "=[")], input);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, quiet.stdout);
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("aml-testkit: ignoring RUST_LOG=\"=[\""),
        "{stderr}"
    );
}

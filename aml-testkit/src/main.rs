//! `aml-testkit`: run the documented cases, the black-box challenge, and canonicalization.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use aml_core::canonical::to_canonical_string;
use aml_core::Sha256Digest;
use aml_testkit::compare::{compare_report, Verdict};
use aml_testkit::matrix::{self, fixture, harness_for, GUARDED_TOOL_FIXTURE};
use aml_testkit::{challenge, rehearsal};

const USAGE: &str = "\
usage:
  aml-testkit rehearse                         every documented case x every adapter, as a table
  aml-testkit rehearse guarded-tool [--adapter core|mcp|a2ui|grpc]
                                               the 17-case guarded-tool report (JSON)
  aml-testkit rehearse a2ui | mcp              the A2UI or MCP report (JSON)
  aml-testkit case <case.json>                 one aml-action-challenge-case/1 -> result JSON
  aml-testkit canonicalize                     JSON lines on stdin -> '<sha256> <canonical>' or 'error <CODE>'
  aml-testkit serve-notice-fixture             the MCP fixture server (stdio) the MCP report runs

exit status: 0 success; 1 a report deviates from fixtures/; 2 bad usage or input";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(2, &format!("cannot start the async runtime: {e}")),
    };
    match args.as_slice() {
        ["rehearse"] => {
            let (table, ok) = matrix::render(&runtime.block_on(matrix::matrix()));
            print!("{table}");
            ExitCode::from(if ok { 0 } else { 1 })
        }
        ["rehearse", "guarded-tool"] => guarded_tool(&runtime, "core"),
        ["rehearse", "guarded-tool", "--adapter", adapter] => guarded_tool(&runtime, adapter),
        ["rehearse", "a2ui"] => print_and_compare(
            runtime.block_on(aml_testkit::a2ui::report()),
            matrix::A2UI_FIXTURE,
            "fixtures/a2ui-function-report.json",
        ),
        ["rehearse", "mcp"] => print_and_compare_with(
            runtime.block_on(aml_testkit::mcp::report()),
            matrix::mcp_verdicts,
            "fixtures/mcp-connected-pilot.json (digests masked)",
        ),
        ["case", path] => case(&runtime, path),
        ["canonicalize"] => canonicalize(),
        ["serve-notice-fixture"] => aml_testkit::notice_fixture::serve(),
        ["--help" | "-h" | "help"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => fail(2, USAGE),
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("aml-testkit: {message}");
    ExitCode::from(code)
}

fn print_json(value: &serde_json::Value) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("aml-testkit: cannot write JSON: {e}"),
    }
}

fn guarded_tool(runtime: &tokio::runtime::Runtime, adapter: &str) -> ExitCode {
    let Some(harness) = harness_for(adapter) else {
        return fail(
            2,
            &format!("unknown adapter {adapter:?}; expected core, mcp, a2ui or grpc"),
        );
    };
    print_and_compare(
        runtime.block_on(rehearsal::rehearse(harness.as_ref())),
        GUARDED_TOOL_FIXTURE,
        "fixtures/guarded-tool-rehearsal.json",
    )
}

/// Prints a computed report and exits non-zero if it deviates from its fixture.
fn print_and_compare(
    report: Result<serde_json::Value, aml_testkit::HarnessError>,
    fixture_text: &str,
    fixture_name: &str,
) -> ExitCode {
    let expected = fixture(fixture_text);
    print_and_compare_with(
        report,
        |r| compare_report(&expected, &r.unwrap_or_default()),
        fixture_name,
    )
}

/// Prints a computed report and exits non-zero if `verdicts` finds a deviation.
fn print_and_compare_with(
    report: Result<serde_json::Value, aml_testkit::HarnessError>,
    verdicts: impl FnOnce(Result<serde_json::Value, aml_testkit::HarnessError>) -> Vec<(String, Verdict)>,
    fixture_name: &str,
) -> ExitCode {
    let report = match report {
        Ok(report) => report,
        Err(e) => return fail(1, &e.to_string()),
    };
    print_json(&report);
    let mut deviates = false;
    for (id, verdict) in verdicts(Ok(report)) {
        if let Verdict::Fail(diffs) = verdict {
            deviates = true;
            eprintln!("aml-testkit: {id} deviates from {fixture_name}:");
            for d in diffs {
                eprintln!("  {d}");
            }
        }
    }
    ExitCode::from(if deviates { 1 } else { 0 })
}

fn case(runtime: &tokio::runtime::Runtime, path: &str) -> ExitCode {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) => return fail(2, &format!("cannot read {path}: {e}")),
    };
    let value = match aml_core::strict::parse_slice(&text) {
        Ok(v) => v,
        Err(e) => return fail(2, &format!("{path}: {e}")),
    };
    match runtime.block_on(challenge::run_case(&value)) {
        Ok(result) => {
            print_json(&result);
            ExitCode::SUCCESS
        }
        Err(e) => fail(2, &format!("{path}: {e}")),
    }
}

fn canonicalize() -> ExitCode {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (n, line) in stdin.lock().split(b'\n').enumerate() {
        let line = match line {
            Ok(l) => l,
            Err(e) => return fail(2, &format!("reading line {}: {e}", n + 1)),
        };
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        let written = match aml_core::strict::parse_slice(line) {
            Ok(value) => match to_canonical_string(&value) {
                Ok(canonical) => writeln!(out, "{} {canonical}", Sha256Digest::of(canonical.as_bytes())),
                Err(e) => writeln!(out, "error {}", e.code()),
            },
            Err(e) => writeln!(out, "error {}", e.code()),
        };
        if let Err(e) = written {
            return fail(2, &format!("writing output: {e}"));
        }
    }
    match out.flush() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(2, &format!("writing output: {e}")),
    }
}

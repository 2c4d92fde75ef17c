//! `aml-testkit`: run the documented cases, the black-box challenge, and canonicalization.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use aml_core::canonical::to_canonical_string;
use aml_core::Sha256Digest;
use aml_testkit::challenge;
use aml_testkit::compare::{compare_report, CaseVerdict};
use aml_testkit::matrix::{self, fixture, harness_for};
use clap::{Parser, Subcommand, ValueEnum};

const EXIT_CODES: &str = "\
Exit status:
  0  success
  1  rehearse: a report deviates from fixtures/ (or an adapter could not run);
     canonicalize: at least one line was refused (every line was still answered)
  2  bad usage, an unreadable or invalid input file, or an I/O error

Logging: set RUST_LOG (e.g. RUST_LOG=debug) for diagnostics on stderr; stdout never changes.";

const REHEARSE_HELP: &str = "\
Without a report name: a table with one row per documented case and one column per adapter
(core, mcp, a2ui, grpc, and http: the worked example of a custom adapter, aml-http-example). `pass` = the adapter reproduced the case in fixtures/; `pass*` and
`pass~` = a documented deviation (fixtures/README.md); `-` = the case is not played through
that adapter (the A2UI and MCP reports are specific to their wire). The `conformance/` rows
send the same hostile calls through every adapter and require the same status, reason,
record and tool-entry count from each (docs/adr/019-one-call-contract.md).

Exit status: 0 every case matches fixtures/; 1 a case deviates or an adapter could not run;
2 bad usage.";

const REPORT_HELP: &str = "\
The report is printed on stdout as JSON; deviations from its fixture are listed on stderr.

Exit status: 0 the report matches fixtures/; 1 it deviates or the adapter could not run;
2 bad usage.";

const CASE_HELP: &str = "\
The case file is {\"protocol\": \"aml-action-challenge-case/1\", \"case_id\", \"proposal\",
\"policy\", \"host\"} (see docs/PROTOCOL.md and examples/case.json). The result is one
aml-action-boundary-result/1 JSON object on stdout.

Exit status: 0 the case ran, whatever its outcome (blocked and unknown included);
2 bad usage, or the file is unreadable, not strict JSON, or not a valid case.";

const CANONICALIZE_HELP: &str = "\
Reads one JSON text per line from stdin (a trailing CR is ignored) and answers every line
on stdout, in order:
  <sha256> <canonical JSON>   the line's canonical form and its SHA-256 (lowercase hex)
  error <CODE>                the strict parser or the canonical form refused the line,
                              e.g. error AML_JSON_SYNTAX; the next lines are still read

Exit status: 0 every line was canonicalized; 1 at least one line was refused (all lines
were still answered); 2 bad usage, or reading stdin or writing stdout failed (output stops
at that point).";

/// Proves the AML action boundary: documented cases, the black-box challenge, canonical JSON
#[derive(Debug, Parser)]
#[command(name = "aml-testkit", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every documented case through every adapter, compared with fixtures/
    #[command(after_help = REHEARSE_HELP)]
    Rehearse {
        #[command(subcommand)]
        report: Option<Report>,
    },
    /// One aml-action-challenge-case/1 file in, its aml-action-boundary-result/1 out
    #[command(after_help = CASE_HELP)]
    Case {
        /// The case file (JSON)
        case_file: PathBuf,
    },
    /// JSON lines on stdin, `<sha256> <canonical JSON>` or `error <CODE>` per line out
    #[command(after_help = CANONICALIZE_HELP)]
    Canonicalize,
    /// The MCP fixture server (stdio) the MCP report runs against
    #[command(hide = true)]
    ServeNoticeFixture,
    /// A raw JSON-RPC MCP server (stdio) that misbehaves on request, for relay tests
    #[command(hide = true)]
    ServeRelayFixture,
}

#[derive(Debug, Subcommand)]
enum Report {
    /// The 17-case guarded-tool report (aml-guarded-tool-rehearsal/2), as JSON
    #[command(after_help = REPORT_HELP)]
    GuardedTool {
        /// The adapter whose wire path the cases run through
        #[arg(long, value_enum, default_value_t = Adapter::Core)]
        adapter: Adapter,
    },
    /// The 9-case A2UI report (aml-a2ui-function-report/1), as JSON
    #[command(after_help = REPORT_HELP)]
    A2ui,
    /// The 6-case MCP report (aml-connected-mcp-pilot/1), as JSON
    #[command(after_help = REPORT_HELP)]
    Mcp,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Adapter {
    Core,
    Mcp,
    A2ui,
    Grpc,
    Http,
}

impl Adapter {
    fn name(self) -> &'static str {
        match self {
            Adapter::Core => "core",
            Adapter::Mcp => "mcp",
            Adapter::A2ui => "a2ui",
            Adapter::Grpc => "grpc",
            Adapter::Http => "http",
        }
    }
}

fn main() -> ExitCode {
    init_logging();
    // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2).
    let cli = Cli::parse();
    tracing::debug!(command = ?cli.command, "aml-testkit starting");
    if let Command::ServeNoticeFixture = cli.command {
        return aml_testkit::notice_fixture::serve();
    }
    if let Command::ServeRelayFixture = cli.command {
        return aml_testkit::relay_fixture::serve();
    }
    if let Command::Canonicalize = cli.command {
        return canonicalize();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(2, &format!("cannot start the async runtime: {e}")),
    };
    match cli.command {
        Command::Rehearse { report: None } => {
            let (table, ok) = matrix::render(&runtime.block_on(matrix::matrix()));
            print!("{table}");
            ExitCode::from(if ok { 0 } else { 1 })
        }
        Command::Rehearse {
            report: Some(Report::GuardedTool { adapter }),
        } => guarded_tool(&runtime, adapter),
        Command::Rehearse {
            report: Some(Report::A2ui),
        } => print_and_compare(
            runtime.block_on(aml_testkit::a2ui::report()),
            matrix::A2UI_FIXTURE,
            "fixtures/a2ui-function-report.json",
        ),
        Command::Rehearse {
            report: Some(Report::Mcp),
        } => print_and_compare_with(
            runtime.block_on(aml_testkit::mcp::report()),
            matrix::mcp_verdicts,
            "fixtures/mcp-connected-pilot.json (digests masked)",
        ),
        Command::Case { case_file } => case(&runtime, &case_file),
        Command::Canonicalize | Command::ServeNoticeFixture | Command::ServeRelayFixture => {
            unreachable!("handled above")
        }
    }
}

/// `RUST_LOG` selects diagnostics, written to stderr only; unset, nothing is logged.
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Err(_) => return,
        Ok(directives) => match EnvFilter::builder().parse(&directives) {
            Ok(filter) => filter,
            Err(e) => {
                eprintln!("aml-testkit: ignoring RUST_LOG={directives:?}: {e}; logging stays off");
                return;
            }
        },
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
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

fn guarded_tool(runtime: &tokio::runtime::Runtime, adapter: Adapter) -> ExitCode {
    let Some(harness) = harness_for(adapter.name()) else {
        return fail(2, &format!("no harness for adapter {:?}", adapter.name()));
    };
    let rehearsed = runtime.block_on(aml_testkit::rehearse_with(harness.as_ref()));
    let report = match rehearsed.report() {
        Ok(report) => report,
        Err(e) => return fail(1, &e.to_string()),
    };
    print_json(report);
    for problem in rehearsed.report_level_failures() {
        eprintln!("aml-testkit: {problem} deviates from fixtures/guarded-tool-rehearsal.json");
    }
    // Deviations only: the documented ones are in the printed report itself
    // (`statically_ruled_out`, `wire_refused`), and a matching report leaves stderr empty.
    for case in rehearsed.cases().iter().filter(|c| !c.passed()) {
        let why = case.explanation().unwrap_or_default();
        eprintln!(
            "aml-testkit: {} deviates from fixtures/guarded-tool-rehearsal.json: {why}",
            case.id()
        );
    }
    ExitCode::from(if rehearsed.passed() { 0 } else { 1 })
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
    verdicts: impl FnOnce(Result<serde_json::Value, aml_testkit::HarnessError>) -> Vec<(String, CaseVerdict)>,
    fixture_name: &str,
) -> ExitCode {
    let report = match report {
        Ok(report) => report,
        Err(e) => return fail(1, &e.to_string()),
    };
    print_json(&report);
    let mut deviates = false;
    for (id, verdict) in verdicts(Ok(report)) {
        if let CaseVerdict::Fail(diffs) = verdict {
            deviates = true;
            eprintln!("aml-testkit: {id} deviates from {fixture_name}:");
            for d in diffs {
                eprintln!("  {d}");
            }
        }
    }
    ExitCode::from(if deviates { 1 } else { 0 })
}

fn case(runtime: &tokio::runtime::Runtime, path: &Path) -> ExitCode {
    let shown = path.display();
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) => return fail(2, &format!("cannot read {shown}: {e}")),
    };
    let value = match aml_core::strict::parse_slice(&text) {
        Ok(v) => v,
        Err(e) => return fail(2, &format!("{shown}: {e}")),
    };
    match runtime.block_on(challenge::run_case(&value)) {
        Ok(result) => {
            print_json(&result);
            ExitCode::SUCCESS
        }
        Err(e) => fail(2, &format!("{shown}: {e}")),
    }
}

fn canonicalize() -> ExitCode {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut refused = 0usize;
    for (n, line) in stdin.lock().split(b'\n').enumerate() {
        let line = match line {
            Ok(l) => l,
            Err(e) => return fail(2, &format!("reading line {}: {e}", n + 1)),
        };
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        let answer = aml_core::strict::parse_slice(line)
            .map_err(|e| e.code())
            .and_then(|value| to_canonical_string(&value).map_err(|e| e.code()));
        let written = match answer {
            Ok(canonical) => writeln!(out, "{} {canonical}", Sha256Digest::of(canonical.as_bytes())),
            Err(code) => {
                refused += 1;
                writeln!(out, "error {code}")
            }
        };
        if let Err(e) = written {
            return fail(2, &format!("writing output: {e}"));
        }
    }
    if let Err(e) = out.flush() {
        return fail(2, &format!("writing output: {e}"));
    }
    if refused > 0 {
        return fail(1, &format!("{refused} line(s) refused"));
    }
    ExitCode::SUCCESS
}

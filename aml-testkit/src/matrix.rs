//! Every documented case × every adapter: the testkit's main job.

use serde_json::Value;

use crate::compare::{compare_report, CaseVerdict};
use crate::harness::{CoreHarness, Harness, HarnessError};
use crate::report::rehearse_with;

/// The documented guarded-tool report (`fixtures/guarded-tool-rehearsal.json`).
pub const GUARDED_TOOL_FIXTURE: &str = include_str!("../../fixtures/guarded-tool-rehearsal.json");
/// The documented A2UI report (`fixtures/a2ui-function-report.json`).
pub const A2UI_FIXTURE: &str = include_str!("../../fixtures/a2ui-function-report.json");
/// The documented MCP report (`fixtures/mcp-connected-pilot.json`).
pub const MCP_FIXTURE: &str = include_str!("../../fixtures/mcp-connected-pilot.json");

/// The adapter columns, in order: the core, the built-in adapters, and the worked example
/// of a custom adapter (`http`, `aml-http-example`).
pub const ADAPTERS: &[&str] = &["core", "mcp", "a2ui", "grpc", "http"];

/// Parses an embedded fixture.
pub fn fixture(text: &str) -> Value {
    aml_core::strict::parse_str(text).unwrap_or(Value::Null)
}

/// A built-in adapter's harnesses: the documented cases' and the conformance probes'.
pub trait AdapterHarness: Harness + crate::conformance::ConformanceHarness {}

impl<T: Harness + crate::conformance::ConformanceHarness> AdapterHarness for T {}

/// The harnesses of `adapter`, if it is known.
pub fn adapter_harness(adapter: &str) -> Option<Box<dyn AdapterHarness>> {
    Some(match adapter {
        "core" => Box::new(CoreHarness),
        "mcp" => Box::new(crate::mcp::McpHarness),
        "a2ui" => Box::new(crate::a2ui::A2uiHarness::default()),
        "grpc" => Box::new(crate::grpc::GrpcHarness),
        "http" => Box::new(crate::http::HttpHarness),
        _ => return None,
    })
}

/// The harness that carries guarded-tool calls through `adapter`, if it is known.
pub fn harness_for(adapter: &str) -> Option<Box<dyn Harness>> {
    adapter_harness(adapter).map(|h| h as Box<dyn Harness>)
}

/// The conformance harness of `adapter`, if it is known.
pub fn conformance_harness_for(adapter: &str) -> Option<Box<dyn crate::conformance::ConformanceHarness>> {
    adapter_harness(adapter).map(|h| h as Box<dyn crate::conformance::ConformanceHarness>)
}

/// The conformance report's rows: every probe through every adapter.
pub async fn conformance_rows() -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for (col, adapter) in ADAPTERS.iter().enumerate() {
        let Some(harness) = conformance_harness_for(adapter) else {
            continue;
        };
        for (case, verdict) in crate::conformance::conformance_with(harness.as_ref()).await {
            let index = match rows.iter().position(|r| r.case == case) {
                Some(index) => index,
                None => {
                    rows.push(Row {
                        report: "conformance",
                        case,
                        cells: vec![None; ADAPTERS.len()],
                    });
                    rows.len() - 1
                }
            };
            rows[index].cells[col] = Some(verdict);
        }
    }
    rows
}

/// One documented case and its verdict per adapter (`None`: not applicable).
#[derive(Debug, Clone)]
pub struct Row {
    /// The documented report the case belongs to.
    pub report: &'static str,
    /// Case id.
    pub case: String,
    /// CaseVerdict per column of [`ADAPTERS`].
    pub cells: Vec<Option<CaseVerdict>>,
}

/// Compares a computed report (or the error that stopped it) with an embedded fixture.
pub fn report_verdicts(
    fixture_text: &str,
    report: Result<Value, HarnessError>,
) -> Vec<(String, CaseVerdict)> {
    let expected = fixture(fixture_text);
    match report {
        Ok(report) => compare_report(&expected, &report),
        Err(e) => case_ids(&expected)
            .into_iter()
            .map(|id| (id, CaseVerdict::Fail(vec![e.to_string()])))
            .collect(),
    }
}

/// Compares a computed MCP report with the fixture, digests masked: the documented
/// report's digests come from a host purpose it did not publish.
pub fn mcp_verdicts(report: Result<Value, HarnessError>) -> Vec<(String, CaseVerdict)> {
    let expected = crate::compare::mask_digests(&fixture(MCP_FIXTURE));
    match report {
        Ok(report) => compare_report(&expected, &crate::compare::mask_digests(&report)),
        Err(e) => case_ids(&expected)
            .into_iter()
            .map(|id| (id, CaseVerdict::Fail(vec![e.to_string()])))
            .collect(),
    }
}

/// Runs the guarded-tool rehearsal through one harness and compares it with the fixture
/// ([`rehearse_with`] as a list).
pub async fn guarded_tool_verdicts(harness: &dyn Harness) -> Vec<(String, CaseVerdict)> {
    let report = rehearse_with(harness).await;
    report
        .cases()
        .iter()
        .map(|case| (case.id().to_owned(), report.cell(case)))
        .collect()
}

fn case_ids(report: &Value) -> Vec<String> {
    report["cases"]
        .as_array()
        .map(|cases| {
            cases
                .iter()
                .map(|c| c["id"].as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn single_column(report: &'static str, adapter: &str, verdicts: Vec<(String, CaseVerdict)>) -> Vec<Row> {
    let col = ADAPTERS.iter().position(|a| *a == adapter).unwrap_or(0);
    verdicts
        .into_iter()
        .map(|(case, verdict)| {
            let mut cells = vec![None; ADAPTERS.len()];
            cells[col] = Some(verdict);
            Row { report, case, cells }
        })
        .collect()
}

/// Runs every documented case through every adapter.
pub async fn matrix() -> Vec<Row> {
    let mut rows: Vec<Row> = case_ids(&fixture(GUARDED_TOOL_FIXTURE))
        .into_iter()
        .map(|case| Row {
            report: "guarded-tool",
            case,
            cells: vec![None; ADAPTERS.len()],
        })
        .collect();
    for (col, adapter) in ADAPTERS.iter().enumerate() {
        let Some(harness) = harness_for(adapter) else {
            continue;
        };
        for (case, verdict) in guarded_tool_verdicts(harness.as_ref()).await {
            let row = match rows.iter().position(|r| r.case == case) {
                Some(i) => &mut rows[i],
                None => {
                    rows.push(Row {
                        report: "guarded-tool",
                        case,
                        cells: vec![None; ADAPTERS.len()],
                    });
                    rows.last_mut().expect("just pushed")
                }
            };
            row.cells[col] = Some(verdict);
        }
    }
    rows.extend(single_column(
        "a2ui",
        "a2ui",
        report_verdicts(A2UI_FIXTURE, crate::a2ui::report().await),
    ));
    rows.extend(single_column(
        "mcp",
        "mcp",
        mcp_verdicts(crate::mcp::report().await),
    ));
    rows.extend(conformance_rows().await);
    rows
}

/// The matrix as a readable table, with totals; and whether every cell passed.
pub fn render(rows: &[Row]) -> (String, bool) {
    let width = rows
        .iter()
        .map(|r| r.report.len() + r.case.len() + 1)
        .max()
        .unwrap_or(10)
        .max(10);
    let mut out = format!("{:width$}", "case");
    for a in ADAPTERS {
        out.push_str(&format!("  {a:>5}"));
    }
    out.push('\n');
    let (mut passed, mut total) = (0, 0);
    let mut failures = Vec::new();
    for row in rows {
        out.push_str(&format!("{:width$}", format!("{}/{}", row.report, row.case)));
        for (col, cell) in row.cells.iter().enumerate() {
            let mark = match cell {
                None => "-",
                Some(CaseVerdict::Pass) => "pass",
                Some(CaseVerdict::PassStatic) => "pass*",
                Some(CaseVerdict::PassWireRefused) => "pass~",
                Some(CaseVerdict::Fail(why)) => {
                    failures.push(format!(
                        "{}/{} [{}]: {}",
                        row.report,
                        row.case,
                        ADAPTERS[col],
                        why.join("; ")
                    ));
                    "FAIL"
                }
            };
            if let Some(v) = cell {
                total += 1;
                passed += usize::from(v.passed());
            }
            out.push_str(&format!("  {mark:>5}"));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "\n{passed} passed, {} failed\n\
         pass* = documented deviation: statically ruled out by Rust's types (fixtures/README.md)\n\
         pass~ = documented deviation: the wire cannot carry the input; nothing was sent (fixtures/README.md)\n",
        total - passed
    ));
    let mut seen = std::collections::BTreeSet::new();
    for f in &failures {
        // Unavailable adapters fail every case with one reason; list each reason once.
        let reason = f.split_once("]: ").map(|(_, r)| r).unwrap_or(f);
        if seen.insert(reason.to_owned()) {
            out.push_str(&format!("FAIL {f}\n"));
        }
    }
    (out, passed == total)
}

//! The 17 documented guarded-tool cases, compared with `fixtures/` as parsed JSON.

use std::process::Command;

use aml_testkit::compare::{compare_report, differences, CaseVerdict};
use aml_testkit::matrix::{fixture, harness_for, GUARDED_TOOL_FIXTURE};
use aml_testkit::rehearsal::rehearse;
use aml_testkit::CoreHarness;
use serde_json::Value;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn core_adapter_reproduces_every_documented_case() {
    let report = block_on(rehearse(&CoreHarness)).unwrap();
    let verdicts = compare_report(&fixture(GUARDED_TOOL_FIXTURE), &report);
    assert_eq!(verdicts.len(), 17);
    for (id, verdict) in &verdicts {
        match id.as_str() {
            "mapper_mutated" => assert_eq!(*verdict, CaseVerdict::PassStatic, "{id}"),
            _ => assert_eq!(*verdict, CaseVerdict::Pass, "{id}"),
        }
    }
}

#[test]
fn the_report_equals_the_fixture_case_by_case_as_parsed_json() {
    let report = block_on(rehearse(&CoreHarness)).unwrap();
    let expected = fixture(GUARDED_TOOL_FIXTURE);
    assert_eq!(report["protocol"], expected["protocol"]);
    let (ours, theirs) = (
        report["cases"].as_array().unwrap(),
        expected["cases"].as_array().unwrap(),
    );
    assert_eq!(ours.len(), theirs.len());
    for (a, e) in ours.iter().zip(theirs) {
        if a["id"] == "mapper_mutated" {
            // Only the attempt differs; its replacement says why in words.
            let diffs = differences(e, a);
            assert!(diffs.iter().all(|d| d.starts_with("$.attempts[0]")), "{diffs:?}");
            assert!(a["attempts"][0]["statically_ruled_out"]
                .as_str()
                .unwrap()
                .contains("does not compile"));
        } else {
            assert_eq!(a, e);
        }
    }
}

#[test]
fn a_wrong_digest_or_event_would_be_caught() {
    let mut report = block_on(rehearse(&CoreHarness)).unwrap();
    report["cases"][1]["attempts"][0]["host_hook_events"][2] = Value::from("One-use claim refused");
    report["cases"][2]["attempts"][0]["proposal_sha256"] = Value::from("0".repeat(64));
    let verdicts = compare_report(&fixture(GUARDED_TOOL_FIXTURE), &report);
    assert!(!verdicts[1].1.passed());
    assert!(!verdicts[2].1.passed());
    assert!(verdicts[0].1.passed());
}

#[test]
fn an_unavailable_adapter_fails_every_case_with_its_reason() {
    let harness = aml_testkit::UnavailableHarness::new("pigeon", "no pigeon adapter exists");
    let err = block_on(rehearse(&harness)).unwrap_err();
    assert_eq!(err.to_string(), "no pigeon adapter exists");
    assert!(harness_for("carrier-pigeon").is_none());
}

#[test]
fn command_line_prints_the_report_and_exits_by_the_comparison() {
    let bin = env!("CARGO_BIN_EXE_aml-testkit");
    let out = Command::new(bin)
        .args(["rehearse", "guarded-tool", "--adapter", "core"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["protocol"], "aml-guarded-tool-rehearsal/2");
    assert_eq!(printed["cases"].as_array().unwrap().len(), 17);

    let out = Command::new(bin)
        .args(["rehearse", "guarded-tool", "--adapter", "grpc"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(bin)
        .args(["rehearse", "guarded-tool", "--adapter", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(bin).arg("bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage: aml-testkit <COMMAND>"));
}

#[test]
fn the_table_shows_every_case_and_adapter_with_a_total() {
    let out = Command::new(env!("CARGO_BIN_EXE_aml-testkit"))
        .arg("rehearse")
        .output()
        .unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    for id in [
        "guarded-tool/host_allow",
        "guarded-tool/unknown_then_replay",
        "a2ui/approved_exact",
        "mcp/tool_error",
    ] {
        assert!(table.contains(id), "{id}");
    }
    let core_passes = table
        .lines()
        .filter(|l| l.starts_with("guarded-tool/"))
        .filter(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells[1].starts_with("pass")
        });
    assert_eq!(core_passes.count(), 17);
    // 17 guarded-tool cases x 5 adapters (core, mcp, a2ui, grpc, http), 9 A2UI and 6 MCP
    // cases, and the conformance report: 13 probes x 5 adapters and the listing x 4 (A2UI
    // lists no tools).
    assert!(table.lines().any(|l| l == "169 passed, 0 failed"), "{table}");
    for probe in aml_testkit::conformance::probes() {
        assert!(
            table.contains(&format!("conformance/{}", probe.id)),
            "{}",
            probe.id
        );
    }
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["case", "core", "mcp", "a2ui", "grpc", "http"]);
    assert!(out.status.success());
}

#[test]
fn rehearse_with_gives_the_verdicts_the_table_shows_and_explains_each_deviation() {
    let report = block_on(aml_testkit::rehearse_with(&CoreHarness));
    assert!(report.passed(), "{report}");
    assert_eq!((report.passed_count(), report.failed_count()), (17, 0));
    assert_eq!(
        report.case("host_allow").unwrap().title(),
        "Exact route, host allow rule"
    );
    let shown = report.to_string();
    assert!(shown.contains("17 passed, 0 failed"), "{shown}");
    assert!(
        shown.contains("pass* mapper_mutated: documented deviation"),
        "{shown}"
    );

    // A wire that cannot carry the input: accepted as `pass~`, with the harness's own reason.
    let mut json = report.report().unwrap().clone();
    let i = json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c["id"] == "invalid_arguments")
        .unwrap();
    json["cases"][i]["attempts"] =
        serde_json::json!([{"wire_refused": "JSON-RPC has no infinity", "host_hook_events": []}]);
    let refused = aml_testkit::RehearsalReport::compare("pigeon", Ok(json));
    assert!(refused.passed(), "{refused}");
    let case = refused.case("invalid_arguments").unwrap();
    assert_eq!(case.mark(), "pass~");
    assert!(case.explanation().unwrap().contains("JSON-RPC has no infinity"));
    assert_eq!(refused.deviations().count(), 2);
}

#[test]
fn rehearse_with_fails_a_deviating_or_unavailable_adapter_and_says_why() {
    let unavailable = aml_testkit::UnavailableHarness::new("pigeon", "no pigeon adapter exists");
    let report = block_on(aml_testkit::rehearse_with(&unavailable));
    assert!(!report.passed());
    assert_eq!((report.passed_count(), report.failed_count()), (0, 17));
    assert!(report
        .to_string()
        .contains("FAIL host_allow: no pigeon adapter exists"));

    let good = block_on(rehearse(&CoreHarness)).unwrap();
    let mut wrong_digest = good.clone();
    wrong_digest["cases"][2]["attempts"][0]["proposal_sha256"] = Value::from("0".repeat(64));
    let report = aml_testkit::RehearsalReport::compare("core", Ok(wrong_digest));
    assert!(!report.passed());
    let case = &report.cases()[2];
    assert_eq!(case.mark(), "FAIL");
    assert!(case
        .explanation()
        .unwrap()
        .contains("$.attempts[0].proposal_sha256"));

    // A deviation outside the cases fails the whole column.
    let mut wrong_protocol = good;
    wrong_protocol["protocol"] = Value::from("aml-guarded-tool-rehearsal/1");
    let report = aml_testkit::RehearsalReport::compare("core", Ok(wrong_protocol));
    assert!(!report.passed());
    assert_eq!(report.report_level_failures().len(), 1);
    assert!(report.to_string().contains("0 passed, 17 failed"), "{report}");
    assert!(!report.cell(&report.cases()[0]).passed());
}

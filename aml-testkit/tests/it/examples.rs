//! The files in `examples/` load with the crates' own loaders, fit each other, and the
//! example case is the reference's own case with the reference's expected result.
//! (`tests/readme.rs` runs the README commands that use them.)

use std::path::PathBuf;
use std::process::Command;

use aml_core::Policy;
use aml_mcp::ToolCatalog;
use serde_json::{json, Value};

fn path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

fn load(relative: &str) -> Value {
    aml_core::strict::parse_str(&std::fs::read_to_string(path(relative)).unwrap())
        .unwrap_or_else(|e| panic!("{relative}: {e}"))
}

#[test]
fn the_example_policy_and_tools_load_and_every_rule_can_match_a_registered_tool() {
    let policy = Policy::try_from_value(&load("examples/policy.json")).unwrap();
    let text = std::fs::read_to_string(path("examples/tools.json")).unwrap();
    let registry = ToolCatalog::from_json(&text).unwrap();
    let tools = load("examples/tools.json");
    assert!(!policy.rules().is_empty());
    for rule in policy.rules() {
        let registered = registry
            .get(&rule.tool)
            .unwrap_or_else(|| panic!("rule for {:?}: the tool is not in tools.json", rule.tool));
        let entry = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == registered.name())
            .unwrap();
        // A rule whose effect or fixed resource differs from the tool's can never match.
        assert_eq!(entry["effect"], json!(rule.effect), "{}", rule.tool);
        if let Some(fixed) = entry["resource"].get("fixed") {
            assert_eq!(fixed, &json!(rule.resource), "{}", rule.tool);
        }
    }
    // Each input schema is enforced: an extra argument is refused.
    let write = registry.get("write_file").unwrap();
    assert!(write.check(&json!({"path": "status.md", "content": "x"})).is_ok());
    assert!(write
        .check(&json!({"path": "status.md", "content": "x", "mode": "append"}))
        .is_err());
    // The served directory has the file the policy lets an agent read.
    assert!(path("examples/files/report.txt").is_file());
}

fn vector<'a>(vectors: &'a Value, name: &Value) -> &'a Value {
    vectors["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| &c["name"] == name)
        .unwrap()
}

#[test]
fn the_example_case_is_the_references_case_and_gives_the_references_result() {
    let case = load("examples/case.json");
    let rows = load("fixtures/upstream-conformance/challenge-cases.json");
    let vectors = load("fixtures/upstream-conformance/vectors.json");
    let row = rows["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == case["case_id"])
        .expect("examples/case.json names one of the 13 challenge cases");
    // This row uses no variants (fixtures/upstream-conformance/SOURCE.md): the document is
    // the row's vector, the vectors' policy and the row's host fixture.
    for variant in ["proposal_variant", "policy_variant"] {
        assert!(row.get(variant).is_none());
    }
    let vector_case = vector(&vectors, &row["vector"]);
    assert_eq!(
        case,
        json!({"protocol": "aml-action-challenge-case/1", "case_id": row["id"],
               "proposal": vector_case["proposal"], "policy": vectors["policy"], "host": row["host"]})
    );

    let out = Command::new(env!("CARGO_BIN_EXE_aml-testkit"))
        .arg("case")
        .arg(path("examples/case.json"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &row["expected"];
    let digest = &vector_case["proposal_sha256"];
    assert_eq!(result["plan"]["proposal_sha256"], *digest);
    assert_eq!(result["plan"]["decision"], e["decision"]);
    assert_eq!(result["plan"]["reason"], e["reason"]);
    assert_eq!(result["receipt"]["proposal_sha256"], *digest);
    assert_eq!(result["receipt"]["execution_status"], e["status"]);
    assert_eq!(result["receipt"]["reason"], e["receipt_reason"]);
    assert_eq!(result["tool_calls"], e["tool_calls"]);
    assert_eq!(
        result["executed_proposal"],
        vector(&vectors, &e["executed_vector"])["proposal"]
    );
}

#[test]
fn the_guides_smallest_adapter_is_under_80_lines_and_keeps_deadlines_and_caller_gone() {
    let guide = std::fs::read_to_string(path("docs/CUSTOM_ADAPTER.md")).unwrap();
    let block = guide
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("// ---- The harness").next())
        .expect("the guide's first Rust block, up to its harness");
    let lines = block.lines().count();
    assert!(lines < 80, "the smallest adapter is {lines} lines");
    // It hands the gate the agent's bytes, its deadline and its caller-gone signal; the
    // block runs as a doctest of aml-http-example, which proves both.
    for needed in [
        "CallRequest::bytes(",
        ".deadline(",
        ".caller_gone(",
        "refuse_request(",
    ] {
        assert!(block.contains(needed), "{needed}");
    }
}

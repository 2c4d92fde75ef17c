//! The reference's 13-case public black-box challenge, run through the `aml-testkit case`
//! binary exactly as the contract describes (one case file in, one JSON object out).

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/upstream-conformance")
}

fn load(name: &str) -> Value {
    aml_core::strict::parse_str(&std::fs::read_to_string(fixtures().join(name)).unwrap()).unwrap()
}

fn vector<'a>(vectors: &'a Value, name: &str) -> &'a Value {
    vectors["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
}

/// Builds the `aml-action-challenge-case/1` document for one row, as SOURCE.md specifies.
fn case_document(row: &Value, vectors: &Value) -> Value {
    let mut proposal = vector(vectors, row["vector"].as_str().unwrap())["proposal"].clone();
    if row["proposal_variant"] == "extra_top_level_field" {
        proposal["extra"] = json!(true);
    }
    let mut policy = vectors["policy"].clone();
    if row["policy_variant"] == "duplicate_matching_rule" {
        let first = policy["rules"][0].clone();
        policy["rules"].as_array_mut().unwrap().push(first);
    }
    let mut host = row["host"].clone();
    if let Some(from) = host.as_object_mut().unwrap().remove("approval_digest_vector") {
        host["approval_digest_sha256"] = vector(vectors, from.as_str().unwrap())["proposal_sha256"].clone();
    }
    json!({"protocol": "aml-action-challenge-case/1", "case_id": row["id"], "proposal": proposal,
           "policy": policy, "host": host})
}

fn expected_result(row: &Value, vectors: &Value) -> Value {
    let e = &row["expected"];
    let digest = if e["null_digest"] == true {
        Value::Null
    } else {
        vector(vectors, row["vector"].as_str().unwrap())["proposal_sha256"].clone()
    };
    let executed = match e["executed_vector"].as_str() {
        Some(name) => vector(vectors, name)["proposal"].clone(),
        None => Value::Null,
    };
    json!({
        "protocol": "aml-action-boundary-result/1",
        "plan": {"protocol": "aml-action-plan/1", "proposal_sha256": digest, "decision": e["decision"], "reason": e["reason"]},
        "receipt": {"protocol": "aml-action-dispatch/1", "proposal_sha256": digest, "policy_decision": e["decision"],
                    "execution_status": e["status"], "reason": e["receipt_reason"]},
        "tool_calls": e["tool_calls"],
        "executed_proposal": executed,
    })
}

fn run_binary(case: &Value, dir: &std::path::Path, name: &str) -> std::process::Output {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(case).unwrap()).unwrap();
    Command::new(env!("CARGO_BIN_EXE_aml-testkit"))
        .arg("case")
        .arg(&path)
        .output()
        .unwrap()
}

#[test]
fn all_thirteen_upstream_challenge_cases_pass_through_the_binary() {
    let rows = load("challenge-cases.json");
    let vectors = load("vectors.json");
    let rows = rows["cases"].as_array().unwrap();
    assert_eq!(rows.len(), 13);
    let dir = aml_test_support::scratch_dir("challenge", "rows");
    for row in rows {
        let id = row["id"].as_str().unwrap();
        let out = run_binary(&case_document(row, &vectors), &dir, id);
        assert!(
            out.status.success(),
            "{id}: exit {:?}, stderr {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let got: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(got, expected_result(row, &vectors), "case {id}");
    }
}

#[test]
fn invalid_case_files_exit_2_with_a_diagnostic_on_stderr() {
    let dir = aml_test_support::scratch_dir("challenge", "invalid");
    let good = case_document(&load("challenge-cases.json")["cases"][0], &load("vectors.json"));
    let mut unknown_host = good.clone();
    unknown_host["host"]["approve_everything"] = json!(true);
    let mut bad_protocol = good.clone();
    bad_protocol["protocol"] = json!("aml-action-challenge-case/2");
    let mut fixed_without_digest = good.clone();
    fixed_without_digest["host"]["approval"] = json!("fixed");
    for (name, case) in [
        ("unknown_host", unknown_host),
        ("bad_protocol", bad_protocol),
        ("fixed", fixed_without_digest),
    ] {
        let out = run_binary(&case, &dir, name);
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(out.stdout.is_empty(), "{name}: nothing on stdout");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("invalid challenge case"),
            "{name}"
        );
    }
    let dup = dir.join("dup.json");
    std::fs::write(&dup, br#"{"protocol":"a","protocol":"b"}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_aml-testkit"))
        .arg("case")
        .arg(&dup)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("AML_JSON_DUPLICATE_KEY"));
}

//! `policy explain` and `policy test` for callers and budgets: the principal is `--caller`
//! (or a case's `caller`), and a policy that reads `context.usage` is decided on `--usage`
//! (or a case's `usage`; all 0 when not given), as the gate decides once it has read the
//! caller's usage.

use serde_json::{json, Value};

use crate::policy_cmd::{expect, work};

/// Alice may send 20 an hour, then asks; nobody else may.
const BUDGET: &str = r#"@id("alice-under-budget")
permit(principal == Caller::"alice", action == Action::"delete_file", resource)
when { context.usage.hour < 20 };

@id("alice-over-budget")
@approval("required")
permit(principal == Caller::"alice", action == Action::"delete_file", resource)
when { context.usage.hour >= 20 };
"#;

/// `policy explain` of `delete_file` on `tmp/x` against `policy`, with `extra` flags.
fn explain_with(dir: &std::path::Path, policy: &str, extra: &[&str]) -> Value {
    let base = [
        "policy",
        "explain",
        "--policy",
        policy,
        "--tools",
        "tools.json",
        "--tool",
        "delete_file",
        "--arguments",
        r#"{"path": "tmp/x"}"#,
    ];
    let args: Vec<&str> = base.iter().chain(extra).copied().collect();
    let (stdout, _) = expect(dir, &args, 0);
    serde_json::from_str(&stdout).unwrap()
}

fn explain(dir: &std::path::Path, extra: &[&str]) -> Value {
    explain_with(dir, "budget.cedar", extra)
}

#[test]
fn explain_decides_for_the_caller_and_its_usage() {
    let dir = work("callers-explain");
    std::fs::write(dir.join("budget.cedar"), BUDGET).unwrap();
    let fresh = explain(&dir, &["--caller", "alice"]);
    assert_eq!(
        (&fresh["caller"], &fresh["usage"], &fresh["decision"]),
        (
            &json!("alice"),
            &json!({"minute": 0, "hour": 0, "day": 0}),
            &json!("allow")
        ),
        "{fresh}"
    );
    assert_eq!(fresh["policies"], json!(["alice-under-budget"]));
    let spent = explain(&dir, &["--caller", "alice", "--usage", r#"{"hour": 20}"#]);
    assert_eq!(
        (&spent["decision"], &spent["policies"]),
        (&json!("requires_approval"), &json!(["alice-over-budget"])),
        "{spent}"
    );
    let local = explain(&dir, &[]);
    assert_eq!(
        (&local["caller"], &local["decision"], &local["reason"]),
        (&json!("local"), &json!("deny"), &json!("no_permit"))
    );
}

#[test]
fn test_cases_name_callers_and_usage() {
    let dir = work("callers-cases");
    std::fs::write(dir.join("budget.cedar"), BUDGET).unwrap();
    let args = |cases: Value| {
        let file = json!({"policy": "budget.cedar", "tools": "tools.json", "cases": cases});
        std::fs::write(dir.join("cases.json"), file.to_string()).unwrap();
    };
    let case = |name: &str, caller: Value, usage: Value, expect: &str| {
        json!({"name": name, "tool": "delete_file", "arguments": {"path": "tmp/x"},
               "caller": caller, "usage": usage, "expect": expect})
    };
    args(json!([
        case("alice's 20th", json!("alice"), json!({"hour": 19}), "allow"),
        case(
            "alice's 21st",
            json!("alice"),
            json!({"hour": 20, "day": 20}),
            "requires_approval"
        ),
        case("bob", json!("bob"), Value::Null, "deny"),
        case("the host's agent", Value::Null, Value::Null, "deny"),
    ]));
    let (stdout, _) = expect(&dir, &["policy", "test", "cases.json"], 0);
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
    // A case whose expectation the usage breaks fails, naming it.
    args(json!([case(
        "alice over",
        json!("alice"),
        json!({"hour": 25}),
        "allow"
    )]));
    let (stdout, _) = expect(&dir, &["policy", "test", "cases.json"], 1);
    assert!(stdout.contains("alice over"), "{stdout}");
    // A misspelt usage member, or a blank caller, is bad usage.
    args(json!([case(
        "typo",
        json!("alice"),
        json!({"hours": 1}),
        "allow"
    )]));
    let (_, stderr) = expect(&dir, &["policy", "test", "cases.json"], 2);
    assert!(stderr.contains("hours"), "{stderr}");
    args(json!([case("blank", json!(" "), Value::Null, "deny")]));
    let (_, stderr) = expect(&dir, &["policy", "test", "cases.json"], 2);
    assert!(stderr.contains("must not be blank"), "{stderr}");
}

#[test]
fn an_exact_rule_naming_a_caller_decides_for_that_caller_only() {
    let dir = work("callers-exact");
    let rules = json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "delete_file", "effect": "delete", "resource": "tmp/x", "requires_approval": false,
         "caller": "alice"}]});
    std::fs::write(dir.join("rules.json"), rules.to_string()).unwrap();
    let decide = |caller: &str| {
        let got = explain_with(&dir, "rules.json", &["--caller", caller]);
        (
            got["decision"].as_str().unwrap().to_owned(),
            got["reason"].as_str().unwrap().to_owned(),
        )
    };
    assert_eq!(decide("alice"), ("allow".to_owned(), "exact_rule".to_owned()));
    assert_eq!(decide("bob"), ("deny".to_owned(), "no_exact_rule".to_owned()));
    assert_eq!(decide("local"), ("deny".to_owned(), "no_exact_rule".to_owned()));
}

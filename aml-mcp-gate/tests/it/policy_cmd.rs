//! `aml-mcp-gate policy check|explain|test`, driven as a host's CI would drive them: against a
//! good policy, against hostile ones (a syntax error, an unknown entity type, an annotation
//! typo, a 10 MB file, a JSON rule with a bad effect), and with exact exit codes and messages
//! that name the problem. `explain`'s digest is checked against the relay's own plan.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use aml_core::{ActionBoundary, FrozenProposal, Policy};
use serde_json::{json, Value};

const GATE: &str = env!("CARGO_BIN_EXE_aml-mcp-gate");

const TOOLS: &str = r#"{"tools": [
 {"name": "read_text_file", "effect": "read", "purpose": "Read a file",
  "resource": {"argument": "path", "as": "path", "root": "/srv/files"},
  "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
                   "required": ["path"], "additionalProperties": false}},
 {"name": "move_file", "effect": "write", "purpose": "Move a file",
  "resource": {"arguments": ["source", "destination"], "as": "path", "root": "/srv/files"},
  "input_schema": {"type": "object", "properties": {"source": {"type": "string"}, "destination": {"type": "string"}},
                   "required": ["source", "destination"]}},
 {"name": "delete_file", "effect": "delete", "purpose": "Delete a file",
  "resource": {"argument": "path", "as": "path", "root": "/srv/files"},
  "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
]}"#;

/// Reads under docs/, asks before moves within out/, never deletes; line 2 names a tool the
/// tools file lacks (`read_txt_file`).
const CEDAR: &str = r#"@id("read-docs")
permit(principal, action in [Action::"read_text_file", Action::"read_txt_file"], resource)
when { context.resource like "docs/*" };

@id("write-out")
@approval("required")
permit(principal, action == Action::"move_file", resource)
when { context.resource like "out/*" };

@id("no-drafts")
forbid(principal, action, resource) when { context.resource like "*/drafts/*" };
"#;

/// A fresh folder with the tools file and the Cedar policy.
pub(crate) fn work(name: &str) -> PathBuf {
    let dir = aml_test_support::scratch_dir("policy-cmd", name);
    std::fs::write(dir.join("tools.json"), TOOLS).unwrap();
    std::fs::write(dir.join("policy.cedar"), CEDAR).unwrap();
    dir
}

fn gate(dir: &Path, args: &[&str]) -> Output {
    Command::new(GATE).current_dir(dir).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `args`, asserts the exit code, and gives stdout and stderr.
pub(crate) fn expect(dir: &Path, args: &[&str], code: i32) -> (String, String) {
    let out = gate(dir, args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
    (stdout, stderr)
}

fn check(dir: &Path, policy: &str, code: i32) -> String {
    let (_, stderr) = expect(
        dir,
        &["policy", "check", "--policy", policy, "--tools", "tools.json"],
        code,
    );
    stderr
}

fn explain(dir: &Path, policy: &str, tool: &str, arguments: &Value) -> Value {
    let arguments = arguments.to_string();
    let args = [
        "policy",
        "explain",
        "--policy",
        policy,
        "--tools",
        "tools.json",
        "--tool",
        tool,
        "--arguments",
        &arguments,
    ];
    let (stdout, _) = expect(dir, &args, 0);
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn check_accepts_a_good_policy_and_warns_of_typos() {
    let dir = work("check");
    let (stdout, stderr) = expect(
        &dir,
        &[
            "policy",
            "check",
            "--policy",
            "policy.cedar",
            "--tools",
            "tools.json",
        ],
        0,
    );
    assert!(
        stdout.contains("policy.cedar: valid: a Cedar policy set"),
        "{stdout}"
    );
    assert!(
        stdout.contains("3 tools, 2 of them listed") && stdout.contains("ok, 2 warnings"),
        "{stdout}"
    );
    assert!(
        stderr.contains(r#"line 2: Action::"read_txt_file" names a tool the tools file does not register"#),
        "{stderr}"
    );
    assert!(
        stderr.contains(r#"tool "delete_file": no permit's action scope admits it"#),
        "{stderr}"
    );
    // For CI: warnings fail the check on request.
    let args = [
        "policy",
        "check",
        "--policy",
        "policy.cedar",
        "--tools",
        "tools.json",
        "--deny-warnings",
    ];
    let (stdout, _) = expect(&dir, &args, 1);
    assert!(stdout.contains("2 warnings (--deny-warnings)"), "{stdout}");

    // Exact rules: a rule for a tool the file lacks, a rule with another effect.
    let rules = json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "read_text_file", "effect": "read", "resource": "docs/a.txt", "requires_approval": false},
        {"tool": "move_file", "effect": "delete", "resource": "out/a.md", "requires_approval": true},
        {"tool": "delete_fil", "effect": "delete", "resource": "x", "requires_approval": true}]});
    std::fs::write(dir.join("rules.json"), rules.to_string()).unwrap();
    let stderr = check(&dir, "rules.json", 0);
    assert!(stderr.contains(r#"rule for tool "delete_fil""#), "{stderr}");
    assert!(
        stderr.contains(r#"rule for tool "move_file" has effect delete"#),
        "{stderr}"
    );
    assert!(
        stderr.contains(r#"tool "delete_file": no rule names it"#),
        "{stderr}"
    );

    // Without warnings: plain ok, nothing on stderr.
    std::fs::write(dir.join("clean.cedar"), "permit(principal, action, resource);").unwrap();
    let (stdout, stderr) = expect(
        &dir,
        &[
            "policy",
            "check",
            "--policy",
            "clean.cedar",
            "--tools",
            "tools.json",
        ],
        0,
    );
    assert!(
        stdout.ends_with("ok\n") && stderr.is_empty(),
        "{stdout}\n{stderr}"
    );
    // Without --tools only the policy is checked.
    let (stdout, _) = expect(&dir, &["policy", "check", "--policy", "rules.json"], 0);
    assert!(
        stdout.contains("with 3 rules") && stdout.ends_with("ok\n"),
        "{stdout}"
    );
}

#[test]
fn check_refuses_hostile_policies_naming_the_problem() {
    let dir = work("hostile");
    let hostile: [(&str, String, &str); 6] = [
        (
            "syntax.cedar",
            "permit(principal, action, resource)\nwhen { context.resource like \"docs/*\" ;\n".into(),
            "Cedar syntax error (line 2)",
        ),
        (
            "typo.cedar",
            "@aproval(\"required\")\npermit(principal, action, resource);\n".into(),
            "unknown annotation @aproval",
        ),
        (
            "entity.cedar",
            "permit(principal == User::\"a\", action, resource);\n".into(),
            "unknown entity type User",
        ),
        (
            "big.cedar",
            "// padding\n".repeat(1 << 20),
            "a Cedar policy file is at most 1048576 bytes",
        ),
        ("big.json", " ".repeat(10 << 20), "AML_JSON_TOO_LARGE"),
        (
            "bad-rule.json",
            r#"{"protocol": "aml-action-policy/1", "rules": [{"tool": "t", "effect": "raed", "resource": "r", "requires_approval": false}]}"#.into(),
            "rule 0: unknown Effect value \"raed\"",
        ),
    ];
    for (name, body, problem) in &hostile {
        std::fs::write(dir.join(name), body).unwrap();
        let stderr = check(&dir, name, 1);
        assert!(
            stderr.contains(&format!("{name}: invalid policy")),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(problem), "{name}: {stderr}");
        // explain and test cannot use it: a file that does not load is exit 2.
        let args = [
            "policy",
            "explain",
            "--policy",
            name,
            "--tools",
            "tools.json",
            "--tool",
            "read_text_file",
        ];
        let (_, stderr) = expect(&dir, &args, 2);
        assert!(stderr.contains(problem), "{name}: {stderr}");
    }
    // An unreadable policy, a broken tools file, and bad usage.
    let (_, stderr) = expect(&dir, &["policy", "check", "--policy", "missing.cedar"], 2);
    assert!(stderr.contains("cannot read missing.cedar"), "{stderr}");
    std::fs::write(dir.join("broken-tools.json"), r#"{"tools": [{"name": "x"}]}"#).unwrap();
    let args = [
        "policy",
        "check",
        "--policy",
        "policy.cedar",
        "--tools",
        "broken-tools.json",
    ];
    let (_, stderr) = expect(&dir, &args, 1);
    assert!(stderr.contains("broken-tools.json"), "{stderr}");
    expect(&dir, &["policy", "check"], 2);
}

#[test]
fn explain_prints_the_gates_decision_resources_policies_and_digest() {
    let dir = work("explain");
    let args = json!({"source": "/srv/files/out/./a.md", "destination": "out/b.md"});
    let moved = explain(&dir, "policy.cedar", "move_file", &args);
    assert_eq!(moved["decision"], "requires_approval", "{moved}");
    assert_eq!(moved["reason"], "policy_permit");
    assert_eq!(moved["policies"], json!(["write-out"]));
    assert_eq!(
        moved["resources"],
        json!(["out/a.md", "out/b.md"]),
        "normalized under the root"
    );
    assert_eq!(moved["proposal"]["protocol"], "aml-proposed-action/2");

    // The digest is the relay's own plan's, and the printed proposal's.
    let policy = Policy::read_file(&dir.join("policy.cedar")).unwrap();
    let boundary = ActionBoundary::builder(Arc::new(policy)).build();
    let tools = aml_mcp::relay::RelayTools::from_json(TOOLS, boundary).unwrap();
    let prepared = tools.gate().gate().prepare_value("move_file", args);
    let planned = prepared.plan().unwrap().proposal_sha256().unwrap().to_string();
    assert_eq!(moved["proposal_sha256"], planned);
    let frozen = FrozenProposal::from_value(&moved["proposal"]).unwrap();
    assert_eq!(frozen.digest().to_string(), planned);

    let read = explain(
        &dir,
        "policy.cedar",
        "read_text_file",
        &json!({"path": "docs/a.txt"}),
    );
    assert_eq!(
        (&read["decision"], &read["policies"]),
        (&json!("allow"), &json!(["read-docs"]))
    );
    let draft = explain(
        &dir,
        "policy.cedar",
        "read_text_file",
        &json!({"path": "docs/drafts/a.txt"}),
    );
    assert_eq!(
        (&draft["decision"], &draft["reason"]),
        (&json!("deny"), &json!("policy_forbid"))
    );
    assert_eq!(draft["policies"], json!(["no-drafts"]));
    let other = explain(
        &dir,
        "policy.cedar",
        "read_text_file",
        &json!({"path": "secret.txt"}),
    );
    assert_eq!(
        (&other["decision"], &other["reason"]),
        (&json!("deny"), &json!("no_permit"))
    );

    // Refusals before any plan are denials, with the refusal as the reason.
    for (tool, arguments, reason) in [
        (
            "read_text_file",
            json!({"path": "../etc/passwd"}),
            "resource_outside_root",
        ),
        ("read_text_file", json!({"path": "~/x"}), "invalid_resource"),
        ("read_text_file", json!({"path": 7}), "invalid_arguments"),
        ("no_such_tool", json!({}), "invalid_or_unregistered_call"),
        (
            "read_text_file",
            json!({"path": "docs/a", "n": 9007199254740993_u64}),
            "inexact_number",
        ),
    ] {
        let got = explain(&dir, "policy.cedar", tool, &arguments);
        assert_eq!(
            (&got["decision"], &got["reason"]),
            (&json!("deny"), &json!(reason)),
            "{got}"
        );
        assert_eq!(
            (&got["refused"], &got["proposal_sha256"]),
            (&json!(true), &Value::Null),
            "{got}"
        );
    }

    // A plain "argument" mapping whose argument the call left out: refused, the caller's
    // omission, not a host error (ADR 035).
    let note = r#"{"tools": [{"name": "send_note", "effect": "send", "purpose": "Send",
        "resource": {"argument": "to"}, "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}}]}"#;
    std::fs::write(dir.join("note.json"), note).unwrap();
    let args = [
        "policy",
        "explain",
        "--policy",
        "policy.cedar",
        "--tools",
        "note.json",
        "--tool",
        "send_note",
    ];
    let (stdout, _) = expect(&dir, &args, 0);
    let got: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (&got["decision"], &got["reason"], &got["refused"]),
        (&json!("deny"), &json!("invalid_resource"), &json!(true)),
        "{got}"
    );
    assert_eq!(got["detail"], "argument \"to\" is missing");

    // Exact rules name no policies; @FILE arguments.
    let rules = json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "read_text_file", "effect": "read", "resource": "docs/a.txt", "requires_approval": false}]});
    std::fs::write(dir.join("rules.json"), rules.to_string()).unwrap();
    std::fs::write(dir.join("args.json"), r#"{"path": "/srv/files/docs/a.txt"}"#).unwrap();
    let args = [
        "policy",
        "explain",
        "--policy",
        "rules.json",
        "--tools",
        "tools.json",
        "--tool",
        "read_text_file",
        "--arguments",
        "@args.json",
        "--caller",
        "local",
    ];
    let (stdout, _) = expect(&dir, &args, 0);
    let got: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (&got["decision"], &got["reason"]),
        (&json!("allow"), &json!("exact_rule"))
    );
    assert_eq!(
        (&got["policies"], &got["resources"]),
        (&json!([]), &json!(["docs/a.txt"]))
    );
}

#[test]
fn explain_refuses_bad_input_with_exit_2() {
    let dir = work("explain-usage");
    let base = [
        "policy",
        "explain",
        "--policy",
        "policy.cedar",
        "--tools",
        "tools.json",
        "--tool",
        "move_file",
    ];
    for (extra, problem) in [
        (&["--arguments", "{\"a\": 1,}"][..], "--arguments: not valid JSON"),
        (
            &["--arguments", "{\"a\": 1, \"a\": 2}"][..],
            "--arguments: not valid JSON",
        ),
        (&["--arguments", "[]"][..], "the arguments must be a JSON object"),
        (&["--arguments", "@missing.json"][..], "cannot read missing.json"),
        (&["--caller", ""][..], "--caller: a caller id must not be blank"),
        (
            &["--caller", "a\u{7}b"][..],
            "--caller: a caller id must not hold control characters",
        ),
        (&["--usage", "{\"hours\": 1}"][..], "--usage: not a usage object"),
        (&["--usage", "{\"hour\": -1}"][..], "--usage: not a usage object"),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let (stdout, stderr) = expect(&dir, &args, 2);
        assert!(
            stdout.is_empty() && stderr.contains(problem),
            "{extra:?}: {stderr}"
        );
    }
}

fn write_cases(dir: &Path, cases: &Value) {
    let file = json!({"policy": "policy.cedar", "tools": "tools.json", "cases": cases});
    std::fs::write(dir.join("cases.json"), file.to_string()).unwrap();
}

#[test]
fn test_runs_a_table_of_expected_decisions() {
    let dir = work("cases");
    let mut cases = json!([
        {"name": "docs are read", "tool": "read_text_file", "arguments": {"path": "docs/a.txt"},
         "expect": "allow", "policies": ["read-docs"]},
        {"name": "moves in out ask", "tool": "move_file",
         "arguments": {"source": "out/a", "destination": "out/b"}, "expect": "requires_approval"},
        {"name": "drafts never", "tool": "read_text_file", "arguments": {"path": "docs/drafts/x"},
         "expect": "deny", "reason": "policy_forbid"},
        {"name": "no escape", "tool": "read_text_file", "arguments": {"path": "/etc/passwd"},
         "expect": "deny", "reason": "resource_outside_root"},
        {"name": "unknown tool", "tool": "rm", "expect": "deny", "reason": "invalid_or_unregistered_call"}
    ]);
    write_cases(&dir, &cases);
    let (stdout, _) = expect(&dir, &["policy", "test", "cases.json"], 0);
    assert!(
        stdout.contains("ok    docs are read: allow (policy_permit) by [read-docs]"),
        "{stdout}"
    );
    assert!(stdout.ends_with("5 cases: 5 passed, 0 failed\n"), "{stdout}");

    // One wrong expectation: exit 1, the case named with what was expected and what came.
    cases[1]["expect"] = json!("allow");
    cases[2]["policies"] = json!(["read-docs"]);
    write_cases(&dir, &cases);
    let (stdout, _) = expect(&dir, &["policy", "test", "cases.json"], 1);
    assert!(
        stdout.contains(
            "FAIL  moves in out ask: expected allow; got requires_approval (policy_permit) by [write-out]"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("FAIL  drafts never: expected policies [read-docs]"),
        "{stdout}"
    );
    assert!(stdout.ends_with("5 cases: 3 passed, 2 failed\n"), "{stdout}");

    // Cases files that do not load: exit 2, naming why.
    let hostile = [
        (
            json!({"policy": "policy.cedar", "tools": "tools.json", "cases": [
            {"name": "typo", "tool": "rm", "expcet": "deny"}]}),
            "unknown field `expcet`",
        ),
        (
            json!({"policy": "policy.cedar", "tools": "tools.json", "cases": [
            {"name": "x", "tool": "rm", "expect": "denied"}]}),
            "denied",
        ),
        (
            json!({"policy": "policy.cedar", "tools": "tools.json", "cases": []}),
            "no cases",
        ),
        (
            json!({"policy": "nope.cedar", "tools": "tools.json", "cases": [
            {"name": "x", "tool": "rm", "expect": "deny"}]}),
            "cannot read",
        ),
    ];
    for (file, problem) in hostile {
        std::fs::write(dir.join("cases.json"), file.to_string()).unwrap();
        let (_, stderr) = expect(&dir, &["policy", "test", "cases.json"], 2);
        assert!(stderr.contains(problem), "{problem}: {stderr}");
    }
    std::fs::write(
        dir.join("syntax.cedar"),
        "permit(principal, action, resource) when {",
    )
    .unwrap();
    let file = json!({"policy": "syntax.cedar", "tools": "tools.json", "cases": [{"name": "x", "tool": "rm", "expect": "deny"}]});
    std::fs::write(dir.join("cases.json"), file.to_string()).unwrap();
    let (_, stderr) = expect(&dir, &["policy", "test", "cases.json"], 2);
    assert!(
        stderr.contains("syntax.cedar: invalid policy: Cedar syntax error"),
        "{stderr}"
    );
    std::fs::write(dir.join("cases.json"), "{\"policy\": 1,").unwrap();
    let (_, stderr) = expect(&dir, &["policy", "test", "cases.json"], 2);
    assert!(stderr.contains("not a JSON document"), "{stderr}");
}

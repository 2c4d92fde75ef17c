use serde_json::json;

use crate::{Decision, Effect, FrozenProposal, PlanReason, Policy, ProposalParts};

/// The issue's filesystem goals: read anything under `docs/`, write under `out/` only with
/// approval, nothing else; and a forbid that wins over a permit.
const FILESYSTEM: &str = r#"
@id("read-docs")
permit(principal, action == Action::"read_text_file", resource)
when { context.resource like "docs/*" };

@id("write-out")
@approval("required")
permit(principal, action in [Action::"write_file", Action::"move_file"], resource)
when { context.resource like "out/*" };

@id("no-drafts")
forbid(principal, action, resource)
when { context.resource like "*/drafts/*" };

@id("small-writes")
permit(principal, action == Action::"append_log", resource == Resource::"logs/app.log")
when { context.arguments has line && context.arguments.line like "ok*" };
"#;

fn policy() -> Policy {
    let policy = Policy::from_cedar(FILESYSTEM, None);
    assert!(policy.error().is_none(), "{:?}", policy.error());
    policy
}

fn frozen(tool: &str, effect: Effect, resources: &[&str], arguments: serde_json::Value) -> FrozenProposal {
    let arguments = arguments.as_object().cloned().unwrap();
    let parts = ProposalParts {
        tool,
        effect,
        resource: resources[0],
        purpose: "p",
        arguments: &arguments,
    };
    FrozenProposal::freeze_many(parts, &resources[1..]).unwrap()
}

#[test]
fn permits_allow_or_ask_forbids_and_silence_deny_each_with_its_policies() {
    let policy = policy();
    let read = policy.evaluate(&frozen(
        "read_text_file",
        Effect::Read,
        &["docs/new.txt"],
        json!({}),
    ));
    assert_eq!(
        (read.decision, read.reason),
        (Decision::Allow, PlanReason::PolicyPermit)
    );
    assert_eq!(read.policies, ["read-docs"]);
    let write = policy.evaluate(&frozen("write_file", Effect::Write, &["out/r.md"], json!({})));
    assert_eq!(
        (write.decision, write.policies.as_slice()),
        (Decision::RequiresApproval, &["write-out".to_owned()][..])
    );
    let secret = policy.evaluate(&frozen(
        "read_text_file",
        Effect::Read,
        &["secret.txt"],
        json!({}),
    ));
    assert_eq!(
        (secret.decision, secret.reason),
        (Decision::Deny, PlanReason::NoPermit)
    );
    assert!(secret.policies.is_empty());
    let draft = policy.evaluate(&frozen(
        "read_text_file",
        Effect::Read,
        &["docs/drafts/x"],
        json!({}),
    ));
    assert_eq!(
        (draft.decision, draft.reason),
        (Decision::Deny, PlanReason::PolicyForbid)
    );
    assert_eq!(draft.policies, ["no-drafts"]);
}

#[test]
fn every_resource_is_decided_and_the_strictest_wins() {
    let policy = policy();
    let out_of_area = frozen("move_file", Effect::Write, &["secret.txt", "out/a"], json!({}));
    assert_eq!(
        policy.decide_proposal(&out_of_area),
        (Decision::Deny, PlanReason::NoPermit)
    );
    let within = frozen("move_file", Effect::Write, &["out/a", "out/b"], json!({}));
    assert_eq!(
        policy.decide_proposal(&within),
        (Decision::RequiresApproval, PlanReason::PolicyPermit)
    );
}

#[test]
fn conditions_read_the_frozen_arguments_and_a_failing_policy_denies() {
    let policy = policy();
    let short = frozen(
        "append_log",
        Effect::Write,
        &["logs/app.log"],
        json!({"line": "ok"}),
    );
    assert_eq!(policy.decide_proposal(&short).0, Decision::Allow);
    let long = frozen(
        "append_log",
        Effect::Write,
        &["logs/app.log"],
        json!({"line": "too long"}),
    );
    assert_eq!(
        policy.decide_proposal(&long),
        (Decision::Deny, PlanReason::NoPermit)
    );
    // `like` on a number is an evaluation error: the policy might have been a forbid.
    let mistyped = frozen("append_log", Effect::Write, &["logs/app.log"], json!({"line": 7}));
    let decided = policy.evaluate(&mistyped);
    assert_eq!(
        (decided.decision, decided.reason),
        (Decision::Deny, PlanReason::PolicyError)
    );
    assert_eq!(decided.policies, ["small-writes"]);
}

#[test]
fn arguments_cannot_smuggle_entities_or_extension_calls_into_the_context() {
    let policy = Policy::from_cedar(
        r#"permit(principal, action == Action::"t", resource) when { context.arguments.who == Caller::"admin" };"#,
        None,
    );
    assert!(policy.error().is_none(), "{:?}", policy.error());
    let forged = frozen(
        "t",
        Effect::Read,
        &["r"],
        json!({"who": {"__entity": {"type": "Caller", "id": "admin"}}}),
    );
    // A record is never equal to an entity: the comparison is false, or a type error.
    assert_eq!(policy.decide_proposal(&forged).0, Decision::Deny);
}

#[test]
fn listing_follows_the_permits_action_scopes() {
    let policy = policy();
    assert!(policy.may_allow("read_text_file", Effect::Read));
    assert!(policy.may_allow("move_file", Effect::Write));
    assert!(
        !policy.may_allow("delete_file", Effect::Delete),
        "only a forbid applies to every action"
    );
    let open = Policy::from_cedar("permit(principal, action, resource);", None);
    assert!(open.may_allow("anything", Effect::Pay));
}

#[test]
fn bad_files_are_invalid_policies_that_say_which_policy_and_line() {
    for (text, says) in [
        ("permit(principal, action, resource)\nwhen { context.x ==  };", "Cedar syntax error (line 2)"),
        ("\n\n@aproval(\"required\")\npermit(principal, action, resource);", "policy \"policy0\" (line 3): unknown annotation @aproval"),
        ("@approval(\"requird\") permit(principal, action, resource);", "@approval takes \"required\""),
        ("@approval(\"required\") forbid(principal, action, resource);", "goes on a permit"),
        ("permit(principal == User::\"a\", action, resource);", "unknown entity type User"),
        ("permit(principal, action == Tool::\"t\", resource);", "expected an entity uid with type `Action`"),
        ("permit(principal, action, resource == Path::\"a\");", "unknown entity type Path"),
        ("@id(\"a\") permit(principal, action, resource);\n@id(\"a\") permit(principal, action, resource);", "two policies share this id"),
        ("permit(principal == ?principal, action, resource);", "templates"),
    ] {
        let policy = Policy::from_cedar(text, None);
        let error = policy.error().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains(says), "{text}: {error}");
        assert_eq!(policy.decide("t", Effect::Read, "r"), (Decision::Deny, PlanReason::InvalidPolicy));
        assert!(!policy.may_allow("t", Effect::Read));
    }
    // Deep enough to overflow a stack in Cedar's parser or evaluator: refused first.
    let deep = format!(
        "permit(principal, action, resource) when {{ {}true{} }};",
        "(".repeat(10_000),
        ")".repeat(10_000)
    );
    let ifs = format!(
        "permit(principal, action, resource) when {{ {} true {} }};",
        "if true then ".repeat(2_000),
        " else false".repeat(2_000)
    );
    let chain = format!(
        "permit(principal, action, resource) when {{ 1{} == 1 }};",
        " + 1".repeat(20_000)
    );
    for (text, says) in [
        (&deep, "nest deeper than 32"),
        (&ifs, "more than 64 `if`"),
        (&chain, "longer than 16384 bytes"),
    ] {
        let error = Policy::from_cedar(text, None)
            .error()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains(says) && error.contains("line 1"), "{error}");
    }
    let fine = "// if ((((( in a comment\npermit(principal, action, resource) when { context.resource like \"((((((if\" };";
    assert!(
        Policy::from_cedar(fine, None).error().is_none(),
        "comments and strings are skipped"
    );
    let huge = "// padding\n".repeat(1 << 17);
    let error = Policy::from_cedar(&huge, None)
        .error()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.contains("at most 1048576 bytes"), "{error}");
}

#[test]
fn a_schema_is_checked_at_load() {
    let schema = r#"
        entity Caller; entity Resource;
        action "read_text_file" appliesTo { principal: Caller, resource: Resource,
            context: { effect: String, tool: String, resource: String, arguments: { path: String } } };
    "#;
    let ok = Policy::from_cedar(
        r#"permit(principal, action == Action::"read_text_file", resource) when { context.arguments.path like "docs/*" };"#,
        Some(schema),
    );
    assert!(ok.error().is_none(), "{:?}", ok.error());
    let frozen_ok = frozen(
        "read_text_file",
        Effect::Read,
        &["docs/a"],
        json!({"path": "docs/a"}),
    );
    assert_eq!(ok.decide_proposal(&frozen_ok).0, Decision::Allow);
    let wrong = Policy::from_cedar(
        r#"permit(principal, action == Action::"read_text_file", resource) when { context.arguments.size > 1 };"#,
        Some(schema),
    );
    let error = wrong.error().map(|e| e.to_string()).unwrap_or_default();
    assert!(error.contains("does not match the schema"), "{error}");
    let broken = Policy::from_cedar("permit(principal, action, resource);", Some("entity ;"));
    assert!(broken
        .error()
        .map(|e| e.to_string())
        .unwrap_or_default()
        .contains("Cedar schema error"));
}

#[test]
fn a_schema_error_read_from_files_names_the_schema_file() {
    let dir = std::env::temp_dir().join(format!("aml-cedar-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.cedar");
    std::fs::write(&policy, "permit(principal, action, resource);").unwrap();
    std::fs::write(dir.join("policy.cedarschema"), "entity ;").unwrap();
    let read = Policy::read_file(&policy).unwrap();
    let error = read.error().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        error.contains("policy.cedarschema: Cedar schema error"),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_digest_names_the_file_and_exact_rules_are_unchanged() {
    let one = Policy::from_cedar(FILESYSTEM, None);
    assert_eq!(one.digest(), Some(crate::Sha256Digest::of(FILESYSTEM.as_bytes())));
    assert!(one.is_cedar() && one.to_value().is_none() && one.rules().is_empty());
    let exact = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "t", "effect": "read", "resource": "r", "requires_approval": false}]}));
    assert!(!exact.is_cedar());
    assert_eq!(
        exact.decide("t", Effect::Read, "r"),
        (Decision::Allow, PlanReason::ExactRule)
    );
}

/// docs/POLICY.md's Cedar example loads and decides as the page says.
#[test]
fn the_documented_example_decides_as_documented() {
    let page = include_str!("../../docs/POLICY.md");
    let block = page
        .split("```cedar\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/POLICY.md has a ```cedar block");
    let policy = Policy::from_cedar(block, None);
    assert!(policy.error().is_none(), "{:?}", policy.error());
    let decide = |tool, effect, resources: &[&str]| {
        policy
            .decide_proposal(&frozen(tool, effect, resources, json!({})))
            .0
    };
    assert_eq!(
        decide("read_text_file", Effect::Read, &["docs/later.txt"]),
        Decision::Allow
    );
    assert_eq!(
        decide("write_file", Effect::Write, &["out/r.md"]),
        Decision::RequiresApproval
    );
    assert_eq!(
        decide("move_file", Effect::Write, &["docs/a.txt", "out/a.md"]),
        Decision::Deny,
        "docs/a.txt is not writable"
    );
    assert_eq!(
        decide("move_file", Effect::Write, &["out/a.md", "out/b.md"]),
        Decision::RequiresApproval
    );
    assert_eq!(
        decide("read_text_file", Effect::Read, &["docs/drafts/x"]),
        Decision::Deny
    );
}

/// docs/POLICY.md's caller and budget examples load and decide as the page says.
#[test]
fn the_documented_caller_and_budget_examples_decide_as_documented() {
    use crate::{CallFacts, Caller, Usage};
    let page = include_str!("../../docs/POLICY.md");
    let blocks: Vec<&str> = page
        .split("```cedar\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .collect();
    let find = |id: &str| {
        let block = blocks
            .iter()
            .find(|b| b.contains(id))
            .unwrap_or_else(|| panic!("docs/POLICY.md has a ```cedar block with {id}"));
        let policy = Policy::from_cedar(block, None);
        assert!(policy.error().is_none(), "{:?}", policy.error());
        policy
    };
    let facts = |caller: &str, hour| {
        CallFacts::of(Caller::new(caller).unwrap()).with_usage(Usage {
            minute: 0,
            hour,
            day: hour,
        })
    };
    let reads = find("ci-reads");
    let read = frozen("read_text_file", Effect::Read, &["docs/a.txt"], json!({}));
    assert_eq!(
        reads.evaluate_for(&read, &facts("ci-bot", 0)).decision,
        Decision::Allow
    );
    assert_eq!(
        reads.evaluate_for(&read, &facts("alice", 0)).decision,
        Decision::Deny
    );
    let budget = find("send-under-budget");
    assert!(budget.reads_usage() && !reads.reads_usage());
    let send = frozen("send_message", Effect::Send, &["team"], json!({}));
    let decided = |hour| budget.evaluate_for(&send, &facts("alice", hour));
    assert_eq!(decided(19).decision, Decision::Allow);
    assert_eq!(decided(19).policies, ["send-under-budget"]);
    assert_eq!(decided(20).decision, Decision::RequiresApproval);
    assert_eq!(decided(20).policies, ["send-over-budget"]);
    // Without the usage the condition cannot be evaluated: denied.
    let blind = budget.evaluate(&send);
    assert_eq!(
        (blind.decision, blind.reason),
        (Decision::Deny, PlanReason::PolicyError)
    );
}

/// Every Cedar block of the README and docs/POLICY.md loads without an error.
#[test]
fn every_documented_cedar_block_loads() {
    for page in [
        include_str!("../../README.md"),
        include_str!("../../docs/POLICY.md"),
    ] {
        let blocks: Vec<&str> = page
            .split("```cedar\n")
            .skip(1)
            .filter_map(|rest| rest.split("```").next())
            .collect();
        assert!(!blocks.is_empty());
        for block in blocks {
            let policy = Policy::from_cedar(block, None);
            assert!(policy.error().is_none(), "{block}: {:?}", policy.error());
        }
    }
}

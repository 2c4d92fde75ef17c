//! `aml-mcp-gate policy check|explain|test`: a host's policy and tools files checked without a
//! server, as the gate would load and decide them (docs/POLICY.md, "Checking policies").
//! Decisions come from the relay's own path ([`RelayTools`] and
//! [`ToolGate::prepare_value`](aml_core::ToolGate::prepare_value)), so they cannot disagree
//! with the gate.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use aml_core::strict::{self, Limits};
use aml_core::{
    plan_frozen_for, ActionBoundary, ArgumentSnapshot, CallFacts, Caller, FrozenProposal, Policy,
    ProposalParts, Refusal, Usage,
};
use aml_mcp::relay::RelayTools;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use crate::policy_cases;

const AFTER_HELP: &str = "\
Examples:
  aml-mcp-gate policy check --policy policy.cedar --tools tools.json
  aml-mcp-gate policy explain --policy policy.cedar --tools tools.json \\
    --tool read_text_file --arguments '{\"path\": \"docs/a.txt\"}'
  aml-mcp-gate policy test policy-cases.json

The files are read as `run` reads them (a .cedar policy with NAME.cedarschema beside it, else
aml-action-policy/1 JSON; the tools file as for --tools); nothing starts and nothing is
recorded. See docs/POLICY.md, \"Checking policies\".

Exit status:
  check    0 valid (warnings, if any, on stderr); 1 the policy or tools file is invalid, or
           with --deny-warnings a warning was given; 2 bad usage or a file cannot be read
  explain  0 explained (whatever the decision); 2 bad usage, bad --arguments, or a file that
           cannot be read or is invalid (the gate would not start with it)
  test     0 every case decided as expected; 1 a case did not; 2 bad usage, or the cases,
           policy or tools file cannot be read or is invalid";

/// `policy` and its commands.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct PolicyArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Load and validate a policy (and tools file), and warn of what looks like a typo: rules
    /// or `Action::"…"` naming tools the tools file lacks, tools no rule or permit can allow
    Check(CheckArgs),
    /// Decide one call as the gate would, and print why as JSON: decision, reason, the
    /// determining Cedar policies, the normalized resources, the proposal and its digest
    Explain(ExplainArgs),
    /// Decide a table of calls (a cases file) and compare each with its expected decision
    Test(TestArgs),
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// The policy: a .cedar policy set or an aml-action-policy/1 JSON document
    #[arg(long, value_name = "POLICY")]
    policy: PathBuf,
    /// The tools file the gate runs with (without it, only the policy is checked)
    #[arg(long, value_name = "TOOLS.json")]
    tools: Option<PathBuf>,
    /// Exit 1 when any warning is given (for CI)
    #[arg(long)]
    deny_warnings: bool,
}

#[derive(Debug, Args)]
struct ExplainArgs {
    /// The policy: a .cedar policy set or an aml-action-policy/1 JSON document
    #[arg(long, value_name = "POLICY")]
    policy: PathBuf,
    /// The tools file the gate runs with
    #[arg(long, value_name = "TOOLS.json")]
    tools: PathBuf,
    /// The tool the call names
    #[arg(long, value_name = "NAME")]
    tool: String,
    /// The call's arguments: a JSON object, or @FILE to read it from FILE
    #[arg(long, value_name = "JSON|@FILE", default_value = "{}")]
    arguments: String,
    /// The caller, the Cedar principal Caller::"CALLER": `local` (stdio, the default) or a
    /// bearer token's name (--tokens)
    #[arg(long, value_name = "CALLER", default_value = "local")]
    caller: String,
    /// The caller's usage of the tool for a policy that reads context.usage, e.g.
    /// '{"hour": 20}' (missing members are 0) [default: all 0 when the policy reads it]
    #[arg(long, value_name = "JSON")]
    usage: Option<String>,
}

#[derive(Debug, Args)]
struct TestArgs {
    /// The cases file: {"policy": PATH, "tools": PATH, "cases": [{"name", "tool",
    /// "arguments"?, "caller"?, "usage"?, "expect": "allow"|"requires_approval"|"deny",
    /// "reason"?, "policies"?}]}, paths relative to the file
    #[arg(value_name = "CASES.json")]
    cases: PathBuf,
}

/// Why a command could not do its work.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The file checked is invalid (`check`: exit 1).
    Invalid(String),
    /// Bad usage, or a file that cannot be read (exit 2).
    Usage(String),
}

impl Failure {
    /// The message, whatever the kind.
    pub(crate) fn message(&self) -> &str {
        match self {
            Failure::Invalid(m) | Failure::Usage(m) => m,
        }
    }

    /// The same message as a [`Failure::Usage`]: for commands that cannot work with an
    /// invalid file rather than report on it.
    pub(crate) fn unusable(self) -> Self {
        match self {
            Failure::Invalid(m) | Failure::Usage(m) => Failure::Usage(m),
        }
    }
}

/// Runs one `policy` command: a [`Failure::Invalid`] is exit 1 (only `check` has an invalid
/// file as its answer; `explain` and `test` report one as [`Failure::Usage`]), a
/// [`Failure::Usage`] exit 2.
pub(crate) fn main(args: PolicyArgs) -> ExitCode {
    let (name, result) = match args.what {
        What::Check(check_args) => ("check", check(&check_args)),
        What::Explain(explain_args) => ("explain", explain(&explain_args).map(|()| ExitCode::SUCCESS)),
        What::Test(test_args) => ("test", policy_cases::run(&test_args.cases)),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("aml-mcp-gate policy {name}: {}", failure.message());
            match failure {
                Failure::Invalid(_) => ExitCode::from(1),
                Failure::Usage(_) => ExitCode::from(2),
            }
        }
    }
}

/// The policy file as the gate loads it: unreadable is [`Failure::Usage`], invalid is
/// [`Failure::Invalid`] (naming the file; Cedar's message names the policy and line).
pub(crate) fn load_policy(path: &Path) -> Result<Policy, Failure> {
    let policy = Policy::read_file(path).map_err(Failure::Usage)?;
    match policy.error() {
        Some(e) => Err(Failure::Invalid(format!("{}: {e}", path.display()))),
        None => Ok(policy),
    }
}

/// The tools file as the gate loads it, gated by `policy`, with its text.
pub(crate) fn load_tools(path: &Path, policy: &Policy) -> Result<(String, RelayTools), Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Usage(format!("cannot read {}: {e}", path.display())))?;
    let boundary = ActionBoundary::builder(Arc::new(policy.clone())).build();
    let tools = RelayTools::from_json(&text, boundary).map_err(|e| {
        Failure::Invalid(
            crate::init::placeholder_error(path, &text).unwrap_or_else(|| format!("{}: {e}", path.display())),
        )
    })?;
    Ok((text, tools))
}

fn check(args: &CheckArgs) -> Result<ExitCode, Failure> {
    let policy = load_policy(&args.policy)?;
    let kind = if policy.is_cedar() {
        let schema = args.policy.with_extension("cedarschema");
        match schema.is_file() {
            true => format!("a Cedar policy set, validated against {}", schema.display()),
            false => "a Cedar policy set (no schema beside it)".to_owned(),
        }
    } else {
        format!(
            "an aml-action-policy/1 document with {} rules",
            policy.rules().len()
        )
    };
    let digest = policy.digest().map(|d| d.to_string()).unwrap_or_default();
    println!("{}: valid: {kind}; sha256 {digest}", args.policy.display());
    let mut warnings = Vec::new();
    if let Some(path) = &args.tools {
        let (text, tools) = load_tools(path, &policy)?;
        let catalog = tools.gate().gate().catalog();
        let listed: Vec<&str> = catalog
            .tools()
            .filter(|t| policy.may_allow(t.name(), t.effect()))
            .map(|t| t.name())
            .collect();
        println!(
            "{}: valid: {} tools, {} of them listed (some rule or permit may allow them): {}",
            path.display(),
            catalog.len(),
            listed.len(),
            if listed.is_empty() {
                "none".to_owned()
            } else {
                listed.join(", ")
            }
        );
        warnings = aml_mcp::relay::catalog_warnings(Some(&text), &policy);
        if policy.is_cedar() {
            // The names in the file's text; Cedar itself accepts any Action::"…".
            if let Ok(cedar) = std::fs::read_to_string(&args.policy) {
                for (name, line) in cedar_actions(&cedar) {
                    if catalog.get(&name).is_none() {
                        warnings.push(format!(
                            "line {line}: Action::{name:?} names a tool the tools file does not register: it matches no call"
                        ));
                    }
                }
            }
        }
        for tool in catalog.tools() {
            let named = policy.rules().iter().any(|r| r.tool == tool.name());
            if policy.may_allow(tool.name(), tool.effect()) || (!policy.is_cedar() && named) {
                continue;
            }
            let what = if policy.is_cedar() {
                "no permit's action scope admits"
            } else {
                "no rule names"
            };
            warnings.push(format!(
                "tool {:?}: {what} it: it is not listed and every call to it is denied",
                tool.name()
            ));
        }
    }
    for warning in &warnings {
        eprintln!("aml-mcp-gate policy check: warning: {warning}");
    }
    match (warnings.len(), args.deny_warnings) {
        (0, _) => println!("ok"),
        (n, false) => println!("ok, {n} warnings"),
        (n, true) => {
            println!("{n} warnings (--deny-warnings)");
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Each `Action::"NAME"` in Cedar text, with its line, first occurrence only: read lexically
/// (string literals and `//` comments skipped), so a name inside a string is not one.
fn cedar_actions(text: &str) -> Vec<(String, usize)> {
    let bytes = text.as_bytes();
    let (mut i, mut line) = (0, 1);
    let mut found: Vec<(String, usize)> = Vec::new();
    // The end of the string literal that starts at `start` (its closing quote's index + 1).
    let literal_end = |start: usize| {
        let mut j = start + 1;
        while j < bytes.len() && bytes[j] != b'"' {
            j += if bytes[j] == b'\\' { 2 } else { 1 };
        }
        (j + 1).min(bytes.len())
    };
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'"' => {
                let end = literal_end(i);
                line += bytes[i..end].iter().filter(|&&b| b == b'\n').count();
                i = end;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                if &text[start..i] != "Action" {
                    continue;
                }
                let rest = text[i..].trim_start();
                let Some(rest) = rest.strip_prefix("::") else {
                    continue;
                };
                let quote = text.len() - rest.trim_start().len();
                if bytes.get(quote) != Some(&b'"') {
                    continue;
                }
                let end = literal_end(quote);
                let name = serde_json::from_str::<String>(&text[quote..end])
                    .unwrap_or_else(|_| text[quote + 1..end.saturating_sub(1)].to_owned());
                if !found.iter().any(|(n, _)| *n == name) {
                    found.push((name, line + text[start..quote].matches('\n').count()));
                }
            }
            _ => i += 1,
        }
    }
    found
}

fn explain(args: &ExplainArgs) -> Result<(), Failure> {
    let caller = Caller::new(&args.caller).map_err(|e| Failure::Usage(format!("--caller: {e}")))?;
    let usage = args
        .usage
        .as_deref()
        .map(parse_usage)
        .transpose()
        .map_err(|e| Failure::Usage(format!("--usage: {e}")))?;
    let text = match args.arguments.strip_prefix('@') {
        Some(file) => {
            std::fs::read_to_string(file).map_err(|e| Failure::Usage(format!("cannot read {file}: {e}")))?
        }
        None => args.arguments.clone(),
    };
    let arguments = parse_arguments(&text).map_err(|e| Failure::Usage(format!("--arguments: {e}")))?;
    let policy = load_policy(&args.policy).map_err(Failure::unusable)?;
    let (_, tools) = load_tools(&args.tools, &policy).map_err(Failure::unusable)?;
    let explained = match strict::first_inexact_number(text.as_bytes()) {
        // The relay refuses it before the gate, from the call's text.
        Some(inexact) => refused(
            &args.tool,
            &caller,
            Refusal::InexactNumber,
            format!("arguments: {inexact}; send it as a string"),
        ),
        None => explain_call(
            &tools,
            &args.tool,
            arguments,
            &CallFacts::of(caller).with_usage_if(usage),
        )?,
    };
    let mut out = serde_json::to_string_pretty(&explained).unwrap_or_default();
    out.push('\n');
    print!("{out}");
    Ok(())
}

/// Call arguments as the gate reads them: strict JSON, an object.
pub(crate) fn parse_arguments(text: &str) -> Result<Map<String, Value>, String> {
    let limits = Limits {
        max_bytes: 16 << 20,
        ..Limits::default()
    };
    match strict::parse_slice_with(text.as_bytes(), limits) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("the arguments must be a JSON object".to_owned()),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
}

/// A caller's usage as `--usage` and a case's `usage` give it: `{"minute", "hour", "day"}`,
/// each optional (0), nothing else.
pub(crate) fn parse_usage(text: &str) -> Result<Usage, String> {
    serde_json::from_str(text)
        .map_err(|e| format!("not a usage object ({{\"minute\", \"hour\", \"day\"}}): {e}"))
}

/// The explanation of a call refused before any plan.
fn refused(tool: &str, caller: &Caller, refusal: Refusal, detail: String) -> Value {
    json!({"tool": tool, "caller": caller.id(), "decision": "deny", "reason": refusal.as_str(),
           "refused": true, "policies": [], "resources": null, "proposal_sha256": null,
           "proposal": null, "detail": detail})
}

/// Decides one call of `tool` with `arguments` by `facts.caller` through the relay's gate,
/// and explains it. A refusal before planning (unknown tool, invalid arguments, a resource
/// outside its root or invalid) is a `deny` with `"refused": true`; a failing resource mapper
/// is a `deny` with reason `host_error`. For a policy that reads `context.usage`, the call
/// is planned again on `facts.usage` (all 0 when not given), as the boundary plans it once
/// it has read the caller's usage.
pub(crate) fn explain_call(
    tools: &RelayTools,
    tool: &str,
    arguments: Map<String, Value>,
    facts: &CallFacts,
) -> Result<Value, Failure> {
    let gate = tools.gate().gate();
    let caller = &facts.caller;
    let prepared = gate.prepare_value_for(
        tool,
        &CallFacts::of(caller.clone()),
        Value::Object(arguments.clone()),
    );
    let plan = prepared.plan().cloned();
    // Ends the call without running it; a call that ended while prepared says why.
    let ended = gate.refuse(
        prepared,
        Refusal::InvalidOrUnregisteredCall,
        "policy explain".into(),
    );
    let Some(plan) = plan else {
        let detail = ended.detail().unwrap_or_default().to_owned();
        return Ok(match (ended.refusal(), ended.host_error()) {
            (Some(refusal), _) => refused(tool, caller, refusal, detail),
            (None, host) => json!({"tool": tool, "caller": caller.id(), "decision": "deny",
                "reason": "host_error", "refused": true, "policies": [], "resources": null,
                "proposal_sha256": null, "proposal": null,
                "detail": host.unwrap_or_default()}),
        });
    };
    let internal = |why: &str| Failure::Usage(format!("internal error: {why} (please report it)"));
    let catalog = gate.catalog();
    let registration = catalog
        .get(tool)
        .ok_or_else(|| internal("a planned tool is not in the catalog"))?;
    // The same mapper, arguments and freeze as the gate's, for what the plan does not carry.
    let resources = registration
        .mapper()
        .resources_for(&ArgumentSnapshot::from(arguments.clone()))
        .map_err(|e| internal(&format!("the mapper failed after the gate planned: {e}")))?;
    let (first, more) = resources.split_first().ok_or_else(|| internal("no resource"))?;
    let more: Vec<&str> = more.iter().map(String::as_str).collect();
    let frozen = FrozenProposal::freeze_many(
        ProposalParts {
            tool: registration.name(),
            effect: registration.effect(),
            resource: first,
            purpose: registration.purpose(),
            arguments: &arguments,
        },
        &more,
    );
    let policy = gate.boundary().policy().current();
    let usage = policy.reads_usage().then(|| facts.usage.unwrap_or_default());
    let mut plan = plan;
    let (policies, proposal, detail) = match &frozen {
        Ok(frozen) => {
            let facts = CallFacts::of(caller.clone()).with_usage_if(usage);
            if usage.is_some() {
                // The boundary's own step once it has read the caller's usage.
                plan = plan_frozen_for(frozen.clone(), &policy, facts.clone())
                    .plan()
                    .clone();
            }
            let decided = policy.evaluate_for(frozen, &facts);
            let same_digest = plan.proposal_sha256().is_none_or(|d| d == frozen.digest());
            if !same_digest || decided.decision != plan.decision() || decided.reason != plan.reason() {
                return Err(internal(
                    "explain's proposal or decision differs from the gate's plan",
                ));
            }
            let proposal = strict::parse_str(frozen.canonical_json()).unwrap_or(Value::Null);
            (decided.policies, proposal, Value::Null)
        }
        Err(refusal) => (Vec::new(), Value::Null, json!(refusal.detail())),
    };
    Ok(
        json!({"tool": tool, "caller": caller.id(), "usage": usage, "decision": plan.decision().as_str(),
        "reason": plan.reason().as_str(), "refused": false, "policies": policies,
        "resources": resources, "proposal_sha256": plan.proposal_sha256(), "proposal": proposal,
        "detail": detail}),
    )
}

#[cfg(test)]
mod tests {
    use super::cedar_actions;

    #[test]
    fn cedar_actions_are_read_lexically() {
        let text = "// Action::\"in_comment\"\npermit(principal, action in [Action::\"a\",\n  Action :: \"b\"], resource)\nwhen { context.tool == \"Action::\\\"in_string\\\"\" };\nforbid(principal, action == Action::\"a\", resource);";
        assert_eq!(
            cedar_actions(text),
            vec![("a".to_owned(), 2), ("b".to_owned(), 3)]
        );
    }
}

//! `aml-mcp-gate policy test CASES.json`: a table of calls and the decisions the host expects,
//! decided as `policy explain` decides one call; one line per case and a summary.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use aml_core::strict::{self, Limits};
use aml_core::{CallFacts, Caller, Decision, Usage};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::policy_cmd::{explain_call, load_policy, load_tools, Failure};

/// The largest cases file read.
const MAX_CASES_BYTES: usize = 16 << 20;

/// A cases file. Unknown members are refused: a misspelt `expect` must not pass silently.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    /// The policy, relative to the cases file.
    policy: PathBuf,
    /// The tools file, relative to the cases file.
    tools: PathBuf,
    cases: Vec<Case>,
}

/// One call and what it must be decided.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    tool: String,
    #[serde(default)]
    arguments: Map<String, Value>,
    expect: Decision,
    /// The plan reason or refusal expected (`policy_permit`, `no_exact_rule`,
    /// `resource_outside_root`, `host_error`, …), when given.
    #[serde(default)]
    reason: Option<String>,
    /// The determining Cedar policy ids expected, in any order, when given.
    #[serde(default)]
    policies: Option<Vec<String>>,
    /// The caller (default `local`): the Cedar principal.
    #[serde(default)]
    caller: Option<String>,
    /// The caller's usage of the tool, for a policy that reads `context.usage` (default 0).
    #[serde(default)]
    usage: Option<Usage>,
}

/// Reads the cases file, decides each case, prints one line each and a summary: exit 0 when
/// every case matched, 1 when one did not.
pub(crate) fn run(path: &Path) -> Result<ExitCode, Failure> {
    let file = read_cases(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let policy = load_policy(&dir.join(&file.policy)).map_err(Failure::unusable)?;
    let (_, tools) = load_tools(&dir.join(&file.tools), &policy).map_err(Failure::unusable)?;
    let mut failed = 0;
    for case in &file.cases {
        let caller = match case.caller.as_deref().map(Caller::new).transpose() {
            Ok(caller) => caller.unwrap_or_else(Caller::local),
            Err(e) => return Err(Failure::Usage(format!("case {:?}: caller: {e}", case.name))),
        };
        let facts = CallFacts::of(caller).with_usage_if(case.usage);
        let got = explain_call(&tools, &case.tool, case.arguments.clone(), &facts)?;
        let decision = got["decision"].as_str().unwrap_or_default();
        let reason = got["reason"].as_str().unwrap_or_default();
        let mut policies: Vec<String> = got["policies"]
            .as_array()
            .map(|p| p.iter().filter_map(|id| id.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        policies.sort();
        let mut mismatches = Vec::new();
        if decision != case.expect.as_str() {
            mismatches.push(format!("expected {}", case.expect));
        }
        if let Some(expected) = case.reason.as_deref().filter(|r| *r != reason) {
            mismatches.push(format!("expected reason {expected}"));
        }
        if let Some(mut expected) = case.policies.clone() {
            expected.sort();
            if expected != policies {
                mismatches.push(format!("expected policies [{}]", expected.join(", ")));
            }
        }
        let mut line = format!("{decision} ({reason})");
        if !policies.is_empty() {
            line.push_str(&format!(" by [{}]", policies.join(", ")));
        }
        if let Some(detail) = got["detail"].as_str().filter(|_| !mismatches.is_empty()) {
            line.push_str(&format!(": {detail}"));
        }
        match mismatches.is_empty() {
            true => println!("ok    {}: {line}", case.name),
            false => {
                failed += 1;
                println!("FAIL  {}: {}; got {line}", case.name, mismatches.join(", "));
            }
        }
    }
    let total = file.cases.len();
    println!("{total} cases: {} passed, {failed} failed", total - failed);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn read_cases(path: &Path) -> Result<CasesFile, Failure> {
    let named = |e: &dyn std::fmt::Display| Failure::Usage(format!("{}: {e}", path.display()));
    let bytes =
        std::fs::read(path).map_err(|e| Failure::Usage(format!("cannot read {}: {e}", path.display())))?;
    let limits = Limits {
        max_bytes: MAX_CASES_BYTES,
        ..Limits::default()
    };
    let document =
        strict::parse_slice_with(&bytes, limits).map_err(|e| named(&format!("not a JSON document: {e}")))?;
    // A number read rounded would test another call than the one written.
    if let Some(inexact) = strict::first_inexact_number(&bytes) {
        return Err(named(&format!(
            "{inexact}: write it exactly or as a string (test inexact_number refusals with `policy explain`)"
        )));
    }
    let file: CasesFile = serde_json::from_value(document).map_err(|e| named(&e))?;
    if file.cases.is_empty() {
        return Err(named(&"no cases: a cases file must hold at least one"));
    }
    Ok(file)
}

//! Comparing computed reports with the documented ones in `fixtures/`, as parsed JSON.

use serde_json::Value;

use crate::rehearsal::STATICALLY_RULED_OUT;

/// Report-level keys that describe who produced a report rather than what happened; they
/// are ours, not the reference's, and are not compared.
pub const UNCOMPARED_REPORT_KEYS: &[&str] = &["provenance", "scope", "source", "sdk", "limits"];
/// Report-level keys our reports add (the A2UI host catalogs); allowed, not compared.
pub const ADDED_REPORT_KEYS: &[&str] = &["host_catalog", "host_catalog_variants"];

/// How one documented case compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseVerdict {
    /// Every field equals the documented case.
    Pass,
    /// Equal except the one documented substitution: an attempt Rust's types rule out
    /// (see `fixtures/README.md`).
    PassStatic,
    /// Equal except that the adapter's wire could not carry the documented input at all,
    /// so no request was sent and no hook ran (see `fixtures/README.md`).
    PassWireRefused,
    /// The differences, as JSON paths.
    Fail(Vec<String>),
}

impl CaseVerdict {
    /// Whether the case holds.
    pub fn passed(&self) -> bool {
        !matches!(self, CaseVerdict::Fail(_))
    }
}

/// Paths at which `actual` differs from `expected`.
pub fn differences(expected: &Value, actual: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff(expected, actual, "$", &mut out);
    out
}

fn diff(expected: &Value, actual: &Value, path: &str, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                match a.get(k) {
                    Some(av) => diff(ev, av, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k}: missing")),
                }
            }
            for k in a.keys().filter(|k| !e.contains_key(*k)) {
                out.push(format!("{path}.{k}: unexpected"));
            }
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => {
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                diff(ev, av, &format!("{path}[{i}]"), out);
            }
        }
        _ if expected == actual => {}
        _ => out.push(format!("{path}: expected {expected}, got {actual}")),
    }
}

/// Compares one case. The only accepted substitution: a documented JavaScript
/// `adapter_error` attempt that Rust rules out at compile time, reported as exactly
/// `{"statically_ruled_out": STATICALLY_RULED_OUT, "host_hook_events": []}`.
pub fn compare_case(expected: &Value, actual: &Value) -> CaseVerdict {
    let direct = differences(expected, actual);
    if direct.is_empty() {
        return CaseVerdict::Pass;
    }
    let static_attempt =
        serde_json::json!([{"statically_ruled_out": STATICALLY_RULED_OUT, "host_hook_events": []}]);
    let documented_runtime_error = expected["attempts"]
        .as_array()
        .is_some_and(|a| a.len() == 1 && a[0]["adapter_error"].is_string());
    if actual["attempts"] == static_attempt && documented_runtime_error {
        let mut substituted = expected.clone();
        substituted["attempts"] = static_attempt;
        if differences(&substituted, actual).is_empty() {
            return CaseVerdict::PassStatic;
        }
    }
    if wire_refusal_stands_for_input_refusal(expected, actual) {
        let mut substituted = expected.clone();
        substituted["attempts"] = actual["attempts"].clone();
        if differences(&substituted, actual).is_empty() {
            return CaseVerdict::PassWireRefused;
        }
    }
    CaseVerdict::Fail(direct)
}

/// A documented input refusal (one blocked attempt, no digest, an `AML_*` code, no hook
/// events) may be matched by a wire that refused to carry the input: exactly one
/// `{"wire_refused": "<why>", "host_hook_events": []}` attempt.
fn wire_refusal_stands_for_input_refusal(expected: &Value, actual: &Value) -> bool {
    let (Some([e]), Some([a])) = (
        expected["attempts"].as_array().map(Vec::as_slice),
        actual["attempts"].as_array().map(Vec::as_slice),
    ) else {
        return false;
    };
    let documented_input_refusal = e["proposal_sha256"].is_null()
        && e["execution_status"] == "blocked"
        && e["reason"].as_str().is_some_and(|r| r.starts_with("AML_"))
        && e["host_hook_events"] == serde_json::json!([]);
    let wire_refused = a.as_object().is_some_and(|o| o.len() == 2)
        && a["wire_refused"].is_string()
        && a["host_hook_events"] == serde_json::json!([]);
    documented_input_refusal && wire_refused
}

/// Replaces every `proposal_sha256` string with a placeholder, for reports whose digests
/// come from a host configuration the reference did not publish.
pub fn mask_digests(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if k == "proposal_sha256" && v.is_string() {
                        Value::from("<sha256>")
                    } else {
                        mask_digests(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(mask_digests).collect()),
        other => other.clone(),
    }
}

/// A computed report compared with a documented one, report-level fields apart from cases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// Report-level fields that differ (`protocol`, an unexpected key), with why.
    pub report_level: Vec<(String, Vec<String>)>,
    /// Every documented case by id, in order, then any case the documentation lacks.
    pub cases: Vec<(String, CaseVerdict)>,
}

/// Compares a whole report: its protocol and every case, by id and in order.
pub fn compare_report_parts(expected: &Value, actual: &Value) -> Comparison {
    let mut report_level = Vec::new();
    let empty_map = serde_json::Map::new();
    let e_top = expected.as_object().unwrap_or(&empty_map);
    let a_top = actual.as_object().unwrap_or(&empty_map);
    for (key, value) in e_top {
        if key != "cases" && !UNCOMPARED_REPORT_KEYS.contains(&key.as_str()) && a_top.get(key) != Some(value)
        {
            let got = a_top.get(key).map_or("nothing".to_owned(), Value::to_string);
            report_level.push((key.clone(), vec![format!("expected {value}, got {got}")]));
        }
    }
    for key in a_top.keys() {
        if !e_top.contains_key(key) && !ADDED_REPORT_KEYS.contains(&key.as_str()) {
            report_level.push((key.clone(), vec!["unexpected report key".to_owned()]));
        }
    }
    let mut cases = Vec::new();
    let empty = Vec::new();
    let expected_cases = expected["cases"].as_array().unwrap_or(&empty);
    let actual_cases = actual["cases"].as_array().unwrap_or(&empty);
    for (i, e) in expected_cases.iter().enumerate() {
        let id = e["id"].as_str().unwrap_or("?").to_owned();
        let verdict = match actual_cases.get(i) {
            Some(a) => compare_case(e, a),
            None => CaseVerdict::Fail(vec!["case missing".to_owned()]),
        };
        cases.push((id, verdict));
    }
    for extra in actual_cases.iter().skip(expected_cases.len()) {
        cases.push((
            extra["id"].as_str().unwrap_or("?").to_owned(),
            CaseVerdict::Fail(vec!["case not documented".to_owned()]),
        ));
    }
    Comparison { report_level, cases }
}

/// [`compare_report_parts`] as one list: report-level differences first, then the cases.
pub fn compare_report(expected: &Value, actual: &Value) -> Vec<(String, CaseVerdict)> {
    let Comparison { report_level, cases } = compare_report_parts(expected, actual);
    report_level
        .into_iter()
        .map(|(key, why)| (key, CaseVerdict::Fail(why)))
        .chain(cases)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_name_the_paths() {
        let e = json!({"a": [1, {"b": 2}], "c": 3});
        let a = json!({"a": [1, {"b": 4}], "d": 3});
        assert_eq!(
            differences(&e, &a),
            ["$.a[1].b: expected 2, got 4", "$.c: missing", "$.d: unexpected"]
        );
        assert!(differences(&e, &e).is_empty());
    }

    #[test]
    fn static_substitution_is_accepted_only_in_its_exact_form() {
        let expected =
            json!({"id": "m", "attempts": [{"adapter_error": "x", "host_hook_events": ["e"]}], "n": 0});
        let mut actual = expected.clone();
        actual["attempts"] = json!([{"statically_ruled_out": STATICALLY_RULED_OUT, "host_hook_events": []}]);
        assert_eq!(compare_case(&expected, &actual), CaseVerdict::PassStatic);
        actual["n"] = json!(1);
        assert!(!compare_case(&expected, &actual).passed());
        actual["n"] = json!(0);
        actual["attempts"][0]["statically_ruled_out"] = json!("something else");
        assert!(!compare_case(&expected, &actual).passed());
        // A case documented as a receipt cannot be passed off as statically ruled out.
        let receipt_case = json!({"id": "r", "attempts": [{"reason": "no_exact_rule"}], "n": 0});
        let mut claimed = receipt_case.clone();
        claimed["attempts"] = json!([{"statically_ruled_out": STATICALLY_RULED_OUT, "host_hook_events": []}]);
        assert!(!compare_case(&receipt_case, &claimed).passed());
    }
}

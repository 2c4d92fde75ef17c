use serde_json::json;

use super::*;

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"},
        "target": {"type": "object", "properties": {
            "zone": {"type": "string", "x-mcp-header": "Zone"}}},
        "note": {"type": "string"}}})
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        map.append(
            HeaderName::try_from(*k).unwrap(),
            HeaderValue::try_from(*v).unwrap(),
        );
    }
    map
}

#[test]
fn declarations_are_read_along_properties_only() {
    let found = bindings(&schema()).unwrap();
    let mut names: Vec<(&str, String)> = found
        .iter()
        .map(|b| (b.header.as_str(), b.path.join(".")))
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            ("mcp-param-count", "count".to_owned()),
            ("mcp-param-dry-run", "dry".to_owned()),
            ("mcp-param-region", "region".to_owned()),
            ("mcp-param-zone", "target.zone".to_owned()),
        ]
    );
    assert_eq!(bindings(&json!({"type": "object"})).unwrap(), vec![]);
    assert_eq!(bindings(&json!(null)).unwrap(), vec![]);
}

#[test]
fn an_invalid_declaration_makes_the_tools_declarations_invalid() {
    let invalid = [
        json!({"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}}),
        json!({"anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}),
        json!({"x-mcp-header": "Root", "type": "string"}),
        json!({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}),
        json!({"properties": {"a": {"x-mcp-header": "A"}}}),
        json!({"properties": {"a": {"type": "string", "x-mcp-header": "Bad Name"}}}),
        json!({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}),
        json!({"properties": {"a": {"type": "string", "x-mcp-header": 7}}}),
        json!({"properties": {"a": {"type": "string", "x-mcp-header": "Same"},
                              "b": {"type": "string", "x-mcp-header": "same"}}}),
        json!({"$defs": {"x": {"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}}}),
    ];
    for schema in invalid {
        assert!(bindings(&schema).is_err(), "{schema}");
    }
}

#[test]
fn mirrored_headers_render_each_type_and_leave_out_absent_and_null_arguments() {
    let found = bindings(&schema()).unwrap();
    let arguments =
        json!({"region": "eu-west", "count": 3, "dry": false, "target": {"zone": "a b "}, "note": "x"});
    let mut sent: Vec<(String, String)> = mirror(&found, &arguments)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        vec![
            ("mcp-param-count".into(), "3".into()),
            ("mcp-param-dry-run".into(), "false".into()),
            ("mcp-param-region".into(), "eu-west".into()),
            // A trailing space is not a plain header value: base64.
            ("mcp-param-zone".into(), "=?base64?YSBiIA==?=".into()),
        ]
    );
    assert!(mirror(&found, &json!({"region": null, "target": "not an object"})).is_empty());
}

#[test]
fn mirrored_headers_pass_the_check() {
    let found = bindings(&schema()).unwrap();
    let arguments = json!({"region": "Zürich", "count": 12, "dry": true, "target": {"zone": "b"}});
    let mut sent = HeaderMap::new();
    for (k, v) in mirror(&found, &arguments) {
        sent.append(k, v);
    }
    assert_eq!(check(&found, &arguments, &sent), Ok(()));
}

#[test]
fn the_check_refuses_every_disagreement() {
    let found = bindings(&schema()).unwrap();
    let arguments = json!({"region": "eu-west", "count": 42});
    let ok = |pairs: &[(&str, &str)]| check(&found, &arguments, &headers(pairs));
    assert_eq!(
        ok(&[("mcp-param-region", "eu-west"), ("mcp-param-count", "42")]),
        Ok(())
    );
    // Integers compare as numbers.
    assert_eq!(
        ok(&[("mcp-param-region", "eu-west"), ("mcp-param-count", "42.0")]),
        Ok(())
    );
    assert_eq!(
        ok(&[
            ("mcp-param-region", "=?base64?ZXUtd2VzdA==?="),
            ("mcp-param-count", "42")
        ]),
        Ok(())
    );
    let refused = [
        vec![("mcp-param-region", "us-east"), ("mcp-param-count", "42")],
        vec![("mcp-param-count", "42")],
        vec![("mcp-param-region", "eu-west"), ("mcp-param-count", "42.5")],
        vec![("mcp-param-region", "eu-west"), ("mcp-param-count", "4e1")],
        vec![
            ("mcp-param-region", "eu-west"),
            ("mcp-param-count", "42"),
            ("mcp-param-dry-run", "true"),
        ],
        vec![
            ("mcp-param-region", "eu-west"),
            ("mcp-param-region", "eu-west"),
            ("mcp-param-count", "42"),
        ],
        vec![("mcp-param-region", "=?base64?!!?="), ("mcp-param-count", "42")],
    ];
    for pairs in refused {
        assert!(ok(&pairs).is_err(), "{pairs:?}");
    }
    // An argument with no header form: no header expected, and one sent never matches.
    let object = json!({"target": {"zone": {"nested": 1}}});
    assert_eq!(check(&found, &object, &HeaderMap::new()), Ok(()));
    assert!(check(&found, &object, &headers(&[("mcp-param-zone", "x")])).is_err());
}

#[test]
fn whole_numbers_compare_exactly() {
    assert!(same_integer("42", "42.000"));
    assert!(same_integer("-0", "0"));
    assert!(same_integer("007", "7"));
    assert!(same_integer("18446744073709551617", "18446744073709551617.0"));
    assert!(!same_integer("18446744073709551617", "18446744073709551616"));
    assert!(!same_integer("42.", "42"));
    assert!(!same_integer("-42", "42"));
    assert!(!same_integer("4e1", "40"));
}

#[test]
fn listings_teach_each_tools_declarations() {
    let known = ToolHeaders::default();
    let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [
        {"name": "deploy", "inputSchema": schema()},
        {"name": "plain", "inputSchema": {"type": "object"}},
        {"name": "broken", "inputSchema": {"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}}]}});
    known.learn(answer.to_string().as_bytes());
    assert_eq!(known.of("deploy").map(|b| b.len()), Some(4));
    assert!(known.of("plain").is_none());
    assert!(
        known.of("broken").is_none(),
        "an invalid declaration is not enforced"
    );
    assert!(known.of("unlisted").is_none());
    known.learn(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-1,\"message\":\"x\"}}");
    assert!(known.of("deploy").is_some(), "an error answer teaches nothing");
}

use super::*;
use serde_json::json;

fn rule(document: Value) -> Result<ResourceRule, String> {
    serde_json::from_value(document).map_err(|e| e.to_string())
}

fn resources(rule: &ResourceRule, arguments: Value) -> Result<Vec<String>, (Option<Refusal>, String)> {
    let Value::Object(map) = arguments else {
        panic!("arguments must be an object")
    };
    rule.resources_in(&map).map_err(|e| (e.refusal(), e.to_string()))
}

fn path_rule() -> ResourceRule {
    rule(json!({"argument": "path", "as": "path", "root": "/srv/files/"})).unwrap()
}

#[test]
fn paths_are_made_relative_to_the_root_and_collapsed() {
    let rule = path_rule();
    for (given, expected) in [
        ("docs/a.txt", "docs/a.txt"),
        ("./docs/a.txt", "docs/a.txt"),
        ("docs//a.txt", "docs/a.txt"),
        ("/srv/files/docs/a.txt", "docs/a.txt"),
        ("/srv//files/./docs/a.txt", "docs/a.txt"),
        ("docs/../secret.txt", "secret.txt"),
        ("docs/", "docs"),
        ("/srv/files", "."),
        (".", "."),
    ] {
        assert_eq!(
            resources(&rule, json!({"path": given})).unwrap(),
            [expected],
            "{given}"
        );
    }
}

#[test]
fn paths_that_leave_the_root_or_hold_a_nul_are_refused_with_their_own_reason() {
    let rule = path_rule();
    for given in [
        "../secret.txt",
        "docs/../../x",
        "/etc/passwd",
        "/srv/filesx/a",
        "/srv/files/../x",
        "/",
    ] {
        let (refusal, detail) = resources(&rule, json!({"path": given})).unwrap_err();
        assert_eq!(refusal, Some(Refusal::ResourceOutsideRoot), "{given}: {detail}");
        assert!(detail.starts_with("argument \"path\": "), "{detail}");
    }
    for given in [
        json!({"path": "docs/a\u{0}.md"}),
        json!({"path": ""}),
        json!({"path": "~/.ssh/id_ed25519"}),
        json!({"path": "~root/x"}),
        json!({"path": 7}),
        json!({}),
    ] {
        let (refusal, detail) = resources(&rule, given.clone()).unwrap_err();
        assert_eq!(refusal, Some(Refusal::InvalidResource), "{given}: {detail}");
    }
}

#[test]
fn a_root_of_slash_takes_every_absolute_path() {
    let rule = rule(json!({"argument": "path", "as": "path", "root": "/"})).unwrap();
    assert_eq!(
        resources(&rule, json!({"path": "/etc//passwd"})).unwrap(),
        ["etc/passwd"]
    );
    let (refusal, _) = resources(&rule, json!({"path": "/.."})).unwrap_err();
    assert_eq!(refusal, Some(Refusal::ResourceOutsideRoot));
}

#[test]
fn urls_are_normalized_and_userinfo_is_refused() {
    let rule = rule(json!({"argument": "url", "as": "url"})).unwrap();
    for (given, expected) in [
        ("HTTPS://Example.COM:443/a/./b/../c", "https://example.com/a/c"),
        ("http://example.com:80/", "http://example.com/"),
        ("http://example.com:8080/x", "http://example.com:8080/x"),
        ("https://example.com/%7efoo", "https://example.com/~foo"),
    ] {
        assert_eq!(
            resources(&rule, json!({"url": given})).unwrap(),
            [expected],
            "{given}"
        );
    }
    for given in [
        "https://user:pw@example.com/",
        "https://user@example.com/",
        "/relative",
        "not a url",
        "mailto:a@b",
    ] {
        let (refusal, detail) = resources(&rule, json!({"url": given})).unwrap_err();
        assert_eq!(refusal, Some(Refusal::InvalidResource), "{given}: {detail}");
    }
}

#[test]
fn email_domains_are_lower_cased_and_local_parts_kept() {
    let rule = rule(json!({"argument": "to", "as": "email"})).unwrap();
    assert_eq!(
        resources(&rule, json!({"to": "Team@Example.TEST"})).unwrap(),
        ["Team@example.test"]
    );
    for given in [
        "team",
        "@example.test",
        "team@",
        "a b@example.test",
        "team@exa@mple",
    ] {
        let (refusal, _) = resources(&rule, json!({"to": given})).unwrap_err();
        assert_eq!(refusal, Some(Refusal::InvalidResource), "{given}");
    }
}

#[test]
fn several_arguments_and_array_items_each_give_a_resource_in_order() {
    let moved = rule(json!({"arguments": ["source", "destination"], "as": "path", "root": "/r"})).unwrap();
    assert_eq!(
        resources(&moved, json!({"source": "/r/docs/a", "destination": "out/a"})).unwrap(),
        ["docs/a", "out/a"]
    );
    let (refusal, _) = resources(&moved, json!({"source": "docs/a", "destination": "../x"})).unwrap_err();
    assert_eq!(
        refusal,
        Some(Refusal::ResourceOutsideRoot),
        "one bad resource refuses the call"
    );
    let each = rule(json!({"argument": "paths", "each": true, "as": "path", "root": "/r"})).unwrap();
    assert_eq!(
        resources(&each, json!({"paths": ["docs/a", "./docs/b"]})).unwrap(),
        ["docs/a", "docs/b"]
    );
    for bad in [
        json!({"paths": []}),
        json!({"paths": "docs/a"}),
        json!({"paths": ["a", 1]}),
    ] {
        let (refusal, _) = resources(&each, bad.clone()).unwrap_err();
        assert_eq!(refusal, Some(Refusal::InvalidResource), "{bad}");
    }
}

#[test]
fn plain_rules_read_as_before_and_bad_documents_say_why() {
    assert_eq!(
        rule(json!({"argument": "to"})).unwrap(),
        ResourceRule::Argument("to".into())
    );
    assert_eq!(
        rule(json!({"fixed": "q"})).unwrap(),
        ResourceRule::Fixed("q".into())
    );
    for (document, says) in [
        (json!({"argument": "p", "as": "path"}), "needs a \"root\""),
        (
            json!({"argument": "p", "as": "path", "root": "relative"}),
            "absolute path",
        ),
        (
            json!({"argument": "p", "as": "path", "root": "/.."}),
            "climbs above",
        ),
        (json!({"argument": "p", "as": "url", "root": "/r"}), "only with"),
        (json!({"argument": "p", "as": "uri"}), "unknown resource kind"),
        (json!({"fixed": "q", "as": "url"}), "fixed resource takes no"),
        (json!({"argument": "p", "fixed": "q"}), "exactly one of"),
        (json!({"arguments": []}), "at least one argument"),
        (json!({"argument": "p", "extra": 1}), "unknown field"),
        (json!(["p"]), "a JSON object"),
    ] {
        let err = rule(document.clone()).unwrap_err();
        assert!(err.contains(says), "{document}: {err}");
    }
}

#[test]
fn the_short_form_refuses_a_missing_or_mistyped_argument_as_the_long_form_does() {
    let short = rule(json!({"argument": "to"})).unwrap();
    let long = rule(json!({"argument": "to", "as": "string"})).unwrap();
    assert_eq!(resources(&short, json!({"to": "a"})).unwrap(), ["a"]);
    for arguments in [
        json!({}),
        json!({"to": 7}),
        json!({"to": null}),
        json!({"to": ["a"]}),
    ] {
        let (short_refusal, short_detail) = resources(&short, arguments.clone()).unwrap_err();
        let (long_refusal, long_detail) = resources(&long, arguments.clone()).unwrap_err();
        assert_eq!(short_refusal, Some(Refusal::InvalidResource), "{arguments}");
        assert_eq!(
            (short_refusal, &short_detail),
            (long_refusal, &long_detail),
            "{arguments}"
        );
    }
}

#[test]
fn rules_serialize_to_the_document_form_they_are_read_from() {
    for document in [
        json!({"argument": "to"}),
        json!({"fixed": "q"}),
        json!({"arguments": ["a", "b"], "as": "path", "root": "/r"}),
        json!({"arguments": ["paths"], "each": true, "as": "email"}),
    ] {
        let read = rule(document.clone()).unwrap();
        assert_eq!(serde_json::to_value(&read).unwrap(), document);
    }
}

/// The filesystem server's tools behind a gate, with the policy of the issue's goals: read
/// anything listed under `docs/`, write `out/a.md` only with approval, nothing else.
mod through_the_gate {
    use std::sync::Arc;

    use serde_json::json;

    use crate::testing::{call_blocking, CountingTool};
    use crate::{
        ActionBoundary, CallOutcome, Effect, MemorySink, Policy, Refusal, TokioRuntime, ToolCatalog, ToolGate,
    };

    fn gate(sink: &MemorySink) -> ToolGate {
        let catalog = ToolCatalog::from_json(
            r#"{"tools": [
            {"name": "read_file", "effect": "read", "purpose": "Read a file",
             "resource": {"argument": "path", "as": "path", "root": "/srv"}, "input_schema": {}},
            {"name": "move_file", "effect": "write", "purpose": "Move a file",
             "resource": {"arguments": ["source", "destination"], "as": "path", "root": "/srv"}, "input_schema": {}},
            {"name": "read_multiple_files", "effect": "read", "purpose": "Read files",
             "resource": {"argument": "paths", "each": true, "as": "path", "root": "/srv"}, "input_schema": {}}]}"#,
        )
        .unwrap();
        let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
            {"tool": "read_file", "effect": "read", "resource": "docs/a.txt", "requires_approval": false},
            {"tool": "read_multiple_files", "effect": "read", "resource": "docs/a.txt", "requires_approval": false},
            {"tool": "move_file", "effect": "write", "resource": "docs/a.txt", "requires_approval": false},
            {"tool": "move_file", "effect": "write", "resource": "out/a.md", "requires_approval": true}]}));
        let boundary = ActionBoundary::builder(Arc::new(policy))
            .sink(sink.clone())
            .build();
        ToolGate::new(catalog, boundary)
            .for_adapter("test")
            .with_runtime(TokioRuntime)
    }

    #[test]
    fn spellings_of_one_path_decide_alike_and_the_tool_gets_the_arguments_as_sent() {
        let sink = MemorySink::new();
        let gate = gate(&sink);
        let counting = CountingTool::new();
        for path in ["docs/a.txt", "./docs/a.txt", "docs//a.txt", "/srv/docs/a.txt"] {
            let done = call_blocking(&gate, &counting, "read_file", json!({"path": path}));
            let CallOutcome::Dispatched(done) = done else {
                panic!("{path}: {done:?}")
            };
            assert_eq!(done.output()["arguments"]["path"], path, "forwarded unchanged");
        }
        assert_eq!(counting.entries(), 4);
        let digests: std::collections::BTreeSet<_> = sink
            .calls()
            .iter()
            .map(|r| r.plan.as_ref().and_then(|p| p.proposal_sha256()))
            .collect();
        assert_eq!(digests.len(), 4, "each call's own arguments are in its digest");
    }

    #[test]
    fn a_path_out_of_the_root_is_refused_before_planning_and_other_paths_are_denied_by_policy() {
        let sink = MemorySink::new();
        let gate = gate(&sink);
        let counting = CountingTool::new();
        for path in ["../secret.txt", "/etc/passwd"] {
            let refused = call_blocking(&gate, &counting, "read_file", json!({"path": path}));
            assert_eq!(refused.refusal(), Some(Refusal::ResourceOutsideRoot), "{path}");
            assert!(refused.plan().is_none());
        }
        let denied = call_blocking(
            &gate,
            &counting,
            "read_file",
            json!({"path": "docs/../secret.txt"}),
        );
        assert_eq!(denied.reason(), "no_exact_rule");
        assert_eq!(counting.entries(), 0);
        let records = sink.calls();
        assert_eq!(records[0].refusal, Some(Refusal::ResourceOutsideRoot));
        assert!(records[0]
            .detail
            .as_deref()
            .unwrap_or("")
            .contains(r#"climbs out of the root "/srv""#));
    }

    #[test]
    fn every_resource_of_a_call_is_decided_and_the_strictest_wins() {
        let sink = MemorySink::new();
        let gate = gate(&sink);
        let counting = CountingTool::new();
        let out_of_area = call_blocking(
            &gate,
            &counting,
            "move_file",
            json!({"source": "docs/a.txt", "destination": "secret.txt"}),
        );
        assert_eq!(out_of_area.reason(), "no_exact_rule");
        let protected_source = call_blocking(
            &gate,
            &counting,
            "move_file",
            json!({"source": "secret.txt", "destination": "docs/a.txt"}),
        );
        assert_eq!(protected_source.reason(), "no_exact_rule");
        let asks = call_blocking(
            &gate,
            &counting,
            "move_file",
            json!({"source": "docs/a.txt", "destination": "out/a.md"}),
        );
        assert_eq!(
            asks.reason(),
            "approval_unavailable",
            "one resource needs approval: the call asks"
        );
        let one_protected = call_blocking(
            &gate,
            &counting,
            "read_multiple_files",
            json!({"paths": ["docs/a.txt", "secret.txt"]}),
        );
        assert_eq!(one_protected.reason(), "no_exact_rule");
        assert_eq!(counting.entries(), 0, "nothing refused reached the tool");
        let both = call_blocking(
            &gate,
            &counting,
            "read_multiple_files",
            json!({"paths": ["docs/a.txt", "./docs/a.txt"]}),
        );
        assert!(matches!(both, CallOutcome::Dispatched(_)), "{both:?}");
        assert_eq!(counting.entries(), 1);
    }

    #[test]
    fn a_multi_resource_proposal_binds_every_resource_and_reads_back() {
        let arguments = serde_json::Map::new();
        let parts = |first| crate::ProposalParts {
            tool: "move_file",
            effect: Effect::Write,
            resource: first,
            purpose: "Move a file",
            arguments: &arguments,
        };
        let one = crate::FrozenProposal::freeze_many(parts("docs/a.txt"), &["out/a.md"]).unwrap();
        let other = crate::FrozenProposal::freeze_many(parts("docs/a.txt"), &["out/b.md"]).unwrap();
        let swapped = crate::FrozenProposal::freeze_many(parts("out/a.md"), &["docs/a.txt"]).unwrap();
        assert_ne!(one.digest(), other.digest());
        assert_ne!(one.digest(), swapped.digest());
        assert_eq!(
            one.canonical_json(),
            r#"{"arguments":{},"effect":"write","protocol":"aml-proposed-action/2","purpose":"Move a file","resources":["docs/a.txt","out/a.md"],"tool":"move_file"}"#
        );
        let read = crate::FrozenProposal::from_value(&one.to_value()).unwrap();
        assert_eq!(read, one);
        let single = crate::FrozenProposal::freeze_many(parts("docs/a.txt"), &[]).unwrap();
        assert!(single.canonical_json().contains(
            r#""protocol":"aml-proposed-action/1","purpose":"Move a file","resource":"docs/a.txt""#
        ));
        for bad in [
            json!({"protocol": "aml-proposed-action/2", "tool": "t", "effect": "read", "resources": ["a"], "purpose": "p", "arguments": {}}),
            json!({"protocol": "aml-proposed-action/2", "tool": "t", "effect": "read", "resource": "a", "purpose": "p", "arguments": {}}),
            json!({"protocol": "aml-proposed-action/2", "tool": "t", "effect": "read", "resources": ["a", " "], "purpose": "p", "arguments": {}}),
            json!({"protocol": "aml-proposed-action/1", "tool": "t", "effect": "read", "resources": ["a", "b"], "purpose": "p", "arguments": {}}),
        ] {
            assert!(crate::FrozenProposal::from_value(&bad).is_err(), "{bad}");
        }
        let many: Vec<String> = (0..crate::proposal::MAX_RESOURCES)
            .map(|i| format!("r{i}"))
            .collect();
        let more: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(
            crate::FrozenProposal::freeze_many(parts("r"), &more).is_err(),
            "at most MAX_RESOURCES"
        );
    }
}

proptest::proptest! {
    /// A normalized path is a fixed point, names no `.`/`..`/empty component, and reads the
    /// same written absolute under the root: one resource has one spelling.
    #[test]
    fn normalized_paths_are_fixed_points_with_one_spelling(
        parts in proptest::collection::vec(proptest::sample::select(vec!["a", "b", "..", ".", "", "c.d"]), 0..8),
        absolute in proptest::bool::ANY,
    ) {
        let root = "/srv/files";
        let joined = parts.join("/");
        let text = if absolute { format!("{root}/{joined}") } else { joined };
        if let Ok(normal) = normalize_path(root, &text) {
            let components: Vec<&str> = normal.split('/').collect();
            proptest::prop_assert!(normal == "." || components.iter().all(|c| !matches!(*c, "" | "." | "..")), "{normal}");
            proptest::prop_assert_eq!(normalize_path(root, &normal).ok(), Some(normal.clone()));
            let under = if normal == "." { root.to_owned() } else { format!("{root}/{normal}") };
            proptest::prop_assert_eq!(normalize_path(root, &under).ok(), Some(normal));
        }
    }
}

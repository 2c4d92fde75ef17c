use super::*;

fn exposed_names(servers: &[(&str, Naming)], entries: &[(usize, &str)]) -> Vec<String> {
    let exposed = expose(servers, entries.iter().copied()).unwrap();
    (0..exposed.len()).map(|i| exposed.name(i).to_owned()).collect()
}

#[test]
fn prefix_always_names_the_server_and_resolves_back() {
    let servers = [("files", Naming::Prefix), ("mail", Naming::Prefix)];
    let entries = [(0, "read"), (1, "read"), (1, "send")];
    assert_eq!(
        exposed_names(&servers, &entries),
        ["files__read", "mail__read", "mail__send"]
    );
    let exposed = expose(&servers, entries).unwrap();
    assert_eq!(exposed.resolve("mail__read"), Some((1, "read")));
    assert_eq!(exposed.resolve("files__read"), Some((0, "read")));
    assert_eq!(exposed.resolve("read"), None);
    assert_eq!(exposed.resolve("mail__"), None);
}

#[test]
fn on_conflict_prefixes_only_names_another_server_has() {
    let servers = [
        ("a", Naming::OnConflict),
        ("b", Naming::OnConflict),
        ("c", Naming::Never),
    ];
    // `x` is shared by a and b, `y` by b and c (c keeps it bare), `z` only by a.
    let entries = [(0, "x"), (1, "x"), (1, "y"), (2, "y"), (0, "z")];
    assert_eq!(
        exposed_names(&servers, &entries),
        ["a__x", "b__x", "b__y", "y", "z"]
    );
}

#[test]
fn never_refuses_a_name_two_servers_expose_bare() {
    let servers = [("a", Naming::Never), ("b", Naming::Never)];
    let err = expose(&servers, [(0, "x"), (1, "x")]).unwrap_err();
    assert_eq!(
        err,
        NameError::Conflict {
            exposed: "x".into(),
            first_server: "a".into(),
            first_name: "x".into(),
            second_server: "b".into(),
            second_name: "x".into(),
        }
    );
    let text = err.to_string();
    assert!(
        text.contains("\"x\"") && text.contains("\"a\"") && text.contains("\"b\""),
        "{text}"
    );
}

#[test]
fn a_bare_name_that_spells_another_servers_prefixed_name_is_a_conflict() {
    // Server b's own tool is literally named "a__x", and server a prefixes its "x".
    let servers = [("a", Naming::Prefix), ("b", Naming::Never)];
    let err = expose(&servers, [(0, "x"), (1, "a__x")]).unwrap_err();
    assert!(
        matches!(err, NameError::Conflict { ref exposed, .. } if exposed == "a__x"),
        "{err}"
    );
    // One server listing one name twice is refused the same way.
    let err = expose(&[("a", Naming::Prefix)], [(0, "x"), (0, "x")]).unwrap_err();
    assert!(matches!(err, NameError::Conflict { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "\"a__x\" is listed twice for server \"a\": remove one"
    );
}

#[test]
fn one_server_with_on_conflict_keeps_its_names_bare() {
    let servers = [("only", Naming::OnConflict)];
    assert_eq!(exposed_names(&servers, &[(0, "x"), (0, "y")]), ["x", "y"]);
    assert!(expose(&servers, []).unwrap().is_empty());
}

#[test]
fn server_names_that_cannot_prefix_unambiguously_are_refused() {
    for bad in [
        "",
        "a__b",
        "has space",
        "dot.name",
        "ünï",
        &"x".repeat(MAX_SERVER_NAME + 1),
    ] {
        let err = expose(&[(bad, Naming::Prefix)], []).unwrap_err();
        assert!(
            matches!(err, NameError::ServerName { ref name, .. } if name == bad),
            "{bad:?}: {err}"
        );
    }
    for good in ["a", "fs-2", "my_server", &"x".repeat(MAX_SERVER_NAME)] {
        assert!(expose(&[(good, Naming::Prefix)], []).is_ok(), "{good:?}");
    }
    let err = expose(&[("a", Naming::Prefix), ("a", Naming::Never)], []).unwrap_err();
    assert_eq!(err, NameError::DuplicateServer("a".into()));
    let err = expose(&[("a", Naming::Prefix)], [(1, "x")]).unwrap_err();
    assert_eq!(err, NameError::NoSuchServer { index: 1, servers: 1 });
}

#[test]
fn namings_read_as_gate_toml_spells_them() {
    for naming in [Naming::Prefix, Naming::OnConflict, Naming::Never] {
        assert_eq!(naming.to_string().parse::<Naming>(), Ok(naming));
    }
    assert_eq!(Naming::default(), Naming::Prefix);
    let err = "Prefix".parse::<Naming>().unwrap_err();
    assert_eq!(err, NameError::UnknownNaming("Prefix".into()));
    assert!(err.to_string().contains("\"on_conflict\""));
}

//! docs/ARCHITECTURE.md's dependency block says what each crate's `Cargo.toml` says: every
//! line `crate [| crate …] -> dep, dep …` names exactly the crate's direct dependencies among
//! the workspace's crates, and every workspace crate has a line.

use std::collections::{BTreeMap, BTreeSet};

use aml_test_support::repo;

/// The workspace crates each `Cargo.toml` lists under `[dependencies]`.
fn declared() -> BTreeMap<String, BTreeSet<String>> {
    let root = repo();
    let mut crates = BTreeMap::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let manifest = dir.join("Cargo.toml");
        if !name.starts_with("aml-") || !manifest.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&manifest).unwrap();
        let mut section = String::new();
        let mut deps = BTreeSet::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_owned();
            } else if section == "[dependencies]" && line.starts_with("aml-") {
                deps.insert(line.split(['=', ' ', '.']).next().unwrap().to_owned());
            }
        }
        crates.insert(name, deps);
    }
    crates
}

/// What the page's first `text` block says, crate by crate.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let page = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).unwrap();
    let block = page
        .split("```text\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/ARCHITECTURE.md has a dependency block");
    let mut said = BTreeMap::new();
    for line in block.lines().filter(|l| l.contains("->")) {
        let (left, right) = line.split_once("->").unwrap();
        let deps: BTreeSet<String> = right
            .split([',', ' '])
            .filter(|w| w.starts_with("aml-"))
            .map(str::to_owned)
            .collect();
        for name in left.split('|') {
            let name = name.split_whitespace().next().expect("a crate name before `->`");
            let before = said.insert(name.to_owned(), deps.clone());
            assert!(before.is_none(), "{name} has two lines in the dependency block");
        }
    }
    said
}

#[test]
fn the_architecture_page_names_each_crates_real_dependencies() {
    let declared = declared();
    assert!(declared.len() >= 10, "found only {declared:?}");
    assert_eq!(
        documented(),
        declared,
        "docs/ARCHITECTURE.md's dependency block (left) differs from the Cargo.toml files (right)"
    );
}

#[test]
fn a_wrong_line_is_caught() {
    let mut said = documented();
    said.get_mut("aml-mcp-http")
        .unwrap()
        .insert("aml-core".to_owned());
    assert_ne!(said, declared());
}

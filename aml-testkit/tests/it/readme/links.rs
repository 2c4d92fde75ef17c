//! Every link and file or ADR reference in the repository's prose resolves: markdown links
//! (and their `#anchors`) in every `.md` file, and paths and ADR numbers cited in `.md` and
//! `.rs` files. A reference to something that is not in the repository fails, naming the
//! file and line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::repo;

/// The files whose prose is checked: every `.md` and `.rs` outside build output, installed
/// peers and generated fuzz data.
fn prose_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                let skipped = ["target", "node_modules", "corpus", "artifacts", "coverage"];
                if !name.starts_with('.') && !skipped.contains(&name.as_str()) {
                    stack.push(path);
                }
            } else if name.ends_with(".md") || name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// GitHub's anchor for a heading: lowercase, punctuation other than `-` and `_` dropped,
/// spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// The markdown link targets on a line: `[text](target)`, outside inline code.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut code = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => code = !code,
            b']' if !code && bytes.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    out.push(line[i + 2..i + 2 + end].to_owned());
                    i += end + 2;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Paths into the repository cited in prose: a word that starts with a top-level folder of
/// the repository (or is a root file such as `README.md`) and names a file by its extension.
fn cited_paths(line: &str, top: &BTreeSet<String>) -> Vec<String> {
    let extensions = [".rs", ".md", ".py", ".json", ".toml", ".proto", ".mjs", ".js"];
    line.split(|c: char| !(c.is_alphanumeric() || "/._-".contains(c)))
        .map(|word| word.trim_end_matches(['.', ',']))
        .filter(|word| extensions.iter().any(|e| word.ends_with(e)))
        .filter(|word| !word.contains('*') && !word.contains("//"))
        .filter(|word| {
            let first = word.split('/').next().unwrap();
            word.contains('/') && top.contains(first) || *word == "DESIGN.md"
        })
        .map(str::to_owned)
        .collect()
}

/// ADR numbers cited as `ADR 7`, `ADR 007` or `docs/adr/007-…`.
fn cited_adrs(line: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for marker in ["ADR ", "adr/"] {
        let mut rest = line;
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(n) = digits.parse() {
                out.push(n);
            }
        }
    }
    out
}

/// Whether a file's cited paths are this repository's: not the upstream sources that
/// `fixtures/` describes (their paths are the upstream's), nor this checker's own examples.
fn cites_paths(shown: &str) -> bool {
    !shown.starts_with("fixtures/")
        && shown != "aml-testkit/tests/it/readme/links.rs"
        && shown != "aml-testkit/tests/it/readme.rs"
}

#[test]
fn every_link_path_and_adr_the_prose_cites_exists() {
    let root = repo();
    let top: BTreeSet<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect();
    let adrs: BTreeSet<u32> = std::fs::read_dir(root.join("docs/adr"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.split('-').next()?.parse().ok()
        })
        .collect();
    let mut dangling = Vec::new();
    let files = prose_files(&root);
    assert!(
        files.len() > 100,
        "found only {} files under {root:?}",
        files.len()
    );
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(&root).unwrap().display().to_string();
        let markdown = shown.ends_with(".md");
        for (n, line) in text.lines().enumerate() {
            let at = format!("{shown}:{}", n + 1);
            for adr in cited_adrs(line) {
                if !adrs.contains(&adr) {
                    dangling.push(format!("{at}: ADR {adr} does not exist"));
                }
            }
            for path in cited_paths(line, &top)
                .into_iter()
                .filter(|_| cites_paths(&shown))
            {
                // A path is the repository's, or (in a crate's files) the crate's.
                let crate_dir = root.join(shown.split('/').next().unwrap());
                if !root.join(&path).exists() && !crate_dir.join(&path).exists() {
                    dangling.push(format!("{at}: {path} is not in the repository"));
                }
            }
            if !markdown {
                continue;
            }
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                if !resolved.exists() {
                    dangling.push(format!("{at}: link to {target}: no such file"));
                    continue;
                }
                let linked_md = resolved.extension().is_some_and(|e| e == "md");
                if !anchor.is_empty() && linked_md {
                    let headings = anchors(&std::fs::read_to_string(&resolved).unwrap());
                    if !headings.contains(anchor) {
                        dangling.push(format!("{at}: link to {target}: no such heading"));
                    }
                }
            }
        }
    }
    assert!(
        dangling.is_empty(),
        "{} dangling references:\n{}",
        dangling.len(),
        dangling.join("\n")
    );
}

/// The checker finds what it is for (a checker that finds nothing would pass vacuously).
#[test]
fn the_reference_checker_sees_links_paths_and_adrs() {
    let top: BTreeSet<String> = ["docs", "aml-core"].map(String::from).into();
    assert_eq!(link_targets("see [a](docs/A.md#b) and `[x](y)`"), ["docs/A.md#b"]);
    assert_eq!(
        cited_paths("as `aml-core/src/gate.rs` says, and DESIGN.md.", &top),
        ["aml-core/src/gate.rs", "DESIGN.md"]
    );
    assert_eq!(cited_adrs("ADR 018 and docs/adr/007-x.md"), [18, 7]);
    assert_eq!(
        slug("Over Streamable HTTP: remote servers, many agents"),
        "over-streamable-http-remote-servers-many-agents"
    );
}

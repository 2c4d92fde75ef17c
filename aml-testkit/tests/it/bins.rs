//! The workspace binaries these tests run (`aml-mcp-gate`, and `aml-approval` for the
//! README's commands), built here when they are missing or older than their sources.
//!
//! `cargo test --workspace` builds them with everything else; `cargo test -p aml-testkit`
//! does not (cargo builds only the tested package's own binaries). So the first test that
//! needs one runs `$CARGO build -p aml-mcp-gate -p aml-approval --bins` once per test
//! process, into this test executable's own target directory and profile, where
//! [`aml_testkit::mcp::gate_binary_path`] looks. cargo releases its lock on the target
//! directory before it runs the test executables, so this nested build does not wait on
//! the `cargo test` that started it. When the binaries are newer than every source file
//! of theirs (under `src/`, and `build.rs`, of their crates and their path dependencies),
//! cargo is not run at all. Manifests are not compared: a manifest edited without changing
//! the binary (a dev-dependency added) leaves cargo's binary as it was, older than the
//! manifest, and would otherwise rebuild it here with another feature set every time. A
//! failed build fails the test that asked, with cargo's errors above.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

/// The crates whose binaries these tests run.
const CRATES: [&str; 2] = ["aml-mcp-gate", "aml-approval"];

/// `aml-mcp-gate`, up to date.
pub(crate) fn gate() -> PathBuf {
    built().join("aml-mcp-gate")
}

/// `aml-approval`, up to date.
pub(crate) fn approval() -> PathBuf {
    built().join("aml-approval")
}

/// The directory holding the binaries, once they are up to date (built at most once per
/// test process).
fn built() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let profile_dir = profile_dir();
        let stale = CRATES.iter().any(|name| {
            let binary = profile_dir.join(name);
            let sources = newest_source(&aml_test_support::repo().join(name));
            modified(&binary).is_none_or(|built| built < sources)
        });
        if stale {
            build(&profile_dir);
        }
        let gate = aml_testkit::mcp::gate_binary_path().unwrap_or_else(|e| panic!("{e}"));
        let dir = gate.parent().expect("the gate sits in a directory").to_path_buf();
        for name in CRATES {
            assert!(
                dir.join(name).is_file(),
                "{name} is not in {dir:?} after the build"
            );
        }
        dir
    })
    .clone()
}

/// `target/<profile>`: where this test executable's build puts binaries.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/<this test>
    exe.parent()
        .and_then(Path::parent)
        .expect("the test executable sits in target/<profile>/deps")
        .to_path_buf()
}

fn build(profile_dir: &Path) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let target_dir = profile_dir.parent().expect("target/<profile> has a parent");
    let mut command = Command::new(&cargo);
    command
        .current_dir(aml_test_support::repo())
        .arg("build")
        .arg("--target-dir")
        .arg(target_dir);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            command.arg("--release");
        }
        Some(profile) => {
            command.args(["--profile", profile]);
        }
        None => panic!("no profile in {profile_dir:?}"),
    }
    for name in CRATES {
        command.args(["-p", name]);
    }
    command.arg("--bins");
    eprintln!("aml-testkit's tests: building {CRATES:?} ({command:?})");
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cargo:?} to build {CRATES:?}: {e}"));
    assert!(
        status.success(),
        "building {CRATES:?} for aml-testkit's tests failed ({command:?}: {status}); cargo's errors are above"
    );
}

/// The newest modification time among `krate`'s source files and those of its path
/// dependencies (transitively).
fn newest_source(krate: &Path) -> SystemTime {
    let repo = aml_test_support::repo();
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut todo = vec![krate.canonicalize().unwrap_or_else(|_| krate.to_path_buf())];
    let mut seen = Vec::new();
    while let Some(dir) = todo.pop() {
        if seen.contains(&dir) {
            continue;
        }
        newest = newest.max(modified(&dir.join("build.rs")).unwrap_or(SystemTime::UNIX_EPOCH));
        newest = newest.max(newest_in(&dir.join("src")));
        todo.extend(path_dependencies(&dir, &repo));
        seen.push(dir);
    }
    newest
}

/// The workspace crates `dir`'s `[dependencies]` name: `path = "../x"`, or `x.workspace =
/// true` / `x = { workspace = true … }` for a workspace member `x` (members sit in
/// directories named after them).
fn path_dependencies(dir: &Path, repo: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if !in_dependencies || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.split("path = \"").nth(1) {
            let path = rest.split('"').next().unwrap_or_default();
            found.push(dir.join(path));
        } else if line.contains("workspace = true") || line.contains(".workspace = true") {
            let name = line.split(['=', '.', ' ']).next().unwrap_or_default();
            let member = repo.join(name);
            if !name.is_empty() && member.join("Cargo.toml").is_file() {
                found.push(member);
            }
        }
    }
    found.into_iter().filter_map(|p| p.canonicalize().ok()).collect()
}

/// The newest modification time of the files under `dir`.
fn newest_in(dir: &Path) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return newest;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let time = if path.is_dir() {
            newest_in(&path)
        } else {
            modified(&path).unwrap_or(SystemTime::UNIX_EPOCH)
        };
        newest = newest.max(time);
    }
    newest
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

//! What the command-line tests share: the gate run to completion with no input, and files
//! in the temporary folder.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub use crate::common::GATE;

/// `aml-mcp-gate ARGS` with stdin closed, to completion.
pub fn gate(args: &[&str]) -> Output {
    Command::new(GATE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Writes `text` to the file `name` of this test process's scratch folder (one for all the
/// command-line tests, made once); its path. The file is written beside and renamed into
/// place, so a gate another test started on the same name never reads it half written
/// (tests running at once rewrite the shared `policy.json`).
pub fn temp(name: &str, text: &str) -> String {
    static FILES: OnceLock<PathBuf> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = FILES.get_or_init(|| aml_test_support::scratch_dir("gate-cli", "files"));
    let path = dir.join(name);
    let part = dir.join(format!(".{name}.{}.part", NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&part, text).unwrap();
    std::fs::rename(&part, &path).unwrap();
    path.to_string_lossy().into_owned()
}

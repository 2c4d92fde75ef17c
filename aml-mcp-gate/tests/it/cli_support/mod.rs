//! What the command-line tests share: the gate run to completion with no input, and files
//! in the temporary folder.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
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
/// command-line tests, made once: each test names its own files); its path.
pub fn temp(name: &str, text: &str) -> String {
    static FILES: OnceLock<PathBuf> = OnceLock::new();
    let dir = FILES.get_or_init(|| aml_test_support::scratch_dir("gate-cli", "files"));
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

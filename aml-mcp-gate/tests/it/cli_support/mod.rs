//! What the command-line tests share: the gate run to completion with no input, and files
//! in the temporary folder.
#![allow(dead_code, unreachable_pub)]

use std::process::{Command, Output, Stdio};

pub const GATE: &str = env!("CARGO_BIN_EXE_aml-mcp-gate");

/// `aml-mcp-gate ARGS` with stdin closed, to completion.
pub fn gate(args: &[&str]) -> Output {
    Command::new(GATE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Writes `text` to a file named for this test process and `name`; its path.
pub fn temp(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("aml-mcp-gate-cli-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

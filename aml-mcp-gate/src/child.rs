//! The server the gate starts as its child: its command, the folder it runs in, and its
//! death with the gate (`parent_death`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use aml_mcp::relay::stdio::{spawn_command, ChildUpstream};

/// A server command and where it runs.
#[derive(Debug, Clone)]
pub(crate) struct ServerCommand {
    argv: Vec<OsString>,
    dir: Option<PathBuf>,
}

impl ServerCommand {
    /// `argv` (program and arguments, not empty), run in `dir` (`None`: the gate's own
    /// working directory).
    pub(crate) fn new(argv: Vec<OsString>, dir: Option<&Path>) -> Self {
        ServerCommand {
            argv,
            dir: dir.map(Path::to_owned),
        }
    }

    /// What to call it in messages: its program.
    pub(crate) fn name(&self) -> String {
        let program = self.argv.first().map(|p| p.to_string_lossy()).unwrap_or_default();
        format!("{program:?}")
    }

    /// Starts it, its messages at most `max` bytes long.
    pub(crate) fn spawn(&self, max: usize) -> std::io::Result<ChildUpstream> {
        let (program, args) = self
            .argv
            .split_first()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no server command"))?;
        let mut command = tokio::process::Command::new(program);
        command.args(args);
        if let Some(dir) = &self.dir {
            command.current_dir(dir);
        }
        crate::parent_death::die_with_gate(&mut command);
        spawn_command(command, max)
    }
}

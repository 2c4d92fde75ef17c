//! The server dies with the gate. A server that ignores the end of its input (or is busy) would
//! outlive a gate killed with `kill -9`, the one exit the gate cannot clean up after, as an
//! orphan nobody stops. On Linux the server's parent-death signal is set to SIGKILL between
//! `fork` and `exec`, so the kernel kills it when the gate dies; elsewhere nothing is set.
//!
//! The kernel sends the signal when the *thread* that forked the child exits. The gate starts
//! servers only from its runtime's thread (a current-thread runtime on the main thread), which
//! lives as long as the process.
//!
//! Why `unsafe` here, the one module of the workspace that allows it (the workspace forbids
//! `unsafe_code`; this crate denies it and allows it only in this module): the setting must be
//! made in the child process after `fork` and before `exec`, and the only way std and tokio
//! offer to run code there is `CommandExt::pre_exec`, which is `unsafe` because the closure
//! runs where only async-signal-safe operations are sound. No maintained crate sets a
//! parent-death signal on a `Command` without it (`process-wrap`, already in the tree through
//! `rmcp`, wraps process groups and sessions, not this). The closure makes two system calls
//! through `nix` (`prctl(PR_SET_PDEATHSIG)`, `getppid`) and allocates nothing.

#![allow(unsafe_code)]

/// Makes the child that `command` starts receive SIGKILL when this process dies (Linux).
#[cfg(target_os = "linux")]
pub(crate) fn die_with_gate(command: &mut tokio::process::Command) {
    use nix::errno::Errno;
    use nix::sys::prctl::set_pdeathsig;
    use nix::sys::signal::Signal;
    use nix::unistd::{getppid, Pid};

    let gate = Pid::this();
    // SAFETY: the closure runs in the forked child before `exec`; it only makes the system
    // calls prctl(2) and getppid(2) and builds an `io::Error` from a raw OS code (no
    // allocation, no lock), which are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            set_pdeathsig(Signal::SIGKILL)?;
            // The gate died before the setting was made: nothing will send the signal now,
            // so the server must not start.
            if getppid() != gate {
                return Err(Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

/// Elsewhere there is no parent-death signal: nothing is set.
#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_gate(_command: &mut tokio::process::Command) {}

//! What the workspace's tests share, so that no test file grows its own copy: a fresh
//! scratch directory per test, waits on a condition with a deadline (never a bare sleep),
//! and where the interop peers that `scripts/interop-setup` installs live.
//!
//! ```
//! use std::time::Duration;
//!
//! let dir = aml_test_support::scratch_dir("doc", "example");
//! std::fs::write(dir.join("ready"), "yes").unwrap();
//! let text = aml_test_support::wait_until("the ready file", Duration::from_secs(1), || {
//!     std::fs::read_to_string(dir.join("ready")).ok()
//! });
//! assert_eq!(text, "yes");
//! ```

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often a wait looks at its condition again.
pub const POLL: Duration = Duration::from_millis(10);

/// A fresh, empty directory under the system's temp dir, named after the suite, the test
/// and this process (so parallel runs never share one); whatever a previous run left there
/// is removed first.
pub fn scratch_dir(suite: &str, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aml-{suite}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create the scratch directory {dir:?}: {e}"));
    dir
}

/// Looks at `condition` every [`POLL`] until it gives a value, and returns that value;
/// panics naming `what` if `timeout` passes first.
pub fn wait_until<T>(what: &str, timeout: Duration, mut condition: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = condition() {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "waited {timeout:?} for {what}, in vain"
        );
        std::thread::sleep(POLL);
    }
}

/// [`wait_until`] for async tests: `condition` is awaited each time.
pub async fn wait_until_async<T, F>(what: &str, timeout: Duration, mut condition: impl FnMut() -> F) -> T
where
    F: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = condition().await {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "waited {timeout:?} for {what}, in vain"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The repository's root (this crate sits one level below it).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("aml-test-support sits in the repository")
        .to_path_buf()
}

/// Where `scripts/interop-setup` installs the peers nobody here wrote.
pub fn interop_dir() -> PathBuf {
    repo().join("target/interop")
}

/// The interop venv's Python (the official MCP SDK, grpcio, the A2UI SDKs); panics, naming
/// the setup script, when it is absent: a test that needs a peer fails loudly, never skips.
pub fn python() -> PathBuf {
    interop_peer("venv/bin/python")
}

/// An installed npm peer's command (`mcp-server-everything`, `mcp-server-filesystem`).
pub fn node_bin(name: &str) -> PathBuf {
    interop_peer(&format!("node/node_modules/.bin/{name}"))
}

fn interop_peer(relative: &str) -> PathBuf {
    let path = interop_dir().join(relative);
    assert!(
        path.exists(),
        "interop peer missing: {path:?}; run `bash scripts/interop-setup`"
    );
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_dir_starts_empty() {
        let dir = scratch_dir("support", "empty");
        std::fs::write(dir.join("left-over"), "x").unwrap();
        let again = scratch_dir("support", "empty");
        assert_eq!(dir, again);
        assert_eq!(std::fs::read_dir(&again).unwrap().count(), 0);
    }

    #[test]
    #[should_panic(expected = "waited 30ms for nothing, in vain")]
    fn a_wait_that_runs_out_names_what_it_waited_for() {
        wait_until::<()>("nothing", Duration::from_millis(30), || None);
    }

    #[test]
    fn a_wait_returns_the_first_value() {
        let mut n = 0;
        let got = wait_until("the third look", Duration::from_secs(5), || {
            n += 1;
            (n == 3).then_some(n)
        });
        assert_eq!(got, 3);
    }
}

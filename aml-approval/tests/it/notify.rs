//! The notification command, run for each new pending proposal: its arguments (the page's
//! address without the token, the digest, the tool) and environment (the URL with the
//! token), passed as given, never through a shell; a command that fails, hangs (it is
//! killed) or cannot start is logged and blocks nothing.

use crate::common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use aml_approval::NotifyCommand;
use aml_core::ReceiptReason;
use common::host_with;

/// Everything the page logs in this test binary.
fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: Arc<Mutex<Vec<u8>>> = Arc::default();
        let sink = Arc::clone(&logs);
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("aml.approval=debug")
            .with_ansi(false)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        logs
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Waits (bounded) for a logged line with every one of `parts`; returns it.
async fn logged(parts: &[&str]) -> String {
    aml_test_support::wait_until_async(
        &format!("a log line with {parts:?}"),
        Duration::from_secs(20),
        || async {
            let text = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
            text.lines()
                .find(|l| parts.iter().all(|p| l.contains(p)))
                .map(str::to_owned)
        },
    )
    .await
}

fn dir(tag: &str) -> PathBuf {
    aml_test_support::scratch_dir("approval-notify", tag)
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Waits (bounded) for `path` to exist; its text.
async fn file(path: &Path) -> String {
    aml_test_support::wait_until_async(
        &format!("{} to be written", path.display()),
        Duration::from_secs(20),
        || async { std::fs::read_to_string(path).ok() },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_new_proposal_runs_the_command_with_its_address_digest_and_tool() {
    logs();
    let dir = dir("args");
    let out = dir.join("notified");
    // Writes its arguments, one a line, then the URL from the environment; whole, at once.
    let command = script(
        &dir,
        "tell.sh",
        "out=\"$1\"; shift\n{ printf '%s\\n' \"$@\"; printf 'env %s %s\\n' \"$AML_APPROVAL_URL\" \"$AML_APPROVAL_GRANT_ID\"; } > \"$out.tmp\"\nmv \"$out.tmp\" \"$out\"",
    );
    let host = host_with(|b| {
        b.notify(
            NotifyCommand::new(&command)
                .arg(out.display().to_string())
                .arg("$(touch pwned) `id`"),
        )
    })
    .await;
    let call = host.propose("Build passed.");
    let [digest] = host.wait_for_pending(1).await[..] else {
        unreachable!()
    };
    let (_, listed) = host.api("GET", "/api/v1/pending", None).await;
    let grant = listed["pending"][0]["grant_id"].as_str().unwrap().to_owned();
    let written = file(&out).await;
    let lines: Vec<&str> = written.lines().collect();
    let address = format!("http://{}/#m-{grant}", host.authority());
    assert_eq!(
        lines,
        [
            "$(touch pwned) `id`",
            address.as_str(),
            &digest.to_string(),
            "send_message",
            &format!(
                "env http://{}/?t={}#m-{grant} {grant}",
                host.authority(),
                host.token()
            ),
        ],
        "arguments as given, never through a shell; the token only in the environment"
    );
    assert!(!written.lines().take(4).any(|l| l.contains(&host.token())));
    assert!(!dir.join("pwned").exists() && !Path::new("pwned").exists());
    host.click("approve").await;
    assert_eq!(call.await.unwrap(), ReceiptReason::HostDispatchReturned);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_hanging_or_missing_command_is_logged_and_blocks_nothing() {
    logs();
    let dir = dir("failing");
    let failing = script(&dir, "fail.sh", "echo 'no route to the pager' >&2\nexit 3");
    let pid_file = dir.join("pid");
    let hanging = script(
        &dir,
        "hang.sh",
        &format!("echo $$ > {}\nexec sleep 30", pid_file.display()), // hangs (simulated) until killed
    );
    let missing = dir.join("no-such-program");
    for (command, says) in [
        (
            NotifyCommand::new(&failing),
            vec!["the notification command failed", "no route to the pager"],
        ),
        (
            NotifyCommand::new(&hanging).timeout(Duration::from_millis(300)),
            vec!["ran too long and was killed"],
        ),
        (
            NotifyCommand::new(&missing),
            vec!["could not start", "no-such-program"],
        ),
    ] {
        let host = host_with(|b| b.notify(command)).await;
        let call = host.propose("Deploy.");
        let [digest] = host.wait_for_pending(1).await[..] else {
            unreachable!()
        };
        let digest = digest.to_string();
        let mut parts = says.clone();
        parts.push(&digest);
        logged(&parts).await;
        // The proposal waited on the page all along, and is decided as usual.
        let response = host.click("approve").await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert_eq!(call.await.unwrap(), ReceiptReason::HostDispatchReturned);
    }
    // The hanging command was killed, not left behind.
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    aml_test_support::wait_until_async(
        &format!("the hanging command {pid} to be gone"),
        Duration::from_secs(10),
        || async {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let gone = state.is_empty() || state.split(") ").nth(1).is_some_and(|s| s.starts_with('Z'));
            gone.then_some(())
        },
    )
    .await;
}

//! The terminal prompt shows the proposal and signs the answer; anything but yes denies.

use std::sync::Arc;

use aml_approval::{ApproverKey, DecisionChannel, Keyring, PendingApproval, StatementDecision, TtyApprovals};
use aml_core::FrozenProposal;
use serde_json::json;

fn pending() -> PendingApproval {
    pending_with("Build passed.")
}

fn pending_with(body: &str) -> PendingApproval {
    let proposal = FrozenProposal::from_value(&json!({
        "protocol": "aml-proposed-action/1", "tool": "send_message", "effect": "send",
        "resource": "team@example.test", "purpose": "Send a status update",
        "arguments": {"to": "team@example.test", "body": body}}))
    .unwrap();
    PendingApproval::new(proposal, "g-1")
}

#[tokio::test]
async fn answers_on_the_terminal_become_signed_decisions() {
    let dir = aml_test_support::scratch_dir("tty", "answers");
    for (answer, expected) in [
        ("y\n", StatementDecision::Approve),
        ("YES\n", StatementDecision::Approve),
        ("n\n", StatementDecision::Deny),
        ("\n", StatementDecision::Deny),
    ] {
        let (input, output) = (dir.join("in"), dir.join("out"));
        std::fs::write(&input, answer).unwrap();
        std::fs::write(&output, "").unwrap();
        let key = ApproverKey::generate("carol").unwrap();
        let ring = Keyring::new().with_approver(&key).unwrap();
        let channel: Arc<dyn DecisionChannel> = Arc::new(TtyApprovals::on_pair(key, &input, &output));
        let signed = channel.decide(pending()).await.unwrap();
        let statement = ring.verify(&signed).unwrap();
        assert_eq!(statement.decision(), expected, "{answer:?}");
        assert_eq!(statement.grant_id(), "g-1");
        let shown = std::fs::read_to_string(&output).unwrap();
        assert!(
            shown.contains("f416748534da5982a029d03d6db48adf00b4138e0785d38857f0b1734923776c"),
            "{shown}"
        );
        assert!(shown.contains(r#"{"arguments":{"body":"Build passed.","to":"team@example.test"}"#));
        assert!(!shown.contains("Warning"), "{shown}");
    }
    // No terminal: the channel fails, which the hook turns into a block.
    let key = ApproverKey::generate("carol").unwrap();
    let missing = TtyApprovals::on(key, dir.join("no-such-terminal"));
    assert!(missing.decide(pending()).await.is_err());
}

/// A real pseudo-terminal stands in for the approver's terminal: the prompt arrives on it,
/// and what is typed there decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_terminal_prompt_is_answered_on_the_terminal() {
    use nix::fcntl::OFlag;
    use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
    use std::io::{Read, Write};

    let mut master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let terminal = ptsname_r(&master).unwrap();

    let key = ApproverKey::generate("dave").unwrap();
    let ring = Keyring::new().with_approver(&key).unwrap();
    let channel = TtyApprovals::on(key, &terminal);
    let asking = tokio::spawn(async move { channel.decide(pending()).await });

    // Read the prompt from the terminal until it asks, then type the answer (on a thread,
    // so a missing prompt fails the test instead of hanging it).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut shown = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&shown).contains("Approve? [y/N]") {
            match master.read(&mut buf) {
                Ok(n) if n > 0 => shown.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        let _ = master.write_all(b"yes\n");
        let _ = tx.send(shown);
        std::thread::sleep(std::time::Duration::from_secs(2)); // keep the terminal open: not a wait
    });
    let shown = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the prompt appears on the terminal");
    let signed = tokio::time::timeout(std::time::Duration::from_secs(30), asking)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        ring.verify(&signed).unwrap().decision(),
        StatementDecision::Approve
    );
    assert!(String::from_utf8_lossy(&shown)
        .contains("f416748534da5982a029d03d6db48adf00b4138e0785d38857f0b1734923776c"));
}

/// A C1 control (U+009B, a terminal's CSI) and a right-to-left override in the arguments
/// reach the terminal only as visible escapes, with a warning; the signed digest is still
/// the digest of the exact bytes.
#[tokio::test]
async fn control_and_bidi_characters_are_shown_as_escapes_with_a_warning() {
    let dir = aml_test_support::scratch_dir("tty", "escapes");
    let (input, output) = (dir.join("in"), dir.join("out"));
    std::fs::write(&input, "n\n").unwrap();
    std::fs::write(&output, "").unwrap();
    let body = "pay \u{9B}31mNOW\u{202E}cod.exe\u{200B}";
    let asked = pending_with(body);
    let digest = asked.proposal.digest();
    let key = ApproverKey::generate("carol").unwrap();
    let ring = Keyring::new().with_approver(&key).unwrap();
    let signed = TtyApprovals::on_pair(key, &input, &output)
        .decide(asked)
        .await
        .unwrap();
    assert_eq!(ring.verify(&signed).unwrap().proposal_sha256(), digest);
    let shown = std::fs::read_to_string(&output).unwrap();
    for raw in ['\u{9B}', '\u{202E}', '\u{200B}'] {
        assert!(
            !shown.contains(raw),
            "{raw:?} reached the terminal raw: {shown:?}"
        );
    }
    assert!(
        shown.contains(r"pay \u{009B}31mNOW\u{202E}cod.exe\u{200B}"),
        "{shown}"
    );
    assert!(shown.contains("Warning: this proposal contains control, bidirectional or invisible characters"));
}

/// The terminal, read on a thread of its own and collected with deadlines.
struct Screen {
    chunks: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: String,
}

impl Screen {
    /// Waits (at most 30 s) until the screen shows `needle` `times` times; what it shows.
    fn until(&mut self, needle: &str, times: usize) -> &str {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.seen.matches(needle).count() < times {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(chunk) => self.seen.push_str(&String::from_utf8_lossy(&chunk)),
                Err(e) => panic!("{needle:?} x{times} never appeared ({e}): {:?}", self.seen),
            }
        }
        &self.seen
    }
}

/// A question whose caller goes away while it is on the terminal is said to be withdrawn;
/// the next request is asked only after that, so what was typed for the withdrawn one
/// does not answer the next.
#[test]
fn a_withdrawn_question_says_so_and_its_answer_does_not_answer_the_next() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(withdrawn_question_says_so())
    }));
    // A question still waiting for a line (a failure) must not keep the test from ending.
    rt.shutdown_background();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn withdrawn_question_says_so() {
    use nix::fcntl::OFlag;
    use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
    use std::io::{Read, Write};

    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let terminal = ptsname_r(&master).unwrap();
    // Kept open (never read) so the terminal stays up between questions, as a real one does.
    let _session = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&terminal)
        .unwrap();
    let mut typing = std::fs::File::from(std::os::fd::OwnedFd::from(master));
    let mut reading = typing.try_clone().unwrap();
    let (tx, chunks) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reading.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut screen = Screen {
        chunks,
        seen: String::new(),
    };

    let key = ApproverKey::generate("erin").unwrap();
    let ring = Keyring::new().with_approver(&key).unwrap();
    let channel = Arc::new(TtyApprovals::on(key, &terminal));
    let first = pending_with("First.");
    let second = pending_with("Second.");
    let (first_digest, second_digest) = (first.proposal.digest(), second.proposal.digest());
    let asking_first = tokio::spawn({
        let channel = Arc::clone(&channel);
        async move { channel.decide(first).await }
    });
    screen.until("Approve? [y/N]", 1);
    let asking_second = tokio::spawn({
        let channel = Arc::clone(&channel);
        async move { channel.decide(second).await }
    });

    // The first request's caller goes away.
    asking_first.abort();
    let shown = screen.until("Withdrawn:", 1).to_owned();
    let notice = shown.split("Withdrawn:").nth(1).unwrap();
    assert!(notice.contains(&first_digest.to_string()), "{shown}");
    assert!(notice.contains("Your answer to it will be ignored"), "{shown}");
    assert!(
        !shown.contains(&second_digest.to_string()),
        "the second question was shown while the first was on the terminal: {shown}"
    );

    // "yes", typed for the withdrawn question, is its answer (ignored); the second question
    // comes after it and is denied.
    typing.write_all(b"yes\n").unwrap();
    let shown = screen.until("Approve? [y/N]", 2).to_owned();
    let after_notice = shown.split("Withdrawn:").nth(1).unwrap();
    assert!(after_notice.contains(&second_digest.to_string()), "{shown}");
    typing.write_all(b"n\n").unwrap();
    let signed = tokio::time::timeout(std::time::Duration::from_secs(30), asking_second)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let statement = ring.verify(&signed).unwrap();
    assert_eq!(statement.proposal_sha256(), second_digest);
    assert_eq!(statement.decision(), StatementDecision::Deny);
}

/// The prompt says who asks (caller and client), escaping what a client named itself, and
/// says so when nobody is known.
#[tokio::test]
async fn the_prompt_says_who_asks() {
    let dir = aml_test_support::scratch_dir("tty", "who-asks");
    let ask = |pending: PendingApproval| {
        let (input, output) = (dir.join("in"), dir.join("out"));
        std::fs::write(&input, "n\n").unwrap();
        std::fs::write(&output, "").unwrap();
        let key = ApproverKey::generate("erin").unwrap();
        let channel = TtyApprovals::on_pair(key, &input, &output);
        async move {
            channel.decide(pending).await.unwrap();
            std::fs::read_to_string(&output).unwrap()
        }
    };
    let known = aml_approval::Requester::unknown()
        .with_caller("ci-bot")
        .with_client("claude-code", "2.1.0");
    let shown = ask(pending().with_requester(known)).await;
    assert!(
        shown.contains("Asked by: Caller ci-bot, Client claude-code 2.1.0\n"),
        "{shown}"
    );
    assert!(!shown.contains("Warning"), "{shown}");
    let sly = aml_approval::Requester::unknown()
        .with_caller("local")
        .with_client("trusted\u{1b}[2Jclient", "1");
    let shown = ask(pending().with_requester(sly)).await;
    assert!(shown.contains("Client trusted\\u{001B}[2Jclient 1"), "{shown}");
    assert!(shown.contains("Warning"), "an escaped client name warns: {shown}");
    let shown = ask(pending()).await;
    assert!(shown.contains("Asked by: not known\n"), "{shown}");
}

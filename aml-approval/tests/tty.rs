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
    PendingApproval {
        proposal,
        grant_id: "g-1".into(),
    }
}

#[tokio::test]
async fn answers_on_the_terminal_become_signed_decisions() {
    let dir = std::env::temp_dir().join(format!("aml-tty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
        std::thread::sleep(std::time::Duration::from_secs(2)); // keep the terminal open
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
    let dir = std::env::temp_dir().join(format!("aml-tty-escapes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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

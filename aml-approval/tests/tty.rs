//! The terminal prompt shows the proposal and signs the answer; anything but yes denies.

use std::sync::Arc;

use aml_approval::{ApproverKey, DecisionChannel, Keyring, PendingApproval, TtyApprovals, Verdict};
use aml_core::FrozenProposal;
use serde_json::json;

fn pending() -> PendingApproval {
    let proposal = FrozenProposal::from_value(&json!({
        "protocol": "aml-proposed-action/1", "tool": "send_message", "effect": "send",
        "resource": "team@example.test", "purpose": "Send a status update",
        "arguments": {"to": "team@example.test", "body": "Build passed."}}))
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
        ("y\n", Verdict::Approve),
        ("YES\n", Verdict::Approve),
        ("n\n", Verdict::Deny),
        ("\n", Verdict::Deny),
    ] {
        let (input, output) = (dir.join("in"), dir.join("out"));
        std::fs::write(&input, answer).unwrap();
        std::fs::write(&output, "").unwrap();
        let key = ApproverKey::generate("carol").unwrap();
        let ring = Keyring::new().with_key("carol", &key.public_key_hex()).unwrap();
        let channel: Arc<dyn DecisionChannel> = Arc::new(TtyApprovals::on_pair(key, &input, &output));
        let signed = channel.decide(pending()).await.unwrap();
        let statement = ring.verify(&signed).unwrap();
        assert_eq!(statement.decision, expected, "{answer:?}");
        assert_eq!(statement.grant_id, "g-1");
        let shown = std::fs::read_to_string(&output).unwrap();
        assert!(
            shown.contains("f416748534da5982a029d03d6db48adf00b4138e0785d38857f0b1734923776c"),
            "{shown}"
        );
        assert!(shown.contains(r#"{"arguments":{"body":"Build passed.","to":"team@example.test"}"#));
    }
    // No terminal: the channel fails, which the hook turns into a block.
    let key = ApproverKey::generate("carol").unwrap();
    let missing = TtyApprovals::on(key, dir.join("no-such-terminal"));
    assert!(missing.decide(pending()).await.is_err());
}

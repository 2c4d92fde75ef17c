//! `aml-approval`: an approver working offline generates a key, signs a decision, and the
//! host verifies it against its keyring.

use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_aml-approval"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn keygen_sign_and_verify_round_trip() {
    let dir = std::env::temp_dir().join(format!("aml-approval-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("alice.key").display().to_string();
    let made = run(&["keygen", "alice", &key]);
    assert!(made.status.success());
    let entry: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
    assert_eq!(entry["key_id"], "alice");
    assert!(
        !run(&["keygen", "alice", &key]).status.success(),
        "a key file is never overwritten"
    );

    let ring = dir.join("keyring.json");
    std::fs::write(&ring, serde_json::json!({"keys": [entry]}).to_string()).unwrap();
    let digest = "f416748534da5982a029d03d6db48adf00b4138e0785d38857f0b1734923776c";
    let signed = run(&["sign", &key, digest, "grant-7", "approve", "--ttl", "60"]);
    assert!(
        signed.status.success(),
        "{}",
        String::from_utf8_lossy(&signed.stderr)
    );
    let statement = dir.join("statement.json");
    std::fs::write(&statement, &signed.stdout).unwrap();
    let verified = run(&[
        "verify",
        &ring.display().to_string(),
        &statement.display().to_string(),
    ]);
    assert!(verified.status.success());
    assert!(String::from_utf8_lossy(&verified.stdout).contains(digest));

    // A tampered statement does not verify.
    let tampered = String::from_utf8(signed.stdout)
        .unwrap()
        .replace("grant-7", "grant-8");
    std::fs::write(&statement, tampered).unwrap();
    let refused = run(&[
        "verify",
        &ring.display().to_string(),
        &statement.display().to_string(),
    ]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("signature"));

    assert_eq!(
        run(&["sign", &key, "not-a-digest", "g", "approve"]).status.code(),
        Some(1)
    );
    assert_eq!(run(&["bogus"]).status.code(), Some(2));
}

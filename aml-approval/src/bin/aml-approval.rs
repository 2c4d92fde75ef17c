//! `aml-approval`: approver keys and offline signing of approval statements.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aml_approval::{ApproverKey, Keyring, SignedStatement, Statement, Verdict, STATEMENT_PROTOCOL};

const USAGE: &str = "\
usage:
  aml-approval keygen KEY_ID KEY_FILE          new Ed25519 key; prints its keyring entry
  aml-approval public KEY_FILE                 the keyring entry for a key file
  aml-approval sign KEY_FILE DIGEST GRANT_ID approve|deny [--ttl SECONDS]
                                               prints a signed aml-approval-statement/1
  aml-approval verify KEYRING_FILE STATEMENT_FILE
                                               checks a statement against a keyring";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["keygen", key_id, file] => keygen(key_id, file),
        ["public", file] => read_key(file).map(|k| println!("{}", entry(&k))),
        ["sign", file, digest, grant, decision] => sign(file, digest, grant, decision, 300),
        ["sign", file, digest, grant, decision, "--ttl", secs] => match secs.parse() {
            Ok(secs) => sign(file, digest, grant, decision, secs),
            Err(_) => Err(format!("--ttl needs whole seconds, got {secs:?}")),
        },
        ["verify", keyring, statement] => verify(keyring, statement),
        ["--help" | "-h" | "help"] => {
            println!("{USAGE}");
            Ok(())
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aml-approval: {e}");
            ExitCode::from(1)
        }
    }
}

fn entry(key: &ApproverKey) -> serde_json::Value {
    serde_json::json!({"key_id": key.key_id(), "public_key": key.public_key_hex()})
}

fn read_key(file: &str) -> Result<ApproverKey, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    ApproverKey::from_json(&text).map_err(|e| format!("{file}: {e}"))
}

fn keygen(key_id: &str, file: &str) -> Result<(), String> {
    if std::path::Path::new(file).exists() {
        return Err(format!("{file} exists; refusing to overwrite a key"));
    }
    let key = ApproverKey::generate(key_id).map_err(|e| e.to_string())?;
    write_private(file, &key.to_json())?;
    println!("{}", entry(&key));
    Ok(())
}

#[cfg(unix)]
fn write_private(file: &str, text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .map_err(|e| format!("cannot create {file}: {e}"))?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {file}: {e}"))
}

#[cfg(not(unix))]
fn write_private(file: &str, text: &str) -> Result<(), String> {
    std::fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
}

fn sign(file: &str, digest: &str, grant: &str, decision: &str, ttl_secs: u64) -> Result<(), String> {
    let key = read_key(file)?;
    digest
        .parse::<aml_core::Sha256Digest>()
        .map_err(|e| format!("{digest:?}: {e}"))?;
    let decision = match decision {
        "approve" => Verdict::Approve,
        "deny" => Verdict::Deny,
        other => return Err(format!("decision must be approve or deny, got {other:?}")),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?;
    let now_ms = i64::try_from(now.as_millis()).map_err(|e| e.to_string())?;
    let ttl_ms = i64::try_from(Duration::from_secs(ttl_secs).as_millis()).map_err(|e| e.to_string())?;
    let signed = Statement {
        protocol: STATEMENT_PROTOCOL.into(),
        proposal_sha256: digest.to_owned(),
        grant_id: grant.to_owned(),
        approver_key_id: key.key_id().to_owned(),
        decision,
        issued_at_ms: now_ms,
        expires_at_ms: now_ms.saturating_add(ttl_ms),
    }
    .sign(&key)
    .map_err(|e| e.to_string())?;
    println!("{}", signed.to_value());
    Ok(())
}

fn verify(keyring: &str, statement: &str) -> Result<(), String> {
    let ring_text = std::fs::read_to_string(keyring).map_err(|e| format!("cannot read {keyring}: {e}"))?;
    let ring = Keyring::from_json(&ring_text).map_err(|e| format!("{keyring}: {e}"))?;
    let text = std::fs::read_to_string(statement).map_err(|e| format!("cannot read {statement}: {e}"))?;
    let signed = SignedStatement::from_json(&text).map_err(|e| format!("{statement}: {e}"))?;
    let s = ring.verify(&signed).map_err(|e| format!("{statement}: {e}"))?;
    println!(
        "valid: {:?} of {} by {}",
        s.decision, s.proposal_sha256, s.approver_key_id
    );
    Ok(())
}

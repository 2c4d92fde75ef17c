//! `aml-approval`: approver keys, offline signing and verification of approval statements.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use aml_approval::display::quoted;
use aml_approval::{
    ApproverKey, KeyError, Keyring, SignedStatement, Statement, StatementDecision, StatementError,
    StatementRefusal, StatementRules, Validity, MAX_SAFE_INTEGER,
};
use aml_core::Sha256Digest;
use aml_grants::{Clock, SystemClock};
use clap::{Parser, Subcommand, ValueEnum};

const EXIT_CODES: &str = "\
Exit codes:
  0  success; for `verify`: a valid, current approval (with --signature-only: a valid signature)
  1  a file cannot be read or written, or is not what it should be (key file, keyring)
  2  usage error (unknown command or option, missing or malformed argument)
  3  verify: the statement is malformed (not an aml-approval-statement/1 statement)
  4  verify: the signature does not verify, or the key is not in the keyring
  5  verify: the statement denies
  6  verify: the statement has expired
  7  verify: issued in the future, or valid for longer than --max-lifetime
  8  verify: it decides another proposal or grant than --digest / --grant-id

verify needs --digest and --grant-id (the proposal and the grant the approval must be for);
--signature-only checks the signature alone and says what it did not check.

Files:
  key file  {\"key_id\": \"…\", \"secret_key\": \"<64 hex>\"}   private, written by keygen
  keyring   {\"keys\": [{\"key_id\": \"…\", \"public_key\": \"<64 hex>\"}]}
            each entry is what keygen and public print";

/// Approver keys, offline signing and verification of aml-approval-statement/1 statements.
#[derive(Debug, Parser)]
#[command(name = "aml-approval", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a new Ed25519 approver key file (mode 0600; never overwritten) and print its
    /// keyring entry.
    #[command(after_help = EXIT_CODES)]
    Keygen {
        /// The key's id, as statements and keyrings name it.
        #[arg(value_parser = non_blank)]
        key_id: String,
        /// Where to write the new key file.
        key_file: PathBuf,
    },
    /// Print the keyring entry {"key_id", "public_key"} of a key file.
    #[command(after_help = EXIT_CODES)]
    Public {
        /// An approver key file.
        key_file: PathBuf,
    },
    /// Sign a decision about one proposal digest and one grant id; print the statement.
    #[command(after_help = EXIT_CODES)]
    Sign {
        /// The approver's key file.
        key_file: PathBuf,
        /// The proposal's SHA-256 digest (64 lowercase hex).
        #[arg(value_parser = digest)]
        digest: Sha256Digest,
        /// The one-use grant id the boundary proposed for this decision.
        #[arg(value_parser = non_blank)]
        grant_id: String,
        /// The decision.
        decision: Decision,
        /// How long the statement stays valid, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u64).range(1..=MAX_TTL_SECS))]
        ttl: u64,
        /// With deny: why, for the agent (signed with the decision; at most 500 characters,
        /// none of them control, bidirectional or invisible).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Check a statement against a keyring; exit 0 only for a valid, current approval of
    /// the proposal --digest with the grant --grant-id.
    #[command(after_help = EXIT_CODES)]
    Verify {
        /// The keyring: {"keys": [{"key_id", "public_key"}]}.
        keyring: PathBuf,
        /// The signed statement (JSON).
        statement: PathBuf,
        /// The digest of the proposal the approval must be for.
        #[arg(long, value_parser = digest, required_unless_present = "signature_only")]
        digest: Option<Sha256Digest>,
        /// The grant id the approval must name.
        #[arg(long, required_unless_present = "signature_only")]
        grant_id: Option<String>,
        /// Check only that a key in the keyring signed it: not the proposal, the grant, the
        /// decision or the times (the output lists what was not checked).
        #[arg(long, conflicts_with_all = ["digest", "grant_id", "at", "max_lifetime"])]
        signature_only: bool,
        /// Judge the times as of this instant (ms since the Unix epoch) instead of now.
        #[arg(long, value_name = "MS", allow_negative_numbers = true,
              value_parser = clap::value_parser!(i64).range(-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER))]
        at: Option<i64>,
        /// The longest validity accepted, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = MAX_TTL_SECS, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u64).range(1..=MAX_TTL_SECS))]
        max_lifetime: u64,
    },
}

/// One day: the hosts' default maximum statement lifetime.
const MAX_TTL_SECS: u64 = 24 * 3600;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Decision {
    Approve,
    Deny,
}

fn digest(text: &str) -> Result<Sha256Digest, String> {
    text.parse().map_err(|e| format!("{e}"))
}

fn non_blank(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("must not be blank".into());
    }
    Ok(text.to_owned())
}

/// A failure and its exit code.
struct Failure(u8, String);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Keygen { key_id, key_file } => keygen(&key_id, &key_file),
        Command::Public { key_file } => read_key(&key_file).map(|k| println!("{}", k.public_entry())),
        Command::Sign {
            key_file,
            digest,
            grant_id,
            decision,
            ttl,
            reason,
        } => sign(&key_file, digest, &grant_id, decision, ttl, reason),
        Command::Verify {
            keyring,
            statement,
            digest,
            grant_id,
            signature_only,
            at,
            max_lifetime,
        } => match (digest, grant_id) {
            _ if signature_only => verify_signature(&keyring, &statement),
            (Some(digest), Some(grant_id)) => verify(
                &keyring,
                &statement,
                &For {
                    digest,
                    grant_id,
                    at,
                    max_lifetime,
                },
            ),
            // clap requires both unless --signature-only is given.
            _ => Err(Failure(2, "verify needs --digest and --grant-id".into())),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, message)) => {
            eprintln!("aml-approval: {message}");
            ExitCode::from(code)
        }
    }
}

fn read(file: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(file).map_err(|e| Failure(1, format!("cannot read {}: {e}", file.display())))
}

fn read_key(file: &Path) -> Result<ApproverKey, Failure> {
    ApproverKey::from_json(&read(file)?).map_err(|e| Failure(1, format!("{}: {e}", file.display())))
}

fn keygen(key_id: &str, file: &Path) -> Result<(), Failure> {
    if file.exists() {
        return Err(Failure(
            1,
            format!("{} exists; refusing to overwrite a key", file.display()),
        ));
    }
    let key = ApproverKey::generate(key_id).map_err(|e| match e {
        KeyError::BlankKeyId | KeyError::UnreadableKeyId { .. } => {
            Failure(2, format!("invalid value for '<KEY_ID>': {e}"))
        }
        e => Failure(1, e.to_string()),
    })?;
    write_private(file, &key.to_json())?;
    println!("{}", key.public_entry());
    Ok(())
}

#[cfg(unix)]
fn write_private(file: &Path, text: &str) -> Result<(), Failure> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .map_err(|e| Failure(1, format!("cannot create {}: {e}", file.display())))?;
    f.write_all(text.as_bytes())
        .map_err(|e| Failure(1, format!("cannot write {}: {e}", file.display())))
}

#[cfg(not(unix))]
fn write_private(file: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(file, text).map_err(|e| Failure(1, format!("cannot write {}: {e}", file.display())))
}

fn sign(
    file: &Path,
    digest: Sha256Digest,
    grant: &str,
    decision: Decision,
    ttl_secs: u64,
    reason: Option<String>,
) -> Result<(), Failure> {
    let key = read_key(file)?;
    let decision = match decision {
        Decision::Approve => StatementDecision::Approve,
        Decision::Deny => StatementDecision::Deny,
    };
    let validity = Validity::lasting(SystemClock.now_ms(), Duration::from_secs(ttl_secs))
        .map_err(|e| Failure(1, e.to_string()))?;
    let mut statement = Statement::new(digest, grant, key.key_id(), decision, validity);
    if let Some(reason) = reason {
        statement = statement
            .with_reason(reason)
            .map_err(|e| Failure(2, format!("invalid value for '--reason <TEXT>': {e}")))?;
    }
    let signed = statement.sign(&key).map_err(|e| Failure(1, e.to_string()))?;
    println!("{}", signed.to_value());
    Ok(())
}

/// What an approval must be for, and when and how long it may count.
struct For {
    digest: Sha256Digest,
    grant_id: String,
    at: Option<i64>,
    max_lifetime: u64,
}

/// The keyring at `keyring`, the statement at `statement`, and that statement once a key in
/// the keyring is shown to have signed it.
fn signed_by_keyring(keyring: &Path, statement: &Path) -> Result<SignedStatement, Failure> {
    let ring =
        Keyring::from_json(&read(keyring)?).map_err(|e| Failure(1, format!("{}: {e}", keyring.display())))?;
    let name = statement.display();
    let signed =
        SignedStatement::from_json(&read(statement)?).map_err(|e| Failure(3, format!("{name}: {e}")))?;
    ring.verify(&signed).map_err(|e| {
        let code = match e {
            StatementError::UnknownKey(_) | StatementError::BadSignature => 4,
            _ => 3,
        };
        Failure(code, format!("{name}: {e}"))
    })?;
    Ok(signed)
}

fn verify(keyring: &Path, statement: &Path, want: &For) -> Result<(), Failure> {
    let signed = signed_by_keyring(keyring, statement)?;
    let s = signed.statement();
    let name = statement.display();
    let now = want.at.unwrap_or_else(|| SystemClock.now_ms());
    let max_lifetime = want.max_lifetime;
    let rules = StatementRules {
        max_lifetime: Duration::from_secs(max_lifetime),
        ..StatementRules::default()
    };
    let validity = s.validity();
    if let Err(refusal) = s.check(now, &rules, Some(want.digest), Some(&want.grant_id)) {
        let (code, why) = match refusal {
            StatementRefusal::OtherProposal => (8, format!("it decides proposal {}", s.proposal_sha256())),
            StatementRefusal::OtherGrant => (8, format!("it names grant {}", quoted(s.grant_id()))),
            StatementRefusal::Denied => match s.reason() {
                Some(reason) => (5, format!("the approver denied it: {}", quoted(reason))),
                None => (5, "the approver denied it".to_owned()),
            },
            StatementRefusal::IssuedInTheFuture => (
                7,
                format!(
                    "issued in the future (issued_at_ms {}, now {now})",
                    validity.issued_at_ms()
                ),
            ),
            StatementRefusal::LifetimeTooLong => (
                7,
                format!(
                    "valid for {} ms, longer than --max-lifetime {max_lifetime} s",
                    validity.expires_at_ms() - validity.issued_at_ms()
                ),
            ),
            StatementRefusal::Expired => (6, format!("expired at {} (now {now})", validity.expires_at_ms())),
            _ => (3, refusal.to_string()),
        };
        return Err(Failure(code, format!("{name}: {why} [{refusal}]")));
    }
    println!(
        "valid approval: proposal {} (= --digest), grant {} (= --grant-id), signed by {} (in the keyring), \
         issued at {}, current at {now}, until {}",
        s.proposal_sha256(),
        quoted(s.grant_id()),
        quoted(s.approver_key_id()),
        validity.issued_at_ms(),
        validity.expires_at_ms()
    );
    Ok(())
}

fn verify_signature(keyring: &Path, statement: &Path) -> Result<(), Failure> {
    let signed = signed_by_keyring(keyring, statement)?;
    let s = signed.statement();
    println!(
        "signature valid: signed by {} (in the keyring); not checked (--signature-only): \
         proposal {}, grant {}, decision {}, issued and expiry times",
        quoted(s.approver_key_id()),
        s.proposal_sha256(),
        quoted(s.grant_id()),
        s.decision()
    );
    Ok(())
}

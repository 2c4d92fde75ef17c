//! `aml-approval`: approver keys, offline signing and verification of approval statements.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use aml_approval::{
    ApproverKey, Keyring, SignedStatement, Statement, StatementDecision, StatementError, StatementRefusal,
    StatementRules, Validity, MAX_SAFE_INTEGER,
};
use aml_core::Sha256Digest;
use aml_grants::{Clock, SystemClock};
use clap::{Parser, Subcommand, ValueEnum};

const EXIT_CODES: &str = "\
Exit codes:
  0  success; for `verify`: a valid, current approval
  1  a file cannot be read or written, or is not what it should be (key file, keyring)
  2  usage error (unknown command or option, missing or malformed argument)
  3  verify: the statement is malformed (not an aml-approval-statement/1 statement)
  4  verify: the signature does not verify, or the key is not in the keyring
  5  verify: the statement denies
  6  verify: the statement has expired
  7  verify: issued in the future, or valid for longer than --max-lifetime
  8  verify: it decides another proposal or grant than --digest / --grant-id

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
    },
    /// Check a statement against a keyring; exit 0 only for a valid, current approval.
    #[command(after_help = EXIT_CODES)]
    Verify {
        /// The keyring: {"keys": [{"key_id", "public_key"}]}.
        keyring: PathBuf,
        /// The signed statement (JSON).
        statement: PathBuf,
        /// Also require this proposal digest.
        #[arg(long, value_parser = digest)]
        digest: Option<Sha256Digest>,
        /// Also require this grant id.
        #[arg(long)]
        grant_id: Option<String>,
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
        } => sign(&key_file, digest, &grant_id, decision, ttl),
        Command::Verify {
            keyring,
            statement,
            digest,
            grant_id,
            at,
            max_lifetime,
        } => verify(
            &keyring,
            &statement,
            digest,
            grant_id.as_deref(),
            at,
            max_lifetime,
        ),
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
    let key = ApproverKey::generate(key_id).map_err(|e| Failure(1, e.to_string()))?;
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
) -> Result<(), Failure> {
    let key = read_key(file)?;
    let decision = match decision {
        Decision::Approve => StatementDecision::Approve,
        Decision::Deny => StatementDecision::Deny,
    };
    let validity = Validity::lasting(SystemClock.now_ms(), Duration::from_secs(ttl_secs))
        .map_err(|e| Failure(1, e.to_string()))?;
    let signed = Statement::new(digest, grant, key.key_id(), decision, validity)
        .sign(&key)
        .map_err(|e| Failure(1, e.to_string()))?;
    println!("{}", signed.to_value());
    Ok(())
}

fn verify(
    keyring: &Path,
    statement: &Path,
    digest: Option<Sha256Digest>,
    grant_id: Option<&str>,
    at: Option<i64>,
    max_lifetime: u64,
) -> Result<(), Failure> {
    let ring =
        Keyring::from_json(&read(keyring)?).map_err(|e| Failure(1, format!("{}: {e}", keyring.display())))?;
    let name = statement.display();
    let signed =
        SignedStatement::from_json(&read(statement)?).map_err(|e| Failure(3, format!("{name}: {e}")))?;
    let s = ring.verify(&signed).map_err(|e| {
        let code = match e {
            StatementError::UnknownKey(_) | StatementError::BadSignature => 4,
            _ => 3,
        };
        Failure(code, format!("{name}: {e}"))
    })?;
    let now = at.unwrap_or_else(|| SystemClock.now_ms());
    let rules = StatementRules {
        max_lifetime: Duration::from_secs(max_lifetime),
        ..StatementRules::default()
    };
    let validity = s.validity();
    if let Err(refusal) = s.check(now, &rules, digest, grant_id) {
        let (code, why) = match refusal {
            StatementRefusal::OtherProposal => (8, format!("it decides proposal {}", s.proposal_sha256())),
            StatementRefusal::OtherGrant => (8, format!("it names grant {:?}", s.grant_id())),
            StatementRefusal::Denied => (5, "the approver denied it".to_owned()),
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
        "valid: approve of {} for grant {} by {}, until {}",
        s.proposal_sha256(),
        s.grant_id(),
        s.approver_key_id(),
        validity.expires_at_ms()
    );
    Ok(())
}

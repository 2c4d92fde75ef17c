//! Approver keys and the host's keyring.
//!
//! Two JSON files, never to be confused:
//!
//! - an **approver key file** (private, mode 0600), written by `aml-approval keygen`:
//!   `{"key_id": "alice", "secret_key": "<64 lowercase hex: the Ed25519 seed>"}`;
//! - a **keyring** (public), which the host reads to verify statements:
//!   `{"keys": [{"key_id": "alice", "public_key": "<64 lowercase hex>"}, ...]}`. Each entry
//!   is what `aml-approval keygen` and `aml-approval public` print. Key ids are unique, not
//!   blank, and free of control, bidirectional and invisible characters (they are shown to
//!   people); weak public keys (small-order points, which verify forged signatures) are
//!   refused, and so are weak seeds in key files.

use std::collections::BTreeMap;

use aml_core::ObjectOnly;
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::display::{hidden, quoted};
use crate::hex;
use crate::statement::{SignedStatement, Statement, StatementError};

/// A seed has at least this many different byte values. 32 random bytes have fewer with a
/// probability below 10^-30; all zeros, a repeated byte or a short repeated pattern have
/// fewer.
pub const MIN_DISTINCT_SEED_BYTES: usize = 8;

/// Refuses a seed anyone could guess.
fn strong(seed: [u8; 32]) -> Result<[u8; 32], KeyError> {
    let mut seen = [false; 256];
    seed.iter().for_each(|&b| seen[usize::from(b)] = true);
    if seen.iter().filter(|&&s| s).count() < MIN_DISTINCT_SEED_BYTES {
        return Err(KeyError::WeakSeed);
    }
    Ok(seed)
}

/// A key file or keyring that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Not a keyring.
    #[error("not a keyring ({{\"keys\": [{{\"key_id\", \"public_key\"}}]}}): {0}")]
    NotAKeyring(String),
    /// An approver key file was given where a keyring belongs.
    #[error(
        "this is an approver key file (it holds a secret key), not a keyring; \
         a keyring is {{\"keys\": [{{\"key_id\", \"public_key\"}}]}}, and \
         `aml-approval public KEY_FILE` prints this key's entry for it"
    )]
    KeyFileNotKeyring,
    /// A single keyring entry was given where a keyring belongs.
    #[error("this is one keyring entry, not a keyring; put it in a list: {{\"keys\": [ENTRY]}}")]
    EntryNotKeyring,
    /// Not an approver key file.
    #[error("not an approver key file ({{\"key_id\", \"secret_key\"}}): {0}")]
    NotAKeyFile(String),
    /// A key id that is blank.
    #[error("a key id must not be blank")]
    BlankKeyId,
    /// A key id with a character that would make it read differently from its bytes.
    #[error(
        "key id {} contains U+{character:04X}, a control, bidirectional or invisible character; \
         key ids are shown to people and must read as they are written",
        quoted(.key_id)
    )]
    UnreadableKeyId {
        /// The key id.
        key_id: String,
        /// The first such character.
        character: u32,
    },
    /// A key id that appears twice in a keyring.
    #[error("key id {} appears twice", quoted(.0))]
    DuplicateKeyId(String),
    /// A public key that is not 64 lowercase hex, or not a point on the curve.
    #[error("public key of {} is not an Ed25519 public key (64 lowercase hex)", quoted(.0))]
    BadPublicKey(String),
    /// A small-order public key: with it, a signature of all zeros verifies any statement.
    #[error("public key of {} is weak (a small-order point) and would verify forged statements", quoted(.0))]
    WeakKey(String),
    /// A seed anyone could guess (all zeros, one byte repeated, a short pattern).
    #[error(
        "the secret key is a weak seed (fewer than {MIN_DISTINCT_SEED_BYTES} different byte values, \
         such as all zeros): anyone could sign with it; make a new key with `aml-approval keygen`"
    )]
    WeakSeed,
    /// No randomness for a new key.
    #[error("no randomness for a new key: {0}")]
    Random(#[source] getrandom::Error),
}

/// An approver's signing key and its id.
pub struct ApproverKey {
    key_id: String,
    signing: SigningKey,
}

impl core::fmt::Debug for ApproverKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ApproverKey")
            .field("key_id", &self.key_id)
            .field("public_key", &self.public_key_hex())
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    key_id: String,
    secret_key: String,
}

/// What a JSON document that is not the expected kind of key file looks like instead.
fn looks_like(value: &Value) -> Option<&'static str> {
    let object = value.as_object()?;
    let has = |k: &str| object.contains_key(k);
    if has("secret_key") {
        Some("key file")
    } else if has("public_key") && has("key_id") {
        Some("keyring entry")
    } else if has("keys") {
        Some("keyring")
    } else if has("signature") || has("protocol") {
        Some("statement")
    } else {
        None
    }
}

impl ApproverKey {
    /// A new key from the operating system's randomness (refused, rather than used, should
    /// the randomness ever give a weak seed).
    pub fn generate(key_id: impl Into<String>) -> Result<Self, KeyError> {
        let key_id = checked_key_id(key_id.into())?;
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(KeyError::Random)?;
        Ok(ApproverKey {
            key_id,
            signing: SigningKey::from_bytes(&strong(seed)?),
        })
    }

    /// The key's id.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public key, 64 lowercase hex.
    pub fn public_key_hex(&self) -> String {
        hex::encode(self.signing.verifying_key().as_bytes())
    }

    pub(crate) fn signing_key(&self) -> &SigningKey {
        &self.signing
    }

    /// The key file: `{"key_id", "secret_key"}` (keep it private).
    pub fn to_json(&self) -> String {
        json!({"key_id": self.key_id, "secret_key": hex::encode(self.signing.as_bytes())}).to_string()
    }

    /// Reads a key file.
    pub fn from_json(text: &str) -> Result<Self, KeyError> {
        let value = aml_core::strict::parse_str(text).map_err(|e| KeyError::NotAKeyFile(e.to_string()))?;
        match looks_like(&value) {
            Some("key file") | None => {}
            Some(other) => return Err(KeyError::NotAKeyFile(format!("this looks like a {other}"))),
        }
        let ObjectOnly(file): ObjectOnly<KeyFile> =
            serde_json::from_value(value).map_err(|e| KeyError::NotAKeyFile(e.to_string()))?;
        let seed = hex::decode::<32>(&file.secret_key)
            .ok_or_else(|| KeyError::NotAKeyFile("secret_key must be 64 lowercase hex".into()))?;
        Ok(ApproverKey {
            key_id: checked_key_id(file.key_id)?,
            signing: SigningKey::from_bytes(&strong(seed)?),
        })
    }

    /// Signs `message` (Ed25519, RFC 8032): the signature, 128 lowercase hex. For messages
    /// of another protocol than approval statements, such as the gate's audit checkpoints;
    /// the message must name its protocol, so that it can never read as a statement.
    pub fn sign_message(&self, message: &[u8]) -> String {
        use ed25519_dalek::Signer;
        hex::encode(&self.signing.sign(message).to_bytes())
    }

    /// This key's keyring entry: `{"key_id", "public_key"}`.
    pub fn public_entry(&self) -> Value {
        json!({"key_id": self.key_id, "public_key": self.public_key_hex()})
    }
}

/// A key id that is not blank and reads as its bytes (see [`crate::display::hidden`]).
fn checked_key_id(key_id: String) -> Result<String, KeyError> {
    if key_id.trim().is_empty() {
        return Err(KeyError::BlankKeyId);
    }
    if let Some(c) = key_id.chars().find(|&c| hidden(c)) {
        return Err(KeyError::UnreadableKeyId {
            character: u32::from(c),
            key_id,
        });
    }
    Ok(key_id)
}

/// The host's approver public keys, by key id.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    keys: BTreeMap<String, VerifyingKey>,
}

impl Keyring {
    /// An empty keyring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a public key (64 lowercase hex). Blank or repeated ids, points off the curve
    /// and weak (small-order) keys are refused.
    pub fn with_key(mut self, key_id: impl Into<String>, public_key_hex: &str) -> Result<Self, KeyError> {
        let key_id = checked_key_id(key_id.into())?;
        let key = hex::decode::<32>(public_key_hex)
            .and_then(|bytes| VerifyingKey::from_bytes(&bytes).ok())
            .ok_or_else(|| KeyError::BadPublicKey(key_id.clone()))?;
        if key.is_weak() {
            return Err(KeyError::WeakKey(key_id));
        }
        if self.keys.contains_key(&key_id) {
            return Err(KeyError::DuplicateKeyId(key_id));
        }
        self.keys.insert(key_id, key);
        Ok(self)
    }

    /// Adds `key`'s public half.
    pub fn with_approver(self, key: &ApproverKey) -> Result<Self, KeyError> {
        let public = key.public_key_hex();
        self.with_key(key.key_id(), &public)
    }

    /// Reads `{"keys": [{"key_id", "public_key"}]}`, saying so when given a key file or a
    /// single entry instead.
    pub fn from_json(text: &str) -> Result<Self, KeyError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Entry {
            key_id: String,
            public_key: String,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            keys: Vec<ObjectOnly<Entry>>,
        }
        let value = aml_core::strict::parse_str(text).map_err(|e| KeyError::NotAKeyring(e.to_string()))?;
        match looks_like(&value) {
            Some("key file") => return Err(KeyError::KeyFileNotKeyring),
            Some("keyring entry") => return Err(KeyError::EntryNotKeyring),
            Some("statement") => return Err(KeyError::NotAKeyring("this looks like a statement".into())),
            _ => {}
        }
        // Objects only: serde would also read a struct from an array of its fields.
        let ObjectOnly(file): ObjectOnly<File> =
            serde_json::from_value(value).map_err(|e| KeyError::NotAKeyring(e.to_string()))?;
        file.keys
            .into_iter()
            .try_fold(Keyring::new(), |ring, ObjectOnly(e)| {
                ring.with_key(e.key_id, &e.public_key)
            })
    }

    /// Whether the keyring holds no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Checks, strictly, that `signature` (128 lowercase hex, as
    /// [`ApproverKey::sign_message`] writes it) is `key_id`'s signature of `message`.
    pub fn verify_message(
        &self,
        key_id: &str,
        message: &[u8],
        signature: &str,
    ) -> Result<(), StatementError> {
        let key = self
            .keys
            .get(key_id)
            .ok_or_else(|| StatementError::UnknownKey(key_id.to_owned()))?;
        let bytes = hex::decode::<64>(signature).ok_or(StatementError::BadSignature)?;
        key.verify_strict(message, &ed25519_dalek::Signature::from_bytes(&bytes))
            .map_err(|_| StatementError::BadSignature)
    }

    /// Checks, strictly (RFC 8032 with canonical encodings and no small-order points), that
    /// `signed` was signed by the key it names; its statement.
    pub fn verify<'a>(&self, signed: &'a SignedStatement) -> Result<&'a Statement, StatementError> {
        let statement = signed.statement();
        let key = self
            .keys
            .get(statement.approver_key_id())
            .ok_or_else(|| StatementError::UnknownKey(statement.approver_key_id().to_owned()))?;
        key.verify_strict(&statement.signing_bytes()?, &signed.signature())
            .map_err(|_| StatementError::BadSignature)?;
        Ok(statement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statement::{StatementDecision, Validity};

    fn statement(key_id: &str) -> Statement {
        Statement::new(
            "ab".repeat(32).parse().unwrap(),
            "g1",
            key_id,
            StatementDecision::Approve,
            Validity::new(1, 2).unwrap(),
        )
    }

    #[test]
    fn messages_verify_only_with_the_key_that_signed_them() {
        let alice = ApproverKey::generate("alice").unwrap();
        let mallory = ApproverKey::generate("alice").unwrap();
        let ring = Keyring::new().with_approver(&alice).unwrap();
        let signature = alice.sign_message(b"checkpoint");
        assert_eq!(signature.len(), 128);
        assert!(ring.verify_message("alice", b"checkpoint", &signature).is_ok());
        assert!(ring.verify_message("alice", b"checkpoinT", &signature).is_err());
        let forged = mallory.sign_message(b"checkpoint");
        assert!(matches!(
            ring.verify_message("alice", b"checkpoint", &forged),
            Err(StatementError::BadSignature)
        ));
        assert!(matches!(
            ring.verify_message("bob", b"checkpoint", &signature),
            Err(StatementError::UnknownKey(_))
        ));
        assert!(ring.verify_message("alice", b"checkpoint", "zz").is_err());
    }

    /// Fuzzing finding: serde reads a struct from an array of its fields, so key files,
    /// keyrings and keyring entries written as arrays were accepted.
    #[test]
    fn key_files_and_keyrings_written_as_arrays_are_refused() {
        let alice = ApproverKey::generate("alice").unwrap();
        let public = alice.public_key_hex();
        for text in [
            format!(r#"{{"keys": [["alice", "{public}"]]}}"#),
            format!(r#"[[["alice", "{public}"]]]"#),
            format!(r#"[[{{"key_id": "alice", "public_key": "{public}"}}]]"#),
        ] {
            let err = Keyring::from_json(&text).unwrap_err();
            assert!(
                matches!(&err, KeyError::NotAKeyring(d) if d.contains("a JSON object")),
                "{text}: {err}"
            );
        }
        let ring = format!(r#"{{"keys": [{{"key_id": "alice", "public_key": "{public}"}}]}}"#);
        assert!(!Keyring::from_json(&ring).unwrap().is_empty());

        let file: Value = serde_json::from_str(&alice.to_json()).unwrap();
        let array = serde_json::json!([file["key_id"], file["secret_key"]]).to_string();
        let err = ApproverKey::from_json(&array).unwrap_err();
        assert!(
            matches!(&err, KeyError::NotAKeyFile(d) if d.contains("a JSON object")),
            "{err}"
        );
        assert_eq!(
            ApproverKey::from_json(&alice.to_json()).unwrap().public_key_hex(),
            public
        );
    }

    #[test]
    fn signed_statements_verify_and_tampering_does_not() {
        let alice = ApproverKey::generate("alice").unwrap();
        let ring = Keyring::new().with_approver(&alice).unwrap();
        let signed = statement("alice").sign(&alice).unwrap();
        assert_eq!(ring.verify(&signed).unwrap().grant_id(), "g1");
        let text = signed.to_value().to_string();
        assert_eq!(SignedStatement::from_json(&text).unwrap(), signed);

        let tampered = text.replace("\"approve\"", "\"deny\"");
        let tampered = SignedStatement::from_json(&tampered).unwrap();
        assert_eq!(ring.verify(&tampered).unwrap_err(), StatementError::BadSignature);
        let mallory = ApproverKey::generate("alice").unwrap();
        let forged = statement("alice").sign(&mallory).unwrap();
        assert_eq!(ring.verify(&forged).unwrap_err(), StatementError::BadSignature);
        let stranger = ApproverKey::generate("bob").unwrap();
        let unknown = statement("bob").sign(&stranger).unwrap();
        assert!(matches!(
            ring.verify(&unknown).unwrap_err(),
            StatementError::UnknownKey(_)
        ));
    }

    /// The identity point as a public key, with R = identity and S = 0, satisfies the
    /// cofactorless equation for every message: such a key must never enter a keyring.
    #[test]
    fn the_identity_point_and_other_weak_keys_are_refused() {
        let identity = format!("01{}", "00".repeat(31));
        assert_eq!(
            Keyring::new().with_key("mallory", &identity).unwrap_err(),
            KeyError::WeakKey("mallory".into())
        );
        // The forged signature would verify under the plain (non-strict) check.
        let key = VerifyingKey::from_bytes(&hex::decode::<32>(&identity).unwrap()).unwrap();
        let mut forged = [0u8; 64];
        forged[0] = 1;
        let any = statement("mallory").signing_bytes().unwrap();
        use ed25519_dalek::Verifier;
        assert!(key
            .verify(&any, &ed25519_dalek::Signature::from_bytes(&forged))
            .is_ok());
        assert!(key
            .verify_strict(&any, &ed25519_dalek::Signature::from_bytes(&forged))
            .is_err());
        // Another small-order point (order 2: y = -1).
        let order_two = format!("ec{}7f", "ff".repeat(30));
        assert!(matches!(
            Keyring::new().with_key("m", &order_two),
            Err(KeyError::WeakKey(_))
        ));
        let text = format!(r#"{{"keys":[{{"key_id":"mallory","public_key":"{identity}"}}]}}"#);
        assert!(matches!(Keyring::from_json(&text), Err(KeyError::WeakKey(_))));
    }

    #[test]
    fn key_files_and_keyrings_are_told_apart() {
        let alice = ApproverKey::generate("alice").unwrap();
        let again = ApproverKey::from_json(&alice.to_json()).unwrap();
        assert_eq!(again.public_key_hex(), alice.public_key_hex());
        assert_eq!(
            Keyring::from_json(&alice.to_json()).unwrap_err(),
            KeyError::KeyFileNotKeyring
        );
        assert_eq!(
            Keyring::from_json(&alice.public_entry().to_string()).unwrap_err(),
            KeyError::EntryNotKeyring
        );
        let ring = json!({"keys": [alice.public_entry()]}).to_string();
        assert!(Keyring::from_json(&ring).is_ok());
        assert!(matches!(
            ApproverKey::from_json(&ring),
            Err(KeyError::NotAKeyFile(_))
        ));
        assert!(ApproverKey::from_json(r#"{"key_id":"x","secret_key":"zz"}"#).is_err());
        assert_eq!(ApproverKey::generate(" ").unwrap_err(), KeyError::BlankKeyId);
        let twice = json!({"keys": [alice.public_entry(), alice.public_entry()]}).to_string();
        assert_eq!(
            Keyring::from_json(&twice).unwrap_err(),
            KeyError::DuplicateKeyId("alice".into())
        );
        let bad = json!({"keys": [{"key_id": "a", "public_key": "zz"}]}).to_string();
        assert!(matches!(Keyring::from_json(&bad), Err(KeyError::BadPublicKey(_))));
    }

    #[test]
    fn weak_seeds_and_unreadable_key_ids_are_refused() {
        for seed in [[0u8; 32], [0xff; 32], *b"abababababababababababababababab"] {
            assert_eq!(strong(seed), Err(KeyError::WeakSeed), "{seed:?}");
            let file = json!({"key_id": "alice", "secret_key": hex::encode(&seed)}).to_string();
            assert_eq!(ApproverKey::from_json(&file).unwrap_err(), KeyError::WeakSeed);
        }
        let seven: Vec<u8> = (0..32).map(|i| i % 7).collect();
        assert!(strong(seven.try_into().unwrap()).is_err());
        let eight: Vec<u8> = (0..32).map(|i| i % 8).collect();
        assert!(strong(eight.try_into().unwrap()).is_ok());
        let generated = ApproverKey::generate("alice").unwrap();
        assert!(ApproverKey::from_json(&generated.to_json()).is_ok());

        for (id, character) in [
            ("a\u{202e}b", 0x202E),
            ("a\u{1b}[2J", 0x1B),
            ("\u{feff}x", 0xFEFF),
        ] {
            let err = ApproverKey::generate(id).unwrap_err();
            assert_eq!(
                err,
                KeyError::UnreadableKeyId {
                    key_id: id.into(),
                    character
                }
            );
            let message = err.to_string();
            assert!(!message.chars().any(hidden), "{message:?}");
            assert!(message.contains(&format!("U+{character:04X}")), "{message}");
            assert!(Keyring::new().with_key(id, &generated.public_key_hex()).is_err());
            let file = json!({"key_id": id, "secret_key": "5402442e4393df143b229db324cd734fa4b8fd06ce84a6f3453684eb8f2b6bff"});
            assert!(matches!(
                ApproverKey::from_json(&file.to_string()),
                Err(KeyError::UnreadableKeyId { .. })
            ));
        }
        assert!(ApproverKey::generate("alice@example.test (laptop)").is_ok());
    }
}

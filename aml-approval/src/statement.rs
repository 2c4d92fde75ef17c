//! Signed approval statements (`aml-approval-statement/1`).
//!
//! A statement is a JSON object with exactly these keys:
//!
//! | key | value |
//! |---|---|
//! | `protocol` | `"aml-approval-statement/1"` |
//! | `proposal_sha256` | the frozen proposal's digest (64 lowercase hex) |
//! | `grant_id` | the one-use grant this decision issues |
//! | `approver_key_id` | which key in the host's keyring signed it |
//! | `decision` | `"approve"` or `"deny"` |
//! | `issued_at_ms`, `expires_at_ms` | integers, milliseconds since the Unix epoch |
//! | `signature` | Ed25519 signature, 128 lowercase hex |
//!
//! The signature is over the UTF-8 bytes of the statement *without* `signature`, in the
//! canonical JSON of `aml-core` (keys sorted by UTF-16 code units, written as
//! `JSON.stringify` writes them — for these keys, plain sorted-key JSON with no spaces).
//! Another language produces it by sorting the seven keys, serializing compactly, and
//! signing those bytes with Ed25519.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::hex;

/// The statement protocol string.
pub const STATEMENT_PROTOCOL: &str = "aml-approval-statement/1";

/// `"approve"` or `"deny"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// `"approve"`
    Approve,
    /// `"deny"`
    Deny,
}

/// The signed fields of a statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    /// Always [`STATEMENT_PROTOCOL`].
    pub protocol: String,
    /// The approved (or denied) proposal digest.
    pub proposal_sha256: String,
    /// The one-use grant this decision issues.
    pub grant_id: String,
    /// The signing key's id.
    pub approver_key_id: String,
    /// The decision.
    pub decision: Verdict,
    /// When it was made.
    pub issued_at_ms: i64,
    /// When it stops counting.
    pub expires_at_ms: i64,
}

/// A statement with its signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedStatement {
    /// The signed fields.
    #[serde(flatten)]
    pub statement: Statement,
    /// Ed25519 over the canonical JSON of `statement`, lowercase hex.
    pub signature: String,
}

/// Why a statement is not proof of a decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StatementError {
    /// Not a statement of this protocol.
    #[error("not an {STATEMENT_PROTOCOL} statement: {0}")]
    Malformed(String),
    /// Signed by a key the host does not know.
    #[error("unknown approver key {0:?}")]
    UnknownKey(String),
    /// The signature does not verify.
    #[error("the signature does not verify")]
    BadSignature,
}

impl Statement {
    /// The bytes that are signed.
    pub fn signing_bytes(&self) -> Result<Vec<u8>, StatementError> {
        let value = serde_json::to_value(self).map_err(|e| StatementError::Malformed(e.to_string()))?;
        aml_core::canonical::to_canonical_string(&value)
            .map(String::into_bytes)
            .map_err(|e| StatementError::Malformed(e.to_string()))
    }

    /// Signs it.
    pub fn sign(self, key: &ApproverKey) -> Result<SignedStatement, StatementError> {
        let signature = key.signing.sign(&self.signing_bytes()?);
        Ok(SignedStatement {
            statement: self,
            signature: hex::encode(&signature.to_bytes()),
        })
    }
}

impl SignedStatement {
    /// Parses a statement from JSON text, strictly.
    pub fn from_json(text: &str) -> Result<Self, StatementError> {
        let value =
            aml_core::strict::parse_str(text).map_err(|e| StatementError::Malformed(e.to_string()))?;
        let signed: SignedStatement =
            serde_json::from_value(value).map_err(|e| StatementError::Malformed(e.to_string()))?;
        if signed.statement.protocol != STATEMENT_PROTOCOL {
            return Err(StatementError::Malformed(format!(
                "protocol {:?}",
                signed.statement.protocol
            )));
        }
        Ok(signed)
    }

    /// The statement as JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
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

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    key_id: String,
    secret_key: String,
}

impl ApproverKey {
    /// A new key from the operating system's randomness.
    pub fn generate(key_id: impl Into<String>) -> Result<Self, StatementError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| StatementError::Malformed(format!("no randomness: {e}")))?;
        Ok(ApproverKey {
            key_id: key_id.into(),
            signing: SigningKey::from_bytes(&seed),
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

    /// The key file: `{"key_id", "secret_key"}` (keep it private).
    pub fn to_json(&self) -> String {
        json!({"key_id": self.key_id, "secret_key": hex::encode(self.signing.as_bytes())}).to_string()
    }

    /// Reads a key file.
    pub fn from_json(text: &str) -> Result<Self, StatementError> {
        let file: KeyFile =
            serde_json::from_str(text).map_err(|e| StatementError::Malformed(e.to_string()))?;
        let seed = hex::decode::<32>(&file.secret_key)
            .ok_or_else(|| StatementError::Malformed("secret_key must be 64 lowercase hex".into()))?;
        Ok(ApproverKey {
            key_id: file.key_id,
            signing: SigningKey::from_bytes(&seed),
        })
    }

    /// This key's entry for a [`Keyring`].
    pub fn public_entry(&self) -> (String, String) {
        (self.key_id.clone(), self.public_key_hex())
    }
}

/// The host's approver public keys, by key id.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    keys: std::collections::BTreeMap<String, VerifyingKey>,
}

impl Keyring {
    /// An empty keyring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a public key (64 lowercase hex).
    pub fn with_key(
        mut self,
        key_id: impl Into<String>,
        public_key_hex: &str,
    ) -> Result<Self, StatementError> {
        let bytes = hex::decode::<32>(public_key_hex)
            .ok_or_else(|| StatementError::Malformed("public key must be 64 lowercase hex".into()))?;
        let key = VerifyingKey::from_bytes(&bytes).map_err(|e| StatementError::Malformed(e.to_string()))?;
        self.keys.insert(key_id.into(), key);
        Ok(self)
    }

    /// Reads `{"keys": [{"key_id", "public_key"}]}`.
    pub fn from_json(text: &str) -> Result<Self, StatementError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Entry {
            key_id: String,
            public_key: String,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            keys: Vec<Entry>,
        }
        let file: File = serde_json::from_str(text).map_err(|e| StatementError::Malformed(e.to_string()))?;
        file.keys
            .into_iter()
            .try_fold(Keyring::new(), |ring, e| ring.with_key(e.key_id, &e.public_key))
    }

    /// Checks that `signed` was signed by the key it names, and returns its statement.
    pub fn verify<'a>(&self, signed: &'a SignedStatement) -> Result<&'a Statement, StatementError> {
        let statement = &signed.statement;
        if statement.protocol != STATEMENT_PROTOCOL {
            return Err(StatementError::Malformed(format!(
                "protocol {:?}",
                statement.protocol
            )));
        }
        let key = self
            .keys
            .get(&statement.approver_key_id)
            .ok_or_else(|| StatementError::UnknownKey(statement.approver_key_id.clone()))?;
        let bytes = hex::decode::<64>(&signed.signature).ok_or(StatementError::BadSignature)?;
        key.verify(&statement.signing_bytes()?, &Signature::from_bytes(&bytes))
            .map_err(|_| StatementError::BadSignature)?;
        Ok(statement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statement(key: &ApproverKey) -> Statement {
        Statement {
            protocol: STATEMENT_PROTOCOL.into(),
            proposal_sha256: "ab".repeat(32),
            grant_id: "g1".into(),
            approver_key_id: key.key_id().into(),
            decision: Verdict::Approve,
            issued_at_ms: 1,
            expires_at_ms: 2,
        }
    }

    #[test]
    fn signed_statements_verify_and_tampering_does_not() {
        let alice = ApproverKey::generate("alice").unwrap();
        let ring = Keyring::new().with_key("alice", &alice.public_key_hex()).unwrap();
        let signed = statement(&alice).sign(&alice).unwrap();
        assert_eq!(ring.verify(&signed).unwrap().grant_id, "g1");
        let text = signed.to_value().to_string();
        assert_eq!(SignedStatement::from_json(&text).unwrap(), signed);

        let mut tampered = signed.clone();
        tampered.statement.decision = Verdict::Deny;
        assert_eq!(ring.verify(&tampered).unwrap_err(), StatementError::BadSignature);
        let mallory = ApproverKey::generate("alice").unwrap();
        let forged = statement(&mallory).sign(&mallory).unwrap();
        assert_eq!(ring.verify(&forged).unwrap_err(), StatementError::BadSignature);
        let stranger = ApproverKey::generate("bob").unwrap();
        let unknown = statement(&stranger).sign(&stranger).unwrap();
        assert!(matches!(
            ring.verify(&unknown).unwrap_err(),
            StatementError::UnknownKey(_)
        ));
    }

    #[test]
    fn the_signed_bytes_are_sorted_compact_json() {
        let alice = ApproverKey::generate("alice").unwrap();
        let bytes = statement(&alice).signing_bytes().unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            format!(
                r#"{{"approver_key_id":"alice","decision":"approve","expires_at_ms":2,"grant_id":"g1","issued_at_ms":1,"proposal_sha256":"{}","protocol":"aml-approval-statement/1"}}"#,
                "ab".repeat(32)
            )
        );
    }

    #[test]
    fn key_files_round_trip_and_bad_input_is_refused() {
        let alice = ApproverKey::generate("alice").unwrap();
        let again = ApproverKey::from_json(&alice.to_json()).unwrap();
        assert_eq!(again.public_key_hex(), alice.public_key_hex());
        assert!(ApproverKey::from_json(r#"{"key_id":"x","secret_key":"zz"}"#).is_err());
        assert!(
            SignedStatement::from_json(r#"{"protocol":"aml-approval-statement/1","protocol":"x"}"#).is_err()
        );
        let ring = Keyring::from_json(&format!(
            r#"{{"keys":[{{"key_id":"alice","public_key":"{}"}}]}}"#,
            alice.public_key_hex()
        ));
        assert!(ring.is_ok());
    }
}

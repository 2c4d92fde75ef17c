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
//! | `issued_at_ms`, `expires_at_ms` | integers, milliseconds since the Unix epoch, each at most 2^53 − 1 in magnitude, `issued_at_ms` ≤ `expires_at_ms` |
//! | `reason` | optional, only with `"deny"`: why, in the approver's words (for the agent), 1 to 500 characters, none of them control, bidirectional or invisible |
//! | `signature` | Ed25519 signature, 128 lowercase hex |
//!
//! The signature is over the UTF-8 bytes of the statement *without* `signature`, in the
//! canonical JSON of `aml-core` (keys sorted by UTF-16 code units, written as
//! `JSON.stringify` writes them — for these keys, plain sorted-key JSON with no spaces).
//! Another language produces it by sorting the seven keys (eight with a `reason`),
//! serializing compactly, and signing those bytes with Ed25519. A statement without a
//! `reason` signs exactly the bytes it signed before reasons existed.
//!
//! Why the integer bound: canonical JSON writes every number as a double, as JavaScript
//! does, and a double holds integers exactly only up to 2^53. Beyond it two different
//! timestamps (…993 and …992) would be written, and signed, as the same bytes; such
//! statements are refused when signing and when verifying.

use core::fmt;
use std::time::Duration;

use aml_core::{ObjectOnly, Sha256Digest};
use ed25519_dalek::{Signature, Signer};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::hex;
use crate::keys::ApproverKey;

/// The statement protocol string.
pub const STATEMENT_PROTOCOL: &str = "aml-approval-statement/1";

/// The largest integer a statement carries: 2^53 − 1 (JavaScript's
/// `Number.MAX_SAFE_INTEGER`); the smallest is its negation.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// What the approver decided: `"approve"` or `"deny"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatementDecision {
    /// `"approve"`
    Approve,
    /// `"deny"`
    Deny,
}

impl StatementDecision {
    /// Every decision.
    pub const ALL: [StatementDecision; 2] = [StatementDecision::Approve, StatementDecision::Deny];

    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            StatementDecision::Approve => "approve",
            StatementDecision::Deny => "deny",
        }
    }
}

impl fmt::Display for StatementDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a statement is not a usable statement, or not proof of a decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StatementError {
    /// Not a statement of this protocol.
    #[error("not an {STATEMENT_PROTOCOL} statement: {0}")]
    Malformed(String),
    /// A timestamp JSON cannot carry exactly.
    #[error("{field} {value} is outside ±(2^53 − 1), so JSON cannot carry it exactly")]
    UnsafeInteger {
        /// `issued_at_ms` or `expires_at_ms`.
        field: &'static str,
        /// The value.
        value: i128,
    },
    /// Issued after it expires.
    #[error("issued_at_ms {issued_at_ms} is after expires_at_ms {expires_at_ms}")]
    IssuedAfterExpiry {
        /// When it says it was issued.
        issued_at_ms: i64,
        /// When it says it expires.
        expires_at_ms: i64,
    },
    /// Signed by a key the host does not know.
    #[error("unknown approver key {}", crate::display::quoted(.0))]
    UnknownKey(String),
    /// The signature does not verify.
    #[error("the signature does not verify")]
    BadSignature,
    /// A deny reason that cannot be signed: empty, too long, with characters a person would
    /// not see, or on an approval.
    #[error("reason refused: {0}")]
    Reason(&'static str),
    /// The statement names one key and was to be signed with another.
    #[error(
        "the statement names key {} but the signing key is {}",
        crate::display::quoted(.named),
        crate::display::quoted(.signing)
    )]
    KeyMismatch {
        /// The key id in the statement.
        named: String,
        /// The signing key's id.
        signing: String,
    },
}

/// When a statement counts: from `issued_at_ms` until (not including) `expires_at_ms`,
/// milliseconds since the Unix epoch, both at most [`MAX_SAFE_INTEGER`] in magnitude.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    issued_at_ms: i64,
    expires_at_ms: i64,
}

impl Validity {
    /// A validity window, or why it cannot be signed exactly.
    pub fn new(issued_at_ms: i64, expires_at_ms: i64) -> Result<Self, StatementError> {
        safe("issued_at_ms", i128::from(issued_at_ms))?;
        safe("expires_at_ms", i128::from(expires_at_ms))?;
        if issued_at_ms > expires_at_ms {
            return Err(StatementError::IssuedAfterExpiry {
                issued_at_ms,
                expires_at_ms,
            });
        }
        Ok(Validity {
            issued_at_ms,
            expires_at_ms,
        })
    }

    /// Issued at `issued_at_ms`, lasting `ttl`.
    pub fn lasting(issued_at_ms: i64, ttl: Duration) -> Result<Self, StatementError> {
        let expires = i128::from(issued_at_ms) + i128::try_from(ttl.as_millis()).unwrap_or(i128::MAX);
        safe("expires_at_ms", expires)?;
        Self::new(issued_at_ms, i64::try_from(expires).unwrap_or(i64::MAX))
    }

    /// When it was issued (ms since the epoch).
    pub fn issued_at_ms(&self) -> i64 {
        self.issued_at_ms
    }

    /// When it stops counting (ms since the epoch).
    pub fn expires_at_ms(&self) -> i64 {
        self.expires_at_ms
    }
}

fn safe(field: &'static str, value: i128) -> Result<(), StatementError> {
    if value.abs() > i128::from(MAX_SAFE_INTEGER) {
        return Err(StatementError::UnsafeInteger { field, value });
    }
    Ok(())
}

/// The longest deny reason, in characters.
pub const MAX_REASON_CHARS: usize = 500;

/// `reason` if it may be signed as a deny reason: 1 to [`MAX_REASON_CHARS`] characters,
/// not only spaces, none of them [hidden](crate::display::hidden) (what is signed is what
/// the person saw, and the agent's error carries no control characters).
fn checked_reason(reason: &str) -> Result<(), StatementError> {
    if reason.trim().is_empty() {
        Err(StatementError::Reason("it is empty"))
    } else if reason.chars().count() > MAX_REASON_CHARS {
        Err(StatementError::Reason("it is longer than 500 characters"))
    } else if reason.chars().any(crate::display::hidden) {
        Err(StatementError::Reason(
            "it contains control, bidirectional or invisible characters",
        ))
    } else {
        Ok(())
    }
}

/// The signed fields of a statement. Built by [`Statement::new`] (and, for a deny with a
/// reason, [`Statement::with_reason`]) or parsed with its signature
/// ([`SignedStatement::from_json`]); both check every field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    proposal_sha256: Sha256Digest,
    grant_id: String,
    approver_key_id: String,
    decision: StatementDecision,
    validity: Validity,
    reason: Option<String>,
}

impl Statement {
    /// A decision about the proposal with digest `proposal_sha256`, issuing grant
    /// `grant_id`, by the approver whose key is `approver_key_id`.
    pub fn new(
        proposal_sha256: Sha256Digest,
        grant_id: impl Into<String>,
        approver_key_id: impl Into<String>,
        decision: StatementDecision,
        validity: Validity,
    ) -> Self {
        Statement {
            proposal_sha256,
            grant_id: grant_id.into(),
            approver_key_id: approver_key_id.into(),
            decision,
            validity,
            reason: None,
        }
    }

    /// This deny, with the approver's reason (signed with it; the boundary can pass it on to
    /// the agent). Refused on an approval, and for a reason [`MAX_REASON_CHARS`] long or
    /// more, blank, or with control, bidirectional or invisible characters.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Result<Self, StatementError> {
        if self.decision != StatementDecision::Deny {
            return Err(StatementError::Reason("only a deny carries a reason"));
        }
        let reason = reason.into();
        checked_reason(&reason)?;
        self.reason = Some(reason);
        Ok(self)
    }

    /// The decided proposal's digest.
    pub fn proposal_sha256(&self) -> Sha256Digest {
        self.proposal_sha256
    }

    /// The one-use grant this decision issues.
    pub fn grant_id(&self) -> &str {
        &self.grant_id
    }

    /// The signing key's id.
    pub fn approver_key_id(&self) -> &str {
        &self.approver_key_id
    }

    /// The decision.
    pub fn decision(&self) -> StatementDecision {
        self.decision
    }

    /// When it counts.
    pub fn validity(&self) -> Validity {
        self.validity
    }

    /// Why it denies, in the approver's words, if they gave a reason.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The statement as JSON, without a signature.
    pub fn to_value(&self) -> Value {
        let mut value = json!({
            "protocol": STATEMENT_PROTOCOL,
            "proposal_sha256": self.proposal_sha256,
            "grant_id": self.grant_id,
            "approver_key_id": self.approver_key_id,
            "decision": self.decision,
            "issued_at_ms": self.validity.issued_at_ms,
            "expires_at_ms": self.validity.expires_at_ms,
        });
        if let (Some(reason), Some(fields)) = (&self.reason, value.as_object_mut()) {
            fields.insert("reason".into(), Value::String(reason.clone()));
        }
        value
    }

    /// The bytes that are signed: the canonical JSON of [`to_value`](Self::to_value).
    pub fn signing_bytes(&self) -> Result<Vec<u8>, StatementError> {
        aml_core::canonical::to_canonical_string(&self.to_value())
            .map(String::into_bytes)
            .map_err(|e| StatementError::Malformed(e.to_string()))
    }

    /// Signs it with `key`, which must be the key it names.
    pub fn sign(self, key: &ApproverKey) -> Result<SignedStatement, StatementError> {
        if key.key_id() != self.approver_key_id {
            return Err(StatementError::KeyMismatch {
                named: self.approver_key_id,
                signing: key.key_id().to_owned(),
            });
        }
        let signature = key.signing_key().sign(&self.signing_bytes()?);
        Ok(SignedStatement {
            statement: self,
            signature: signature.to_bytes(),
        })
    }

    /// Whether this (verified) statement approves now, under `rules`, and — when given —
    /// names exactly `proposal_sha256` and `grant_id`. The first reason it does not, in the
    /// order of [`StatementRefusal::ALL`].
    pub fn check(
        &self,
        now_ms: i64,
        rules: &StatementRules,
        proposal_sha256: Option<Sha256Digest>,
        grant_id: Option<&str>,
    ) -> Result<(), StatementRefusal> {
        let millis = |d: Duration| i128::try_from(d.as_millis()).unwrap_or(i128::MAX);
        let (issued, expires) = (
            i128::from(self.validity.issued_at_ms),
            i128::from(self.validity.expires_at_ms),
        );
        if proposal_sha256.is_some_and(|d| d != self.proposal_sha256) {
            Err(StatementRefusal::OtherProposal)
        } else if grant_id.is_some_and(|g| g != self.grant_id) {
            Err(StatementRefusal::OtherGrant)
        } else if self.decision != StatementDecision::Approve {
            Err(StatementRefusal::Denied)
        } else if issued > i128::from(now_ms) + millis(rules.max_clock_skew) {
            Err(StatementRefusal::IssuedInTheFuture)
        } else if expires - issued > millis(rules.max_lifetime) {
            Err(StatementRefusal::LifetimeTooLong)
        } else if expires <= i128::from(now_ms) {
            Err(StatementRefusal::Expired)
        } else {
            Ok(())
        }
    }
}

/// What a host requires of a statement beyond a valid signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatementRules {
    /// The longest `expires_at_ms − issued_at_ms` accepted (default 24 h).
    pub max_lifetime: Duration,
    /// How far in the future `issued_at_ms` may be, for clocks out of step (default 30 s).
    pub max_clock_skew: Duration,
}

impl Default for StatementRules {
    fn default() -> Self {
        StatementRules {
            max_lifetime: Duration::from_secs(24 * 3600),
            max_clock_skew: Duration::from_secs(30),
        }
    }
}

/// Why a validly signed statement does not approve (see [`Statement::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StatementRefusal {
    /// `"other_proposal"`: it decides another proposal digest.
    OtherProposal,
    /// `"other_grant"`: it names another grant (e.g. a statement for an earlier request,
    /// replayed).
    OtherGrant,
    /// `"denied"`: the decision is `deny`.
    Denied,
    /// `"issued_in_the_future"`: issued later than now plus the allowed clock skew.
    IssuedInTheFuture,
    /// `"lifetime_too_long"`: valid for longer than the host allows.
    LifetimeTooLong,
    /// `"expired"`: `expires_at_ms` has passed.
    Expired,
}

impl StatementRefusal {
    /// Every refusal, in the order they are checked.
    pub const ALL: [StatementRefusal; 6] = [
        StatementRefusal::OtherProposal,
        StatementRefusal::OtherGrant,
        StatementRefusal::Denied,
        StatementRefusal::IssuedInTheFuture,
        StatementRefusal::LifetimeTooLong,
        StatementRefusal::Expired,
    ];

    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            StatementRefusal::OtherProposal => "other_proposal",
            StatementRefusal::OtherGrant => "other_grant",
            StatementRefusal::Denied => "denied",
            StatementRefusal::IssuedInTheFuture => "issued_in_the_future",
            StatementRefusal::LifetimeTooLong => "lifetime_too_long",
            StatementRefusal::Expired => "expired",
        }
    }
}

impl fmt::Display for StatementRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A statement with its signature. Serializes to (and deserializes from, checking every
/// field) the wire form above.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "Wire", try_from = "ObjectOnly<Wire>")]
pub struct SignedStatement {
    statement: Statement,
    signature: [u8; 64],
}

/// The wire form, as serde reads and writes it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    protocol: String,
    proposal_sha256: Sha256Digest,
    grant_id: String,
    approver_key_id: String,
    decision: StatementDecision,
    issued_at_ms: i64,
    expires_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    signature: String,
}

impl From<SignedStatement> for Wire {
    fn from(s: SignedStatement) -> Self {
        let SignedStatement { statement, signature } = s;
        Wire {
            protocol: STATEMENT_PROTOCOL.to_owned(),
            proposal_sha256: statement.proposal_sha256,
            grant_id: statement.grant_id,
            approver_key_id: statement.approver_key_id,
            decision: statement.decision,
            issued_at_ms: statement.validity.issued_at_ms,
            expires_at_ms: statement.validity.expires_at_ms,
            reason: statement.reason,
            signature: hex::encode(&signature),
        }
    }
}

impl TryFrom<ObjectOnly<Wire>> for SignedStatement {
    type Error = StatementError;

    fn try_from(ObjectOnly(w): ObjectOnly<Wire>) -> Result<Self, StatementError> {
        if w.protocol != STATEMENT_PROTOCOL {
            return Err(StatementError::Malformed(format!("protocol {:?}", w.protocol)));
        }
        let signature = hex::decode::<64>(&w.signature)
            .ok_or_else(|| StatementError::Malformed("signature must be 128 lowercase hex".into()))?;
        let mut statement = Statement::new(
            w.proposal_sha256,
            w.grant_id,
            w.approver_key_id,
            w.decision,
            Validity::new(w.issued_at_ms, w.expires_at_ms)?,
        );
        if let Some(reason) = w.reason {
            statement = statement.with_reason(reason)?;
        }
        Ok(SignedStatement { statement, signature })
    }
}

impl SignedStatement {
    /// Parses a statement from JSON text, strictly (duplicate keys, unknown keys, unsafe
    /// integers and malformed fields are refused).
    pub fn from_json(text: &str) -> Result<Self, StatementError> {
        let value =
            aml_core::strict::parse_str(text).map_err(|e| StatementError::Malformed(e.to_string()))?;
        let wire: ObjectOnly<Wire> =
            serde_json::from_value(value).map_err(|e| StatementError::Malformed(e.to_string()))?;
        SignedStatement::try_from(wire)
    }

    /// The signed fields (not yet verified: see [`Keyring::verify`](crate::Keyring::verify)).
    pub fn statement(&self) -> &Statement {
        &self.statement
    }

    /// The Ed25519 signature.
    pub(crate) fn signature(&self) -> Signature {
        Signature::from_bytes(&self.signature)
    }

    /// The statement as JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statement(key: &ApproverKey) -> Statement {
        Statement::new(
            "ab".repeat(32).parse().unwrap(),
            "g1",
            key.key_id(),
            StatementDecision::Approve,
            Validity::new(1, 2).unwrap(),
        )
    }

    /// Fuzzing finding: serde reads a struct from an array of its fields, so a validly
    /// signed statement written as an array (fields in declaration order) was accepted.
    #[test]
    fn a_statement_written_as_an_array_is_refused() {
        let alice = ApproverKey::generate("alice").unwrap();
        let signed = statement(&alice).sign(&alice).unwrap();
        let v = signed.to_value();
        let fields = [
            "protocol",
            "proposal_sha256",
            "grant_id",
            "approver_key_id",
            "decision",
            "issued_at_ms",
            "expires_at_ms",
            "signature",
        ];
        let array = Value::Array(fields.iter().map(|f| v[*f].clone()).collect());
        let err = SignedStatement::from_json(&array.to_string()).unwrap_err();
        assert!(
            matches!(&err, StatementError::Malformed(d) if d.contains("a JSON object")),
            "{err}"
        );
        assert!(serde_json::from_value::<SignedStatement>(array).is_err());
        // The same fields as an object are the statement.
        assert_eq!(SignedStatement::from_json(&v.to_string()).unwrap(), signed);
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
    fn integers_past_two_to_the_53_are_refused_when_signing_and_parsing() {
        let max = MAX_SAFE_INTEGER;
        assert!(Validity::new(-max, max).is_ok());
        for (issued, expires) in [(0, max + 1), (-max - 1, 0), (0, i64::MAX), (i64::MIN, 0)] {
            assert!(
                matches!(
                    Validity::new(issued, expires),
                    Err(StatementError::UnsafeInteger { .. })
                ),
                "{issued} {expires}"
            );
        }
        assert!(matches!(
            Validity::lasting(max - 10, Duration::from_millis(11)),
            Err(StatementError::UnsafeInteger {
                field: "expires_at_ms",
                ..
            })
        ));
        assert!(matches!(
            Validity::lasting(0, Duration::MAX),
            Err(StatementError::UnsafeInteger { .. })
        ));
        // 2^53 + 1 and 2^53 would sign the same bytes: the wire form refuses them.
        let alice = ApproverKey::generate("alice").unwrap();
        let mut wire = statement(&alice).sign(&alice).unwrap().to_value();
        wire["expires_at_ms"] = json!(9_007_199_254_740_993_i64);
        let refused = SignedStatement::from_json(&wire.to_string()).unwrap_err();
        assert!(
            matches!(
                refused,
                StatementError::UnsafeInteger {
                    field: "expires_at_ms",
                    ..
                }
            ),
            "{refused}"
        );
    }

    #[test]
    fn issued_after_expiry_and_bad_wire_forms_are_refused() {
        assert!(matches!(
            Validity::new(5, 4),
            Err(StatementError::IssuedAfterExpiry { .. })
        ));
        let alice = ApproverKey::generate("alice").unwrap();
        let good = statement(&alice).sign(&alice).unwrap().to_value();
        assert!(SignedStatement::from_json(&good.to_string()).is_ok());
        let mut cases = Vec::new();
        for (key, value) in [
            ("protocol", json!("aml-approval-statement/2")),
            ("decision", json!("maybe")),
            ("issued_at_ms", json!(1.5)),
            ("expires_at_ms", json!("2")),
            ("signature", json!("AB")),
            ("proposal_sha256", json!("AB")),
            ("extra", json!(1)),
        ] {
            let mut bad = good.clone();
            bad[key] = value;
            cases.push(bad.to_string());
        }
        cases.push(r#"{"protocol":"aml-approval-statement/1","protocol":"x"}"#.into());
        for text in cases {
            assert!(SignedStatement::from_json(&text).is_err(), "{text}");
        }
    }

    /// A deny may carry the approver's reason: signed with it (the eighth key, sorted in),
    /// read back, and refused where it could mislead or on an approval.
    #[test]
    fn a_deny_reason_is_signed_and_checked() {
        let alice = ApproverKey::generate("alice").unwrap();
        let deny = |reason: &str| {
            Statement::new(
                "ab".repeat(32).parse().unwrap(),
                "g1",
                "alice",
                StatementDecision::Deny,
                Validity::new(1, 2).unwrap(),
            )
            .with_reason(reason)
        };
        let statement = deny("Not to the whole team, please.").unwrap();
        assert_eq!(
            String::from_utf8(statement.signing_bytes().unwrap()).unwrap(),
            format!(
                r#"{{"approver_key_id":"alice","decision":"deny","expires_at_ms":2,"grant_id":"g1","issued_at_ms":1,"proposal_sha256":"{}","protocol":"aml-approval-statement/1","reason":"Not to the whole team, please."}}"#,
                "ab".repeat(32)
            )
        );
        let signed = statement.sign(&alice).unwrap();
        let ring = crate::Keyring::new().with_approver(&alice).unwrap();
        let read = SignedStatement::from_json(&signed.to_value().to_string()).unwrap();
        assert_eq!(
            ring.verify(&read).unwrap().reason(),
            Some("Not to the whole team, please.")
        );
        // The reason is signed: changed, the signature no longer verifies.
        let mut changed = signed.to_value();
        changed["reason"] = json!("Approved after all.");
        let changed = SignedStatement::from_json(&changed.to_string()).unwrap();
        assert_eq!(ring.verify(&changed), Err(StatementError::BadSignature));
        for bad in [
            "",
            "   ",
            "line\nbreak",
            "rtl\u{202E}",
            &"x".repeat(MAX_REASON_CHARS + 1),
        ] {
            assert!(matches!(deny(bad), Err(StatementError::Reason(_))), "{bad:?}");
        }
        assert!(
            deny(&"é".repeat(MAX_REASON_CHARS)).is_ok(),
            "characters, not bytes"
        );
        let approve_with_reason = Statement::new(
            "ab".repeat(32).parse().unwrap(),
            "g1",
            "alice",
            StatementDecision::Approve,
            Validity::new(1, 2).unwrap(),
        )
        .with_reason("fine");
        assert_eq!(
            approve_with_reason,
            Err(StatementError::Reason("only a deny carries a reason"))
        );
        // Read from the wire, an approval with a reason is refused as well.
        let mut wire = statement_for_wire(&alice);
        wire["reason"] = json!("fine");
        assert!(SignedStatement::from_json(&wire.to_string()).is_err());
    }

    fn statement_for_wire(key: &ApproverKey) -> Value {
        statement(key).sign(key).unwrap().to_value()
    }

    #[test]
    fn a_statement_signs_only_with_the_key_it_names() {
        let alice = ApproverKey::generate("alice").unwrap();
        let bob = ApproverKey::generate("bob").unwrap();
        assert!(matches!(
            statement(&alice).sign(&bob),
            Err(StatementError::KeyMismatch { .. })
        ));
    }

    #[test]
    fn checks_refuse_in_order_and_name_the_reason() {
        let digest: Sha256Digest = "ab".repeat(32).parse().unwrap();
        let rules = StatementRules::default();
        let at = |issued, expires, decision| {
            Statement::new(
                digest,
                "g1",
                "alice",
                decision,
                Validity::new(issued, expires).unwrap(),
            )
        };
        let now = 1_000_000_000;
        let approve = StatementDecision::Approve;
        let ok = at(now, now + 60_000, approve);
        assert_eq!(ok.check(now, &rules, Some(digest), Some("g1")), Ok(()));
        let other = Sha256Digest::of(b"other");
        let cases = [
            (
                ok.check(now, &rules, Some(other), Some("g1")),
                StatementRefusal::OtherProposal,
            ),
            (
                ok.check(now, &rules, Some(digest), Some("g2")),
                StatementRefusal::OtherGrant,
            ),
            (
                at(now, now + 1, StatementDecision::Deny).check(now, &rules, None, None),
                StatementRefusal::Denied,
            ),
            (
                at(now + 31_000, now + 60_000, approve).check(now, &rules, None, None),
                StatementRefusal::IssuedInTheFuture,
            ),
            (
                at(now, now + 24 * 3_600_000 + 1, approve).check(now, &rules, None, None),
                StatementRefusal::LifetimeTooLong,
            ),
            (
                at(now - 10, now, approve).check(now, &rules, None, None),
                StatementRefusal::Expired,
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, Err(want));
        }
        // Within the skew is fine.
        assert_eq!(
            at(now + 29_000, now + 60_000, approve).check(now, &rules, None, None),
            Ok(())
        );
    }

    #[test]
    fn wire_strings_match_serde() {
        for d in StatementDecision::ALL {
            assert_eq!(serde_json::to_value(d).unwrap(), json!(d.as_str()));
        }
        for r in StatementRefusal::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), json!(r.as_str()));
            assert_eq!(r.to_string(), r.as_str());
        }
    }
}

//! Approval statements, keyrings and key files: parse and verify. Never panics; a parsed
//! statement reads back from its own JSON; nothing but the statement the example key really
//! signed verifies under the example keyring; checks answer for any clock.
#![no_main]

use std::time::Duration;

use aml_approval::{ApproverKey, Keyring, SignedStatement, StatementRules};
use libfuzzer_sys::fuzz_target;

const KEYRING: &str = include_str!("../../examples/approval/keyring.json");
const SIGNED: &str = include_str!("../../examples/approval/statement.json");

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = ApproverKey::from_json(text);
    if let Ok(ring) = Keyring::from_json(text) {
        assert!(
            text.trim_start().starts_with('{'),
            "a keyring that is not an object loaded"
        );
        let _ = ring.is_empty();
    }
    let Ok(signed) = SignedStatement::from_json(text) else {
        return;
    };
    assert!(
        text.trim_start().starts_with('{'),
        "a statement that is not an object parsed"
    );
    let wire = signed.to_value();
    assert!(wire.is_object());
    assert_eq!(SignedStatement::from_json(&wire.to_string()).unwrap(), signed);
    let statement = signed.statement();
    let _ = statement.signing_bytes();
    let ring = Keyring::from_json(KEYRING).unwrap();
    if let Ok(verified) = ring.verify(&signed) {
        let genuine = SignedStatement::from_json(SIGNED).unwrap();
        assert_eq!(
            verified,
            genuine.statement(),
            "a statement the key never signed verified"
        );
    }
    let validity = statement.validity();
    let rules = StatementRules::default();
    let tight = StatementRules {
        max_lifetime: Duration::from_millis(1),
        max_clock_skew: Duration::ZERO,
    };
    for now in [
        i64::MIN,
        0,
        validity.issued_at_ms(),
        validity.expires_at_ms(),
        i64::MAX,
    ] {
        for rules in [&rules, &tight] {
            let checked = statement.check(
                now,
                rules,
                Some(statement.proposal_sha256()),
                Some(statement.grant_id()),
            );
            if checked.is_ok() {
                assert!(validity.issued_at_ms() < validity.expires_at_ms());
                assert!(now < validity.expires_at_ms());
            }
        }
    }
});

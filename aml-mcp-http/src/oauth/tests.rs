//! The checks with a key set in memory: tokens signed here with fixed test keys.

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use super::jwks::Jwks;
use super::validate::Checker;
use super::*;

const ISS: &str = "http://as.test";
const AUD: &str = "http://gate.test/mcp";
/// Ed25519 keys (PKCS#8 DER) and their public halves, made for these tests only.
const ED_A: &str =
    "302e020100300506032b657004220420575a37317345733b961f32a47ef7667e2c6016f1000f7a1848538f8edfc1daab";
const ED_A_X: &str = "VxMo2y_oJUHFAEtUWrGmkeU_28TBgSLKFBwvXvrFTcE";
const ED_B: &str =
    "302e020100300506032b6570042204204a5f456a7614df8fee7e3eae3888feea8c6acdf2ac8d40a587808b30b64be591";
/// A P-256 key and its public point.
const EC: &str = "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b020101042069909c68a5c305464e7ca7e02f7d64d34d1f4a2bc17a24addbbea441be590e80a14403420004f56f3e27b7969dc8b0df15dedc5d12fba6ce6978bab61b273450437054cc0facb41ffebd966b3d3954872460ee73055be9fc58a1f34f1f5ad98e787de92f7308";
const EC_X: &str = "9W8-J7eWnciw3xXe3F0S-6bOaXi6thsnNFBDcFTMD6w";
const EC_Y: &str = "tB_-vZZrPTlUhyRg7nMFW-n8WKHzTx9a2Y54fekvcwg";
/// `{"alg":"none"}` with claims this checker would otherwise accept.
const ALG_NONE: &str = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJtYWxsb3J5IiwiaXNzIjoiaHR0cDovL2FzLnRlc3QiLCJhdWQiOiJodHRwOi8vZ2F0ZS50ZXN0L21jcCIsImV4cCI6NDEwMjQ0NDgwMH0.";

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn keys() -> JwkSet {
    serde_json::from_value(json!({"keys": [
        {"kty": "OKP", "crv": "Ed25519", "x": ED_A_X, "kid": "a", "use": "sig", "alg": "EdDSA"},
        {"kty": "EC", "crv": "P-256", "x": EC_X, "y": EC_Y, "kid": "ec"},
    ]}))
    .unwrap()
}

fn now() -> i64 {
    jsonwebtoken::get_current_timestamp() as i64
}

fn claims() -> Value {
    json!({"sub": "alice", "iss": ISS, "aud": AUD, "exp": now() + 300, "iat": now(), "scope": "mcp:tools mcp:read"})
}

fn sign(kid: Option<&str>, der: &str, claims: &Value) -> String {
    let alg = if der == EC {
        Algorithm::ES256
    } else {
        Algorithm::EdDSA
    };
    let key = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_der(&hex(der)),
        _ => EncodingKey::from_ed_der(&hex(der)),
    };
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

fn with(change: impl FnOnce(&mut Value)) -> String {
    let mut c = claims();
    change(&mut c);
    sign(Some("a"), ED_A, &c)
}

fn checker(scopes: &[&str]) -> Checker {
    let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
    Checker::new(ISS, AUD, &scopes)
}

fn reason(result: Result<Accepted, Rejection>) -> String {
    match result {
        Err(Rejection::Invalid(why)) => why,
        other => panic!("not invalid: {other:?}"),
    }
}

#[test]
fn a_good_token_names_its_subject_with_either_algorithm() {
    let check = checker(&["mcp:tools"]);
    let accepted = check.check(&with(|_| {}), &keys()).unwrap();
    assert_eq!(accepted.subject, "alice");
    let ec = sign(Some("ec"), EC, &claims());
    assert_eq!(check.check(&ec, &keys()).unwrap().subject, "alice");
    // An audience list that holds this gate's resource is enough.
    let listed = with(|c| c["aud"] = json!(["http://other.test", AUD]));
    assert!(check.check(&listed, &keys()).is_ok());
    // Inside the 60 s skew.
    let just = with(|c| c["exp"] = json!(now() - 30));
    assert!(check.check(&just, &keys()).is_ok());
}

#[test]
fn wrong_claims_are_each_refused_with_their_reason() {
    let check = checker(&[]);
    let keys = keys();
    let cases = [
        (with(|c| c["aud"] = json!("http://other.test/mcp")), "aud"),
        (with(|c| c["aud"] = json!(["http://gate.test"])), "aud"),
        (with(|c| c["iss"] = json!("http://evil.test")), "issuer"),
        (with(|c| c["exp"] = json!(now() - 120)), "expired"),
        (with(|c| c["nbf"] = json!(now() + 120)), "nbf"),
        (
            with(|c| c.as_object_mut().unwrap().remove("aud").map(drop).unwrap_or(())),
            "no aud",
        ),
        (
            with(|c| c.as_object_mut().unwrap().remove("exp").map(drop).unwrap_or(())),
            "no exp",
        ),
        (
            with(|c| c.as_object_mut().unwrap().remove("sub").map(drop).unwrap_or(())),
            "no sub",
        ),
        (with(|c| c["sub"] = json!("local")), "local"),
        (with(|c| c["sub"] = json!("bad\nname")), "caller name"),
        (with(|c| c["sub"] = json!("")), "caller name"),
    ];
    for (token, needle) in cases {
        let why = reason(check.check(&token, &keys));
        assert!(why.contains(needle), "{needle}: {why}");
    }
}

#[test]
fn forged_and_malformed_tokens_are_refused() {
    let check = checker(&[]);
    let keys = keys();
    // Another key under a known kid.
    assert!(reason(check.check(&sign(Some("a"), ED_B, &claims()), &keys)).contains("signature"));
    assert!(reason(check.check(ALG_NONE, &keys)).contains("not a JWT"));
    // HS256 keyed with the issuer's public key: the algorithm is refused before any key.
    let hs = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(),
        &EncodingKey::from_secret(ED_A_X.as_bytes()).unwrap(),
    )
    .unwrap();
    assert!(reason(check.check(&hs, &keys)).contains("HS256"));
    let good = with(|_| {});
    for bad in [
        &good[..good.len() - 10],
        "",
        "a.b",
        "a.b.c",
        &good.replace('.', ""),
    ] {
        assert!(
            matches!(check.check(bad, &keys), Err(Rejection::Invalid(_))),
            "{bad}"
        );
    }
    let huge = format!("{good}{}", "A".repeat(MAX_TOKEN_BYTES));
    assert!(reason(check.check(&huge, &keys)).contains("bytes"));
}

#[test]
fn an_unknown_key_and_a_missing_kid_are_told_apart() {
    let check = checker(&[]);
    let token = sign(Some("rotated"), ED_B, &claims());
    assert_eq!(
        check.check(&token, &keys()),
        Err(Rejection::UnknownKey(Some("rotated".into())))
    );
    // No kid: the one key of the algorithm's family is used.
    assert!(check.check(&sign(None, ED_A, &claims()), &keys()).is_ok());
    let two: JwkSet = serde_json::from_value(json!({"keys": [
        {"kty": "OKP", "crv": "Ed25519", "x": ED_A_X, "kid": "a"},
        {"kty": "OKP", "crv": "Ed25519", "x": ED_A_X, "kid": "a2"},
    ]}))
    .unwrap();
    assert!(reason(check.check(&sign(None, ED_A, &claims()), &two)).contains("several"));
    // A key the set marks for encryption is not used to verify.
    let enc: JwkSet = serde_json::from_value(json!({"keys": [
        {"kty": "OKP", "crv": "Ed25519", "x": ED_A_X, "kid": "a", "use": "enc"},
    ]}))
    .unwrap();
    assert!(matches!(
        check.check(&with(|_| {}), &enc),
        Err(Rejection::Invalid(_))
    ));
}

#[test]
fn every_required_scope_must_be_granted() {
    let check = checker(&["mcp:tools", "mcp:write"]);
    assert_eq!(
        check.check(&with(|_| {}), &keys()),
        Err(Rejection::InsufficientScope(vec!["mcp:write".into()]))
    );
    let none = with(|c| c.as_object_mut().unwrap().remove("scope").map(drop).unwrap_or(()));
    assert_eq!(
        check.check(&none, &keys()),
        Err(Rejection::InsufficientScope(vec![
            "mcp:tools".into(),
            "mcp:write".into()
        ]))
    );
    let both = with(|c| c["scope"] = json!("mcp:write mcp:tools"));
    assert!(check.check(&both, &keys()).is_ok());
}

#[tokio::test]
async fn an_unknown_kid_fetches_at_most_once_per_window() {
    let oauth = OAuth::new(ISS, AUD).unwrap();
    let verifier = Verifier::with_jwks(Jwks::preloaded(ISS, keys()), oauth);
    let good = with(|_| {});
    assert!(matches!(verifier.verify(&good).await, Verdict::Accepted(a) if a.subject == "alice"));
    for _ in 0..20 {
        let token = sign(Some("made-up"), ED_B, &claims());
        assert!(matches!(
            verifier.verify(&token).await,
            Verdict::Rejected(Rejection::UnknownKey(_))
        ));
    }
    // The set was fetched moments ago: no request went out for the made-up kids.
    assert_eq!(verifier.jwks.fetches().await, 0);
}

#[test]
fn the_metadata_names_the_resource_and_its_issuer() {
    let oauth = OAuth::new(ISS, AUD)
        .unwrap()
        .with_scopes(vec!["mcp:tools".into()])
        .unwrap();
    let doc: Value = serde_json::from_slice(&oauth.metadata()).unwrap();
    assert_eq!(
        doc,
        json!({"resource": AUD, "authorization_servers": [ISS], "scopes_supported": ["mcp:tools"], "bearer_methods_supported": ["header"]})
    );
    assert_eq!(
        oauth.resource_metadata_url(),
        "http://gate.test/.well-known/oauth-protected-resource/mcp"
    );
    assert_eq!(
        oauth.metadata_paths(),
        [
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-protected-resource/mcp"
        ]
    );
    let root = OAuth::new(ISS, "http://gate.test:8080").unwrap();
    assert_eq!(
        root.resource_metadata_url(),
        "http://gate.test:8080/.well-known/oauth-protected-resource"
    );
    let proxied = OAuth::new(ISS, "https://gate.test/tools/mcp/").unwrap();
    assert!(proxied
        .metadata_paths()
        .contains(&"/.well-known/oauth-protected-resource/tools/mcp".to_owned()));
    for bad in ["mcp", "/mcp", "urn:x", "http://gate.test/\"x"] {
        assert!(OAuth::new(ISS, bad).is_err(), "{bad}");
    }
    assert!(OAuth::new("issuer", AUD).is_err());
    assert!(oauth.clone().with_scopes(vec!["a b".into()]).is_err());
    assert!(oauth.clone().with_jwks_url("https://as.test/jwks").is_err());
    let https = OAuth::new("https://as.test", AUD).unwrap();
    assert!(https.check_reachable().is_err());
    assert!(https
        .with_jwks_url("http://127.0.0.1:1/jwks")
        .unwrap()
        .check_reachable()
        .is_ok());
}

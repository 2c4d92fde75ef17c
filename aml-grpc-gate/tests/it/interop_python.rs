//! The gateway between Python grpcio peers, as a user runs it: a Python upstream (types from
//! a descriptor set, with reflection) and a Python client whose types come from the
//! gateway's reflection only. Allowed, denied, approved and streaming calls; the upstream's
//! log shows only what was allowed, byte for byte the frozen message; an int64 of 2^63−1
//! arrives exact; unknown fields, truncated messages, wrong wire types and a 100 MB length
//! prefix are refused with statuses; a deadline or a cancel during approval never reaches the
//! upstream;
//! the upstream's NOT_FOUND and its details reach the client.

use crate::support;

use std::path::Path;

use aml_core::{Effect, FrozenProposal, ProposalParts};
use prost_reflect::DescriptorPool;
use serde_json::{json, Value};
use support::{client, descriptor_set, gateway, upstream, upstream_log};

const TOOLS: &str = r#"{"tools": [
  {"name": "lookup_order", "method": "payments.v1.Payments/Lookup", "effect": "read",
   "purpose": "Look up an order", "resource": {"argument": "order_id"}},
  {"name": "refund_order", "method": "payments.v1.Payments/Refund", "effect": "pay",
   "purpose": "Refund an order", "resource": {"argument": "customer.email", "as": "email"}}],
 "relay_ungated": ["payments.v1.Payments/Watch"]}"#;

const POLICY: &str = r#"{"protocol": "aml-action-policy/1", "rules": [
  {"tool": "lookup_order", "effect": "read", "resource": "A-1", "requires_approval": false},
  {"tool": "lookup_order", "effect": "read", "resource": "A-404", "requires_approval": false},
  {"tool": "refund_order", "effect": "pay", "resource": "ok@example.test", "requires_approval": true}]}"#;

const LOOKUP: &str = "payments.v1.Payments/Lookup";
const REFUND: &str = "payments.v1.Payments/Refund";
const MAX_I64: &str = "9223372036854775807";

/// The digest of the proposal the boundary freezes for `tool` with the request message
/// `hex` (as the upstream logged it), rebuilt independently from the bytes.
fn digest_of(
    pool: &DescriptorPool,
    method: &str,
    hex: &str,
    tool: &str,
    effect: Effect,
    purpose: &str,
    resource: &str,
) -> String {
    let (service, name) = method.split_once('/').unwrap();
    let input = pool
        .get_service_by_name(service)
        .unwrap()
        .methods()
        .find(|m| m.name() == name)
        .unwrap()
        .input();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let json = aml_grpc_gate::transcode::to_json(&input, &bytes).unwrap();
    let arguments: serde_json::Map<String, Value> = serde_json::from_slice(&json).unwrap();
    let frozen = FrozenProposal::freeze(ProposalParts {
        tool,
        effect,
        resource,
        purpose,
        arguments: &arguments,
    })
    .unwrap();
    frozen.digest().to_string()
}

fn reason(answer: &Value) -> &str {
    answer["error_info"]["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("no ErrorInfo: {answer}"))
}

#[test]
fn python_clients_through_the_gateway_to_a_python_upstream() {
    let dir = aml_test_support::scratch_dir("grpc-gate", "interop");
    let descriptors = descriptor_set(&dir);
    let pool = DescriptorPool::decode(std::fs::read(&descriptors).unwrap().as_slice()).unwrap();
    let log = dir.join("upstream.jsonl");
    let (_upstream, upstream_address) = upstream(&descriptors, &log);
    std::fs::write(dir.join("tools.json"), TOOLS).unwrap();
    std::fs::write(dir.join("policy.json"), POLICY).unwrap();
    let receipts = dir.join("receipts.jsonl");
    let files = |p: &str| dir.join(p).display().to_string();
    let upstream_url = format!("http://{upstream_address}");
    // Types from the upstream's reflection (no --descriptors).
    let (mut gate, address, page) = gateway(&[
        "--upstream",
        &upstream_url,
        "--tools",
        &files("tools.json"),
        "--policy",
        &files("policy.json"),
        "--approve",
        "web",
        "--receipts",
        &receipts.display().to_string(),
        "--forward-metadata",
        "x-request-id",
    ]);
    let page = page.unwrap();

    // Reflection and health for what it fronts.
    let services = client(&address, &["services"]);
    assert!(
        services["services"]
            .as_array()
            .unwrap()
            .contains(&json!("payments.v1.Payments")),
        "{services}"
    );
    assert_eq!(
        services["health"]["payments.v1.Payments"], "SERVING",
        "{services}"
    );

    // Allowed, with an int64 of 2^63-1.
    let lookup = json!({"order_id": "A-1", "cursor": MAX_I64, "tags": ["x", "y"]}).to_string();
    let allowed = client(&address, &["call", LOOKUP, &lookup]);
    assert_eq!(allowed["code"], "OK", "{allowed}");
    assert_eq!(allowed["response"]["cursor"], MAX_I64, "{allowed}");

    // Denied: no rule for that order.
    let denied = client(&address, &["call", LOOKUP, r#"{"order_id": "B-2"}"#]);
    assert_eq!(
        (denied["code"].as_str(), reason(&denied)),
        (Some("PERMISSION_DENIED"), "no_exact_rule"),
        "{denied}"
    );
    assert_eq!(denied["error_info"]["domain"], "aml.action-boundary");

    // Approved on the page's API; the resource is the normalized address at a field path.
    let refund = json!({"order_id": "A-1", "amount_minor": "1250", "customer": {"email": "ok@Example.TEST"}})
        .to_string();
    let approved = client(&address, &["approve", &page, REFUND, &refund]);
    assert_eq!(approved["code"], "OK", "{approved}");
    assert_eq!(approved["approval"]["outcome"], "approved", "{approved}");
    assert_eq!(
        approved["approval"]["proposal_sha256"],
        approved["metadata"]["aml-proposal-sha256"]
    );
    assert_eq!(approved["response"]["amount_minor"], "1250");

    // A deadline during approval: blocked, never sent.
    let late = client(&address, &["call", REFUND, &refund, "0.6"]);
    assert_eq!(
        (late["code"].as_str(), reason(&late)),
        (Some("DEADLINE_EXCEEDED"), "approval_error"),
        "{late}"
    );

    // A caller that cancels while approval waits: the request is withdrawn, never sent.
    let cancelled = client(&address, &["cancel", &page, REFUND, &refund]);
    assert_eq!(
        cancelled,
        json!({"was_pending": true, "cancelled": true, "still_pending": false})
    );

    // The upstream's NOT_FOUND, with its details, reaches the client.
    let missing = client(&address, &["call", LOOKUP, r#"{"order_id": "A-404"}"#]);
    assert_eq!(missing["code"], "NOT_FOUND", "{missing}");
    assert_eq!(missing["message"], "order A-404 not found");
    assert_eq!(
        missing["details"][0]["resource_info"]["resource_name"], "A-404",
        "{missing}"
    );

    // Unknown fields, hostile bytes and unlisted methods: statuses with ErrorInfo.
    let unknown = client(&address, &["raw", LOOKUP, "0a03412d317801"]);
    assert_eq!(
        (unknown["code"].as_str(), reason(&unknown)),
        (Some("INVALID_ARGUMENT"), "invalid_arguments"),
        "{unknown}"
    );
    for hostile in ["0a05412d31", "0801", "0a03412d31ff"] {
        let refused = client(&address, &["raw", LOOKUP, hostile]);
        assert_eq!(
            (refused["code"].as_str(), reason(&refused)),
            (Some("INVALID_ARGUMENT"), "malformed_request"),
            "{hostile}: {refused}"
        );
    }
    let unlisted = client(
        &address,
        &["call", "payments.v1.Payments/Cancel", r#"{"order_id": "A-1"}"#],
    );
    assert_eq!(reason(&unlisted), "invalid_or_unregistered_call", "{unlisted}");

    // The server-streaming method, relayed ungated.
    let watched = client(
        &address,
        &[
            "stream",
            "payments.v1.Payments/Watch",
            r#"{"order_id": "A-1", "count": 3}"#,
        ],
    );
    assert_eq!(watched["events"].as_array().map(Vec::len), Some(3), "{watched}");
    assert!(gate.alive(), "the gateway survived every hostile message");

    // The upstream saw only what was allowed, each byte for byte the frozen message.
    let seen = upstream_log(&log);
    let methods: Vec<&str> = seen.iter().map(|l| l["method"].as_str().unwrap()).collect();
    assert_eq!(methods, ["Lookup", "Refund", "Lookup", "Watch"], "{seen:?}");
    assert_eq!(seen[0]["hex"], allowed["sent_hex"]);
    // The caller's deadline (10 s; grpcio's header rounds it up a little, to 10.1 s) went on
    // with the time left; only allowed metadata crossed.
    let left = seen[0]["time_remaining"].as_f64().unwrap();
    assert!(left > 1.0 && left <= 10.2, "{seen:?}");
    assert_eq!(
        (seen[0]["x_request_id"].as_str(), seen[0]["x_secret"].as_str()),
        (Some("req-7"), None)
    );
    assert_eq!(seen[1]["hex"], approved["sent_hex"]);
    assert_eq!(seen[2]["hex"], missing["sent_hex"]);
    let hex = |i: usize| seen[i]["hex"].as_str().unwrap().to_owned();
    let lookup_digest = digest_of(
        &pool,
        LOOKUP,
        &hex(0),
        "lookup_order",
        Effect::Read,
        "Look up an order",
        "A-1",
    );
    assert_eq!(allowed["metadata"]["aml-proposal-sha256"], lookup_digest.as_str());
    let refund_digest = digest_of(
        &pool,
        REFUND,
        &hex(1),
        "refund_order",
        Effect::Pay,
        "Refund an order",
        "ok@example.test",
    );
    assert_eq!(
        approved["metadata"]["aml-proposal-sha256"],
        refund_digest.as_str()
    );
    // 2^63-1 arrived exact: the upstream echoed it, and its bytes decode to it.
    let arrived = aml_grpc_gate::transcode::to_json(
        &pool.get_message_by_name("payments.v1.LookupRequest").unwrap(),
        &(0..hex(0).len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex(0)[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&arrived).unwrap()["cursor"],
        MAX_I64
    );

    // Every call left a record; the relayed stream's says it was not gated.
    drop(gate);
    let records = std::fs::read_to_string(&receipts).unwrap();
    assert!(
        records.lines().any(|l| l.contains("relayed ungated")),
        "{records}"
    );
    assert!(records.lines().count() >= 9, "{records}");
    descriptor_file_gateway(&dir, &descriptors, &upstream_url, &log);
}

/// The same upstream, its types from the descriptor set file instead of reflection.
fn descriptor_file_gateway(dir: &Path, descriptors: &Path, upstream_url: &str, log: &Path) {
    let files = |p: &str| dir.join(p).display().to_string();
    let (_gate, address, _) = gateway(&[
        "--upstream",
        upstream_url,
        "--tools",
        &files("tools.json"),
        "--policy",
        &files("policy.json"),
        "--descriptors",
        &descriptors.display().to_string(),
    ]);
    let before = upstream_log(log).len();
    let allowed = client(
        &address,
        &[
            "call",
            LOOKUP,
            r#"{"order_id": "A-1", "cursor": "-9223372036854775808"}"#,
        ],
    );
    assert_eq!(allowed["response"]["cursor"], "-9223372036854775808", "{allowed}");
    // Without --approve, an approval rule blocks: nothing is sent.
    let unapproved = client(
        &address,
        &["call", REFUND, r#"{"customer": {"email": "ok@example.test"}}"#],
    );
    assert_eq!(reason(&unapproved), "approval_unavailable", "{unapproved}");
    assert_eq!(upstream_log(log).len(), before + 1);
}

//! Every receipt reason value is produced by at least one real scenario, through the
//! guarded tool and the boundary (no receipt is built by hand here).

use std::collections::BTreeSet;
use std::sync::Arc;

use aml_core::{
    approval_fn, async_trait, tool_fn, ActionBoundary, Approval, ApprovalError, ArgumentSnapshot, ClaimError,
    ClaimStatus, Effect, GrantRef, GrantStore, GuardedTool, LivePolicy, MapperError, Policy, ReceiptReason,
    Sha256Digest, ToolError,
};
use serde_json::{json, Value};

#[derive(Debug)]
struct Store(Result<ClaimStatus, &'static str>);

#[async_trait]
impl GrantStore for Store {
    async fn claim(&self, _: &GrantRef) -> Result<ClaimStatus, ClaimError> {
        self.0.map_err(ClaimError::new)
    }
}

fn policy(requires_approval: bool) -> LivePolicy {
    LivePolicy::new(Policy::from_value(
        &json!({"protocol": "aml-action-policy/1", "rules": [
            {"tool": "send_message", "effect": "send", "resource": "team@example.test", "requires_approval": requires_approval}
        ]}),
    ))
}

fn to(s: &ArgumentSnapshot) -> Result<String, MapperError> {
    s.str("to")
        .map(str::to_owned)
        .ok_or_else(|| MapperError::new("no to"))
}

#[derive(Clone, Copy)]
enum Approve {
    None,
    Yes,
    No,
    Stale,
    Fail,
    Revoke,
}

/// What the tool does when it is called.
#[derive(Clone, Copy)]
enum Runs {
    Returns,
    Fails,
    NotEntered,
}

fn tool(
    requires_approval: bool,
    approve: Approve,
    store: Option<Store>,
    executor: Option<Runs>,
) -> GuardedTool {
    let live = policy(requires_approval);
    let revoker = live.clone();
    let mut b =
        GuardedTool::builder("send_message", Effect::Send, "Send a status update", live).resource_for(to);
    if let Some(store) = store {
        b = b.grants(store);
    }
    if let Some(runs) = executor {
        b = b.executor(tool_fn(move |_| async move {
            match runs {
                Runs::Returns => Ok(json!(true)),
                Runs::Fails => Err(ToolError::new("down")),
                Runs::NotEntered => {
                    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
                    Err(ToolError::not_entered("no connection", refused))
                }
            }
        }));
    }
    if !matches!(approve, Approve::None) {
        b = b.approval(approval_fn(move |req| {
            let d = req.proposal().digest();
            if matches!(approve, Approve::Revoke) {
                revoker.revoke("send_message", Effect::Send, "team@example.test");
            }
            async move {
                match approve {
                    Approve::No => Ok(Approval::decline(d)),
                    Approve::Stale => Ok(Approval::approve(Sha256Digest::of(b"stale"))),
                    Approve::Fail => Err(ApprovalError::new("down")),
                    _ => Ok(Approval::approve(d)),
                }
            }
        }));
    }
    b.build().unwrap()
}

#[test]
fn every_receipt_reason_is_reachable() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let team = json!({"to": "team@example.test", "body": "b"});
    let mut seen = BTreeSet::new();
    let mut record = |out: aml_core::DispatchOutcome| {
        seen.insert(out.receipt().reason());
    };
    let ok = || Some(Store(Ok(ClaimStatus::Claimed)));
    for (t, args) in [
        (tool(true, Approve::Yes, ok(), Some(Runs::Returns)), team.clone()),
        (tool(true, Approve::Yes, ok(), Some(Runs::Fails)), team.clone()),
        (
            tool(true, Approve::Yes, ok(), Some(Runs::NotEntered)),
            team.clone(),
        ),
        (
            tool(true, Approve::Yes, ok(), Some(Runs::Returns)),
            json!({"to": "other@example.test"}),
        ),
        (
            tool(true, Approve::Yes, ok(), Some(Runs::Returns)),
            json!({"to": " "}),
        ),
        (
            tool(true, Approve::Yes, ok(), Some(Runs::Returns)),
            json!({"to": "team@example.test", "b": "x".repeat(70_000)}),
        ),
        (tool(true, Approve::Yes, ok(), None), team.clone()),
        (tool(true, Approve::None, ok(), Some(Runs::Returns)), team.clone()),
        (tool(true, Approve::Fail, ok(), Some(Runs::Returns)), team.clone()),
        (tool(true, Approve::No, ok(), Some(Runs::Returns)), team.clone()),
        (
            tool(true, Approve::Stale, ok(), Some(Runs::Returns)),
            team.clone(),
        ),
        (
            tool(true, Approve::Revoke, ok(), Some(Runs::Returns)),
            team.clone(),
        ),
        (
            tool(true, Approve::Yes, Some(Store(Err("down"))), Some(Runs::Returns)),
            team.clone(),
        ),
        (
            tool(
                true,
                Approve::Yes,
                Some(Store(Ok(ClaimStatus::AlreadyClaimed))),
                Some(Runs::Returns),
            ),
            team.clone(),
        ),
    ] {
        record(rt.block_on(t.call(&args)).unwrap());
    }
    let guarded = tool(false, Approve::None, None, Some(Runs::Returns));
    // Not `json!`: it would already have turned NaN into null.
    #[derive(serde::Serialize)]
    struct WithNumber {
        to: &'static str,
        n: f64,
    }
    record(
        rt.block_on(guarded.call(&WithNumber {
            to: "team@example.test",
            n: f64::NAN,
        }))
        .unwrap(),
    );
    record(
        rt.block_on(guarded.call(&std::collections::BTreeMap::from([("to", u128::MAX)])))
            .unwrap(),
    );
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    for text in [
        "{".to_owned(),
        r#"{"to":"a","to":"b"}"#.to_owned(),
        r#"{"to":"\udc00"}"#.to_owned(),
        r#"{"to":1e400}"#.to_owned(),
        format!(r#"{{"to":{deep}}}"#),
        " ".repeat(2 << 20),
    ] {
        record(rt.block_on(guarded.call_json(text)).unwrap());
    }
    record(rt.block_on(guarded.call_json(b"{\"to\":\"\xff\"}")).unwrap());

    let ambiguous = ActionBoundary::builder(Arc::new(Policy::from_value(
        &json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "t", "effect": "read", "resource": "r", "requires_approval": false},
        {"tool": "t", "effect": "read", "resource": "r", "requires_approval": false}]}),
    )))
    .build();
    let broken = ActionBoundary::builder(Arc::new(Policy::from_value(&json!({"protocol": "nope"})))).build();
    let proposal: Value = json!({"protocol": "aml-proposed-action/1", "tool": "t", "effect": "read",
                                 "resource": "r", "purpose": "p", "arguments": {}});
    record(rt.block_on(ambiguous.run(&proposal)));
    record(rt.block_on(broken.run(&proposal)));
    let cedar = ActionBoundary::builder(Arc::new(Policy::from_cedar(
        r#"forbid(principal, action, resource == Resource::"f");
           permit(principal, action, resource == Resource::"e") when { context.arguments.x > 1 };"#,
        None,
    )))
    .build();
    for resource in ["f", "e", "none"] {
        let mut proposal = proposal.clone();
        proposal["resource"] = json!(resource);
        record(rt.block_on(cedar.run(&proposal)));
    }

    let all: BTreeSet<ReceiptReason> = ReceiptReason::ALL.iter().copied().collect();
    let missing: Vec<_> = all.difference(&seen).collect();
    assert!(missing.is_empty(), "no scenario produced {missing:?}");
}

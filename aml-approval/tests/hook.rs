//! `SignedApprovalHook`: only a valid, current, approving statement for the exact digest
//! dispatches, once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_approval::{
    ApproverKey, ChannelError, DecisionChannel, Keyring, PendingApproval, SignedApprovalHook,
    SignedStatement, Statement, Verdict, STATEMENT_PROTOCOL,
};
use aml_core::{async_trait, tool_fn, ArgumentSnapshot, Effect, GuardedTool, Policy, ReceiptReason};
use aml_grants::MemoryGrants;
use serde_json::json;

/// How the stand-in approver answers.
#[derive(Debug, Clone)]
enum Answer {
    Sign {
        decision: Verdict,
        other_digest: bool,
        expired: bool,
    },
    Replay,
    Tamper,
    Never,
}

#[derive(Debug)]
struct Scripted {
    key: ApproverKey,
    answer: Answer,
    last: Mutex<Option<SignedStatement>>,
}

#[async_trait]
impl DecisionChannel for Scripted {
    async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError> {
        let (decision, other_digest, expired) = match &self.answer {
            Answer::Never => std::future::pending().await,
            Answer::Replay => {
                if let Some(old) = self.last.lock().unwrap().clone() {
                    return Ok(old);
                }
                (Verdict::Approve, false, false)
            }
            Answer::Tamper => (Verdict::Deny, false, false),
            Answer::Sign {
                decision,
                other_digest,
                expired,
            } => (*decision, *other_digest, *expired),
        };
        let digest = if other_digest {
            aml_core::Sha256Digest::of(b"other").to_string()
        } else {
            pending.proposal.digest().to_string()
        };
        let now = aml_grants::Clock::now_ms(&aml_grants::SystemClock);
        let mut signed = Statement {
            protocol: STATEMENT_PROTOCOL.into(),
            proposal_sha256: digest,
            grant_id: pending.grant_id,
            approver_key_id: self.key.key_id().into(),
            decision,
            issued_at_ms: now,
            expires_at_ms: if expired { now - 1 } else { now + 60_000 },
        }
        .sign(&self.key)
        .unwrap();
        if matches!(self.answer, Answer::Tamper) {
            signed.statement.decision = Verdict::Approve;
        }
        *self.last.lock().unwrap() = Some(signed.clone());
        Ok(signed)
    }
}

fn tool(answer: Answer, key_in_ring: bool, calls: Arc<AtomicUsize>) -> GuardedTool {
    let key = ApproverKey::generate("alice").unwrap();
    let ring = if key_in_ring {
        Keyring::new().with_key("alice", &key.public_key_hex()).unwrap()
    } else {
        Keyring::new()
    };
    let grants = Arc::new(MemoryGrants::default());
    let channel = Arc::new(Scripted {
        key,
        answer,
        last: Mutex::default(),
    });
    let hook =
        SignedApprovalHook::new(ring, channel, grants.clone()).with_timeout(Duration::from_millis(200));
    let policy = Arc::new(Policy::from_value(
        &json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_message", "effect": "send", "resource": "team@example.test", "requires_approval": true}]}),
    ));
    GuardedTool::builder("send_message", Effect::Send, "Send a status update", policy)
        .resource_for(|a: &ArgumentSnapshot| Ok(a.str("to").unwrap_or_default().to_owned()))
        .approval(hook)
        .grants_arc(grants)
        .executor(tool_fn(move |_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({"sent": true})) }
        }))
        .build()
        .unwrap()
}

async fn reason(t: &GuardedTool) -> ReceiptReason {
    t.call(&json!({"to": "team@example.test", "body": "hi"}))
        .await
        .unwrap()
        .receipt()
        .reason()
}

#[tokio::test]
async fn a_valid_signed_approval_dispatches_once_and_its_replay_is_refused() {
    let calls = Arc::new(AtomicUsize::new(0));
    let t = tool(Answer::Replay, true, Arc::clone(&calls));
    assert_eq!(reason(&t).await, ReceiptReason::HostDispatchReturned);
    // The same signed statement again: its grant is already spent.
    assert_eq!(reason(&t).await, ReceiptReason::ApprovalReusedOrExpired);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn anything_but_a_valid_current_approval_blocks() {
    let sign = |decision, other_digest, expired| Answer::Sign {
        decision,
        other_digest,
        expired,
    };
    let cases = [
        (
            sign(Verdict::Deny, false, false),
            true,
            ReceiptReason::ApprovalMissingOrMismatched,
        ),
        (
            sign(Verdict::Approve, true, false),
            true,
            ReceiptReason::ApprovalMissingOrMismatched,
        ),
        (
            sign(Verdict::Approve, false, true),
            true,
            ReceiptReason::ApprovalMissingOrMismatched,
        ),
        (
            sign(Verdict::Approve, false, false),
            false,
            ReceiptReason::ApprovalError,
        ),
        (Answer::Tamper, true, ReceiptReason::ApprovalError),
        (Answer::Never, true, ReceiptReason::ApprovalError),
    ];
    let calls = Arc::new(AtomicUsize::new(0));
    for (answer, known, expected) in cases {
        let t = tool(answer.clone(), known, Arc::clone(&calls));
        assert_eq!(reason(&t).await, expected, "{answer:?} known={known}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_decisions_are_journaled_before_they_count() {
    let dir = std::env::temp_dir().join(format!("aml-approval-journal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = Arc::new(aml_grants::SqliteStore::open(dir.join("boundary.db")).unwrap());
    let key = ApproverKey::generate("alice").unwrap();
    let ring = Keyring::new().with_key("alice", &key.public_key_hex()).unwrap();
    let channel = Arc::new(Scripted {
        key,
        answer: Answer::Replay,
        last: Mutex::default(),
    });
    let hook = SignedApprovalHook::new(ring, channel, store.clone()).with_journal(store.clone());
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let policy = Arc::new(Policy::from_value(
        &json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "send_message", "effect": "send", "resource": "team@example.test", "requires_approval": true}]}),
    ));
    let t = GuardedTool::builder("send_message", Effect::Send, "Send a status update", policy)
        .resource_for(|a: &ArgumentSnapshot| Ok(a.str("to").unwrap_or_default().to_owned()))
        .approval(hook)
        .grants_arc(store.clone())
        .executor(tool_fn(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({"sent": true})) }
        }))
        .build()
        .unwrap();
    let out = t
        .call(&json!({"to": "team@example.test", "body": "hi"}))
        .await
        .unwrap();
    assert_eq!(out.receipt().reason(), ReceiptReason::HostDispatchReturned);
    // The replayed statement is journaled too, and refused by the claim.
    assert_eq!(reason(&t).await, ReceiptReason::ApprovalReusedOrExpired);
    let digest = out.plan().proposal_sha256().unwrap().to_string();
    let decisions = store.decisions_for(&digest).await.unwrap();
    assert_eq!(decisions.len(), 2);
    assert!(decisions
        .iter()
        .all(|(d, statement)| d == "approve" && statement.contains("\"signature\"")));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

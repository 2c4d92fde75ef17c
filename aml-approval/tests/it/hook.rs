//! `SignedApprovalHook`: only a valid, current, approving statement for the exact digest
//! and the grant id of this very request dispatches, once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_approval::{
    ApproverKey, ChannelError, DecisionChannel, Keyring, PendingApproval, SignedApprovalHook,
    SignedStatement, Statement, StatementDecision, Validity, MAX_SAFE_INTEGER,
};
use aml_core::testing;
use aml_core::{async_trait, tool_fn, GuardedTool, Policy, ReceiptReason};
use aml_grants::{Clock, MemoryGrants, SystemClock};
use serde_json::json;

const DAY_MS: i64 = 24 * 3600 * 1000;

/// How the stand-in approver answers.
#[derive(Debug, Clone)]
enum Answer {
    /// Signs a statement; offsets are from now, in ms.
    Sign {
        decision: StatementDecision,
        other_digest: bool,
        other_grant: bool,
        issued: i64,
        expires: i64,
    },
    /// Hands back the statement kept in the shared slot (signed for an earlier request),
    /// or signs a fresh approval and keeps it there.
    Replay(Arc<Mutex<Option<SignedStatement>>>),
    /// Signs a denial and edits it into an approval.
    Tamper,
    /// Never answers.
    Never,
}

fn approval() -> Answer {
    Answer::Sign {
        decision: StatementDecision::Approve,
        other_digest: false,
        other_grant: false,
        issued: 0,
        expires: 60_000,
    }
}

#[derive(Debug)]
struct Scripted {
    key: ApproverKey,
    answer: Answer,
}

impl Scripted {
    fn sign(&self, pending: PendingApproval, answer: &Answer) -> SignedStatement {
        let Answer::Sign {
            decision,
            other_digest,
            other_grant,
            issued,
            expires,
        } = answer.clone()
        else {
            unreachable!()
        };
        let digest = if other_digest {
            aml_core::Sha256Digest::of(b"other")
        } else {
            pending.proposal.digest()
        };
        let grant = if other_grant {
            "another-grant".to_owned()
        } else {
            pending.grant_id
        };
        let now = SystemClock.now_ms();
        let validity = Validity::new(
            (now + issued).min(MAX_SAFE_INTEGER),
            (now + expires).min(MAX_SAFE_INTEGER),
        )
        .unwrap();
        Statement::new(digest, grant, self.key.key_id(), decision, validity)
            .sign(&self.key)
            .unwrap()
    }
}

#[async_trait]
impl DecisionChannel for Scripted {
    async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError> {
        Ok(match &self.answer {
            Answer::Never => std::future::pending().await,
            Answer::Replay(slot) => {
                let kept = slot.lock().unwrap().clone();
                match kept {
                    Some(old) => old,
                    None => {
                        let fresh = self.sign(pending, &approval());
                        *slot.lock().unwrap() = Some(fresh.clone());
                        fresh
                    }
                }
            }
            Answer::Tamper => {
                let deny = Answer::Sign {
                    decision: StatementDecision::Deny,
                    other_digest: false,
                    other_grant: false,
                    issued: 0,
                    expires: 60_000,
                };
                let text = self.sign(pending, &deny).to_value().to_string();
                SignedStatement::from_json(&text.replace("\"deny\"", "\"approve\"")).unwrap()
            }
            sign => self.sign(pending, sign),
        })
    }
}

fn policy() -> Arc<Policy> {
    testing::send_message_policy(true)
}

/// A guarded tool whose approvals come from `answer`, signed by `key`, checked against a
/// keyring holding `key` when `key_in_ring`; its own in-memory grant store.
fn tool(key: ApproverKey, answer: Answer, key_in_ring: bool, calls: Arc<AtomicUsize>) -> GuardedTool {
    let ring = if key_in_ring {
        Keyring::new().with_approver(&key).unwrap()
    } else {
        Keyring::new()
    };
    let grants = Arc::new(MemoryGrants::default());
    let channel = Arc::new(Scripted { key, answer });
    let hook =
        SignedApprovalHook::new(ring, channel, grants.clone()).with_timeout(Duration::from_millis(200));
    testing::send_message(policy())
        .approval(hook)
        .grants_arc(grants)
        .executor(tool_fn(move |_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({"sent": true})) }
        }))
        .build()
        .unwrap()
}

fn alice() -> ApproverKey {
    ApproverKey::generate("alice").unwrap()
}

async fn reason(t: &GuardedTool) -> ReceiptReason {
    t.call(&json!({"to": "team@example.test", "body": "hi"}))
        .await
        .unwrap()
        .receipt()
        .reason()
}

#[tokio::test]
async fn a_statement_approves_only_the_request_whose_grant_it_names() {
    let calls = Arc::new(AtomicUsize::new(0));
    let slot = Arc::default();
    let t = tool(
        alice(),
        Answer::Replay(Arc::clone(&slot)),
        true,
        Arc::clone(&calls),
    );
    assert_eq!(reason(&t).await, ReceiptReason::HostDispatchReturned);
    // Request 2 is identical, but its grant id is new: request 1's statement does not
    // approve it.
    assert_eq!(reason(&t).await, ReceiptReason::ApprovalMissingOrMismatched);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn one_statement_replayed_to_a_second_store_does_not_dispatch_again() {
    let calls = Arc::new(AtomicUsize::new(0));
    let slot: Arc<Mutex<Option<SignedStatement>>> = Arc::default();
    let key = alice();
    let twin = ApproverKey::from_json(&key.to_json()).unwrap();
    let first = tool(key, Answer::Replay(Arc::clone(&slot)), true, Arc::clone(&calls));
    let second = tool(twin, Answer::Replay(Arc::clone(&slot)), true, Arc::clone(&calls));
    assert_eq!(reason(&first).await, ReceiptReason::HostDispatchReturned);
    assert!(slot.lock().unwrap().is_some());
    assert_eq!(reason(&second).await, ReceiptReason::ApprovalMissingOrMismatched);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn anything_but_a_valid_current_approval_of_this_request_blocks() {
    let sign = |decision, other_digest, other_grant, issued, expires| Answer::Sign {
        decision,
        other_digest,
        other_grant,
        issued,
        expires,
    };
    let (approve, deny) = (StatementDecision::Approve, StatementDecision::Deny);
    let mismatched = ReceiptReason::ApprovalMissingOrMismatched;
    let cases = [
        ("deny", sign(deny, false, false, 0, 60_000), true, mismatched),
        (
            "other digest",
            sign(approve, true, false, 0, 60_000),
            true,
            mismatched,
        ),
        (
            "other grant id",
            sign(approve, false, true, 0, 60_000),
            true,
            mismatched,
        ),
        (
            "expired",
            sign(approve, false, false, -60_000, -1),
            true,
            mismatched,
        ),
        (
            "issued ten years ahead",
            sign(approve, false, false, 3650 * DAY_MS, 3650 * DAY_MS + 60_000),
            true,
            mismatched,
        ),
        (
            "issued a minute ahead",
            sign(approve, false, false, 60_000, 120_000),
            true,
            mismatched,
        ),
        (
            "valid until 2^53 - 1",
            sign(approve, false, false, 0, MAX_SAFE_INTEGER),
            true,
            mismatched,
        ),
        (
            "valid a day and a second",
            sign(approve, false, false, 0, DAY_MS + 1_000),
            true,
            mismatched,
        ),
        ("unknown key", approval(), false, ReceiptReason::ApprovalError),
        ("tampered", Answer::Tamper, true, ReceiptReason::ApprovalError),
        ("no answer", Answer::Never, true, ReceiptReason::ApprovalError),
    ];
    let calls = Arc::new(AtomicUsize::new(0));
    for (name, answer, known, expected) in cases {
        let t = tool(alice(), answer, known, Arc::clone(&calls));
        assert_eq!(reason(&t).await, expected, "{name}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // Within the clock skew, and a fresh approval, dispatch.
    for answer in [sign(approve, false, false, 10_000, 70_000), approval()] {
        let t = tool(alice(), answer, true, Arc::clone(&calls));
        assert_eq!(reason(&t).await, ReceiptReason::HostDispatchReturned);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_decisions_are_journaled_before_they_count() {
    let dir = aml_test_support::scratch_dir("approval", "journal");
    let store = Arc::new(aml_grants::SqliteStore::open(dir.join("boundary.db")).unwrap());
    let key = alice();
    let ring = Keyring::new().with_approver(&key).unwrap();
    let channel = Arc::new(Scripted {
        key,
        answer: Answer::Replay(Arc::default()),
    });
    let hook = SignedApprovalHook::new(ring, channel, store.clone()).with_journal(store.clone());
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let t = testing::send_message(policy())
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
    // The replayed statement is journaled too, and refused: it names the first grant.
    assert_eq!(reason(&t).await, ReceiptReason::ApprovalMissingOrMismatched);
    let digest = out.plan().proposal_sha256().unwrap().to_string();
    let decisions = store.decisions_for(&digest).await.unwrap();
    assert_eq!(decisions.len(), 2);
    assert!(decisions
        .iter()
        .all(|(d, statement)| d == "approve" && statement.contains("\"signature\"")));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// Keeps the expiry each pending approval is shown with, and never answers.
#[derive(Debug, Default)]
struct Watching(Mutex<Vec<Option<i64>>>);

#[async_trait]
impl DecisionChannel for Watching {
    async fn decide(&self, pending: PendingApproval) -> Result<SignedStatement, ChannelError> {
        self.0.lock().unwrap().push(pending.expires_at_ms);
        std::future::pending().await
    }
}

#[tokio::test]
async fn the_person_is_shown_the_callers_deadline_when_it_is_sooner_than_the_timeout() {
    let channel = Arc::new(Watching::default());
    let grants = Arc::new(MemoryGrants::default());
    let hook = SignedApprovalHook::new(
        Keyring::new().with_approver(&alice()).unwrap(),
        channel.clone(),
        grants.clone(),
    )
    .with_timeout(Duration::from_secs(300));
    let tool = testing::send_message(policy())
        .approval(hook)
        .grants_arc(grants)
        .executor(tool_fn(|_| async { Ok(json!(null)) }))
        .build()
        .unwrap();
    let asked_at = SystemClock.now_ms();
    let at = std::time::Instant::now() + Duration::from_millis(400);
    let deadline = aml_core::Deadline::new(at, tokio::time::sleep_until(at.into()));
    let text = testing::send_message_args().to_string();
    let outcome = tool.call_json_until(text, deadline).await.unwrap();
    assert_eq!(outcome.receipt().reason(), ReceiptReason::ApprovalError);
    let shown = channel.0.lock().unwrap().clone();
    let [Some(expires_at_ms)] = shown[..] else {
        panic!("one pending approval with an expiry: {shown:?}")
    };
    // The deadline (400 ms away), not the hook's 300 s.
    let left = expires_at_ms - asked_at;
    assert!((0..=400).contains(&left), "{left} ms");
}

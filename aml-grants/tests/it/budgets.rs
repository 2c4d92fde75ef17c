//! Budgets on the durable stores (`context.usage`): two replicas — two stores on one SQLite
//! file, or on one PostgreSQL database — behind two gates share each caller's count; the
//! 21st send within an hour asks for approval whichever replica takes it, and 64 calls
//! racing at a budget's edge over-run it by none.

use std::sync::Arc;

use aml_core::testing::{CountingTool, LockstepUsage};
use aml_core::{
    ActionBoundary, CallOutcome, CallRequest, Caller, Counted, Effect, Policy, ResourceRule, TokioRuntime,
    ToolCatalog, ToolGate, ToolRegistration, UsageLedger,
};
use serde_json::json;

/// Twenty sends an hour without asking, then ask.
const BUDGET: &str = r#"
permit(principal, action == Action::"send", resource) when { context.usage.hour < 20 };
@approval("required")
permit(principal, action == Action::"send", resource) when { context.usage.hour >= 20 };
"#;

fn gate(ledger: Arc<dyn UsageLedger>) -> ToolGate {
    let catalog = ToolCatalog::new()
        .with(
            ToolRegistration::new(
                "send",
                Effect::Send,
                "p",
                ResourceRule::Argument("to".into()),
                json!({}),
            )
            .unwrap(),
        )
        .unwrap();
    let boundary = ActionBoundary::builder(Arc::new(Policy::from_cedar(BUDGET, None)))
        .usage(ledger)
        .build();
    ToolGate::new(catalog, boundary)
        .for_adapter("test")
        .with_runtime(TokioRuntime)
}

fn send(
    gate: &ToolGate,
    caller: &Caller,
    n: usize,
) -> impl std::future::Future<Output = CallOutcome> + Send + 'static {
    gate.call(
        CallRequest::value("send", json!({"to": "team", "n": n}))
            .caller(caller.clone())
            .executor(Arc::new(CountingTool::new())),
    )
}

/// A caller no earlier run of the tests used (the PostgreSQL database outlives a run).
fn fresh_caller(tag: &str) -> Caller {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    Caller::new(&format!("{tag}-{}-{nanos}", std::process::id())).unwrap()
}

/// The 21st send of one caller, alternating between two replicas, asks for approval.
pub(crate) async fn twenty_first_send_asks(replicas: [Arc<dyn UsageLedger>; 2], tag: &str) {
    let caller = fresh_caller(tag);
    let gates = replicas.map(gate);
    for n in 0..20 {
        let outcome = send(&gates[n % 2], &caller, n).await;
        assert_eq!(
            (outcome.status(), outcome.reason()),
            ("dispatched", "host_dispatch_returned"),
            "send {n}"
        );
    }
    let outcome = send(&gates[1], &caller, 20).await;
    assert_eq!(
        (outcome.status(), outcome.reason()),
        ("blocked", "approval_unavailable")
    );
    // Another caller has a budget of its own.
    let other = send(&gates[0], &fresh_caller(&format!("{tag}-other")), 0).await;
    assert_eq!(other.status(), "dispatched");
}

/// With 19 sends counted, 64 sends racing through two replicas: exactly one runs without
/// asking, and the count ends at 20.
pub(crate) async fn racing_calls_over_run_by_none(replicas: [Arc<dyn UsageLedger>; 2], tag: &str) {
    let caller = fresh_caller(tag);
    for _ in 0..19 {
        let seen = replicas[0].usage(&caller, "send").await.unwrap();
        assert_eq!(
            replicas[0].count_if(&caller, "send", seen).await.unwrap(),
            Counted::Counted
        );
    }
    // Every racing call, through either replica, reads the usage before any is counted.
    let first = LockstepUsage::new(Arc::clone(&replicas[0]), 64);
    let gates = [
        gate(Arc::new(first.clone())),
        gate(Arc::new(first.sharing(Arc::clone(&replicas[1])))),
    ];
    let calls: Vec<_> = (0..64)
        .map(|n| tokio::spawn(send(&gates[n % 2], &caller, n)))
        .collect();
    let mut dispatched = 0;
    let mut asked = 0;
    for call in calls {
        let outcome = call.await.unwrap();
        match (outcome.status(), outcome.reason()) {
            ("dispatched", _) => dispatched += 1,
            ("blocked", "approval_unavailable") => asked += 1,
            other => panic!("unexpected outcome {other:?}: {:?}", outcome.detail()),
        }
    }
    assert_eq!((dispatched, asked), (1, 63), "one send was left under the budget");
    let usage = replicas[1].usage(&caller, "send").await.unwrap();
    assert_eq!(usage.hour, 20, "the budget was over-run by none");
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use aml_grants::SqliteStore;

    fn replicas(tag: &str) -> [Arc<dyn UsageLedger>; 2] {
        let path = crate::common::temp_db(tag);
        [
            Arc::new(SqliteStore::open(&path).unwrap()),
            Arc::new(SqliteStore::open(&path).unwrap()),
        ]
    }

    #[test]
    fn sqlite_the_21st_send_within_an_hour_asks_across_two_stores_on_one_file() {
        crate::common::rt().block_on(twenty_first_send_asks(replicas("budget-21st"), "sqlite-21st"));
    }

    #[test]
    fn sqlite_64_racing_sends_over_run_a_budget_by_none() {
        crate::common::rt().block_on(racing_calls_over_run_by_none(
            replicas("budget-race"),
            "sqlite-race",
        ));
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use aml_grants::{GrantLifetimes, PostgresStore};

    async fn replicas() -> [Arc<dyn UsageLedger>; 2] {
        let url = std::env::var("AML_POSTGRES_URL").expect(
            "AML_POSTGRES_URL is not set: point it at a PostgreSQL server (scripts/test uses \
             host=127.0.0.1 port=5432 user=postgres dbname=test)",
        );
        let connect = || async {
            PostgresStore::connect(&url, GrantLifetimes::default())
                .await
                .unwrap_or_else(|e| panic!("PostgreSQL at {url:?} is unreachable: {e}"))
        };
        [Arc::new(connect().await), Arc::new(connect().await)]
    }

    #[test]
    fn postgres_the_21st_send_within_an_hour_asks_across_two_replicas() {
        let rt = crate::common::rt();
        let replicas = rt.block_on(replicas());
        rt.block_on(twenty_first_send_asks(replicas, "pg-21st"));
    }

    #[test]
    fn postgres_64_racing_sends_through_two_replicas_over_run_a_budget_by_none() {
        let rt = crate::common::rt();
        let replicas = rt.block_on(replicas());
        rt.block_on(racing_calls_over_run_by_none(replicas, "pg-race"));
    }
}

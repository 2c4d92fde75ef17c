//! One receipt stream: the same call through every adapter leaves records of one shape in the
//! host's sink — the same keys, the same digest, the same reason — each naming its adapter.

use std::collections::BTreeSet;

use aml_core::testing::{self, CountingTool};
use aml_core::{CallRecord, MemorySink, Sha256Digest};
use aml_testkit::matrix::{harness_for, ADAPTERS};
use aml_testkit::{Attempt, CallerArguments, MessageArgs};
use serde_json::Value;

/// Runs `args` once through `adapter` against a fresh documented tool whose boundary records
/// in its own sink; the records the sink received.
async fn records(adapter: &str, args: MessageArgs) -> (Vec<CallRecord>, Attempt) {
    let sink = MemorySink::new();
    let tool = testing::send_message(testing::send_message_policy(true))
        .approval(testing::approve_all())
        .executor(CountingTool::new())
        .sink(sink.clone())
        .build()
        .unwrap();
    let harness = harness_for(adapter).unwrap();
    let attempt = harness
        .call(std::sync::Arc::new(tool), &CallerArguments::new(args))
        .await
        .unwrap_or_else(|e| panic!("{adapter}: {e}"));
    (sink.calls(), attempt)
}

fn keys(record: &CallRecord) -> BTreeSet<String> {
    match record.to_value() {
        Value::Object(map) => map.keys().cloned().collect(),
        other => panic!("a record is an object: {other}"),
    }
}

fn digest_and_reason(record: &CallRecord) -> (Option<Sha256Digest>, String) {
    let receipt = record.receipt.as_ref().expect("a planned call has a receipt");
    (receipt.proposal_sha256(), receipt.reason().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_adapter_feeds_the_sink_the_same_record() {
    let cases = [
        (
            MessageArgs::new(testing::TEAM, "Build passed."),
            "host_dispatch_returned",
        ),
        (
            MessageArgs::new("outside@example.test", "Build passed."),
            "no_exact_rule",
        ),
    ];
    for (args, reason) in cases {
        let mut seen = Vec::new();
        for adapter in ADAPTERS {
            let (records, attempt) = records(adapter, args.clone()).await;
            assert!(
                matches!(attempt, Attempt::Completed { .. }),
                "{adapter}: {attempt:?}"
            );
            assert_eq!(records.len(), 1, "{adapter}: one record per call: {records:?}");
            let record = &records[0];
            assert_eq!(record.adapter, *adapter);
            assert_eq!(record.tool, testing::SEND_MESSAGE);
            assert_eq!(record.record, aml_core::CALL_RECORD_PROTOCOL);
            seen.push((adapter, keys(record), digest_and_reason(record), record.result));
        }
        let (_, first_keys, first, first_result) = &seen[0];
        assert_eq!(first.1, reason);
        assert_eq!(first_result.is_some(), reason == "host_dispatch_returned");
        assert!(
            first.0.is_some(),
            "an exact or no-exact-rule plan carries its digest"
        );
        for (adapter, keys, digest_reason, result) in &seen {
            assert_eq!(keys, first_keys, "{adapter}: one shape");
            assert_eq!(digest_reason, first, "{adapter}: same digest and reason");
            assert_eq!(
                result, first_result,
                "{adapter}: the same result digest (only when dispatched)"
            );
        }
    }
}

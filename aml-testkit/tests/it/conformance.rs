//! The cross-adapter conformance report through every built-in adapter: the same hostile
//! calls give the same status, reason, record and tool-entry count over each wire.

use aml_testkit::compare::CaseVerdict;
use aml_testkit::conformance::{conformance_with, probes};
use aml_testkit::matrix::{conformance_harness_for, ADAPTERS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_adapter_passes_every_probe_and_only_mcp_cannot_carry_unparsed_text() {
    let probes = probes();
    for adapter in ADAPTERS {
        let harness = conformance_harness_for(adapter).unwrap();
        let rows = conformance_with(harness.as_ref()).await;
        // Every probe, and the listing where the wire lists tools (A2UI does not).
        let listing = usize::from(*adapter != "a2ui");
        assert_eq!(rows.len(), probes.len() + listing, "{adapter}");
        for (id, verdict) in &rows {
            let unparsed_only = probes.iter().any(|p| p.id == id && p.unparsed_only);
            let expected = if *adapter == "mcp" && unparsed_only {
                CaseVerdict::PassWireRefused
            } else {
                CaseVerdict::Pass
            };
            assert_eq!(verdict, &expected, "{adapter} {id}");
        }
    }
}

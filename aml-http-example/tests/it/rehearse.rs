//! The proof an adapter gives: the 17 documented guarded-tool cases through its real wire
//! path (an `HttpToolServer` on loopback, called with hyper's client), in one testkit call.

use aml_testkit::http::HttpHarness;
use aml_testkit::{rehearse_with, CaseVerdict};

#[tokio::test]
async fn the_documented_cases_pass_over_http_on_loopback() {
    let report = rehearse_with(&HttpHarness).await;
    assert!(report.passed(), "{report}");
    assert_eq!(report.adapter(), "http");
    assert_eq!(report.cases().len(), 17);
    // The one documented deviation of every Rust adapter; HTTP carries every input, so
    // there is no wire refusal (`pass~`).
    let deviations: Vec<&str> = report.deviations().map(|c| c.id()).collect();
    assert_eq!(deviations, ["mapper_mutated"], "{report}");
    for case in report.cases().iter().filter(|c| c.id() != "mapper_mutated") {
        assert_eq!(*case.verdict(), CaseVerdict::Pass, "{}", case.id());
    }
    // The report is the one `aml-testkit rehearse guarded-tool --adapter http` prints.
    let json = report.report().expect("the harness ran");
    assert_eq!(json["protocol"], "aml-guarded-tool-rehearsal/2");
}

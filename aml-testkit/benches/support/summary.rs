//! The summary an interleaved benchmark writes for `scripts/perf-table`; shared by the
//! testkit's benches and `aml-grpc`'s (which includes this file by path).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Writes what an interleaved benchmark measured, for `scripts/perf-table` (which turns it
/// into the tables of docs/PERFORMANCE.md): `target/criterion/interleaved/BENCH.json`, with
/// when and at what load it ran. `rows`: one object per path (`name`, `p50_us`, `p99_us`, and
/// what else the bench measures); `goals`: `{"goal", "measured", "met"}` each.
pub(crate) fn write_summary(bench: &str, rows: Vec<serde_json::Value>, goals: Vec<serde_json::Value>) {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("criterion/interleaved");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let summary = serde_json::json!({"bench": bench, "measured_at": at,
        "load": load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        "rows": rows, "goals": goals});
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join(format!("{bench}.json")), summary.to_string()));
    if let Err(e) = written {
        eprintln!("{bench}: cannot write its summary under {}: {e}", dir.display());
    }
}

/// Microseconds, for summaries.
pub(crate) fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

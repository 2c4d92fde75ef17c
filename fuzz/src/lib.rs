//! What the fuzz targets share: value comparison as `JSON.parse` sees it, input splitting,
//! and a runtime on tokio's paused clock.

use serde_json::Value;

/// Whether two values are the same JSON value as `JSON.parse` would read them: numbers
/// compare as doubles (`1`, `1.0` and `1e0` are one value), keys regardless of order.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Splits fuzz input at the first `0xFF` byte (never part of UTF-8 text, so never part of a
/// JSON document): the parts of a two-document input. No separator: the second part is empty.
pub fn split_ff(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == 0xFF) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[]),
    }
}

/// A single-threaded runtime on the paused clock: timers fire as soon as every task waits.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

pub mod relay;

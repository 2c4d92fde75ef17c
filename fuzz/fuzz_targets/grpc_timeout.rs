//! The `grpc-timeout` header: accepted exactly when it is 1 to 8 ASCII digits and a unit
//! (`H M S m u n`), with the value an independent computation gives; never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = aml_grpc::parse_grpc_timeout(data);
    let expected = (|| {
        let (unit, digits) = data.split_last()?;
        if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n: u128 = std::str::from_utf8(digits).ok()?.parse().ok()?;
        let nanos_per: u128 = match unit {
            b'H' => 3_600_000_000_000,
            b'M' => 60_000_000_000,
            b'S' => 1_000_000_000,
            b'm' => 1_000_000,
            b'u' => 1_000,
            b'n' => 1,
            _ => return None,
        };
        Some(n * nanos_per)
    })();
    match (parsed, expected) {
        (Ok(d), Some(nanos)) => assert_eq!(d.as_nanos(), nanos),
        // The error echoes at most 32 input bytes, each at most 10 characters once escaped.
        (Err(e), None) => assert!(e.to_string().len() <= 100 + 32 * 10, "an unbounded error: {e}"),
        (got, want) => panic!(
            "{:?}: parsed {got:?}, expected {want:?}",
            String::from_utf8_lossy(data)
        ),
    }
});

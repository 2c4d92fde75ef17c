//! The caller's deadline: the `grpc-timeout` header, parsed as the gRPC HTTP/2 protocol
//! defines it, and the point by which the service answers.

use std::time::Duration;

use tokio::time::Instant;

/// A `grpc-timeout` header that is not `TimeoutValue TimeoutUnit`: 1 to 8 ASCII digits,
/// then one of `H M S m u n`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid grpc-timeout {shown:?}: expected 1 to 8 digits and a unit (H, M, S, m, u, n)")]
pub struct InvalidTimeout {
    shown: String,
}

impl InvalidTimeout {
    fn of(value: &[u8]) -> Self {
        // Echo a bounded, printable prefix: the header is the peer's.
        let shown = String::from_utf8_lossy(&value[..value.len().min(32)]).into_owned();
        InvalidTimeout { shown }
    }
}

/// Parses a `grpc-timeout` value. At most 8 digits, as the protocol says, so no unit can
/// overflow (99,999,999 hours is about 3.6e11 seconds).
pub fn parse_grpc_timeout(value: &[u8]) -> Result<Duration, InvalidTimeout> {
    let invalid = || InvalidTimeout::of(value);
    let (unit, digits) = value.split_last().ok_or_else(invalid)?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(invalid());
    }
    let n = digits.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Ok(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return Err(invalid()),
    })
}

/// How much earlier than the caller's deadline the service answers (a fifth of the
/// caller's budget, at most this much), so its answer still arrives in time.
pub const ANSWER_MARGIN: Duration = Duration::from_millis(100);

/// When the service must answer a call that may take `budget` from `arrived`; `None` when
/// that is beyond what the clock can represent (no deadline in practice).
pub fn answer_by(arrived: Instant, budget: Duration) -> Option<Instant> {
    let margin = (budget / 5).min(ANSWER_MARGIN);
    arrived.checked_add(budget - margin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_values_parse_in_every_unit() {
        for (text, expected) in [
            ("5S", Duration::from_secs(5)),
            ("250m", Duration::from_millis(250)),
            ("1H", Duration::from_secs(3600)),
            ("2M", Duration::from_secs(120)),
            ("7n", Duration::from_nanos(7)),
            ("9u", Duration::from_micros(9)),
            ("0m", Duration::ZERO),
            ("00000001S", Duration::from_secs(1)),
            ("99999999H", Duration::from_secs(99_999_999 * 3600)),
        ] {
            assert_eq!(parse_grpc_timeout(text.as_bytes()), Ok(expected), "{text}");
        }
    }

    #[test]
    fn hostile_values_are_refused_without_panicking() {
        for text in [
            &b"18446744073709551615S"[..],
            b"999999999S",
            b"",
            b"S",
            b"5",
            b"-5S",
            b"+5S",
            b"5s",
            b"1.5S",
            b" 5S",
            b"5S ",
            b"\xff\xfeS",
            b"5\xc3\xa9",
            b"10Q",
        ] {
            let refused = parse_grpc_timeout(text).unwrap_err();
            assert!(
                refused.to_string().starts_with("invalid grpc-timeout"),
                "{refused}"
            );
        }
    }

    #[test]
    fn the_answer_is_due_before_the_deadline_and_never_overflows() {
        let now = Instant::now();
        assert_eq!(
            answer_by(now, Duration::from_millis(50)),
            Some(now + Duration::from_millis(40))
        );
        assert_eq!(
            answer_by(now, Duration::from_secs(10)),
            Some(now + Duration::from_millis(9900))
        );
        assert_eq!(answer_by(now, Duration::ZERO), Some(now));
        assert_eq!(answer_by(now, Duration::MAX), None);
    }
}

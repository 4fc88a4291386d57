//! The wall clock in milliseconds since the Unix epoch, and its UTC renderings (the calendar
//! arithmetic is `jiff`'s).

use std::time::{SystemTime, UNIX_EPOCH};

use jiff::Timestamp;

/// Milliseconds since the Unix epoch (0 for a clock set before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `ms` since the Unix epoch as a timestamp; past jiff's range (year 9999) it is clamped to
/// its last instant.
fn timestamp(ms: u64) -> Timestamp {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .unwrap_or(Timestamp::MAX)
}

/// `ms` since the Unix epoch as JavaScript's `toISOString()` (`2026-01-02T03:04:05.678Z`).
pub fn iso_timestamp(ms: u64) -> String {
    timestamp(ms).strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// `ms` since the Unix epoch as an RFC 3339 UTC timestamp to the second
/// (`2023-11-14T22:13:20Z`).
pub fn format_utc_ms(ms: u64) -> String {
    timestamp(ms).strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::{format_utc_ms, iso_timestamp, now_ms};

    #[test]
    fn renders_utc_calendar_times() {
        assert_eq!(iso_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_timestamp(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        // A leap day and the last millisecond of a year.
        assert_eq!(iso_timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso_timestamp(1_735_689_599_999), "2024-12-31T23:59:59.999Z");
        assert_eq!(format_utc_ms(1_700_000_000_123), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn the_clock_is_past_2020() {
        assert!(now_ms() > 1_577_836_800_000);
    }
}

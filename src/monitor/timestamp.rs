//! RFC 3339 timestamps with nanoseconds in UTC, formatted exactly like Go's `time.RFC3339Nano`.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// Appends `t` as Go's `t.UTC().Format(time.RFC3339Nano)` would print it:
/// `2026-11-22T04:21:41.123456789Z`, with trailing zeros of the fraction trimmed and the
/// dot dropped when the fraction is zero (`…:41Z`). Times before 1970 are clamped to the epoch.
pub fn push_rfc3339_nano(out: &mut Vec<u8>, t: SystemTime) {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    let mut nanos = since.subsec_nanos();
    if nanos != 0 {
        let mut digits = 9;
        while nanos % 10 == 0 {
            nanos /= 10;
            digits -= 1;
        }
        let _ = write!(out, ".{nanos:0digits$}");
    }
    out.push(b'Z');
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn fmt(secs: u64, nanos: u32) -> String {
        let mut out = Vec::new();
        push_rfc3339_nano(&mut out, UNIX_EPOCH + Duration::new(secs, nanos));
        String::from_utf8(out).expect("ascii")
    }

    #[test]
    fn full_nanoseconds_are_printed() {
        // date -u -d @1795321301 → 2026-11-22T04:21:41Z
        assert_eq!(
            fmt(1_795_321_301, 123_456_789),
            "2026-11-22T04:21:41.123456789Z"
        );
    }

    #[test]
    fn trailing_zeros_of_the_fraction_are_trimmed_like_go() {
        assert_eq!(fmt(1_795_321_301, 120_000_000), "2026-11-22T04:21:41.12Z");
        assert_eq!(fmt(1_795_321_301, 100), "2026-11-22T04:21:41.0000001Z");
        assert_eq!(fmt(1_795_321_301, 1), "2026-11-22T04:21:41.000000001Z");
    }

    #[test]
    fn a_zero_fraction_drops_the_dot() {
        assert_eq!(fmt(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(fmt(1_795_321_301, 0), "2026-11-22T04:21:41Z");
    }

    #[test]
    fn calendar_edges() {
        assert_eq!(fmt(951_782_400, 0), "2000-02-29T00:00:00Z"); // leap day of a /400 year
        assert_eq!(fmt(4_107_542_399, 0), "2100-02-28T23:59:59Z"); // 2100 is no leap year
        assert_eq!(fmt(4_107_542_400, 0), "2100-03-01T00:00:00Z");
        assert_eq!(
            fmt(1_767_225_599, 999_999_999),
            "2025-12-31T23:59:59.999999999Z"
        );
    }

    #[test]
    fn times_before_the_epoch_clamp() {
        let mut out = Vec::new();
        push_rfc3339_nano(&mut out, UNIX_EPOCH - Duration::from_secs(5));
        assert_eq!(out, b"1970-01-01T00:00:00Z");
    }
}

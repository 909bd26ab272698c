//! The values of `xtrace record`'s flags that clap cannot check alone: durations, sizes, periods,
//! start times and labels, each refused with one line that names the accepted form.
use crate::session::{GpuPeriod, StartAt};

pub(super) fn parse_gpu_period(text: &str) -> Result<GpuPeriod, String> {
    if text == "off" {
        return Ok(GpuPeriod::Off);
    }
    let ns = parse_span_duration(text)?;
    if ns < 10_000_000 {
        return Err(format!(
            "`{text}` is shorter than the 10ms NVML can usefully sample at"
        ));
    }
    Ok(GpuPeriod::Every(std::time::Duration::from_nanos(ns)))
}

pub(super) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(format!("`{text}` must be a positive number of seconds"));
    }
    if seconds >= 1e9 {
        return Err(format!("`{text}` is too long: at most 999999999 seconds"));
    }
    let duration = std::time::Duration::from_secs_f64(seconds);
    if duration.is_zero() {
        return Err(format!("`{text}` is shorter than 1ns"));
    }
    Ok(duration)
}

/// `50us` → 50,000 (ns). Units: ns, us (or µs), ms, s; fractions allowed.
pub(super) fn parse_warn_rule(text: &str) -> Result<crate::pipeline::warnings::WarnRule, String> {
    crate::pipeline::warnings::WarnRule::parse(text, parse_span_duration)
}

pub(super) fn parse_span_duration(text: &str) -> Result<u64, String> {
    let units = [("ns", 1.0), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)];
    let bad = || format!("`{text}` is not a duration such as 50us, 2ms or 1s (units: ns, us, ms, s)");
    let (number, scale) = units
        .iter()
        .find_map(|(unit, scale)| text.strip_suffix(unit).map(|n| (n, *scale)))
        .ok_or_else(bad)?;
    let value: f64 = number.trim().parse().map_err(|_| bad())?;
    // `nan` and `inf` parse as floats, but are no durations.
    if !value.is_finite() {
        return Err(bad());
    }
    let ns = value * scale;
    if ns >= 1e18 {
        return Err(format!("`{text}` is too long: at most 1000000000s"));
    }
    if ns.is_nan() || ns < 1.0 {
        return Err(format!("`{text}` must be at least 1ns"));
    }
    Ok(ns.round() as u64)
}

/// `--off-cpu`'s MIN: a duration, or 0 for every wait.
pub(super) fn parse_off_cpu_min(text: &str) -> Result<u64, String> {
    match text.trim() {
        "0" => Ok(0),
        _ => parse_span_duration(text)
            .map_err(|_| format!("`{text}` is not a duration such as 1ms, 50us or 1s, or 0 for every wait")),
    }
}

/// `256K` → 262,144: a number of bytes with an optional K, M or G suffix.
pub(super) fn parse_bytes(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.as_bytes().last() {
        Some(b'K' | b'k') => (&text[..text.len() - 1], 1u64 << 10),
        Some(b'M' | b'm') => (&text[..text.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("`{text}` is not a size in bytes (e.g. 4096, 16K, 16M)"))
}

pub(super) fn parse_user_stack(text: &str) -> Result<u32, String> {
    let bytes = parse_bytes(text)?;
    let max = xtrace_common::event::USER_STACK_MAX as u64;
    if bytes > max {
        return Err(format!(
            "`{text}` is more than the {}K of user stack a sample can carry",
            max >> 10
        ));
    }
    Ok(bytes as u32)
}

pub(super) fn parse_buffer_size(text: &str) -> Result<u32, String> {
    let bytes = parse_bytes(text)?;
    if !bytes.is_power_of_two() || !(4096..=1 << 30).contains(&bytes) {
        return Err(format!("`{text}` must be a power of two from 4K to 1G"));
    }
    Ok(bytes as u32)
}

/// `--flight DURATION`: a duration of at least 1ms, the flight recorder's least slot.
pub(super) fn parse_flight_window(text: &str) -> Result<u64, String> {
    let ns = parse_span_duration(text)?;
    if ns < 1_000_000 {
        return Err(format!(
            "`{text}` is shorter than 1ms, the least window the flight recorder keeps"
        ));
    }
    Ok(ns)
}

/// `--flight-size BYTES`: at least 1M.
pub(super) fn parse_flight_size(text: &str) -> Result<u64, String> {
    let bytes = parse_bytes(text)?;
    if bytes < 1 << 20 {
        return Err(format!(
            "`{text}` is less than 1M, the least the flight recorder holds (e.g. 16M, 64M, 1G)"
        ));
    }
    Ok(bytes)
}

/// `--label KEY=VALUE`: a key of letters, digits, `_`, `.` and `-` that starts with a letter or
/// `_`, and a value of printable characters.
pub(super) fn parse_label(text: &str) -> Result<(String, String), String> {
    let bad = || format!("`{text}` is not a label such as job=train or commit=1a2b3c (KEY=VALUE)");
    let (key, value) = text.split_once('=').ok_or_else(bad)?;
    let starts_well = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
    let key_chars = key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if !starts_well || !key_chars {
        return Err(format!(
            "`{text}`: the key `{key}` must start with a letter or _ and hold only letters, digits, _, . and -"
        ));
    }
    if value.is_empty() || value.chars().any(char::is_control) {
        return Err(format!("`{text}`: the value must be non-empty printable text"));
    }
    Ok((key.into(), value.into()))
}

/// `--start-at WHEN`: `/PERIOD` (the next multiple of PERIOD on the wall clock, e.g. /10s),
/// `@SECONDS` (Unix time, as `date +%s` prints it; fractions allowed) or an RFC 3339 time
/// (`2026-11-29T12:00:00Z`, `2026-11-29T13:00:00.5+01:00`).
pub(super) fn parse_start_at(text: &str) -> Result<StartAt, String> {
    let bad = || {
        format!(
            "`{text}` is not a time such as /10s (the next multiple of 10 s), @1764417600 (Unix \
             time) or 2026-11-29T12:00:00Z (RFC 3339)"
        )
    };
    if let Some(period) = text.strip_prefix('/') {
        return parse_span_duration(period)
            .map(|period_ns| StartAt::Every { period_ns })
            .map_err(|_| bad());
    }
    if let Some(seconds) = text.strip_prefix('@') {
        // Parsed as digits, not as a float, which would round the nanoseconds.
        let (whole, fraction) = match seconds.split_once('.') {
            Some((_, "")) => return Err(bad()),
            Some(parts) => parts,
            None => (seconds, ""),
        };
        let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || whole.len() > 10 || !digits(whole) || !digits(fraction) {
            return Err(bad());
        }
        let kept = &fraction[..fraction.len().min(9)];
        let fraction_ns = format!("{kept:0<9}").parse::<u64>().map_err(|_| bad())?;
        let whole: u64 = whole.parse().map_err(|_| bad())?;
        return Ok(StartAt::At {
            realtime_ns: whole * 1_000_000_000 + fraction_ns,
        });
    }
    rfc3339_ns(text)
        .map(|realtime_ns| StartAt::At { realtime_ns })
        .ok_or_else(bad)
}

/// An RFC 3339 time as ns since the Unix epoch (from 1970 to 2262); None when it is not one.
fn rfc3339_ns(text: &str) -> Option<u64> {
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    let separators = text.as_bytes();
    if separators.get(4) != Some(&b'-')
        || separators.get(7) != Some(&b'-')
        || !matches!(separators.get(10), Some(b'T' | b't' | b' '))
        || separators.get(13) != Some(&b':')
        || separators.get(16) != Some(&b':')
    {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let month_days = *days_in_month.get(usize::try_from(month - 1).ok()?)?;
    if !(1..=month_days).contains(&day) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &text[19..];
    let mut fraction_ns = 0i64;
    if let Some(digits) = rest.strip_prefix('.') {
        let len = digits.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 {
            return None;
        }
        let kept = &digits[..len.min(9)];
        fraction_ns = kept.parse::<i64>().ok()? * 10i64.pow(9 - kept.len() as u32);
        rest = &digits[len..];
    }
    let offset_s = match rest.as_bytes() {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digits = [*h1, *h2, *m1, *m2];
            if !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let [h1, h2, m1, m2] = digits.map(|d| i64::from(d - b'0'));
            let offset = (h1 * 10 + h2) * 3600 + (m1 * 10 + m2) * 60;
            if *sign == b'+' {
                offset
            } else {
                -offset
            }
        }
        _ => return None,
    };
    // Days from 1970-01-01 to the civil date (proleptic Gregorian calendar).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    let ns = i128::from(seconds) * 1_000_000_000 + i128::from(fraction_ns);
    u64::try_from(ns).ok()
}

/// `--store`'s URL; empty (`--store` alone) for the default SQLite file.
pub fn parse_store(text: &str) -> Result<crate::store::Url, String> {
    if text.is_empty() {
        return Ok(crate::store::Url::default_sqlite());
    }
    crate::store::Url::parse(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::{parse_buffer_size, parse_duration, parse_span_duration, parse_user_stack};

    #[test]
    fn span_durations() {
        assert_eq!(parse_span_duration("50us"), Ok(50_000));
        assert_eq!(parse_span_duration("50µs"), Ok(50_000));
        assert_eq!(parse_span_duration("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_span_duration("2s"), Ok(2_000_000_000));
        assert_eq!(parse_span_duration("100ns"), Ok(100));
        for bad in ["50", "ms", "-1ms", "0ns", "1h", "abcms"] {
            assert!(parse_span_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn user_stack_sizes() {
        assert_eq!(parse_user_stack("16K"), Ok(16384));
        assert_eq!(parse_user_stack("0"), Ok(0));
        assert_eq!(parse_user_stack("4000"), Ok(4000));
        assert!(parse_user_stack("17K").unwrap_err().contains("16K"));
        assert!(parse_user_stack("lots").is_err());
    }

    #[test]
    fn buffer_sizes() {
        assert_eq!(parse_buffer_size("16M"), Ok(16 << 20));
        assert_eq!(parse_buffer_size("4096"), Ok(4096));
        assert_eq!(parse_buffer_size("256k"), Ok(256 << 10));
        assert_eq!(parse_buffer_size("1G"), Ok(1 << 30));
        for bad in ["3M", "2048", "2G", "abc", "", "M", "99999999999999999999K"] {
            assert!(parse_buffer_size(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn gpu_periods() {
        use super::parse_gpu_period;
        use crate::session::GpuPeriod;
        assert_eq!(parse_gpu_period("off"), Ok(GpuPeriod::Off));
        assert_eq!(
            parse_gpu_period("250ms"),
            Ok(GpuPeriod::Every(std::time::Duration::from_millis(250)))
        );
        assert!(parse_gpu_period("1ms").is_err());
        assert!(parse_gpu_period("fast").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0.5").unwrap().as_millis(), 500);
        assert_eq!(parse_duration("3").unwrap().as_secs(), 3);
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("inf").is_err());
        // Too long is said to be too long, not "not positive"; below 1 ns is not accepted as 0.
        assert_eq!(
            parse_duration("1e20"),
            Err("`1e20` is too long: at most 999999999 seconds".into())
        );
        assert_eq!(
            parse_duration("0.0000000001"),
            Err("`0.0000000001` is shorter than 1ns".into())
        );
        assert_eq!(
            parse_span_duration("99999999999999999999s"),
            Err("`99999999999999999999s` is too long: at most 1000000000s".into())
        );
        assert_eq!(
            parse_span_duration("0.1ns"),
            Err("`0.1ns` must be at least 1ns".into())
        );
        for text in ["nanms", "infs", "-infus"] {
            assert_eq!(
                parse_span_duration(text),
                Err(format!(
                    "`{text}` is not a duration such as 50us, 2ms or 1s (units: ns, us, ms, s)"
                ))
            );
        }
    }

    #[test]
    fn labels() {
        use super::parse_label;
        assert_eq!(parse_label("job=train"), Ok(("job".into(), "train".into())));
        assert_eq!(
            parse_label("git.commit=a=b"),
            Ok(("git.commit".into(), "a=b".into()))
        );
        for bad in ["job", "=x", "1job=x", "jo b=x", "job=", "job=a\nb"] {
            assert!(parse_label(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn start_times() {
        use super::{parse_start_at, StartAt};
        let at = |text| match parse_start_at(text) {
            Ok(StartAt::At { realtime_ns }) => realtime_ns,
            other => panic!("{text}: {other:?}"),
        };
        // `date -u -d 2026-11-29T12:00:00Z +%s` prints 1795953600.
        assert_eq!(at("2026-11-29T12:00:00Z"), 1_795_953_600_000_000_000);
        assert_eq!(at("2026-11-29 13:00:00.25+01:00"), 1_795_953_600_250_000_000);
        assert_eq!(at("2026-11-29T11:30:00-00:30"), 1_795_953_600_000_000_000);
        assert_eq!(at("2024-02-29T00:00:00Z"), 1_709_164_800_000_000_000);
        assert_eq!(at("1970-01-01T00:00:00Z"), 0);
        assert_eq!(at("@1764417600.5"), 1_764_417_600_500_000_000);
        assert_eq!(at("@1795954365.965172455"), 1_795_954_365_965_172_455);
        assert_eq!(at("@7"), 7_000_000_000);
        assert_eq!(
            parse_start_at("/10s"),
            Ok(StartAt::Every {
                period_ns: 10_000_000_000
            })
        );
        for bad in [
            "2026-02-29T00:00:00Z",
            "2026-11-29T24:00:00Z",
            "2026-11-29T12:00:00",
            "2026-11-29T12:00:00.Z",
            "2026-11-29T12:00:00+1:00",
            "1969-12-31T23:59:59Z",
            "@-1",
            "@nan",
            "@1.",
            "@.5",
            "@1e9",
            "/10",
            "/0s",
            "noon",
            "",
        ] {
            assert!(parse_start_at(bad).is_err(), "{bad:?} should be refused");
        }
    }
}

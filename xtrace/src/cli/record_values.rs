//! The values of `xtrace record`'s flags that clap cannot check alone: durations, sizes, periods
//! and labels, each refused with one line that names the accepted form.
use crate::session::GpuPeriod;

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
}

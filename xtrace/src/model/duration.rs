//! Durations for people (summaries, reports, warnings, notices).

/// A duration for people: 950ns, 12.3µs, 4.56ms, 1.234s. The unit is chosen for the value as
/// rounded, so 999,960 ns is 1.00ms, not 1000.0µs.
pub fn human(ns: u64) -> String {
    // The bounds where each unit's rounding reaches the next unit: 999.95µs, 999.995ms.
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..999_950 => format!("{:.1}µs", ns as f64 / 1e3),
        999_950..999_995_000 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.3}s", ns as f64 / 1e9),
    }
}

/// A CLOCK_REALTIME time in ns as a UTC date and time to the second: `2026-11-29 15:10:02`.
pub fn utc(ns: u64) -> String {
    let seconds = ns / 1_000_000_000;
    let (days, of_day) = ((seconds / 86_400) as i64, seconds % 86_400);
    // Days since 1970-01-01 to a proleptic Gregorian date, by 400-year eras of 146,097 days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153; // March is 0
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::{human, utc};

    #[test]
    fn durations_round_into_the_next_unit() {
        let cases = [
            (999, "999ns"),
            (1_000, "1.0µs"),
            (999_949, "999.9µs"),
            (999_950, "1.00ms"),
            (999_996, "1.00ms"),
            (999_994_999, "999.99ms"),
            (999_995_000, "1.000s"),
            (999_999_600, "1.000s"),
        ];
        for (ns, shown) in cases {
            assert_eq!(human(ns), shown, "{ns}");
        }
    }

    #[test]
    fn human_units() {
        assert_eq!(human(999), "999ns");
        assert_eq!(human(1_500), "1.5µs");
        assert_eq!(human(2_500_000), "2.50ms");
        assert_eq!(human(3_000_000_000), "3.000s");
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000_000_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_795_964_140_500_519_239), "2026-11-29 14:55:40");
        assert_eq!(utc(4_107_542_399_000_000_000), "2100-02-28 23:59:59");
    }
}

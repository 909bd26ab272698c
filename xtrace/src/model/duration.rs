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

#[cfg(test)]
mod tests {
    use super::human;

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
}

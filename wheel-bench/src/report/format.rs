//! Numbers as people read them: "10M", "12.3 M/s", "1.23 ms", "345 MiB".

/// A timer count: 10 000 000 → "10M", 100 000 → "100k", 1234 → "1234".
pub fn count_text(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000_000 => format!("{:.1}M", n as f64 / 1e6),
        n if n >= 10_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// Operations per second: "12.3 M/s", "850 k/s".
pub fn rate_text(per_sec: f64) -> String {
    match per_sec {
        r if r >= 1e6 => format!("{:.2} M/s", r / 1e6),
        r if r >= 1e3 => format!("{:.0} k/s", r / 1e3),
        r => format!("{r:.0} /s"),
    }
}

/// A span in nanoseconds with three significant digits: "812 ns", "13.5 µs", "1.23 ms", "4.50 s".
pub fn nanos_text(ns: u64) -> String {
    let (value, unit) = match ns {
        n if n >= 1_000_000_000 => (n as f64 / 1e9, "s"),
        n if n >= 1_000_000 => (n as f64 / 1e6, "ms"),
        n if n >= 1_000 => (n as f64 / 1e3, "µs"),
        n => return format!("{n} ns"),
    };
    let decimals = if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.decimals$} {unit}")
}

/// A size in bytes: "345 MiB", "1.21 GiB".
pub fn bytes_text(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let b = bytes as f64;
    if b >= 1024.0 * MIB {
        format!("{:.2} GiB", b / (1024.0 * MIB))
    } else {
        format!("{:.0} MiB", b / MIB)
    }
}

/// A ratio to wheel's figure: "×0.17".
pub fn ratio_text(value: f64, wheel: f64) -> String {
    if wheel == 0.0 || !value.is_finite() || !wheel.is_finite() {
        return "×–".into();
    }
    let r = value / wheel;
    if r >= 100.0 {
        format!("×{r:.0}")
    } else if r >= 10.0 {
        format!("×{r:.1}")
    } else {
        format!("×{r:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(count_text(10_000_000), "10M");
        assert_eq!(count_text(1_500_000), "1.5M");
        assert_eq!(count_text(100_000), "100k");
        assert_eq!(count_text(1_234), "1234");
        assert_eq!(rate_text(12_345_678.0), "12.35 M/s");
        assert_eq!(rate_text(850_000.0), "850 k/s");
        assert_eq!(nanos_text(812), "812 ns");
        assert_eq!(nanos_text(13_500), "13.5 µs");
        assert_eq!(nanos_text(1_234_000), "1.23 ms");
        assert_eq!(nanos_text(123_400_000), "123 ms");
        assert_eq!(bytes_text(345 * 1024 * 1024), "345 MiB");
        assert_eq!(ratio_text(2.0, 10.0), "×0.20");
        assert_eq!(ratio_text(1.0, 0.0), "×–");
    }
}

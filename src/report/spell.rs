//! How figures read in the summary and the display: a time in ms, a
//! rate, a duration given on the command line.

/// `1234.5` ms as `1.23s`, `12.3ms`.
pub fn format_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2}s", ms / 1000.0)
    } else {
        format!("{ms:.1}ms")
    }
}

/// Records per second, rounded for reading.
pub fn format_rate(per_s: f64) -> String {
    if per_s >= 100.0 {
        format!("{per_s:.0}/s")
    } else {
        format!("{per_s:.2}/s")
    }
}

/// A duration given on the command line, in ms, as it reads best: `30s`,
/// `5m`, `1h`, `2.5s`, `250ms`.
pub fn format_duration_ms(ms: f64) -> String {
    for (unit, per) in [("h", 3_600_000.0), ("m", 60_000.0), ("s", 1000.0)] {
        if ms >= per && (ms / per).fract() == 0.0 {
            return format!("{}{unit}", ms / per);
        }
    }
    if ms >= 1000.0 {
        format!("{}s", ms / 1000.0)
    } else {
        format!("{ms}ms")
    }
}

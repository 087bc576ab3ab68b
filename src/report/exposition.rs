//! The Prometheus text exposition format (version 0.0.4), written: metric
//! families, each its `# HELP` and `# TYPE` lines and its samples, every
//! sample labelled with the drip it is of. Pure: it builds a string.

use std::fmt::Write as _;

/// A metrics file's text being written, for the drip labelled `drip`.
pub struct Exposition {
    pub(crate) out: String,
    /// The value of every sample's `drip` label: the `--name`, or the pid.
    pub(crate) drip: String,
}

/// A metric family being written: `# HELP`, `# TYPE`, then its samples.
pub(crate) struct MetricFamily<'a> {
    text: &'a mut Exposition,
    /// The family's name, which each of its samples bears.
    name: &'a str,
}

impl<'a> MetricFamily<'a> {
    pub(crate) fn new(
        text: &'a mut Exposition,
        name: &'a str,
        kind: &str,
        help: &str,
    ) -> MetricFamily<'a> {
        let _ = writeln!(text.out, "# HELP {name} {help}");
        let _ = writeln!(text.out, "# TYPE {name} {kind}");
        MetricFamily { text, name }
    }

    /// A sample of the family, labelled `drip` and `labels`.
    pub(crate) fn sample(&mut self, labels: &[(&str, &str)], value: f64) -> &mut Self {
        let out = &mut self.text.out;
        let _ = write!(out, "{}{{drip=\"{}\"", self.name, escape(&self.text.drip));
        for (label, text) in labels {
            let _ = write!(out, ",{label}=\"{}\"", escape(text));
        }
        let _ = writeln!(out, "}} {}", number(value));
        self
    }
}

/// A label value as the format wants it: `\`, `"` and newline escaped.
fn escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value: integers without a fraction, `+Inf` for infinity.
fn number(value: f64) -> String {
    if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else if value.is_nan() {
        "NaN".to_string()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

impl Exposition {
    /// A gauge family of a single value.
    pub(crate) fn gauge(&mut self, name: &str, help: &str, value: f64) {
        MetricFamily::new(self, name, "gauge", help).sample(&[], value);
    }

    /// A counter family of a single value.
    pub(crate) fn counter(&mut self, name: &str, help: &str, value: f64) {
        MetricFamily::new(self, name, "counter", help).sample(&[], value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn values_and_labels_are_written_as_the_format_wants() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}

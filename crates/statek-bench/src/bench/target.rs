//! A target of the bench (issues 6 and 12) and how a measured figure is
//! judged against it. Targets are reported, never asserted by tests.

use serde::Serialize;

/// A target and whether this run met it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Target {
    /// What is compared (names the workload or section).
    pub what: String,
    /// Required.
    pub required: String,
    /// Measured.
    pub measured: String,
    /// The measured ratio (or value) that was judged, when it is one number.
    #[serde(default)]
    pub ratio: Option<f64>,
    /// Met?
    pub met: bool,
}

impl Target {
    /// `measured / baseline ≥ floor`, shown as a ratio (`1.02x`).
    pub fn ratio_at_least(what: String, measured: f64, baseline: f64, floor: f64) -> Self {
        let ratio = measured / baseline;
        Self {
            what,
            required: format!(">= {floor:.2}x"),
            measured: format!("{ratio:.2}x ({measured:.0} vs {baseline:.0})"),
            ratio: Some(ratio),
            met: ratio >= floor,
        }
    }

    /// `measured / baseline ≤ ceiling`, shown as a ratio (figures below
    /// 10 with three decimals: milliseconds per run).
    pub fn ratio_at_most(what: String, measured: f64, baseline: f64, ceiling: f64) -> Self {
        let ratio = measured / baseline;
        Self {
            what,
            required: format!("<= {ceiling:.2}x"),
            measured: format!("{ratio:.3}x ({} vs {})", figure(measured), figure(baseline)),
            ratio: Some(ratio),
            met: ratio <= ceiling,
        }
    }

    /// `value ≥ floor` in `unit`; the ratio is `value / floor`.
    pub fn value_at_least(what: String, value: f64, floor: f64, unit: &str) -> Self {
        Self {
            what,
            required: format!(">= {floor:.0} {unit}"),
            measured: format!("{value:.0} {unit}"),
            ratio: Some(value / floor),
            met: value >= floor,
        }
    }

    /// A target that could not be judged in this run (e.g. a figure the
    /// server would not give); never met.
    pub fn not_measured(what: String, required: &str, why: &str) -> Self {
        Self {
            what,
            required: required.to_owned(),
            measured: format!("not measured: {why}"),
            ratio: None,
            met: false,
        }
    }
}

/// A figure as a ratio target shows it: one decimal, three below 10.
fn figure(value: f64) -> String {
    if value.abs() < 10.0 {
        format!("{value:.3}")
    } else {
        format!("{value:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judging() {
        let check = |t: Target, required: &str, measured: &str, ratio: Option<f64>, met: bool| {
            assert_eq!(t.required, required, "{t:?}");
            assert_eq!(t.measured, measured, "{t:?}");
            assert_eq!(t.ratio, ratio, "{t:?}");
            assert_eq!(t.met, met, "{t:?}");
        };
        let w = || "w".to_owned();
        check(
            Target::ratio_at_least(w(), 800.0, 1000.0, 0.8),
            ">= 0.80x",
            "0.80x (800 vs 1000)",
            Some(0.8),
            true,
        );
        check(
            Target::ratio_at_least(w(), 799.0, 1000.0, 0.8),
            ">= 0.80x",
            "0.80x (799 vs 1000)",
            Some(0.799),
            false,
        );
        check(
            Target::ratio_at_least(w(), 1000.0, 1000.0, 1.0),
            ">= 1.00x",
            "1.00x (1000 vs 1000)",
            Some(1.0),
            true,
        );
        check(
            Target::ratio_at_most(w(), 5.0, 100.0, 0.05),
            "<= 0.05x",
            "0.050x (5.000 vs 100.0)",
            Some(0.05),
            true,
        );
        check(
            Target::ratio_at_most(w(), 6.0, 100.0, 0.05),
            "<= 0.05x",
            "0.060x (6.000 vs 100.0)",
            Some(0.06),
            false,
        );
        check(
            Target::ratio_at_most(w(), 0.14, 0.091, 1.1),
            "<= 1.10x",
            "1.538x (0.140 vs 0.091)",
            Some(0.14 / 0.091),
            false,
        );
        check(
            Target::value_at_least(w(), 100_000.0, 100_000.0, "slots/s"),
            ">= 100000 slots/s",
            "100000 slots/s",
            Some(1.0),
            true,
        );
        check(
            Target::value_at_least(w(), 50_000.0, 100_000.0, "slots/s"),
            ">= 100000 slots/s",
            "50000 slots/s",
            Some(0.5),
            false,
        );
        check(
            Target::not_measured(w(), ">= 1x", "no data"),
            ">= 1x",
            "not measured: no data",
            None,
            false,
        );
    }
}

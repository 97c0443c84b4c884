//! The alert rules' unit tests (`promtool test rules` files under
//! `deploy/`, e.g. `deploy/prometheus/alerts.test.yaml`), checked without
//! promtool: every alert has a case where it fires, every case names an
//! alert that exists, every input series is a metric statek emits with its
//! labels (and a scrape's `instance` and `job`), and in a test that makes
//! an alert fire, every series of a counter replicas create at 0
//! ([`zero_at_start`]) starts at 0, as a replica's does (`increase()` and
//! `rate()` ignore a first sample; a gauge may hold its state, such as a
//! risk found at the start, from its first sample). An alert that
//! reads a metric neither created at 0 nor listed with where its first
//! value comes from ([`not_zero_at_start`]) is named too. `cargo xtask
//! rule-tests` runs the cases themselves.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use statek_scheduler::metrics::{not_zero_at_start, zero_at_start};

use super::catalogue::MetricKind;
use super::promql::{metric_references, resolve};

/// Labels a scrape adds to every series.
const SCRAPE_LABELS: &[&str] = &["instance", "job"];

/// What the rule test files hold, across files.
#[derive(Debug, Default)]
pub struct AlertTests {
    /// Alerts some case expects to fire.
    fired: BTreeSet<String>,
    /// Every alert a case names, with where.
    named: BTreeMap<String, String>,
    /// Test files seen.
    files: usize,
}

/// Whether a document is a `promtool test rules` file.
pub fn is_rule_test(document: &Value) -> bool {
    document.get("rule_files").is_some() && document.get("tests").is_some()
}

/// Whether an input series' values start at 0 (`0`, `0x5`, `0+1x10`).
fn starts_at_zero(values: &str) -> bool {
    let first = values.split_whitespace().next().unwrap_or("");
    first == "0" || ["0x", "0+", "0-"].iter().any(|p| first.starts_with(p))
}

/// Why an alert's metric may be read: `None` if it exists at 0 from a
/// replica's start or is listed with where its first value comes from.
pub fn not_at_start(alert: &str, metric: &str) -> Option<String> {
    let listed = zero_at_start().contains(&metric)
        || not_zero_at_start().iter().any(|(name, _)| *name == metric);
    (!listed).then(|| {
        format!(
            "alert {alert} reads {metric}, which replicas do not create at 0 at their start \
             (statek_scheduler::metrics::zero_at_start) and not_zero_at_start does not list"
        )
    })
}

impl AlertTests {
    /// Reads one rule test document; returns its problems.
    pub fn document(&mut self, at: &str, document: &Value) -> Vec<String> {
        self.files += 1;
        let mut problems = Vec::new();
        let tests = document.get("tests").and_then(Value::as_array);
        for (index, test) in tests.into_iter().flatten().enumerate() {
            let name = test
                .get("name")
                .and_then(Value::as_str)
                .map_or_else(|| format!("test {}", index + 1), ToOwned::to_owned);
            let cases = test.get("alert_rule_test").and_then(Value::as_array);
            let mut fires = false;
            for case in cases.into_iter().flatten() {
                let Some(alert) = case.get("alertname").and_then(Value::as_str) else {
                    problems.push(format!("{at}: {name}: a case names no alertname"));
                    continue;
                };
                self.named
                    .entry(alert.to_owned())
                    .or_insert_with(|| format!("{at}: {name}"));
                let expected = case.get("exp_alerts").and_then(Value::as_array);
                if expected.is_some_and(|alerts| !alerts.is_empty()) {
                    self.fired.insert(alert.to_owned());
                    fires = true;
                }
            }
            let series = test.get("input_series").and_then(Value::as_array);
            for input in series.into_iter().flatten() {
                let text = input.get("series").and_then(Value::as_str).unwrap_or("");
                let values = input.get("values").and_then(Value::as_str).unwrap_or("");
                problems.extend(series_problems(
                    &format!("{at}: {name}"),
                    text,
                    values,
                    fires,
                ));
            }
        }
        problems
    }

    /// The problems once every file is read: `alerts` maps each alert of
    /// the rule files to where it is defined.
    pub fn finish(&self, alerts: &BTreeMap<String, String>) -> Vec<String> {
        let mut problems = Vec::new();
        if self.files == 0 && !alerts.is_empty() {
            problems.push(
                "no promtool rule test file (rule_files, tests) under deploy/: the alerts are \
                 untested"
                    .to_owned(),
            );
        }
        for (alert, defined) in alerts {
            if !self.fired.contains(alert) {
                problems.push(format!(
                    "{defined}: alert {alert} has no rule test case where it fires"
                ));
            }
        }
        for (alert, at) in &self.named {
            if !alerts.contains_key(alert) {
                problems.push(format!(
                    "{at}: a case names alert {alert}, which no rule defines"
                ));
            }
        }
        problems
    }
}

/// The problems of one input series `text` with `values`; `fires`: its
/// test expects some alert to fire.
fn series_problems(at: &str, text: &str, values: &str, fires: bool) -> Vec<String> {
    let references = match metric_references(text) {
        Ok(references) => references,
        Err(error) => return vec![format!("{at}: series {text}: {error}")],
    };
    if references.len() != 1 {
        return vec![format!("{at}: series {text} is not one statek metric")];
    }
    let mut problems = Vec::new();
    for mut reference in references {
        reference
            .labels
            .retain(|label| !SCRAPE_LABELS.contains(&label.as_str()));
        match resolve(&reference) {
            Ok(metric) => {
                if fires
                    && metric.kind == MetricKind::Counter
                    && zero_at_start().contains(&metric.name)
                    && !starts_at_zero(values)
                {
                    problems.push(format!(
                        "{at}: series {text} starts at {values:?}, not at 0 as a replica \
                         creates it"
                    ));
                }
            }
            Err(error) => problems.push(format!("{at}: series {text}: {error}")),
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_start_at_zero() {
        for (values, zero) in [
            ("0", true),
            ("0x5 1x20", true),
            ("0+100x30", true),
            ("0-1x3", true),
            ("_x5 1x20", false),
            ("1x30", false),
            ("05", false),
            ("", false),
        ] {
            assert_eq!(starts_at_zero(values), zero, "{values:?}");
        }
    }

    #[test]
    fn every_alert_metric_is_accounted_for() {
        assert_eq!(not_at_start("A", "statek_reservations_total"), None);
        assert_eq!(
            not_at_start("A", "statek_retained_oldest_timestamp_seconds"),
            None
        );
        assert!(
            not_at_start("A", "statek_service_lag_seconds").is_some_and(
                |problem| problem.starts_with("alert A reads statek_service_lag_seconds")
            )
        );
    }
}

//! `cargo xtask deploy-check`: the files under `deploy/` parse, and the
//! Prometheus rules and the Grafana dashboard use exactly the metrics statek
//! emits.
//!
//! - Every `*.yaml` / `*.yml` file (every document of the stream) and every
//!   `*.json` file under `deploy/` parses.
//! - Every `statek_*` identifier in a PromQL expression (the `expr` of an
//!   alert or recording rule, the `expr` of a dashboard panel target, a
//!   dashboard variable query) names a metric of [`METRICS`]: a histogram
//!   only through its `_bucket`, `_sum` or `_count` series, any other kind
//!   never through them; label matchers name only the metric's labels (and
//!   `le` on `_bucket`).
//! - Every metric of [`METRICS`] is used by at least one alert rule or
//!   dashboard panel.
//! - Every alert has `summary`, `description` and `runbook` annotations and
//!   a `severity` label; the runbook is `docs/operations.md#ANCHOR` for a
//!   heading of that file; alert names are unique.
//! - Dashboard panel ids are unique within their dashboard.
//! - Every Kubernetes Secret is a template: `stringData` values that all
//!   contain [`PLACEHOLDER`], and no base64 `data`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;

use self::MetricKind::{Counter, Gauge, Histogram};
use crate::workspace;

/// What a metric is, as Prometheus sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Exposed as `NAME` (a `_total` name by convention).
    Counter,
    /// Exposed as `NAME`.
    Gauge,
    /// Exposed as `NAME_bucket{le}`, `NAME_sum` and `NAME_count`.
    Histogram,
}

/// One metric statek emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// The exposed name (for a histogram, without `_bucket`/`_sum`/`_count`).
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Its labels.
    pub labels: &'static [&'static str],
}

const fn metric(name: &'static str, kind: MetricKind, labels: &'static [&'static str]) -> Metric {
    Metric { name, kind, labels }
}

/// Every metric statek emits, with its kind and labels.
///
/// This list MUST equal what the code emits (the names in
/// `statek_scheduler::metrics` and statek-store-pg's prune metrics); it is
/// also the table in `docs/operations.md`, "Metrics". A check against the
/// code itself is to be added next to this one: until then, change this
/// list, the code and the docs together.
pub const METRICS: &[Metric] = &[
    metric("statek_reservations_total", Counter, &["shard"]),
    metric("statek_reservation_retries_total", Counter, &["shard"]),
    metric("statek_reservation_duration_seconds", Histogram, &["shard"]),
    metric("statek_selections_total", Counter, &["shard", "tenant"]),
    metric(
        "statek_tick_outcomes_total",
        Counter,
        &["shard", "tenant", "outcome"],
    ),
    metric("statek_tick_errors_total", Counter, &["shard", "kind"]),
    metric(
        "statek_starvation_bound_reservations",
        Gauge,
        &["shard", "tenant"],
    ),
    metric(
        "statek_selection_gap_max_reservations",
        Gauge,
        &["shard", "tenant"],
    ),
    metric(
        "statek_gap_above_bound_total",
        Counter,
        &["shard", "tenant"],
    ),
    metric(
        "statek_service_lag_seconds",
        Histogram,
        &["shard", "tenant"],
    ),
    metric("statek_run_outcomes_total", Counter, &["tenant", "outcome"]),
    metric("statek_worker_runs_executing", Gauge, &["shard"]),
    metric("statek_worker_batch_slots", Histogram, &["shard"]),
    metric("statek_prune_deleted_total", Counter, &[]),
    metric("statek_prune_cutoff_timestamp_seconds", Gauge, &[]),
    metric("statek_prune_batch_duration_seconds", Histogram, &[]),
    metric(
        "statek_retained_oldest_timestamp_seconds",
        Gauge,
        &["shard"],
    ),
    metric("statek_durability_risk", Gauge, &["risk"]),
    metric("statek_reservations_lost_total", Counter, &["shard"]),
    metric("statek_timeline_changes_total", Counter, &["shard"]),
];

/// The marker every value of a Secret template under `deploy/` must contain.
pub const PLACEHOLDER: &str = "CHANGE_ME";

/// The page every alert's `runbook` annotation points into.
const RUNBOOK_PAGE: &str = "docs/operations.md";

const HISTOGRAM_SUFFIXES: &[&str] = &["_bucket", "_sum", "_count"];

const SEVERITIES: &[&str] = &["critical", "warning", "info"];

/// Runs the check on the workspace; fails with every violation.
pub fn run() -> Result<()> {
    let report = check_tree(&workspace::root())?;
    if report.violations.is_empty() {
        println!(
            "deploy-check: {} files parse ({} YAML documents, {} JSON); {} alert rules and \
             {} dashboard panels use only, and all of, the {} metrics statek emits",
            report.files,
            report.yaml_documents,
            report.json_files,
            report.alerts,
            report.panels,
            METRICS.len()
        );
        Ok(())
    } else {
        bail!(
            "deploy-check found {} problem(s):\n  {}",
            report.violations.len(),
            report.violations.join("\n  ")
        )
    }
}

/// What the check saw, and everything that was wrong.
#[derive(Debug, Default)]
pub struct Report {
    /// YAML and JSON files read.
    pub files: usize,
    /// YAML documents parsed (a file may hold several).
    pub yaml_documents: usize,
    /// JSON files parsed.
    pub json_files: usize,
    /// Alert rules seen.
    pub alerts: usize,
    /// Dashboard panels with queries seen.
    pub panels: usize,
    /// One message per problem; empty when all is well.
    pub violations: Vec<String>,
}

/// Checks `deploy/` under `root` against `docs/operations.md`.
fn check_tree(root: &Path) -> Result<Report> {
    let deploy = root.join("deploy");
    let mut paths = Vec::new();
    collect_files(&deploy, &mut paths)?;
    let operations = root.join(RUNBOOK_PAGE);
    let markdown = std::fs::read_to_string(&operations)
        .with_context(|| format!("reading {}", operations.display()))?;
    let mut files = Vec::new();
    for path in paths {
        let name = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        files.push(SourceFile::parse(name, &text));
    }
    Ok(check_files(&files, &anchors(&markdown)))
}

/// Every YAML and JSON file below `dir`, sorted.
fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()
        .with_context(|| format!("listing {}", dir.display()))?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_files(&path, out)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
    Ok(())
}

/// One parsed file: its documents, or why it does not parse.
#[derive(Debug)]
pub struct SourceFile {
    name: String,
    format: Format,
    documents: std::result::Result<Vec<Value>, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Yaml,
    Json,
}

impl SourceFile {
    /// Parses `text`: YAML (all documents) for a `.yaml`/`.yml` name, JSON
    /// otherwise.
    pub fn parse(name: String, text: &str) -> Self {
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        let documents = if yaml {
            serde_norway::Deserializer::from_str(text)
                .map(Value::deserialize)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())
        } else {
            serde_json::from_str(text)
                .map(|value| vec![value])
                .map_err(|e| e.to_string())
        };
        Self {
            name,
            format: if yaml { Format::Yaml } else { Format::Json },
            documents,
        }
    }
}

/// Where a PromQL expression was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// An alert or recording rule, or a dashboard panel: counts as a use.
    Query,
    /// A dashboard variable: checked, but not a use.
    Variable,
}

/// Accumulates what the files hold.
#[derive(Default)]
struct Checker {
    report: Report,
    used: BTreeSet<&'static str>,
    alert_names: BTreeMap<String, String>,
}

/// Checks parsed files; `anchors` are the heading anchors of
/// `docs/operations.md`.
pub fn check_files(files: &[SourceFile], anchors: &BTreeSet<String>) -> Report {
    let mut checker = Checker::default();
    for file in files {
        checker.report.files += 1;
        let documents = match &file.documents {
            Ok(documents) => documents,
            Err(error) => {
                checker
                    .report
                    .violations
                    .push(format!("{}: does not parse: {error}", file.name));
                continue;
            }
        };
        match file.format {
            Format::Yaml => checker.report.yaml_documents += documents.len(),
            Format::Json => checker.report.json_files += 1,
        }
        for (index, document) in documents.iter().enumerate() {
            let at = if documents.len() > 1 {
                format!("{} (document {})", file.name, index + 1)
            } else {
                file.name.clone()
            };
            checker.document(&at, document, anchors);
        }
    }
    for metric in METRICS {
        if !checker.used.contains(metric.name) {
            checker.report.violations.push(format!(
                "metric {} is used by no alert rule and no dashboard panel",
                metric.name
            ));
        }
    }
    checker.report
}

impl Checker {
    fn violation(&mut self, message: String) {
        self.report.violations.push(message);
    }

    fn document(&mut self, at: &str, document: &Value, anchors: &BTreeSet<String>) {
        if document.get("kind").and_then(Value::as_str) == Some("Secret") {
            self.secret(at, document);
        }
        for problem in crate::cnpg_check::check(at, document) {
            self.violation(problem);
        }
        if let Some(templating) = document
            .pointer("/templating/list")
            .and_then(Value::as_array)
        {
            for variable in templating {
                let name = variable.get("name").and_then(Value::as_str).unwrap_or("?");
                for query in [
                    variable.get("query"),
                    variable.pointer("/query/query"),
                    variable.get("definition"),
                ]
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                {
                    self.expression(&format!("{at}: variable {name}"), query, Use::Variable);
                }
            }
        }
        if let Some(panels) = document.get("panels").and_then(Value::as_array) {
            let mut ids = BTreeSet::new();
            self.panels(at, panels, &mut ids);
        }
        self.rules(at, document, anchors);
    }

    /// Dashboard panels, rows included; each target's `expr` is a use.
    fn panels(&mut self, at: &str, panels: &[Value], ids: &mut BTreeSet<i64>) {
        for panel in panels {
            let title = panel.get("title").and_then(Value::as_str).unwrap_or("?");
            if let Some(id) = panel.get("id").and_then(Value::as_i64) {
                if !ids.insert(id) {
                    self.violation(format!("{at}: panel id {id} ({title}) is used twice"));
                }
            }
            let targets = panel.get("targets").and_then(Value::as_array);
            let mut queries = 0;
            for target in targets.into_iter().flatten() {
                if let Some(expr) = target.get("expr").and_then(Value::as_str) {
                    queries += 1;
                    self.expression(&format!("{at}: panel {title:?}"), expr, Use::Query);
                }
            }
            if queries > 0 {
                self.report.panels += 1;
            }
            if let Some(nested) = panel.get("panels").and_then(Value::as_array) {
                self.panels(at, nested, ids);
            }
        }
    }

    /// Prometheus rule groups: a rules file (`groups`) or a
    /// `PrometheusRule` (`spec.groups`).
    fn rules(&mut self, at: &str, document: &Value, anchors: &BTreeSet<String>) {
        let groups = document
            .get("groups")
            .or_else(|| document.pointer("/spec/groups"))
            .and_then(Value::as_array);
        for group in groups.into_iter().flatten() {
            let rules = group.get("rules").and_then(Value::as_array);
            for rule in rules.into_iter().flatten() {
                let name = rule
                    .get("alert")
                    .or_else(|| rule.get("record"))
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                match rule.get("expr").and_then(Value::as_str) {
                    Some(expr) => self.expression(&format!("{at}: rule {name}"), expr, Use::Query),
                    None => self.violation(format!("{at}: rule {name} has no expr")),
                }
                if rule.get("alert").is_some() {
                    self.alert(at, name, rule, anchors);
                }
            }
        }
    }

    fn alert(&mut self, at: &str, name: &str, rule: &Value, anchors: &BTreeSet<String>) {
        self.report.alerts += 1;
        if let Some(previous) = self.alert_names.insert(name.to_owned(), at.to_owned()) {
            self.violation(format!("{at}: alert {name} is also defined in {previous}"));
        }
        for key in ["summary", "description", "runbook"] {
            let text = rule
                .pointer(&format!("/annotations/{key}"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if text.trim().is_empty() {
                self.violation(format!("{at}: alert {name} has no {key} annotation"));
            }
        }
        let severity = rule.pointer("/labels/severity").and_then(Value::as_str);
        if !severity.is_some_and(|s| SEVERITIES.contains(&s)) {
            self.violation(format!(
                "{at}: alert {name} needs a severity label, one of {}",
                SEVERITIES.join(", ")
            ));
        }
        if let Some(runbook) = rule.pointer("/annotations/runbook").and_then(Value::as_str) {
            match runbook
                .trim()
                .strip_prefix(RUNBOOK_PAGE)
                .and_then(|rest| rest.strip_prefix('#'))
            {
                Some(anchor) if anchors.contains(anchor) => {}
                Some(anchor) => self.violation(format!(
                    "{at}: alert {name}: runbook anchor #{anchor} is no heading of {RUNBOOK_PAGE}"
                )),
                None => self.violation(format!(
                    "{at}: alert {name}: runbook {runbook:?} must be {RUNBOOK_PAGE}#ANCHOR"
                )),
            }
        }
    }

    fn secret(&mut self, at: &str, secret: &Value) {
        let name = secret
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        if secret.get("data").is_some() {
            self.violation(format!(
                "{at}: Secret {name} has base64 `data`; templates use `stringData` with {PLACEHOLDER}"
            ));
        }
        let values = secret.get("stringData").and_then(Value::as_object);
        for (key, value) in values.into_iter().flatten() {
            if !value.as_str().is_some_and(|v| v.contains(PLACEHOLDER)) {
                self.violation(format!(
                    "{at}: Secret {name} key {key} holds no {PLACEHOLDER} placeholder: \
                     real credentials never belong in deploy/"
                ));
            }
        }
    }

    fn expression(&mut self, at: &str, expr: &str, usage: Use) {
        let references = match metric_references(expr) {
            Ok(references) => references,
            Err(error) => {
                self.violation(format!("{at}: {error}"));
                return;
            }
        };
        for reference in references {
            match resolve(&reference) {
                Ok(metric) => {
                    if usage == Use::Query {
                        self.used.insert(metric.name);
                    }
                }
                Err(error) => self.violation(format!("{at}: {error}")),
            }
        }
    }
}

/// A metric named in a PromQL expression, with the labels its selector
/// matches on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The series name as written (`statek_..._bucket` included).
    pub name: String,
    /// Label names of the selector's matchers, in order.
    pub labels: Vec<String>,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Every `statek_*` identifier of a PromQL expression (outside string
/// literals), with the label names of its `{...}` selector.
///
/// # Errors
/// An unterminated string or a malformed selector after a statek metric.
pub fn metric_references(expr: &str) -> std::result::Result<Vec<Reference>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut references = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&chars, i)?;
        } else if is_name_char(c) {
            let start = i;
            while i < chars.len() && is_name_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if word.starts_with("statek_") {
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                let labels = if chars.get(j) == Some(&'{') {
                    let (labels, end) = selector_labels(&chars, j, &word)?;
                    i = end;
                    labels
                } else {
                    Vec::new()
                };
                references.push(Reference { name: word, labels });
            }
        } else {
            i += 1;
        }
    }
    Ok(references)
}

/// Index just past the string literal starting at `start`.
fn skip_string(chars: &[char], start: usize) -> std::result::Result<usize, String> {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err(format!("unterminated string starting at character {start}"))
}

/// Label names of the selector `{...}` at `open`, and the index past `}`.
fn selector_labels(
    chars: &[char],
    open: usize,
    metric: &str,
) -> std::result::Result<(Vec<String>, usize), String> {
    let malformed = |i: usize| format!("malformed label selector of {metric} at character {i}");
    let skip_ws = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let mut labels = Vec::new();
    let mut i = skip_ws(open + 1);
    loop {
        match chars.get(i) {
            Some('}') => return Ok((labels, i + 1)),
            Some(c) if is_name_char(*c) => {}
            _ => return Err(malformed(i)),
        }
        let start = i;
        while i < chars.len() && is_name_char(chars[i]) {
            i += 1;
        }
        labels.push(chars[start..i].iter().collect());
        i = skip_ws(i);
        let operator: String = chars[i..chars.len().min(i + 2)].iter().collect();
        i += if operator == "=~" || operator == "!~" || operator == "!=" {
            2
        } else if operator.starts_with('=') {
            1
        } else {
            return Err(malformed(i));
        };
        i = skip_ws(i);
        if !matches!(chars.get(i), Some('"' | '\'' | '`')) {
            return Err(malformed(i));
        }
        i = skip_ws(skip_string(chars, i)?);
        match chars.get(i) {
            Some(',') => i = skip_ws(i + 1),
            Some('}') => {}
            _ => return Err(malformed(i)),
        }
    }
}

/// The metric of [`METRICS`] a reference names, checking suffixes and labels.
///
/// # Errors
/// An unknown name, a histogram without (or another kind with) a
/// `_bucket`/`_sum`/`_count` suffix, or a label the metric does not have.
pub fn resolve(reference: &Reference) -> std::result::Result<&'static Metric, String> {
    let name = reference.name.as_str();
    let valid_name = name.strip_prefix("statek_").is_some_and(|rest| {
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
    });
    if !valid_name {
        return Err(format!(
            "{name} is not a statek metric name (statek_[a-z_]+)"
        ));
    }
    let find = |n: &str| METRICS.iter().find(|m| m.name == n);
    let (metric, suffix) = match find(name) {
        Some(metric) => (metric, None),
        None => HISTOGRAM_SUFFIXES
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .and_then(find)
                    .map(|metric| (metric, Some(*suffix)))
            })
            .ok_or_else(|| format!("{name} is not a metric statek emits"))?,
    };
    match (metric.kind, suffix) {
        (Histogram, None) => {
            return Err(format!(
                "{name} is a histogram: query {name}_bucket, {name}_sum or {name}_count"
            ))
        }
        (Counter | Gauge, Some(suffix)) => {
            return Err(format!(
                "{} is a {:?}, it has no {suffix} series",
                metric.name, metric.kind
            ))
        }
        _ => {}
    }
    for label in &reference.labels {
        let allowed =
            metric.labels.contains(&label.as_str()) || (suffix == Some("_bucket") && label == "le");
        if !allowed {
            return Err(format!(
                "{name} has no label {label} (labels: {})",
                if metric.labels.is_empty() {
                    "none".to_owned()
                } else {
                    metric.labels.join(", ")
                }
            ));
        }
    }
    Ok(metric)
}

/// The anchors GitHub gives the headings of a Markdown text (code fences
/// skipped; a repeated heading gets `-1`, `-2`, ...).
pub fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    let mut fence: Option<&str> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") {
            fence = Some("```");
            continue;
        }
        if trimmed.starts_with("~~~") {
            fence = Some("~~~");
            continue;
        }
        let hashes = line.bytes().take_while(|b| *b == b'#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim());
        let count = seen.entry(base.clone()).or_insert(0);
        let anchor = if *count == 0 {
            base
        } else {
            format!("{base}-{count}")
        };
        *count += 1;
        anchors.insert(anchor);
    }
    anchors
}

/// GitHub's heading anchor: lowercase, spaces to `-`, punctuation other
/// than `-` and `_` dropped.
pub fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metric_list_is_exactly_what_the_code_emits() {
        let mut listed: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
        let mut emitted: Vec<&str> = statek_scheduler::metrics::ALL.to_vec();
        emitted.extend([
            statek_store_pg::PRUNE_DELETED_TOTAL,
            statek_store_pg::PRUNE_CUTOFF_TIMESTAMP_SECONDS,
            statek_store_pg::PRUNE_BATCH_DURATION_SECONDS,
            statek_store_pg::DURABILITY_RISK,
            statek_store_pg::RESERVATIONS_LOST_TOTAL,
            statek_store_pg::TIMELINE_CHANGES_TOTAL,
        ]);
        listed.sort_unstable();
        emitted.sort_unstable();
        assert_eq!(listed, emitted);
    }

    /// The real `deploy/` tree and `docs/operations.md`.
    #[test]
    fn deploy_files_use_exactly_the_emitted_metrics() {
        let report = check_tree(&workspace::root()).unwrap();
        assert_eq!(report.violations, Vec::<String>::new());
        assert!(report.alerts > 0, "no alert rule found under deploy/");
        assert!(report.panels > 0, "no dashboard panel found under deploy/");
    }

    fn refs(expr: &str) -> Vec<(String, Vec<String>)> {
        metric_references(expr)
            .unwrap()
            .into_iter()
            .map(|r| (r.name, r.labels))
            .collect()
    }

    fn check_refs(expr: &str, expected: &[(&str, &[&str])]) {
        let expected: Vec<(String, Vec<String>)> = expected
            .iter()
            .map(|(name, labels)| {
                (
                    (*name).to_owned(),
                    labels.iter().map(|l| (*l).to_owned()).collect(),
                )
            })
            .collect();
        assert_eq!(refs(expr), expected, "{expr}");
    }

    #[test]
    fn references_in_promql() {
        check_refs("up", &[]);
        check_refs(
            "statek_reservations_total",
            &[("statek_reservations_total", &[])],
        );
        check_refs(
            r#"sum by (shard) (rate(statek_reservations_total{shard=~"$shard"}[$__rate_interval]))"#,
            &[("statek_reservations_total", &["shard"])],
        );
        check_refs(
            r#"statek_tick_errors_total { kind = "store" , shard!="a,b}" }"#,
            &[("statek_tick_errors_total", &["kind", "shard"])],
        );
        check_refs(
            r#"histogram_quantile(0.99, sum by (le) (rate(statek_service_lag_seconds_bucket{tenant!~'x'}[5m])))"#,
            &[("statek_service_lag_seconds_bucket", &["tenant"])],
        );
        check_refs(
            r#"label_values(statek_selections_total{shard=~"$shard"}, tenant)"#,
            &[("statek_selections_total", &["shard"])],
        );
        check_refs(r#"up{job="statek_worker"}"#, &[]);
        check_refs(
            "time() - statek_prune_cutoff_timestamp_seconds > 171 * 3600",
            &[("statek_prune_cutoff_timestamp_seconds", &[])],
        );
        check_refs("my_statek_total + statek:recorded", &[]);
        check_refs(
            "a / on () group_left statek_x offset 1h",
            &[("statek_x", &[])],
        );
        check_refs("statek_Bad_name", &[("statek_Bad_name", &[])]);
    }

    #[test]
    fn malformed_expressions() {
        assert!(metric_references(r#"statek_x{shard="a}"#).is_err());
        assert!(metric_references(r#"statek_x{shard}"#).is_err());
        assert!(metric_references(r#"statek_x{shard=a}"#).is_err());
        assert!(metric_references(r#"statek_x{shard="a" tenant="b"}"#).is_err());
        assert!(metric_references(r#"up{job="x"#).is_err());
    }

    fn check_resolve(name: &str, labels: &[&str], expected: Result<&str, &str>) {
        let reference = Reference {
            name: name.to_owned(),
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        };
        match (resolve(&reference), expected) {
            (Ok(metric), Ok(want)) => assert_eq!(metric.name, want, "{name}"),
            (Err(error), Err(want)) => assert!(error.contains(want), "{name}: {error}"),
            (got, want) => panic!("{name} {labels:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn resolving_names_suffixes_and_labels() {
        check_resolve(
            "statek_reservations_total",
            &["shard"],
            Ok("statek_reservations_total"),
        );
        check_resolve(
            "statek_service_lag_seconds_bucket",
            &["le", "tenant"],
            Ok("statek_service_lag_seconds"),
        );
        check_resolve(
            "statek_service_lag_seconds_sum",
            &[],
            Ok("statek_service_lag_seconds"),
        );
        check_resolve(
            "statek_prune_batch_duration_seconds_count",
            &[],
            Ok("statek_prune_batch_duration_seconds"),
        );
        check_resolve("statek_service_lag_seconds", &[], Err("is a histogram"));
        check_resolve(
            "statek_service_lag_seconds_sum",
            &["le"],
            Err("has no label le"),
        );
        check_resolve(
            "statek_reservations_total_count",
            &[],
            Err("has no _count series"),
        );
        check_resolve("statek_reservations", &[], Err("not a metric statek emits"));
        check_resolve(
            "statek_reservations_total",
            &["tenant"],
            Err("has no label tenant"),
        );
        check_resolve(
            "statek_prune_deleted_total",
            &["shard"],
            Err("labels: none"),
        );
        check_resolve("statek_Bad", &[], Err("not a statek metric name"));
        check_resolve("statek_", &[], Err("not a statek metric name"));
    }

    #[test]
    fn metrics_are_listed_once_with_conventional_names() {
        let names: BTreeSet<&str> = METRICS.iter().map(|m| m.name).collect();
        assert_eq!(names.len(), METRICS.len());
        for m in METRICS {
            assert_eq!(m.kind == Counter, m.name.ends_with("_total"), "{}", m.name);
            assert!(
                !HISTOGRAM_SUFFIXES.iter().any(|s| m.name.ends_with(s)),
                "{}",
                m.name
            );
        }
    }

    #[test]
    fn heading_anchors() {
        let md = "# Operating statek\n## Failure modes\n### StatekTenantAboveBound\n\
                  ```sh\n# not a heading\n```\n## Failure modes\n#nospace\n\
                  ## `statek policy verify` as readiness\n";
        let expected: BTreeSet<String> = [
            "operating-statek",
            "failure-modes",
            "statektenantabovebound",
            "failure-modes-1",
            "statek-policy-verify-as-readiness",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        assert_eq!(anchors(md), expected);
    }

    fn file(name: &str, text: &str) -> SourceFile {
        SourceFile::parse(name.to_owned(), text)
    }

    /// A rules file and a dashboard that together use every metric once.
    fn complete_dashboard() -> SourceFile {
        let targets: Vec<Value> = METRICS
            .iter()
            .map(|m| {
                let series = if m.kind == Histogram {
                    format!("{}_count", m.name)
                } else {
                    m.name.to_owned()
                };
                serde_json::json!({ "expr": format!("sum({series})") })
            })
            .collect();
        let dashboard = serde_json::json!({
            "panels": [{ "id": 1, "title": "row", "panels": [
                { "id": 2, "title": "all", "targets": targets }
            ]}],
            "templating": { "list": [
                { "name": "shard", "query": { "query": "label_values(statek_reservations_total, shard)" } }
            ]}
        });
        file("d.json", &dashboard.to_string())
    }

    const ALERT: &str = "
groups:
  - name: statek
    rules:
      - alert: StatekX
        expr: statek_reservations_total > 0
        labels: { severity: warning }
        annotations:
          summary: s
          description: d
          runbook: docs/operations.md#statekx
";

    fn violations(files: &[SourceFile]) -> Vec<String> {
        let anchors = BTreeSet::from(["statekx".to_owned()]);
        check_files(files, &anchors).violations
    }

    #[test]
    fn a_complete_set_passes_and_counts() {
        let files = [file("a.yaml", ALERT), complete_dashboard()];
        let report = check_files(&files, &BTreeSet::from(["statekx".to_owned()]));
        assert_eq!(report.violations, Vec::<String>::new());
        assert_eq!((report.alerts, report.panels, report.files), (1, 1, 2));
    }

    #[test]
    fn problems_are_each_named() {
        let bad_alert = ALERT
            .replace("statek_reservations_total > 0", "statek_nope_total > 0")
            .replace("runbook: docs/operations.md#statekx", "runbook: http://x")
            .replace("summary: s", "summary: ''");
        let secret = "apiVersion: v1\nkind: Secret\nmetadata: { name: s }\n\
                      stringData: { url: 'postgres://u:hunter2@h/db' }\n---\nkind: ConfigMap\n";
        let got = violations(&[
            file("a.yaml", &bad_alert),
            file("b.yaml", ALERT),
            file("s.yaml", secret),
            file("broken.json", "{"),
            complete_dashboard(),
        ]);
        let expected = [
            "a.yaml: rule StatekX: statek_nope_total is not a metric statek emits",
            "a.yaml: alert StatekX has no summary annotation",
            "a.yaml: alert StatekX: runbook \"http://x\" must be docs/operations.md#ANCHOR",
            "b.yaml: alert StatekX is also defined in a.yaml",
            "s.yaml (document 1): Secret s key url holds no CHANGE_ME placeholder",
            "broken.json: does not parse",
        ];
        assert_eq!(got.len(), expected.len(), "{got:#?}");
        for want in expected {
            assert!(
                got.iter().any(|v| v.starts_with(want)),
                "missing {want:?} in {got:#?}"
            );
        }
    }

    #[test]
    fn unused_metrics_are_named() {
        let got = violations(&[file("a.yaml", ALERT)]);
        assert_eq!(got.len(), METRICS.len() - 1, "{got:#?}");
        assert!(got.contains(
            &"metric statek_service_lag_seconds is used by no alert rule and no dashboard panel"
                .to_owned()
        ));
        // A dashboard variable alone is not a use.
        let variable_only = serde_json::json!({ "templating": { "list": [
            { "name": "s", "query": "label_values(statek_service_lag_seconds_count, shard)" }
        ]}});
        let got = violations(&[
            file("a.yaml", ALERT),
            file("v.json", &variable_only.to_string()),
        ]);
        assert_eq!(got.len(), METRICS.len() - 1, "{got:#?}");
    }
}

//! `cargo xtask deploy-check`: the files under `deploy/` parse, and the
//! Prometheus rules and the Grafana dashboard use exactly the metrics statek
//! emits.
//!
//! - Every `*.yaml` / `*.yml` file (every document of the stream) and every
//!   `*.json` file under `deploy/` parses.
//! - Every `statek_*` identifier in a PromQL expression (the `expr` of an
//!   alert or recording rule, the `expr` of a dashboard panel target, a
//!   dashboard variable query) names a metric of [`METRICS`] (statek's one
//!   catalogue, `statek_scheduler::metrics::catalogue()`): a histogram
//!   only through its `_bucket`, `_sum` or `_count` series, any other kind
//!   never through them; label matchers name only the metric's labels (and
//!   `le` on `_bucket`).
//! - Every metric of [`METRICS`] is used by at least one alert rule or
//!   dashboard panel.
//! - Every alert has `summary`, `description` and `runbook` annotations and
//!   a `severity` label; the runbook is `docs/operations.md#ANCHOR` for a
//!   heading of that file; alert names are unique.
//! - Every alert reads only metrics that replicas create at 0 from their
//!   start, or that are listed with where their first value comes from;
//!   every alert has a `promtool test rules` case where it fires, from
//!   series that start at 0 ([`alert_tests`]).
//! - Dashboard panel ids are unique within their dashboard.
//! - Every Kubernetes Secret is a template: `stringData` values that all
//!   contain [`PLACEHOLDER`], and no base64 `data`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::workspace;

mod alert_tests;
mod anchors;
mod catalogue;
mod promql;
#[cfg(test)]
mod tests;

use alert_tests::AlertTests;
use anchors::anchors;
use catalogue::METRICS;
use promql::{metric_references, resolve};

/// The marker every value of a Secret template under `deploy/` must contain.
pub const PLACEHOLDER: &str = "CHANGE_ME";

/// The page every alert's `runbook` annotation points into.
const RUNBOOK_PAGE: &str = "docs/operations.md";

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
    alert_tests: AlertTests,
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
    let untested = checker.alert_tests.finish(&checker.alert_names);
    checker.report.violations.extend(untested);
    for metric in METRICS.iter() {
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
        if alert_tests::is_rule_test(document) {
            for problem in self.alert_tests.document(at, document) {
                self.violation(problem);
            }
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
                    Some(expr) => {
                        let read = self.expression(&format!("{at}: rule {name}"), expr, Use::Query);
                        if rule.get("alert").is_some() {
                            for metric in read {
                                if let Some(problem) = alert_tests::not_at_start(name, metric) {
                                    self.violation(format!("{at}: {problem}"));
                                }
                            }
                        }
                    }
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

    /// Checks an expression's metric references; returns the metrics it
    /// reads (each once).
    fn expression(&mut self, at: &str, expr: &str, usage: Use) -> BTreeSet<&'static str> {
        let mut read = BTreeSet::new();
        let references = match metric_references(expr) {
            Ok(references) => references,
            Err(error) => {
                self.violation(format!("{at}: {error}"));
                return read;
            }
        };
        for reference in references {
            match resolve(&reference) {
                Ok(metric) => {
                    read.insert(metric.name);
                    if usage == Use::Query {
                        self.used.insert(metric.name);
                    }
                }
                Err(error) => self.violation(format!("{at}: {error}")),
            }
        }
        read
    }
}

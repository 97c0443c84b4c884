//! Tests of `cargo xtask deploy-check`.

use super::catalogue::MetricKind::{Counter, Histogram};
use super::catalogue::HISTOGRAM_SUFFIXES;
use super::promql::Reference;
use super::*;

#[test]
fn the_catalogue_names_each_metric_once_and_holds_the_stores_own() {
    let names: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    for store_metric in [
        statek_store_pg::metric_names::PRUNE_DELETED_TOTAL,
        statek_store_pg::metric_names::PRUNE_CUTOFF_TIMESTAMP_SECONDS,
        statek_store_pg::metric_names::PRUNE_BATCH_DURATION_SECONDS,
        statek_store_pg::metric_names::DURABILITY_RISK,
        statek_store_pg::metric_names::RESERVATIONS_LOST_TOTAL,
        statek_store_pg::metric_names::TIMELINE_CHANGES_TOTAL,
        statek_store_pg::metric_names::RUNS_PRUNED_TOTAL,
    ] {
        assert!(unique.contains(store_metric), "{store_metric}");
    }
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
    for m in METRICS.iter() {
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

/// A promtool rule test of [`ALERT`] where it fires.
const RULE_TEST: &str = "
rule_files: [a.yaml]
tests:
  - name: fires
    interval: 1m
    input_series:
      - series: 'statek_reservations_total{shard=\"s\",instance=\"r1\"}'
        values: '0 1'
    alert_rule_test:
      - eval_time: 1m
        alertname: StatekX
        exp_alerts: [{ exp_labels: { severity: warning } }]
";

fn violations(files: &[SourceFile]) -> Vec<String> {
    let anchors = BTreeSet::from(["statekx".to_owned()]);
    check_files(files, &anchors).violations
}

#[test]
fn a_complete_set_passes_and_counts() {
    let files = [
        file("a.yaml", ALERT),
        file("a.test.yaml", RULE_TEST),
        complete_dashboard(),
    ];
    let report = check_files(&files, &BTreeSet::from(["statekx".to_owned()]));
    assert_eq!(report.violations, Vec::<String>::new());
    assert_eq!((report.alerts, report.panels, report.files), (1, 1, 3));
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
        file("a.test.yaml", RULE_TEST),
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
    let got = violations(&[file("a.yaml", ALERT), file("a.test.yaml", RULE_TEST)]);
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
        file("a.test.yaml", RULE_TEST),
        file("v.json", &variable_only.to_string()),
    ]);
    assert_eq!(got.len(), METRICS.len() - 1, "{got:#?}");
}

#[test]
fn untested_alerts_and_bad_rule_tests_are_named() {
    // An alert on a metric that exists only at its first event.
    let lag = ALERT.replace("StatekX", "StatekLag").replace(
        "statek_reservations_total > 0",
        "rate(statek_service_lag_seconds_count[5m]) > 0",
    );
    let bad_test = RULE_TEST
        .replace("values: '0 1'", "values: '1 2'")
        .replace("instance=\"r1\"", "pod=\"r1\"")
        .replace("alertname: StatekX", "alertname: StatekGone");
    let got = violations(&[
        file("a.yaml", ALERT),
        file("l.yaml", &lag),
        file("a.test.yaml", &bad_test),
        complete_dashboard(),
    ]);
    let expected = [
        "l.yaml: alert StatekLag reads statek_service_lag_seconds, which replicas do not create \
         at 0",
        "a.test.yaml: fires: series statek_reservations_total{shard=\"s\",pod=\"r1\"}: ",
        "a.yaml: alert StatekX has no rule test case where it fires",
        "l.yaml: alert StatekLag has no rule test case where it fires",
        "a.test.yaml: fires: a case names alert StatekGone, which no rule defines",
    ];
    assert_eq!(got.len(), expected.len(), "{got:#?}");
    for want in expected {
        assert!(
            got.iter().any(|v| v.starts_with(want)),
            "missing {want:?} in {got:#?}"
        );
    }
    // A firing case whose counter is born at its first event.
    let not_zero = RULE_TEST.replace("values: '0 1'", "values: '1 2'");
    let got = violations(&[
        file("a.yaml", ALERT),
        file("a.test.yaml", &not_zero),
        complete_dashboard(),
    ]);
    assert_eq!(
        got,
        [
            "a.test.yaml: fires: series statek_reservations_total{shard=\"s\",instance=\"r1\"} \
          starts at \"1 2\", not at 0 as a replica creates it"
        ]
    );
    // No rule test file at all.
    let got = violations(&[file("a.yaml", ALERT), complete_dashboard()]);
    assert_eq!(got.len(), 2, "{got:#?}");
    assert!(got[0].starts_with("no promtool rule test file"), "{got:#?}");
}

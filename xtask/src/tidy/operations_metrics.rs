//! docs/operations.md's "Metrics" table lists exactly the metrics of
//! `statek_scheduler::metrics::catalogue()`, each with the catalogue's
//! kind, labels and unit, in catalogue order or any other.

use std::collections::BTreeMap;

use statek_scheduler::metrics::{catalogue, Metric};

/// One row of the table: name -> (type, labels, unit) as written.
fn table_rows(document: &str) -> Result<BTreeMap<String, (String, String, String)>, String> {
    let section = document
        .split("\n### Metrics\n")
        .nth(1)
        .ok_or("docs/operations.md has no \"### Metrics\" section")?;
    let mut rows = BTreeMap::new();
    let mut lines = section.lines().skip_while(|line| !line.starts_with('|'));
    let header = lines.next().ok_or("the Metrics section has no table")?;
    if !header.starts_with("| metric | type | labels | unit |") {
        return Err(format!("unexpected table header {header:?}"));
    }
    for line in lines.skip(1).take_while(|line| line.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        let [name, kind, labels, unit, ..] = cells[..] else {
            return Err(format!("short row {line:?}"));
        };
        let name = name.trim_matches('`').to_owned();
        let row = (kind.to_owned(), labels.to_owned(), unit.to_owned());
        if rows.insert(name.clone(), row).is_some() {
            return Err(format!("{name} is listed twice"));
        }
    }
    Ok(rows)
}

/// How the table writes a metric's labels: `` `shard`, `tenant` `` or `none`.
fn labels_cell(metric: &Metric) -> String {
    if metric.labels.is_empty() {
        "none".to_owned()
    } else {
        metric
            .labels
            .iter()
            .map(|label| format!("`{label}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Every difference between the table and the catalogue.
fn differences(document: &str, metrics: &[Metric]) -> Vec<String> {
    let mut rows = match table_rows(document) {
        Ok(rows) => rows,
        Err(error) => return vec![error],
    };
    let mut found = Vec::new();
    for metric in metrics {
        let expected = (
            metric.kind.as_str().to_owned(),
            labels_cell(metric),
            metric.unit.to_owned(),
        );
        match rows.remove(metric.name) {
            None => found.push(format!("{} is not in the table", metric.name)),
            Some(row) if row != expected => found.push(format!(
                "{}: the table says {row:?}, the catalogue {expected:?}",
                metric.name
            )),
            Some(_) => {}
        }
    }
    found.extend(
        rows.keys()
            .map(|name| format!("{name} is in the table but not in the catalogue")),
    );
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operations_metrics_table_is_the_catalogue() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
        let document = std::fs::read_to_string(&path).unwrap();
        let metrics: Vec<Metric> = catalogue().copied().collect();
        assert_eq!(
            differences(&document, &metrics),
            Vec::<String>::new(),
            "docs/operations.md, \"Metrics\", drifted from statek_scheduler::metrics::catalogue()"
        );
    }

    #[test]
    fn a_wrong_kind_label_or_unit_and_a_stray_row_are_found() {
        let metrics: Vec<Metric> = catalogue().copied().take(2).collect();
        let row = |metric: &Metric, kind: &str, labels: &str, unit: &str| {
            format!(
                "| `{}` | {kind} | {labels} | {unit} | meaning | who |\n",
                metric.name
            )
        };
        let (first, second) = (&metrics[0], &metrics[1]);
        let table = |rows: &str| {
            format!(
                "intro\n### Metrics\n\n| metric | type | labels | unit | meaning | recorded by |\n\
                 |---|---|---|---|---|---|\n{rows}\nNotes\n"
            )
        };
        let good = row(first, first.kind.as_str(), &labels_cell(first), first.unit)
            + &row(
                second,
                second.kind.as_str(),
                &labels_cell(second),
                second.unit,
            );
        assert_eq!(differences(&table(&good), &metrics), Vec::<String>::new());
        let wrong_unit = row(first, first.kind.as_str(), &labels_cell(first), "furlongs")
            + "| `statek_nothing` | gauge | none | 1 | meaning | who |\n";
        assert_eq!(
            differences(&table(&wrong_unit), &metrics),
            [
                format!(
                    "{}: the table says {:?}, the catalogue {:?}",
                    first.name,
                    (first.kind.as_str(), labels_cell(first).as_str(), "furlongs"),
                    (first.kind.as_str(), labels_cell(first).as_str(), first.unit),
                ),
                format!("{} is not in the table", second.name),
                "statek_nothing is in the table but not in the catalogue".to_owned(),
            ]
        );
    }
}

//! Section `workloads` as text: the table printed at the end of a run and
//! the Markdown written to `workloads.md` (the tables docs/benchmarks.md
//! quotes). Pure: no I/O.

use super::results::{DbWork, Side, Workloads, BATCHED, FAIR};

fn lag_cell(side: &Side, percentile: fn(&super::lag::Lag) -> f64) -> String {
    side.lag.as_ref().map_or_else(
        || "—".to_owned(),
        |lag| {
            let bound = if lag.unclaimed > 0 { "≥ " } else { "" };
            format!("{bound}{:.1}", percentile(lag))
        },
    )
}

/// `low-high (n)` of a median row's judged samples.
fn range_cell(side: &Side) -> String {
    side.range.map_or_else(
        || "—".to_owned(),
        |r| format!("{:.0}-{:.0} ({})", r.low, r.high, r.samples),
    )
}

/// The Markdown tables.
pub fn markdown(w: &Workloads) -> String {
    let mut out = String::new();
    out.push_str(
        "| setting | workload | side | executing runs | runs/s (median) | range (samples) | vs plain claimer | slots/s | fed p50 ms | fed p99 ms |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in &w.runs {
        let plain = run.side(super::results::PLAIN).map(|s| s.runs_per_second);
        for side in &run.sides {
            let versus = plain.map_or_else(
                || "—".to_owned(),
                |p| format!("{:.2}×", side.runs_per_second / p),
            );
            out.push_str(&format!(
                "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} |\n",
                run.setting,
                run.workload,
                side.side,
                run.executing_runs,
                side.runs_per_second,
                range_cell(side),
                versus,
                side.slots_per_second
                    .map_or_else(|| "—".to_owned(), |s| format!("{s:.0}")),
                lag_cell(side, |l| l.p50_ms),
                lag_cell(side, |l| l.p99_ms),
            ));
        }
    }
    if w.runs
        .iter()
        .any(|run| run.sides.iter().any(|s| s.work.is_some()))
    {
        out.push_str(
            "\n| setting | workload | side | WAL bytes/run | full-page images/run | rows written/run | of which HOT updates | inserted | updated | deleted | statements/run | server exec + plan ms/run | client CPU ms/run | rows vs batched | WAL vs batched | server time vs batched |\n\
             |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for run in &w.runs {
            let batched = run.side(BATCHED).and_then(|s| s.work);
            for side in &run.sides {
                let Some(work) = side.work else {
                    continue;
                };
                let versus = |of: fn(&DbWork) -> Option<f64>| match (
                    of(&work),
                    batched.as_ref().and_then(of),
                ) {
                    (Some(mine), Some(theirs)) if theirs > 0.0 => {
                        format!("{:.2}×", mine / theirs)
                    }
                    _ => "—".to_owned(),
                };
                let or_na = |value: Option<f64>, digits: usize| {
                    value.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.digits$}"))
                };
                out.push_str(&format!(
                    "| {} | {} | {} | {:.0} | {:.3} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {:.3} | {} | {} | {} |\n",
                    run.setting,
                    run.workload,
                    side.side,
                    work.wal_bytes,
                    work.wal_fpi,
                    work.rows_written(),
                    work.hot_updated,
                    work.inserted,
                    work.updated,
                    work.deleted,
                    or_na(work.statements, 2),
                    or_na(work.db_ms(), 3),
                    work.client_cpu_ms,
                    versus(|w| Some(w.rows_written())),
                    versus(|w| Some(w.wal_bytes)),
                    versus(DbWork::db_ms),
                ));
            }
        }
    }
    let splits: Vec<(&str, &str, super::batch_split::BatchSplit)> = w
        .runs
        .iter()
        .filter_map(|run| {
            let split = super::batch_split::of(run.side(FAIR)?)?;
            Some((run.setting.as_str(), run.workload.as_str(), split))
        })
        .collect();
    if !splits.is_empty() {
        out.push('\n');
        out.push_str(super::batch_split::HEADER);
        for (setting, workload, split) in &splits {
            out.push_str(&super::batch_split::row(setting, workload, split));
        }
    }
    if !w.slot_rate.is_empty() {
        out.push_str(
            "\n| setting | Worker concurrency | slots/s | runs/s | reservation rows/s | batches/s |\n\
             |---|---:|---:|---:|---:|---:|\n",
        );
        for s in &w.slot_rate {
            out.push_str(&format!(
                "| {} | {} | {:.0} | {:.0} | {:.1} | {} |\n",
                s.setting,
                s.concurrency,
                s.slots_per_second,
                s.runs as f64 / s.seconds.max(1e-9),
                s.rows_per_second,
                s.batches_per_second
                    .map_or_else(|| "not counted".to_owned(), |b| format!("{b:.1}")),
            ));
        }
    }
    out
}

/// Prints the section's tables.
pub fn print(w: &Workloads) {
    if w.runs.is_empty() && w.slot_rate.is_empty() {
        return;
    }
    println!();
    println!(
        "{:<8} | {:<15} | {:<26} | {:>4} | {:>8} | {:>9} | {:>9} | {:>11}",
        "setting", "workload", "side", "exec", "runs/s", "slots/s", "fed p50", "fed p99 ms"
    );
    for run in &w.runs {
        for side in &run.sides {
            println!(
                "{:<8} | {:<15} | {:<26} | {:>4} | {:>8.0} | {:>9} | {:>9} | {:>11}",
                run.setting,
                run.workload,
                side.side,
                run.executing_runs,
                side.runs_per_second,
                side.slots_per_second
                    .map_or_else(|| "-".to_owned(), |s| format!("{s:.0}")),
                lag_cell(side, |l| l.p50_ms),
                lag_cell(side, |l| l.p99_ms),
            );
            if side.side != FAIR && side.backlog_left == Some(0) {
                println!("         (the backlog ran out inside the window: runs/s is low)");
            }
        }
    }
    for run in &w.runs {
        if let Some(split) = run.side(FAIR).and_then(super::batch_split::of) {
            println!(
                "{} {} fair batches: {:.0}/s, {:.2} ms apart, {:.1} slots and {:.1} runs each; per batch reserve {:.3} ms, {:.2} claims {:.3} ms, finishes {:.3} ms, client CPU {:.3} ms; {:.0} claim statements/s",
                run.setting,
                run.workload,
                split.batches_per_second,
                split.period_ms,
                split.slots,
                split.runs,
                split.reserve_ms,
                split.claims,
                split.claim_ms,
                split.finish_ms,
                split.client_ms,
                split.claims_per_second,
            );
        }
    }
    for s in &w.slot_rate {
        println!(
            "slot-rate ({}): {:.0} slots/s, {:.1} reservation rows/s, {} batches/s (one Worker, concurrency {})",
            s.setting,
            s.slots_per_second,
            s.rows_per_second,
            s.batches_per_second
                .map_or_else(|| "not counted".to_owned(), |b| format!("{b:.1}")),
            s.concurrency
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::lag::Lag;
    use super::super::results::{SlotRate, WorkloadRun, PLAIN};
    use super::*;

    #[test]
    fn markdown_rows() {
        let side = |name: &str, rate: f64, lag: Option<Lag>| Side {
            side: name.to_owned(),
            runs: 0,
            seconds: 1.0,
            runs_per_second: rate,
            slots_per_second: (name == FAIR).then_some(4000.0),
            lag,
            backlog_left: None,
            sample: 1,
            drained: false,
            backlog_scale: 1,
            work: Some(DbWork {
                runs: 1000,
                wal_bytes: if name == FAIR { 900.0 } else { 600.0 },
                wal_fpi: 0.0,
                inserted: 1.0,
                updated: if name == FAIR { 3.0 } else { 2.0 },
                hot_updated: 0.5,
                deleted: 0.0,
                client_cpu_ms: 0.125,
                statements: (name != PLAIN).then_some(2.5),
                exec_ms: (name != PLAIN).then_some(if name == FAIR { 0.5 } else { 0.25 }),
                plan_ms: (name != PLAIN).then_some(0.125),
            }),
            range: Some(super::super::results::Range {
                low: rate - 100.0,
                high: rate + 50.0,
                samples: 3,
            }),
            statements: Vec::new(),
        };
        let lag = |unclaimed| Lag {
            runs: 3,
            unclaimed,
            p50_ms: 2.0,
            p99_ms: 30.25,
            max_ms: 31.0,
        };
        let w = Workloads {
            window_seconds: 2,
            runs: vec![WorkloadRun {
                setting: "fast".to_owned(),
                workload: "noisy-neighbour".to_owned(),
                executing_runs: 16,
                handler_ms: 0,
                sides: vec![
                    side(FAIR, 1500.0, Some(lag(0))),
                    side(PLAIN, 3000.0, Some(lag(2))),
                    side(BATCHED, 3000.0, None),
                ],
                samples: Vec::new(),
            }],
            slot_rate: vec![SlotRate {
                setting: "fast".to_owned(),
                concurrency: 16,
                seconds: 2.0,
                slots: 8000,
                slots_per_second: 4000.0,
                runs: 20,
                lifetime_seconds: 3.0,
                lifetime_rows: 9000,
                rows_per_second: 3000.0,
                batches: None,
                batches_per_second: None,
            }],
        };
        let md = markdown(&w);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[2],
            "| fast | noisy-neighbour | fair Worker | 16 | 1500 | 1400-1550 (3) | 0.50× | 4000 | 2.0 | 30.2 |"
        );
        assert_eq!(lines[3], "| fast | noisy-neighbour | plain SKIP LOCKED claimer | 16 | 3000 | 2900-3050 (3) | 1.00× | — | ≥ 2.0 | ≥ 30.2 |");
        assert_eq!(
            lines[8],
            "| fast | noisy-neighbour | fair Worker | 900 | 0.000 | 4.00 | 0.50 | 1.00 | 3.00 | 0.00 | 2.50 | 0.625 | 0.125 | 1.33× | 1.50× | 1.67× |"
        );
        assert_eq!(
            lines[10],
            "| fast | noisy-neighbour | batched plain queue | 600 | 0.000 | 3.00 | 0.50 | 1.00 | 2.00 | 0.00 | 2.50 | 0.375 | 0.125 | 1.00× | 1.00× | 1.00× |"
        );
        assert_eq!(
            lines[14],
            "| fast | 16 | 4000 | 10 | 3000.0 | not counted |"
        );
    }
}

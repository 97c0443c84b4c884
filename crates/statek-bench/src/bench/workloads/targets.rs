//! The targets of issue 23 ("Fairness for free") for section
//! `workloads`, judged from its results. Pure: no I/O. Reported, never
//! asserted by tests.

use super::results::{WorkloadRun, Workloads, BATCHED, FAIR, PLAIN};
use crate::bench::target::Target;

/// Slots per second one Worker must consume on the sparse policy: fast
/// settings, then durable.
pub const SLOT_RATE_FLOORS: (f64, f64) = (500_000.0, 250_000.0);

/// Fair's p99 service lag of the fed tenants, as a multiple of the plain
/// claimer's, at most.
pub const LAG_CEILING: f64 = 0.01;

/// Every workload target that `workloads` can judge. The throughput
/// floors against the batched queue are 0.9x on the fast settings and
/// 1.0x on the durable server.
pub fn judge(workloads: &Workloads) -> Vec<Target> {
    let mut targets = Vec::new();
    for run in &workloads.runs {
        let name = |what: &str| format!("{} ({}): {what}", run.workload, run.setting);
        let rate = |versus: &str, floor: f64| -> Option<Target> {
            let (fair, baseline) = (run.side(FAIR)?, run.side(versus)?);
            Some(Target::ratio_at_least(
                name(&format!("fair runs/s vs {versus}")),
                fair.runs_per_second,
                baseline.runs_per_second,
                floor,
            ))
        };
        let batched_floor = if run.setting == "durable" { 1.0 } else { 0.9 };
        targets.extend(work_targets(run));
        match run.workload.as_str() {
            "all-backlogged" => targets.extend(rate(BATCHED, batched_floor)),
            "noisy-neighbour" => {
                targets.extend(rate(BATCHED, batched_floor));
                targets.extend(lag_target(
                    run,
                    &name("weight-8 p99 service lag, fair vs plain claimer"),
                ));
            }
            "sparse" => targets.extend(rate(PLAIN, 1.0)),
            "long-runs" => {
                targets.extend(rate(BATCHED, 0.95));
                targets.extend(ceiling_target(
                    run,
                    &name("fair runs/s vs the handlers' ceiling"),
                ));
            }
            _ => {}
        }
    }
    for slots in &workloads.slot_rate {
        let name = |what: &str| format!("slot-rate ({}): {what}", slots.setting);
        let floor = if slots.setting == "durable" {
            SLOT_RATE_FLOORS.1
        } else {
            SLOT_RATE_FLOORS.0
        };
        targets.push(Target::value_at_least(
            name("slots/s of one Worker"),
            slots.slots_per_second,
            floor,
            "slots/s",
        ));
        let what = name("reservation rows/s <= batches/s");
        targets.push(match slots.batches_per_second {
            Some(batches) => Target::ratio_at_most(what, slots.rows_per_second, batches, 1.0),
            None => {
                Target::not_measured(what, "<= 1.00x", "the server does not count function calls")
            }
        });
    }
    targets
}

/// Fair's runs/s against what its handlers allow (executing runs, each
/// taking the handler's time): at least 0.8x.
fn ceiling_target(run: &WorkloadRun, what: &str) -> Option<Target> {
    let fair = run.side(FAIR)?;
    if run.handler_ms == 0 {
        return None;
    }
    let ceiling = run.executing_runs as f64 * 1_000.0 / run.handler_ms as f64;
    Some(Target::ratio_at_least(
        what.to_owned(),
        fair.runs_per_second,
        ceiling,
        0.8,
    ))
}

/// The most database work per run the fair side may do, as a multiple
/// of the batched plain queue's (issue 23): rows written, WAL bytes and
/// the server's execution plus planning time.
pub const WORK_CEILING: f64 = 1.1;

/// Fair's rows written, WAL bytes and server time per run against the
/// batched queue's, when both were measured (server time "not measured"
/// without `pg_stat_statements`).
fn work_targets(run: &WorkloadRun) -> Vec<Target> {
    let (Some(fair), Some(batched)) = (
        run.side(FAIR).and_then(|s| s.work),
        run.side(BATCHED).and_then(|s| s.work),
    ) else {
        return Vec::new();
    };
    let name = |what: &str| format!("{} ({}): {what}", run.workload, run.setting);
    vec![
        Target::ratio_at_most(
            name("fair rows written per run vs batched plain queue"),
            fair.rows_written(),
            batched.rows_written(),
            WORK_CEILING,
        ),
        Target::ratio_at_most(
            name("fair WAL bytes per run vs batched plain queue"),
            fair.wal_bytes,
            batched.wal_bytes,
            WORK_CEILING,
        ),
        match (fair.db_ms(), batched.db_ms()) {
            (Some(fair), Some(batched)) => Target::ratio_at_most(
                name("fair server exec + plan time per run vs batched plain queue"),
                fair,
                batched,
                WORK_CEILING,
            ),
            _ => Target::not_measured(
                name("fair server exec + plan time per run vs batched plain queue"),
                &format!("<= {WORK_CEILING:.2}x"),
                "pg_stat_statements is not loaded on this server",
            ),
        },
    ]
}

/// Fair's p99 lag of the fed tenants ≤ [`LAG_CEILING`] of the plain
/// claimer's.
fn lag_target(run: &WorkloadRun, what: &str) -> Option<Target> {
    let fair = run.side(FAIR)?;
    let plain = run.side(PLAIN)?;
    Some(match (&fair.lag, &plain.lag) {
        (Some(f), Some(p)) => {
            Target::ratio_at_most(what.to_owned(), f.p99_ms, p.p99_ms, LAG_CEILING)
        }
        _ => Target::not_measured(
            what.to_owned(),
            &format!("<= {LAG_CEILING:.2}x"),
            "no fed run became claimable in the window",
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::super::lag::Lag;
    use super::super::results::{Side, SlotRate};
    use super::*;

    fn side(name: &str, runs_per_second: f64, p99_ms: Option<f64>) -> Side {
        Side {
            side: name.to_owned(),
            runs: 0,
            seconds: 1.0,
            runs_per_second,
            slots_per_second: None,
            lag: p99_ms.map(|p99_ms| Lag {
                runs: 10,
                unclaimed: 0,
                p50_ms: 1.0,
                p99_ms,
                max_ms: p99_ms,
            }),
            backlog_left: None,
            sample: 0,
            drained: false,
            backlog_scale: 1,
            work: None,
            range: None,
            statements: Vec::new(),
        }
    }

    fn run(workload: &str, sides: Vec<Side>) -> WorkloadRun {
        WorkloadRun {
            setting: "fast".to_owned(),
            workload: workload.to_owned(),
            executing_runs: 16,
            handler_ms: 0,
            sides,
            samples: Vec::new(),
        }
    }

    fn slot_rate(slots_per_second: f64, rows: f64, batches: Option<f64>) -> SlotRate {
        SlotRate {
            setting: "durable".to_owned(),
            concurrency: 16,
            seconds: 1.0,
            slots: 0,
            slots_per_second,
            runs: 0,
            lifetime_seconds: 1.0,
            lifetime_rows: 0,
            rows_per_second: rows,
            batches: batches.map(|b| b as i64),
            batches_per_second: batches,
        }
    }

    /// `(what, ratio, met)` of every target.
    fn judged(workloads: &Workloads) -> Vec<(String, Option<f64>, bool)> {
        judge(workloads)
            .into_iter()
            .map(|t| (t.what, t.ratio, t.met))
            .collect()
    }

    #[test]
    fn every_target_of_issue_23() {
        let durable = |mut run: WorkloadRun| {
            run.setting = "durable".to_owned();
            run
        };
        let mut long_runs = run(
            "long-runs",
            vec![
                side(FAIR, 2600.0, None),
                side(PLAIN, 3000.0, None),
                side(BATCHED, 2500.0, None),
            ],
        );
        (long_runs.executing_runs, long_runs.handler_ms) = (64, 20);
        let workloads = Workloads {
            window_seconds: 2,
            runs: vec![
                run(
                    "all-backlogged",
                    vec![
                        side(FAIR, 900.0, None),
                        side(PLAIN, 1000.0, None),
                        side(BATCHED, 1000.0, None),
                    ],
                ),
                durable(run(
                    "all-backlogged",
                    vec![side(FAIR, 990.0, None), side(BATCHED, 1000.0, None)],
                )),
                run(
                    "noisy-neighbour",
                    vec![
                        side(FAIR, 700.0, Some(4.0)),
                        side(PLAIN, 1000.0, Some(400.0)),
                        side(BATCHED, 2000.0, Some(300.0)),
                    ],
                ),
                run(
                    "sparse",
                    vec![side(FAIR, 1000.0, None), side(PLAIN, 1000.0, None)],
                ),
                long_runs,
            ],
            slot_rate: vec![
                SlotRate {
                    setting: "fast".to_owned(),
                    ..slot_rate(500_000.0, 10.0, Some(10.0))
                },
                slot_rate(240_000.0, 20.0, None),
            ],
        };
        let s = |x: &str| x.to_owned();
        assert_eq!(
            judged(&workloads),
            vec![
                (
                    s("all-backlogged (fast): fair runs/s vs batched plain queue"),
                    Some(0.9),
                    true
                ),
                (
                    s("all-backlogged (durable): fair runs/s vs batched plain queue"),
                    Some(0.99),
                    false
                ),
                (
                    s("noisy-neighbour (fast): fair runs/s vs batched plain queue"),
                    Some(0.35),
                    false
                ),
                (
                    s("noisy-neighbour (fast): weight-8 p99 service lag, fair vs plain claimer"),
                    Some(0.01),
                    true
                ),
                (
                    s("sparse (fast): fair runs/s vs plain SKIP LOCKED claimer"),
                    Some(1.0),
                    true
                ),
                (
                    s("long-runs (fast): fair runs/s vs batched plain queue"),
                    Some(1.04),
                    true
                ),
                (
                    s("long-runs (fast): fair runs/s vs the handlers' ceiling"),
                    Some(2600.0 / 3200.0),
                    true
                ),
                (
                    s("slot-rate (fast): slots/s of one Worker"),
                    Some(1.0),
                    true
                ),
                (
                    s("slot-rate (fast): reservation rows/s <= batches/s"),
                    Some(1.0),
                    true
                ),
                (
                    s("slot-rate (durable): slots/s of one Worker"),
                    Some(0.96),
                    false
                ),
                (
                    s("slot-rate (durable): reservation rows/s <= batches/s"),
                    None,
                    false
                ),
            ]
        );
    }

    #[test]
    fn database_work_per_run_is_judged_against_the_batched_queue() {
        let with_work = |name: &str, rows: f64, wal: f64, db_ms: Option<f64>| {
            let mut s = side(name, 1000.0, None);
            s.work = Some(super::super::results::DbWork {
                runs: 100,
                wal_bytes: wal,
                wal_fpi: 0.0,
                inserted: rows,
                updated: 0.0,
                hot_updated: 0.0,
                deleted: 0.0,
                client_cpu_ms: 0.0,
                statements: db_ms.map(|_| 3.0),
                exec_ms: db_ms,
                plan_ms: db_ms.map(|_| 0.0),
            });
            s
        };
        let workloads = Workloads {
            window_seconds: 4,
            runs: vec![run(
                "sparse",
                vec![
                    with_work(FAIR, 4.0, 1100.0, Some(0.5)),
                    side(PLAIN, 1000.0, None),
                    with_work(BATCHED, 2.0, 1000.0, Some(0.25)),
                ],
            )],
            slot_rate: Vec::new(),
        };
        let s = |x: &str| x.to_owned();
        assert_eq!(
            judged(&workloads),
            vec![
                (
                    s("sparse (fast): fair rows written per run vs batched plain queue"),
                    Some(2.0),
                    false
                ),
                (
                    s("sparse (fast): fair WAL bytes per run vs batched plain queue"),
                    Some(1.1),
                    true
                ),
                (
                    s("sparse (fast): fair server exec + plan time per run vs batched plain queue"),
                    Some(2.0),
                    false
                ),
                (
                    s("sparse (fast): fair runs/s vs plain SKIP LOCKED claimer"),
                    Some(1.0),
                    true
                ),
            ]
        );
        // Without pg_stat_statements the server time is not measured.
        let mut without = workloads.clone();
        for side in &mut without.runs[0].sides {
            if let Some(work) = side.work.as_mut() {
                work.exec_ms = None;
            }
        }
        let targets = judge(&without);
        assert_eq!(
            targets[2].measured,
            "not measured: pg_stat_statements is not loaded on this server"
        );
        assert!(!targets[2].met);
    }

    #[test]
    fn a_missing_side_or_lag_is_no_target_or_not_measured() {
        let workloads = Workloads {
            window_seconds: 2,
            runs: vec![run(
                "noisy-neighbour",
                vec![side(FAIR, 700.0, None), side(PLAIN, 1000.0, Some(4.0))],
            )],
            slot_rate: Vec::new(),
        };
        // No batched side: no throughput target; the lag is not measured.
        let targets = judge(&workloads);
        assert_eq!(targets.len(), 1);
        assert_eq!(
            targets[0].measured,
            "not measured: no fed run became claimable in the window"
        );
        assert_eq!(targets[0].required, "<= 0.01x");
        assert!(!targets[0].met);
        assert!(judge(&Workloads::default()).is_empty());
    }
}

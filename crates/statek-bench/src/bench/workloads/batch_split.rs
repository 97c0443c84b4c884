//! Per batch of the fair side: where a reservation batch's time goes. One
//! Worker reserves a batch, claims for its slots and records the finished
//! runs; the server's time of each (`pg_stat_statements`, execution plus
//! planning) and the bench process's CPU, divided by the batches, set
//! against the time between two batches (the Worker's period). A
//! statement's time is the server's wall clock: on a busy 2-core machine
//! it includes waiting for a core. Pure: no I/O.

use super::results::{Side, StatementWork};

/// One fair side's batches, from its figures per run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchSplit {
    /// Batches (`statek.reserve_batch` calls) per second.
    pub batches_per_second: f64,
    /// Milliseconds between two batches (1,000 / batches per second).
    pub period_ms: f64,
    /// Slots per batch.
    pub slots: f64,
    /// Runs completed per batch.
    pub runs: f64,
    /// Server milliseconds of the reservation, per batch.
    pub reserve_ms: f64,
    /// Claim statements (`statek.claim_slots`) per batch.
    pub claims: f64,
    /// Server milliseconds of the claims, per batch.
    pub claim_ms: f64,
    /// Server milliseconds of the finishes (`statek.finish_runs`), per
    /// batch.
    pub finish_ms: f64,
    /// The bench process's CPU milliseconds (the Worker's client side),
    /// per batch.
    pub client_ms: f64,
    /// Claim statements per second.
    pub claims_per_second: f64,
}

/// The statement whose text calls `function`.
fn statement<'a>(statements: &'a [StatementWork], function: &str) -> Option<&'a StatementWork> {
    statements.iter().find(|s| s.query.contains(function))
}

/// The split of `side`, or `None` when its statements were not counted
/// (no `pg_stat_statements`) or it reserved nothing (a baseline side).
pub fn of(side: &Side) -> Option<BatchSplit> {
    let reserve = statement(&side.statements, "statek.reserve_batch(")?;
    if reserve.calls <= 0.0 {
        return None;
    }
    let per_batch =
        |s: Option<&StatementWork>| s.map_or(0.0, |s| s.exec_ms + s.plan_ms) / reserve.calls;
    let claim = statement(&side.statements, "statek.claim_slots(");
    let batches_per_second = reserve.calls * side.runs_per_second;
    Some(BatchSplit {
        batches_per_second,
        period_ms: 1000.0 / batches_per_second.max(1e-9),
        slots: side.slots_per_second.unwrap_or(0.0) / batches_per_second.max(1e-9),
        runs: 1.0 / reserve.calls,
        reserve_ms: per_batch(Some(reserve)),
        claims: claim.map_or(0.0, |c| c.calls) / reserve.calls,
        claim_ms: per_batch(claim),
        finish_ms: per_batch(statement(&side.statements, "statek.finish_runs(")),
        client_ms: side.work.map_or(0.0, |w| w.client_cpu_ms) / reserve.calls,
        claims_per_second: claim.map_or(0.0, |c| c.calls) * side.runs_per_second,
    })
}

/// The Markdown header of the split's table.
pub const HEADER: &str = "| setting | workload | batches/s | ms between batches | slots/batch | runs/batch | reserve ms/batch | claim statements/batch | claim ms/batch | finish ms/batch | client CPU ms/batch | claim statements/s |\n\
                          |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";

/// One row of the table.
pub fn row(setting: &str, workload: &str, s: &BatchSplit) -> String {
    format!(
        "| {setting} | {workload} | {:.0} | {:.2} | {:.1} | {:.1} | {:.3} | {:.2} | {:.3} | {:.3} | {:.3} | {:.0} |\n",
        s.batches_per_second,
        s.period_ms,
        s.slots,
        s.runs,
        s.reserve_ms,
        s.claims,
        s.claim_ms,
        s.finish_ms,
        s.client_ms,
        s.claims_per_second,
    )
}

#[cfg(test)]
mod tests {
    use super::super::results::{DbWork, FAIR};
    use super::*;

    fn work(query: &str, calls: f64, exec_ms: f64) -> StatementWork {
        StatementWork {
            query: query.to_owned(),
            calls,
            exec_ms,
            plan_ms: 0.0,
            wal_bytes: 0.0,
        }
    }

    fn fair(statements: Vec<StatementWork>) -> Side {
        Side {
            side: FAIR.to_owned(),
            runs: 4000,
            seconds: 1.0,
            runs_per_second: 4000.0,
            slots_per_second: Some(8000.0),
            lag: None,
            backlog_left: None,
            sample: 1,
            drained: false,
            backlog_scale: 1,
            work: Some(DbWork {
                runs: 4000,
                wal_bytes: 0.0,
                wal_fpi: 0.0,
                inserted: 0.0,
                updated: 0.0,
                hot_updated: 0.0,
                deleted: 0.0,
                client_cpu_ms: 0.025,
                statements: None,
                exec_ms: None,
                plan_ms: None,
            }),
            range: None,
            statements,
        }
    }

    #[test]
    fn a_batch_is_split_by_its_statements_per_run() {
        // A batch of 16 runs (1/16 reservation per run), 32 slots, one claim
        // statement and a finish every second batch.
        let side = fair(vec![
            work(
                "SELECT * FROM statek.claim_slots($1::bigint[], ...)",
                0.0625,
                0.1,
            ),
            work(
                "SELECT * FROM statek.finish_runs($1::uuid[], ...)",
                0.03125,
                0.08,
            ),
            work(
                "SELECT * FROM statek.reserve_batch($1, $2, ...)",
                0.0625,
                0.025,
            ),
        ]);
        let split = of(&side).unwrap();
        assert_eq!(
            split,
            BatchSplit {
                batches_per_second: 250.0,
                period_ms: 4.0,
                slots: 32.0,
                runs: 16.0,
                reserve_ms: 0.4,
                claims: 1.0,
                claim_ms: 1.6,
                finish_ms: 1.28,
                client_ms: 0.4,
                claims_per_second: 250.0,
            }
        );
        assert_eq!(
            row("fast", "all-backlogged", &split),
            "| fast | all-backlogged | 250 | 4.00 | 32.0 | 16.0 | 0.400 | 1.00 | 1.600 | 1.280 | 0.400 | 250 |\n"
        );
    }

    #[test]
    fn a_side_without_reservations_or_statements_has_no_split() {
        assert_eq!(of(&fair(Vec::new())), None);
        let baseline = fair(vec![work(
            "WITH candidate AS MATERIALIZED (SELECT ...)",
            1.0,
            0.2,
        )]);
        assert_eq!(of(&baseline), None);
    }
}

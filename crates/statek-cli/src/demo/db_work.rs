//! The database's work per finished run on each side of the demo: WAL
//! bytes, rows written and, where `pg_stat_statements` is installed in
//! the demo's database, statements and server milliseconds (execution
//! plus planning). Read with statek-store-pg's `server_work` (the bench's
//! readings too) before a side starts and after its sessions went quiet;
//! everything the side did counts, its runs' enqueues included, on both
//! sides alike.

use std::fmt;

use anyhow::Result;
use serde::Serialize;
use statek_store_pg::server_work::{NotMeasured, ServerReading, ServerWork, StatementStatistics};
use statek_store_pg::PgStore;

use crate::out::outln;

/// A reading of the database's counters, before or after a side.
pub struct Reading(ServerReading);

/// Takes a reading once the other sessions went quiet (their statistics
/// flushed), saying so when they did not; `when` names the reading in
/// that message (`before the statek side`).
///
/// # Errors
/// Connection and server errors.
pub async fn reading(admin: &PgStore, when: &str) -> Result<Reading> {
    let (reading, quiet) = admin.server_reading_when_quiet().await?;
    if !quiet {
        outln!(
            "  (database work, reading {when}: other sessions of this database were still busy \
             after {} s, so the database work printed at the end may count their rows and WAL \
             too, or miss some of this side's)",
            statek_store_pg::server_work::QUIET_WITHIN.as_secs()
        )?;
    }
    Ok(Reading(reading))
}

/// One side's work per finished run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SideWork {
    /// Finished runs (the divisor).
    pub runs: i64,
    /// WAL bytes per run.
    pub wal_bytes: f64,
    /// Rows inserted, updated and deleted per run, schema `statek`.
    pub rows_written: f64,
    /// Of the updates, HOT ones per run.
    pub hot_updated: f64,
    /// Top-level statements per run (`null` without `pg_stat_statements`).
    pub statements: Option<f64>,
    /// Server execution plus planning milliseconds per run (`null`
    /// without `pg_stat_statements`).
    pub server_ms: Option<f64>,
}

impl SideWork {
    /// The work between two readings for `runs` finished runs, or why it
    /// was not measured: no finished run, or counters reset between the
    /// readings (`pg_stat_reset()` and the like, in words).
    ///
    /// # Errors
    /// The reason, in words.
    pub fn between_readings(
        before: &Reading,
        after: &Reading,
        runs: usize,
    ) -> Result<Self, &'static str> {
        Self::between(&before.0, &after.0, runs)
    }

    fn between(
        before: &ServerReading,
        after: &ServerReading,
        runs: usize,
    ) -> Result<Self, &'static str> {
        let runs = i64::try_from(runs).unwrap_or(i64::MAX);
        let work = ServerWork::try_between(before, after, runs).map_err(|why| match why {
            NotMeasured::NoCompletedRun => NO_RUN,
            NotMeasured::Reset(which) => which,
        })?;
        Ok(Self {
            runs: work.runs,
            wal_bytes: work.wal_bytes,
            rows_written: work.rows_written(),
            hot_updated: work.hot_updated,
            statements: work.statements,
            server_ms: work.db_ms(),
        })
    }
}

/// Why a side's work is not measured when it finished no run.
const NO_RUN: &str = "a side finished no run";

/// Why the demo's database has no statement figures, in words; `None`
/// when `pg_stat_statements` answers.
pub fn statements_unavailable(statistics: StatementStatistics) -> Option<&'static str> {
    match statistics {
        StatementStatistics::Available => None,
        StatementStatistics::NotInstalled => Some(
            "pg_stat_statements is not installed in this database; `cargo xtask demo` loads \
             it on the server it starts",
        ),
        StatementStatistics::NotLoaded => Some(
            "pg_stat_statements is installed in this database, but the server does not load \
             it: add it to shared_preload_libraries and restart the server",
        ),
    }
}

/// Both sides' work, as the demo prints it.
#[derive(Debug, Serialize)]
pub struct WorkComparison {
    pub statek: Option<SideWork>,
    pub fifo: Option<SideWork>,
    /// Why a side's work is `None` (the first side's reason), in words.
    pub unmeasured: Option<&'static str>,
    /// Why statements and server time are not measured
    /// ([`statements_unavailable`]); `None` when they are.
    pub statements_unavailable: Option<&'static str>,
}

impl WorkComparison {
    /// Both sides' work, or why either is not measured.
    pub fn new(
        statek: Result<SideWork, &'static str>,
        fifo: Result<SideWork, &'static str>,
        statements_unavailable: Option<&'static str>,
    ) -> Self {
        Self {
            unmeasured: statek.err().or(fifo.err()),
            statek: statek.ok(),
            fifo: fifo.ok(),
            statements_unavailable,
        }
    }

    /// One line per figure: statek, FIFO, and statek's ratio to FIFO.
    pub fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        let (Some(fair), Some(plain)) = (self.statek, self.fifo) else {
            return writeln!(
                w,
                "database work per run: not measured ({})",
                self.unmeasured.unwrap_or(NO_RUN)
            );
        };
        writeln!(
            w,
            "database work per finished run (everything each side did, enqueues included; \
             statek / FIFO = ratio):"
        )?;
        let line = |w: &mut dyn fmt::Write, what: &str, f: f64, p: f64, unit: &str| {
            writeln!(
                w,
                "  {what:<22} {f:>10.2} / {p:>10.2} {unit:<5} = {}",
                ratio(f, p)
            )
        };
        line(w, "WAL", fair.wal_bytes, plain.wal_bytes, "bytes")?;
        line(
            w,
            "rows written",
            fair.rows_written,
            plain.rows_written,
            "rows",
        )?;
        line(
            w,
            "HOT updates",
            fair.hot_updated,
            plain.hot_updated,
            "rows",
        )?;
        match (
            fair.statements.zip(fair.server_ms),
            plain.statements.zip(plain.server_ms),
        ) {
            (Some((fs, fm)), Some((ps, pm))) => {
                line(w, "statements", fs, ps, "")?;
                line(w, "server time", fm, pm, "ms")
            }
            _ => writeln!(
                w,
                "  statements and server time: n/a ({})",
                self.statements_unavailable
                    .unwrap_or("pg_stat_statements answered for one side only")
            ),
        }
    }
}

/// `f / p` as "1.23x"; "-" when `p` is 0.
fn ratio(f: f64, p: f64) -> String {
    if p > 0.0 {
        format!("{:.2}x", f / p)
    } else {
        "-".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use statek_store_pg::server_work::StatementSums;

    use super::*;

    fn counters(wal: i64, rows: i64, statements: Option<(i64, f64)>) -> ServerReading {
        ServerReading {
            wal_lsn: wal,
            inserted: rows,
            updated: 2 * rows,
            hot_updated: rows,
            statements: statements.map(|(calls, exec_ms)| StatementSums {
                calls,
                exec_ms,
                plan_ms: 0.0,
            }),
            ..ServerReading::default()
        }
    }

    #[test]
    fn prints_both_sides_per_run_and_the_ratio() {
        let zero = counters(0, 0, Some((0, 0.0)));
        let comparison = WorkComparison::new(
            SideWork::between(&zero, &counters(300_000, 400, Some((500, 250.0))), 100),
            SideWork::between(&zero, &counters(200_000, 400, Some((250, 100.0))), 100),
            None,
        );
        let mut text = String::new();
        comparison.write_text(&mut text).unwrap();
        assert_eq!(
            text,
            "database work per finished run (everything each side did, enqueues included; \
             statek / FIFO = ratio):\n  \
             WAL                       3000.00 /    2000.00 bytes = 1.50x\n  \
             rows written                12.00 /      12.00 rows  = 1.00x\n  \
             HOT updates                  4.00 /       4.00 rows  = 1.00x\n  \
             statements                   5.00 /       2.50       = 2.00x\n  \
             server time                  2.50 /       1.00 ms    = 2.50x\n"
        );
    }

    #[test]
    fn says_what_it_could_not_measure() {
        let zero = counters(0, 0, None);
        let comparison = WorkComparison::new(
            SideWork::between(&zero, &counters(100, 10, None), 10),
            SideWork::between(&zero, &counters(100, 10, None), 0),
            statements_unavailable(StatementStatistics::NotInstalled),
        );
        let mut text = String::new();
        comparison.write_text(&mut text).unwrap();
        assert_eq!(
            text,
            "database work per run: not measured (a side finished no run)\n"
        );
        let comparison = WorkComparison {
            fifo: comparison.statek,
            unmeasured: None,
            ..comparison
        };
        let mut text = String::new();
        comparison.write_text(&mut text).unwrap();
        assert_eq!(
            text,
            "database work per finished run (everything each side did, enqueues included; \
             statek / FIFO = ratio):\n  \
             WAL                         10.00 /      10.00 bytes = 1.00x\n  \
             rows written                 3.00 /       3.00 rows  = 1.00x\n  \
             HOT updates                  1.00 /       1.00 rows  = 1.00x\n  \
             statements and server time: n/a (pg_stat_statements is not installed in this \
             database; `cargo xtask demo` loads it on the server it starts)\n"
        );
        let comparison = WorkComparison {
            statements_unavailable: statements_unavailable(StatementStatistics::NotLoaded),
            ..comparison
        };
        let mut text = String::new();
        comparison.write_text(&mut text).unwrap();
        assert!(
            text.ends_with(
                "  statements and server time: n/a (pg_stat_statements is installed in this \
                 database, but the server does not load it: add it to \
                 shared_preload_libraries and restart the server)\n"
            ),
            "{text}"
        );
        assert_eq!(statements_unavailable(StatementStatistics::Available), None);
    }

    /// `pg_stat_reset()` during a side: its counters start again from 0,
    /// so the difference would be negative or far too small; the demo
    /// says so instead of printing it.
    #[test]
    fn a_reset_during_a_side_is_named_not_measured() {
        let zero = counters(0, 0, None);
        let mut after = counters(100, 10, None);
        after.resets.database = Some(std::time::SystemTime::UNIX_EPOCH);
        let comparison = WorkComparison::new(
            SideWork::between(&zero, &counters(100, 10, None), 10),
            SideWork::between(&zero, &after, 10),
            None,
        );
        let mut text = String::new();
        comparison.write_text(&mut text).unwrap();
        assert_eq!(
            text,
            "database work per run: not measured (this database's statistics were reset \
             (pg_stat_reset()) between the readings)\n"
        );
    }
}

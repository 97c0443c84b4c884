//! The database's work while one side runs: readings of WAL position,
//! WAL statistics and the row counters of schema `statek`'s tables, and
//! the bench process's CPU, before the side starts and after all its
//! sessions ended (a backend flushes its statistics when it exits), turned
//! into work per completed run ([`DbWork`]).

use anyhow::Result;
use statek_store_pg::server_work::{self, ServerReading, ServerWork};

use super::results::{DbWork, StatementWork, TOP_STATEMENTS};

/// One reading: the server's counters (statek-store-pg's
/// `server_work`, shared with the demo) and this process's CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    /// WAL, row and statement counters.
    pub server: ServerReading,
    /// This process's user + system CPU, milliseconds.
    pub cpu_ms: f64,
}

/// Takes a reading (after flushing this session's own statistics).
pub async fn read(client: &tokio_postgres::Client) -> Result<Reading> {
    Ok(Reading {
        server: server_work::read(client).await?,
        cpu_ms: process_cpu_ms(),
    })
}

/// This process's user + system CPU time, milliseconds.
fn process_cpu_ms() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |usage| {
        let ms =
            |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1_000.0 + t.tv_usec() as f64 / 1_000.0;
        ms(usage.user_time()) + ms(usage.system_time())
    })
}

/// Every top-level statement of this database in `pg_stat_statements`
/// (the bench's own readings left out).
const STATEMENTS: &str = "
    SELECT queryid, query, calls, total_exec_time AS exec_ms, total_plan_time AS plan_ms,
           wal_bytes::float8 AS wal_bytes
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND toplevel AND query NOT LIKE '%pg_stat%'";

/// One statement's counters at one reading.
#[derive(Debug, Clone, PartialEq)]
pub struct StatementCounter {
    /// `queryid` (with `dbid` and the role, `pg_stat_statements`' key;
    /// one role runs every side).
    pub queryid: i64,
    /// Its text.
    pub query: String,
    /// `calls`.
    pub calls: i64,
    /// `total_exec_time`, milliseconds.
    pub exec_ms: f64,
    /// `total_plan_time`, milliseconds.
    pub plan_ms: f64,
    /// `wal_bytes`.
    pub wal_bytes: f64,
}

/// Every statement's counters; none where `pg_stat_statements` does not
/// answer (the work per run says so already).
pub async fn read_statements(client: &tokio_postgres::Client) -> Vec<StatementCounter> {
    let Ok(rows) = client.query(STATEMENTS, &[]).await else {
        return Vec::new();
    };
    rows.iter()
        .filter_map(|row| {
            Some(StatementCounter {
                queryid: row.try_get("queryid").ok()?,
                query: row.try_get("query").ok()?,
                calls: row.try_get("calls").ok()?,
                exec_ms: row.try_get("exec_ms").ok()?,
                plan_ms: row.try_get("plan_ms").ok()?,
                wal_bytes: row.try_get("wal_bytes").ok()?,
            })
        })
        .collect()
}

/// The statements called between two readings, per run of `runs`, by
/// execution plus planning time, most first, at most [`TOP_STATEMENTS`]
/// (a statement first seen in `after` counts from zero).
pub fn top_statements(
    before: &[StatementCounter],
    after: &[StatementCounter],
    runs: i64,
) -> Vec<StatementWork> {
    if runs <= 0 {
        return Vec::new();
    }
    let per = runs as f64;
    let mut work: Vec<StatementWork> = after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.queryid == a.queryid);
            let calls = a.calls - b.map_or(0, |b| b.calls);
            (calls > 0).then(|| StatementWork {
                query: collapse(&a.query, 100),
                calls: calls as f64 / per,
                exec_ms: (a.exec_ms - b.map_or(0.0, |b| b.exec_ms)) / per,
                plan_ms: (a.plan_ms - b.map_or(0.0, |b| b.plan_ms)) / per,
                wal_bytes: (a.wal_bytes - b.map_or(0.0, |b| b.wal_bytes)) / per,
            })
        })
        .collect();
    work.sort_by(|x, y| (y.exec_ms + y.plan_ms).total_cmp(&(x.exec_ms + x.plan_ms)));
    work.truncate(TOP_STATEMENTS);
    work
}

/// `text` with every run of whitespace one space, at most `max` characters.
fn collapse(text: &str, max: usize) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(max)
        .collect()
}

/// The work per run between two readings for `runs` completed runs;
/// `None` without a completed run.
pub fn per_run(before: &Reading, after: &Reading, runs: i64) -> Option<DbWork> {
    let server = ServerWork::between(&before.server, &after.server, runs)?;
    Some(DbWork {
        runs,
        wal_bytes: server.wal_bytes,
        wal_fpi: server.wal_fpi,
        inserted: server.inserted,
        updated: server.updated,
        hot_updated: server.hot_updated,
        deleted: server.deleted,
        client_cpu_ms: (after.cpu_ms - before.cpu_ms) / runs as f64,
        statements: server.statements,
        exec_ms: server.exec_ms,
        plan_ms: server.plan_ms,
    })
}

#[cfg(test)]
mod tests {
    use statek_store_pg::server_work::{ResetTimes, StatementSums};

    use super::*;

    fn counter(
        queryid: i64,
        query: &str,
        calls: i64,
        exec_ms: f64,
        wal_bytes: f64,
    ) -> StatementCounter {
        StatementCounter {
            queryid,
            query: query.to_owned(),
            calls,
            exec_ms,
            plan_ms: exec_ms / 4.0,
            wal_bytes,
        }
    }

    #[test]
    fn top_statements_are_the_differences_per_run_most_time_first() {
        let before = [
            counter(
                1,
                "SELECT * FROM statek.claim_slots($1)",
                100,
                50.0,
                1_000.0,
            ),
            counter(
                2,
                "SELECT * FROM statek.finish_runs($1)",
                100,
                80.0,
                2_000.0,
            ),
            counter(3, "SELECT idle", 7, 1.0, 0.0),
        ];
        let after = [
            counter(
                1,
                "SELECT * FROM statek.claim_slots($1)",
                300,
                250.0,
                41_000.0,
            ),
            counter(
                2,
                "SELECT * FROM statek.finish_runs($1)",
                200,
                180.0,
                22_000.0,
            ),
            counter(3, "SELECT idle", 7, 1.0, 0.0),
            counter(
                4,
                "SELECT   *\n  FROM\tstatek.reserve_batch($1)",
                50,
                300.0,
                500.0,
            ),
        ];
        let top = top_statements(&before, &after, 100);
        let seen: Vec<(&str, f64, f64, f64, f64)> = top
            .iter()
            .map(|w| (w.query.as_str(), w.calls, w.exec_ms, w.plan_ms, w.wal_bytes))
            .collect();
        assert_eq!(
            seen,
            vec![
                (
                    "SELECT * FROM statek.reserve_batch($1)",
                    0.5,
                    3.0,
                    0.75,
                    5.0
                ),
                ("SELECT * FROM statek.claim_slots($1)", 2.0, 2.0, 0.5, 400.0),
                (
                    "SELECT * FROM statek.finish_runs($1)",
                    1.0,
                    1.0,
                    0.25,
                    200.0
                ),
            ]
        );
        assert_eq!(top_statements(&before, &after, 0), Vec::new());
        let many: Vec<StatementCounter> = (0..10)
            .map(|i| counter(i, &"x".repeat(150), 1, i as f64, 0.0))
            .collect();
        let top = top_statements(&[], &many, 1);
        assert_eq!(top.len(), TOP_STATEMENTS);
        assert_eq!(top[0].exec_ms, 9.0);
        assert_eq!(top[0].query.len(), 100);
    }

    #[test]
    fn work_is_the_server_work_per_run_with_this_process_cpu() {
        let server = ServerReading {
            wal_lsn: 1_000,
            wal_fpi: 5,
            inserted: 10,
            updated: 20,
            hot_updated: 4,
            deleted: 0,
            statements: Some(StatementSums {
                calls: 1_000,
                exec_ms: 50.0,
                plan_ms: 10.0,
            }),
            resets: ResetTimes::default(),
        };
        let before = Reading {
            server,
            cpu_ms: 100.0,
        };
        let after = Reading {
            server: ServerReading {
                wal_lsn: 41_000,
                wal_fpi: 15,
                inserted: 210,
                updated: 420,
                hot_updated: 104,
                deleted: 0,
                statements: Some(StatementSums {
                    calls: 1_600,
                    exec_ms: 250.0,
                    plan_ms: 30.0,
                }),
                resets: ResetTimes::default(),
            },
            cpu_ms: 500.0,
        };
        let work = per_run(&before, &after, 200).unwrap();
        assert_eq!(
            work,
            DbWork {
                runs: 200,
                wal_bytes: 200.0,
                wal_fpi: 0.05,
                inserted: 1.0,
                updated: 2.0,
                hot_updated: 0.5,
                deleted: 0.0,
                client_cpu_ms: 2.0,
                statements: Some(3.0),
                exec_ms: Some(1.0),
                plan_ms: Some(0.1),
            }
        );
        assert_eq!(work.rows_written(), 3.0);
        assert_eq!(work.db_ms(), Some(1.1));
        assert_eq!(per_run(&before, &after, 0), None);
        // Without the extension on either side: n/a, the rest measured.
        let without = Reading {
            server: ServerReading {
                statements: None,
                ..after.server
            },
            ..after
        };
        let work = per_run(&before, &without, 200).unwrap();
        assert_eq!(
            (work.statements, work.exec_ms, work.plan_ms, work.db_ms()),
            (None, None, None, None)
        );
        assert_eq!(work.wal_bytes, 200.0);
    }
}

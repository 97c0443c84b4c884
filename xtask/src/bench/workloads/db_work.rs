//! The database's work while one side runs: readings of WAL position,
//! WAL statistics and the row counters of schema `statek`'s tables, and
//! the bench process's CPU, before the side starts and after all its
//! sessions ended (a backend flushes its statistics when it exits), turned
//! into work per completed run ([`DbWork`]).

use anyhow::Result;

use super::results::DbWork;

/// One reading.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    /// `pg_current_wal_lsn()` as bytes from 0/0.
    pub wal_lsn: i64,
    /// `pg_stat_wal.wal_fpi`.
    pub wal_fpi: i64,
    /// Sums of `pg_stat_user_tables` over schema `statek`.
    pub inserted: i64,
    /// `n_tup_upd` (HOT included).
    pub updated: i64,
    /// `n_tup_hot_upd`.
    pub hot_updated: i64,
    /// `n_tup_del`.
    pub deleted: i64,
    /// This process's user + system CPU, milliseconds.
    pub cpu_ms: f64,
    /// Sums of `pg_stat_statements` over this database: calls, execution
    /// and planning milliseconds; `None` when the extension is not loaded.
    pub statements: Option<Statements>,
}

/// Sums of `pg_stat_statements` at one reading.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Statements {
    /// `calls`.
    pub calls: i64,
    /// `total_exec_time`, milliseconds.
    pub exec_ms: f64,
    /// `total_plan_time`, milliseconds.
    pub plan_ms: f64,
}

/// The statements of this database, the readings' own left out. Top-level
/// statements only (PostgreSQL's default `pg_stat_statements.track`): a
/// claim function's time includes its body.
const STATEMENT_SUMS: &str = "
    SELECT coalesce(sum(calls), 0)::bigint AS calls,
           coalesce(sum(total_exec_time), 0)::float8 AS exec_ms,
           coalesce(sum(total_plan_time), 0)::float8 AS plan_ms
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND query NOT LIKE '%pg_stat%'";

/// Creates the extension where the server loads it (the bench's own
/// servers do, see `pg::STATEMENT_STATISTICS`); says so and goes on
/// without it elsewhere.
pub async fn enable_statement_statistics(client: &tokio_postgres::Client) {
    let enabled = async {
        client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await?;
        client.query_one(STATEMENT_SUMS, &[]).await
    };
    if let Err(e) = enabled.await {
        eprintln!(
            "xtask: statements and server time per run are n/a: pg_stat_statements is not available ({e})"
        );
    }
}

/// Takes a reading (after flushing this session's own statistics).
pub async fn read(client: &tokio_postgres::Client) -> Result<Reading> {
    client
        .batch_execute("SELECT pg_stat_force_next_flush()")
        .await?;
    let row = client
        .query_one(
            "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint AS wal_lsn,
                    (SELECT wal_fpi FROM pg_stat_wal) AS wal_fpi,
                    coalesce(sum(n_tup_ins), 0)::bigint AS inserted,
                    coalesce(sum(n_tup_upd), 0)::bigint AS updated,
                    coalesce(sum(n_tup_hot_upd), 0)::bigint AS hot_updated,
                    coalesce(sum(n_tup_del), 0)::bigint AS deleted
             FROM pg_stat_user_tables WHERE schemaname = 'statek'",
            &[],
        )
        .await?;
    Ok(Reading {
        wal_lsn: row.try_get("wal_lsn")?,
        wal_fpi: row.try_get("wal_fpi")?,
        inserted: row.try_get("inserted")?,
        updated: row.try_get("updated")?,
        hot_updated: row.try_get("hot_updated")?,
        deleted: row.try_get("deleted")?,
        cpu_ms: process_cpu_ms(),
        statements: match client.query_one(STATEMENT_SUMS, &[]).await {
            Ok(row) => Some(Statements {
                calls: row.try_get("calls")?,
                exec_ms: row.try_get("exec_ms")?,
                plan_ms: row.try_get("plan_ms")?,
            }),
            Err(_) => None,
        },
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

/// The work per run between two readings for `runs` completed runs;
/// `None` without a completed run.
pub fn per_run(before: &Reading, after: &Reading, runs: i64) -> Option<DbWork> {
    if runs <= 0 {
        return None;
    }
    let per = |delta: i64| delta as f64 / runs as f64;
    Some(DbWork {
        runs,
        wal_bytes: per(after.wal_lsn - before.wal_lsn),
        wal_fpi: per(after.wal_fpi - before.wal_fpi),
        inserted: per(after.inserted - before.inserted),
        updated: per(after.updated - before.updated),
        hot_updated: per(after.hot_updated - before.hot_updated),
        deleted: per(after.deleted - before.deleted),
        client_cpu_ms: (after.cpu_ms - before.cpu_ms) / runs as f64,
        statements: statements(before, after).map(|(s, _)| per(s.calls)),
        exec_ms: statements(before, after).map(|(s, _)| s.exec_ms / runs as f64),
        plan_ms: statements(before, after).map(|(s, _)| s.plan_ms / runs as f64),
    })
}

/// The statements between two readings (and the later reading's), when
/// both have them.
fn statements(before: &Reading, after: &Reading) -> Option<(Statements, Statements)> {
    let (b, a) = (before.statements?, after.statements?);
    Some((
        Statements {
            calls: a.calls - b.calls,
            exec_ms: a.exec_ms - b.exec_ms,
            plan_ms: a.plan_ms - b.plan_ms,
        },
        a,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_the_difference_of_the_readings_per_run() {
        let before = Reading {
            wal_lsn: 1_000,
            wal_fpi: 5,
            inserted: 10,
            updated: 20,
            hot_updated: 4,
            deleted: 0,
            cpu_ms: 100.0,
            statements: Some(Statements {
                calls: 1_000,
                exec_ms: 50.0,
                plan_ms: 10.0,
            }),
        };
        let after = Reading {
            wal_lsn: 41_000,
            wal_fpi: 15,
            inserted: 210,
            updated: 420,
            hot_updated: 104,
            deleted: 0,
            cpu_ms: 500.0,
            statements: Some(Statements {
                calls: 1_600,
                exec_ms: 250.0,
                plan_ms: 30.0,
            }),
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
            statements: None,
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

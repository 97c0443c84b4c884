//! The database's work while one side runs: readings of WAL position,
//! WAL statistics and the row counters of schema `statek`'s tables, and
//! the bench process's CPU, before the side starts and after all its
//! sessions ended (a backend flushes its statistics when it exits), turned
//! into work per completed run ([`DbWork`]).

use anyhow::Result;
use statek_store_pg::server_work::{self, ServerReading, ServerWork};

use super::results::DbWork;

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

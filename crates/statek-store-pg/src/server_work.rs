//! Feature `baseline`: the database's work while one side of a comparison
//! runs (the demo's statek and FIFO sides, the bench's sides), per
//! completed run. A [`ServerReading`] is taken before the side starts and
//! after it stopped; [`ServerWork::between`] turns two readings into work
//! per run.
//!
//! What a reading holds, and where it comes from (PostgreSQL 15 or later):
//! - WAL bytes: `pg_current_wal_lsn()`, as bytes from `0/0`; full-page
//!   images: `pg_stat_wal.wal_fpi`;
//! - rows inserted, updated (HOT included), HOT-updated and deleted: the
//!   sums of `pg_stat_user_tables` over schema `statek`;
//! - top-level statements and their execution and planning milliseconds:
//!   the sums of `pg_stat_statements` over this database (`None` where the
//!   extension is not installed in it; planning time is 0 unless the
//!   server sets `pg_stat_statements.track_planning`). The readings' own
//!   statements (any statement naming `pg_stat`) are left out.
//!
//! A reading also holds the times the counters were last reset
//! ([`ResetTimes`]): `pg_stat_reset()` of this database, a reset of the WAL
//! statistics or of `pg_stat_statements` between two readings would make
//! their difference meaningless (negative or far too small), so
//! [`ServerWork::between`] refuses such a pair and
//! [`ServerReading::reset_between`] says which counters were reset.
//!
//! The row counters are PostgreSQL's cumulative statistics: a backend
//! flushes its own to shared memory when it goes idle, but not more often
//! than once a second (`PGSTAT_MIN_INTERVAL`); what it could not flush
//! then waits for its idle timer (`PGSTAT_IDLE_INTERVAL`, 10 s), and
//! everything is flushed when it exits (PostgreSQL documentation, "The
//! Cumulative Statistics System"; `src/backend/utils/activity/pgstat.c`).
//! A reading taken while other sessions are busy, or just went idle,
//! undercounts. [`PgStore::server_reading_when_quiet`] closes its own
//! store's idle connections and waits until every other session has ended
//! or been idle for [`QUIET_AFTER`]; a side that drops its pools when it
//! stops is measured without waiting for that timer.

use std::time::{Duration, SystemTime};

use tokio_postgres::types::Type;

use crate::statement::Db;
use crate::{PgStore, StoreError};

/// One reading of the database's cumulative counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerReading {
    /// `pg_current_wal_lsn()` as bytes from `0/0`.
    pub wal_lsn: i64,
    /// `pg_stat_wal.wal_fpi` (full-page images written).
    pub wal_fpi: i64,
    /// Rows inserted into schema `statek`'s tables (`n_tup_ins`).
    pub inserted: i64,
    /// Rows updated, HOT included (`n_tup_upd`).
    pub updated: i64,
    /// Of those, HOT updates (`n_tup_hot_upd`).
    pub hot_updated: i64,
    /// Rows deleted (`n_tup_del`).
    pub deleted: i64,
    /// `pg_stat_statements` sums; `None` where it is not installed.
    pub statements: Option<StatementSums>,
    /// When the counters were last reset.
    pub resets: ResetTimes,
}

/// When each family of counters in a [`ServerReading`] was last reset
/// (`None`: never, or not available).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResetTimes {
    /// `pg_stat_database.stats_reset` of this database: `pg_stat_reset()`
    /// (and a reset of one table's or function's counters) sets it.
    pub database: Option<SystemTime>,
    /// `pg_stat_wal.stats_reset`: `pg_stat_reset_shared('wal')`.
    pub wal: Option<SystemTime>,
    /// `pg_stat_statements_info.stats_reset`: a full
    /// `pg_stat_statements_reset()`.
    pub statements: Option<SystemTime>,
}

impl ServerReading {
    /// Which counters were reset between `before` and `after`, in words
    /// (the first found), or `None` when none was.
    pub fn reset_between(before: &Self, after: &Self) -> Option<&'static str> {
        let (b, a) = (before.resets, after.resets);
        if b.database != a.database {
            Some("this database's statistics were reset (pg_stat_reset()) between the readings")
        } else if b.wal != a.wal {
            Some("the WAL statistics were reset (pg_stat_reset_shared('wal')) between the readings")
        } else if b.statements != a.statements {
            Some("pg_stat_statements was reset (pg_stat_statements_reset()) between the readings")
        } else {
            None
        }
    }
}

/// Why [`ServerWork::try_between`] measures nothing for a pair of readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotMeasured {
    /// No run was completed between the readings (nothing to divide by).
    NoCompletedRun,
    /// Counters were reset between the readings: which, in words
    /// ([`ServerReading::reset_between`]).
    Reset(&'static str),
}

impl std::fmt::Display for NotMeasured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotMeasured::NoCompletedRun => f.write_str("no run was completed between the readings"),
            NotMeasured::Reset(which) => f.write_str(which),
        }
    }
}

/// Sums of `pg_stat_statements` over this database at one reading.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StatementSums {
    /// `calls` of top-level statements.
    pub calls: i64,
    /// `total_exec_time`, milliseconds.
    pub exec_ms: f64,
    /// `total_plan_time`, milliseconds.
    pub plan_ms: f64,
}

/// The database's work per completed run between two readings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerWork {
    /// Runs completed between the readings (the divisor).
    pub runs: i64,
    /// WAL bytes per run.
    pub wal_bytes: f64,
    /// Full-page images per run.
    pub wal_fpi: f64,
    /// Rows inserted per run.
    pub inserted: f64,
    /// Rows updated per run (HOT included).
    pub updated: f64,
    /// HOT updates per run.
    pub hot_updated: f64,
    /// Rows deleted per run.
    pub deleted: f64,
    /// Top-level statements per run; `None` without `pg_stat_statements`.
    pub statements: Option<f64>,
    /// Execution milliseconds per run.
    pub exec_ms: Option<f64>,
    /// Planning milliseconds per run.
    pub plan_ms: Option<f64>,
}

impl ServerWork {
    /// The work per run between `before` and `after` for `runs` completed
    /// runs; `None` without a completed run, or when counters were reset
    /// between the readings ([`try_between`](Self::try_between) says why).
    pub fn between(before: &ServerReading, after: &ServerReading, runs: i64) -> Option<Self> {
        Self::try_between(before, after, runs).ok()
    }

    /// [`between`](Self::between), or why the pair measures nothing.
    ///
    /// # Errors
    /// [`NotMeasured::Reset`] when counters were reset between the
    /// readings, else [`NotMeasured::NoCompletedRun`] when `runs` is not
    /// positive.
    pub fn try_between(
        before: &ServerReading,
        after: &ServerReading,
        runs: i64,
    ) -> Result<Self, NotMeasured> {
        if let Some(reset) = ServerReading::reset_between(before, after) {
            return Err(NotMeasured::Reset(reset));
        }
        if runs <= 0 {
            return Err(NotMeasured::NoCompletedRun);
        }
        let per = |delta: i64| delta as f64 / runs as f64;
        let statements = match (before.statements, after.statements) {
            (Some(b), Some(a)) => Some(StatementSums {
                calls: a.calls - b.calls,
                exec_ms: a.exec_ms - b.exec_ms,
                plan_ms: a.plan_ms - b.plan_ms,
            }),
            _ => None,
        };
        Ok(Self {
            runs,
            wal_bytes: per(after.wal_lsn - before.wal_lsn),
            wal_fpi: per(after.wal_fpi - before.wal_fpi),
            inserted: per(after.inserted - before.inserted),
            updated: per(after.updated - before.updated),
            hot_updated: per(after.hot_updated - before.hot_updated),
            deleted: per(after.deleted - before.deleted),
            statements: statements.map(|s| per(s.calls)),
            exec_ms: statements.map(|s| s.exec_ms / runs as f64),
            plan_ms: statements.map(|s| s.plan_ms / runs as f64),
        })
    }

    /// Rows written per run: inserted, updated and deleted.
    pub fn rows_written(&self) -> f64 {
        self.inserted + self.updated + self.deleted
    }

    /// The server's execution plus planning milliseconds per run, when
    /// `pg_stat_statements` measured them.
    pub fn db_ms(&self) -> Option<f64> {
        Some(self.exec_ms? + self.plan_ms?)
    }
}

/// The statements of this database, the readings' own left out.
/// Top-level statements only (`pg_stat_statements.track = top`, the
/// default): a function's time includes its body.
const STATEMENT_SUMS: &str = "
    SELECT coalesce(sum(calls), 0)::bigint AS calls,
           coalesce(sum(total_exec_time), 0)::float8 AS exec_ms,
           coalesce(sum(total_plan_time), 0)::float8 AS plan_ms,
           (SELECT stats_reset FROM pg_stat_statements_info) AS statements_reset
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND query NOT LIKE '%pg_stat%'";

/// WAL position and statistics, and the row counters of schema `statek`.
const COUNTERS: &str = "
    SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint AS wal_lsn,
           (SELECT wal_fpi FROM pg_stat_wal) AS wal_fpi,
           coalesce(sum(n_tup_ins), 0)::bigint AS inserted,
           coalesce(sum(n_tup_upd), 0)::bigint AS updated,
           coalesce(sum(n_tup_hot_upd), 0)::bigint AS hot_updated,
           coalesce(sum(n_tup_del), 0)::bigint AS deleted,
           (SELECT stats_reset FROM pg_stat_database
            WHERE datname = current_database()) AS database_reset,
           (SELECT stats_reset FROM pg_stat_wal) AS wal_reset
    FROM pg_stat_user_tables WHERE schemaname = 'statek'";

/// Flushes this session's own statistics first (PostgreSQL 15 or later).
const FLUSH: &str = "SELECT pg_stat_force_next_flush()";

/// A reading from a [`COUNTERS`] row and, where `pg_stat_statements`
/// answered, a [`STATEMENT_SUMS`] row.
fn reading_of(
    counters: &tokio_postgres::Row,
    statements: Option<&tokio_postgres::Row>,
) -> Result<ServerReading, tokio_postgres::Error> {
    Ok(ServerReading {
        wal_lsn: counters.try_get("wal_lsn")?,
        wal_fpi: counters.try_get("wal_fpi")?,
        inserted: counters.try_get("inserted")?,
        updated: counters.try_get("updated")?,
        hot_updated: counters.try_get("hot_updated")?,
        deleted: counters.try_get("deleted")?,
        statements: match statements {
            Some(row) => Some(StatementSums {
                calls: row.try_get("calls")?,
                exec_ms: row.try_get("exec_ms")?,
                plan_ms: row.try_get("plan_ms")?,
            }),
            None => None,
        },
        resets: ResetTimes {
            database: counters.try_get("database_reset")?,
            wal: counters.try_get("wal_reset")?,
            statements: match statements {
                Some(row) => row.try_get("statements_reset")?,
                None => None,
            },
        },
    })
}

/// The counters, read in one session after flushing that session's own
/// statistics (for callers with a client of their own, such as the
/// bench). A missing `pg_stat_statements` gives `statements: None`.
///
/// # Errors
/// The server's errors reading the counters (PostgreSQL before 15 lacks
/// `pg_stat_force_next_flush` and `pg_stat_wal`).
pub async fn read(client: &tokio_postgres::Client) -> Result<ServerReading, tokio_postgres::Error> {
    client.batch_execute(FLUSH).await?;
    let counters = client.query_one(COUNTERS, &[]).await?;
    let statements = client.query_one(STATEMENT_SUMS, &[]).await.ok();
    reading_of(&counters, statements.as_ref())
}

/// How long a session must have been idle for its statistics to count as
/// flushed: PostgreSQL's `PGSTAT_IDLE_INTERVAL` (10 s) and a margin.
pub const QUIET_AFTER: Duration = Duration::from_millis(10_500);

/// Longest [`PgStore::server_reading_when_quiet`] waits for quiet.
pub const QUIET_WITHIN: Duration = Duration::from_secs(15);

/// Other client sessions of this database that are neither gone nor idle
/// for [`QUIET_AFTER`].
const BUSY_SESSIONS: &str = "
    SELECT count(*) AS busy FROM pg_stat_activity
    WHERE datname = current_database() AND backend_type = 'client backend'
      AND pid <> pg_backend_pid()
      AND NOT (state = 'idle' AND state_change < clock_timestamp() - $1 * interval '1 second')";

/// Whether `pg_stat_statements` can answer in this database, and if not,
/// what is missing (a reading's `statements` is `None` in both cases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementStatistics {
    /// Installed in this database and loaded by the server.
    Available,
    /// Not installed in this database (`CREATE EXTENSION
    /// pg_stat_statements`, after loading it).
    NotInstalled,
    /// Installed in this database, but the server does not load it: it
    /// must be in `shared_preload_libraries`, which takes a restart.
    NotLoaded,
}

/// Whether the extension is installed here and in the server's
/// `shared_preload_libraries` (a comma-separated list).
const STATEMENT_STATISTICS: &str = "
    SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements') AS installed,
           'pg_stat_statements' = ANY (string_to_array(
               replace(current_setting('shared_preload_libraries'), ' ', ''), ',')) AS loaded";

impl PgStore {
    /// Whether `pg_stat_statements` answers in this database, else which
    /// of installing and loading it is missing.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn statement_statistics(&self) -> Result<StatementStatistics, StoreError> {
        let (installed, loaded): (bool, bool) = self
            .with_response_timeout(async |db: &Db<'_>| {
                let row = db.query_one(STATEMENT_STATISTICS, &[]).await?;
                Ok((row.try_get("installed")?, row.try_get("loaded")?))
            })
            .await?;
        Ok(match (installed, loaded) {
            (true, true) => StatementStatistics::Available,
            (true, false) => StatementStatistics::NotLoaded,
            (false, _) => StatementStatistics::NotInstalled,
        })
    }

    /// A [`ServerReading`] once every other client session of this
    /// database has ended or been idle for [`QUIET_AFTER`], so their row
    /// counters are flushed; this store's own idle connections are closed
    /// first (a backend flushes its statistics when it exits). After
    /// [`QUIET_WITHIN`] it reads anyway and says so (`false`: sessions
    /// were still busy, rows may be undercounted).
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn server_reading_when_quiet(&self) -> Result<(ServerReading, bool), StoreError> {
        self.close_idle_connections();
        let started = std::time::Instant::now();
        let idle_for = QUIET_AFTER.as_secs_f64();
        let quiet = loop {
            let busy: i64 = self
                .with_response_timeout(async |db: &Db<'_>| {
                    Ok(db
                        .query_one(BUSY_SESSIONS, &[(&idle_for, Type::FLOAT8)])
                        .await?
                        .try_get("busy")?)
                })
                .await?;
            if busy == 0 {
                break true;
            }
            if started.elapsed() >= QUIET_WITHIN {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let reading = self
            .with_response_timeout(async |db: &Db<'_>| {
                db.batch_execute(FLUSH).await?;
                let counters = db.query_one(COUNTERS, &[]).await?;
                let statements = db.query_one(STATEMENT_SUMS, &[]).await.ok();
                Ok(reading_of(&counters, statements.as_ref())?)
            })
            .await?;
        Ok((reading, quiet))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_the_difference_of_the_readings_per_run() {
        let before = ServerReading {
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
        let after = ServerReading {
            wal_lsn: 41_000,
            wal_fpi: 15,
            inserted: 210,
            updated: 420,
            hot_updated: 104,
            deleted: 40,
            statements: Some(StatementSums {
                calls: 1_600,
                exec_ms: 250.0,
                plan_ms: 30.0,
            }),
            resets: ResetTimes::default(),
        };
        let work = ServerWork::between(&before, &after, 200).unwrap();
        assert_eq!(
            work,
            ServerWork {
                runs: 200,
                wal_bytes: 200.0,
                wal_fpi: 0.05,
                inserted: 1.0,
                updated: 2.0,
                hot_updated: 0.5,
                deleted: 0.2,
                statements: Some(3.0),
                exec_ms: Some(1.0),
                plan_ms: Some(0.1),
            }
        );
        assert_eq!(work.rows_written(), 3.2);
        assert_eq!(work.db_ms(), Some(1.1));
        assert_eq!(ServerWork::between(&before, &after, 0), None);
        let without = ServerReading {
            statements: None,
            ..after
        };
        let work = ServerWork::between(&before, &without, 200).unwrap();
        assert_eq!((work.statements, work.db_ms()), (None, None));
    }

    #[test]
    fn a_reset_between_the_readings_is_named_and_measures_nothing() {
        let at = |secs| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
        let before = ServerReading {
            wal_lsn: 1_000,
            inserted: 500,
            resets: ResetTimes {
                database: at(10),
                wal: at(10),
                statements: at(10),
            },
            ..ServerReading::default()
        };
        // pg_stat_reset() mid-side: the row counters start again from 0.
        let reset = |resets: ResetTimes| ServerReading {
            wal_lsn: 9_000,
            inserted: 40,
            resets,
            ..before
        };
        let cases = [
            (
                ResetTimes { database: at(20), ..before.resets },
                Some("this database's statistics were reset (pg_stat_reset()) between the readings"),
            ),
            (
                ResetTimes { wal: at(20), ..before.resets },
                Some("the WAL statistics were reset (pg_stat_reset_shared('wal')) between the readings"),
            ),
            (
                ResetTimes { statements: at(20), ..before.resets },
                Some("pg_stat_statements was reset (pg_stat_statements_reset()) between the readings"),
            ),
            (before.resets, None),
        ];
        for (resets, expected) in cases {
            let after = reset(resets);
            assert_eq!(ServerReading::reset_between(&before, &after), expected);
            assert_eq!(
                ServerWork::try_between(&before, &after, 10).err(),
                expected.map(NotMeasured::Reset),
                "{expected:?}"
            );
            assert_eq!(
                ServerWork::between(&before, &after, 10).is_some(),
                expected.is_none(),
                "{expected:?}"
            );
        }
        assert_eq!(
            ServerWork::try_between(&before, &before, 0),
            Err(NotMeasured::NoCompletedRun)
        );
        assert_eq!(
            NotMeasured::NoCompletedRun.to_string(),
            "no run was completed between the readings"
        );
        // The first reset a server records (never reset before) counts too.
        let never = ServerReading {
            resets: ResetTimes::default(),
            ..before
        };
        assert_eq!(
            ServerReading::reset_between(&never, &before),
            Some("this database's statistics were reset (pg_stat_reset()) between the readings")
        );
    }
}

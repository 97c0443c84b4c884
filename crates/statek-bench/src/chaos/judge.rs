//! What a chaos cell is judged by, read back from the database after the
//! fleet stopped: throughput around the fault (from the runs' finish
//! times), lost runs (acknowledged enqueues not completed), and double
//! executions (the handlers' rows against statek's claim history).

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Result;
use uuid::Uuid;

/// Completed runs' finish times, seconds since the epoch, ascending.
pub const FINISH_TIMES: &str = "SELECT extract(epoch FROM finished_at)::float8 AS at
     FROM statek.runs WHERE state = 'completed' ORDER BY finished_at";

/// Acknowledged runs that did not complete.
const NOT_COMPLETED: &str = "SELECT count(*) AS lost FROM unnest($1::uuid[]) AS a(run_id)
     LEFT JOIN statek.runs r USING (run_id)
     WHERE r.state IS DISTINCT FROM 'completed'";

/// Every execution after a run's first recorded one, with the claims of
/// both: whether the earlier claim had finished before the later claim was
/// made, and whether the later claim came before the earlier one's lease
/// deadline (as the claim gave it; heartbeats only move it later).
const REPEATED_EXECUTIONS: &str = "WITH e AS (
         SELECT run_id, attempt, lease_expires_at,
                lag(attempt) OVER (PARTITION BY run_id ORDER BY attempt) AS earlier,
                lag(lease_expires_at) OVER (PARTITION BY run_id ORDER BY attempt) AS earlier_lease
         FROM chaos.executions
     )
     SELECT e.run_id, e.earlier AS earlier_attempt,
            (c1.finished_at IS NOT NULL AND c1.finished_at <= c2.claimed_at) AS earlier_finished,
            (c2.claimed_at < e.earlier_lease) AS within_lease
     FROM e
     JOIN statek.run_attempts c1 ON c1.run_id = e.run_id AND c1.attempt = e.earlier
     JOIN statek.run_attempts c2 ON c2.run_id = e.run_id AND c2.attempt = e.attempt
     WHERE e.earlier IS NOT NULL";

/// Claims made while the claim before them on the same run was unfinished
/// and less than one lease old: a lease the queue must have honoured.
const CLAIMS_WITHIN_A_LEASE: &str = "SELECT count(*) AS claims FROM statek.run_attempts c2
     JOIN statek.run_attempts c1 ON c1.run_id = c2.run_id AND c1.attempt = c2.attempt - 1
     WHERE (c1.finished_at IS NULL OR c1.finished_at > c2.claimed_at)
       AND c2.claimed_at < c1.claimed_at + $1::float8 * interval '1 second'";

/// Claims made after the claim before them on the same run expired
/// unfinished (what the lease allows).
const CLAIMS_AFTER_AN_EXPIRED_LEASE: &str = "SELECT count(*) AS claims FROM statek.run_attempts c2
     JOIN statek.run_attempts c1 ON c1.run_id = c2.run_id AND c1.attempt = c2.attempt - 1
     WHERE c1.finished_at IS NULL
       AND c2.claimed_at >= c1.claimed_at + $1::float8 * interval '1 second'";

/// Executions beyond a run's first, sorted by what allowed them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Doubles {
    /// After the earlier claim's lease expired unfinished: allowed.
    pub after_expired_lease: u64,
    /// After the earlier execution's handler failed (its row committed,
    /// the answer lost): the retry rule, allowed.
    pub after_handler_failure: u64,
    /// Neither: the earlier claim had finished, or its lease still held.
    pub not_allowed: u64,
}

/// The evidence of one cell.
#[derive(Debug, Clone)]
pub struct Evidence {
    pub finish_times: Vec<f64>,
    pub lost: i64,
    pub doubles: Doubles,
    pub claims_within_a_lease: i64,
    pub claims_after_an_expired_lease: i64,
}

/// Reads the cell's evidence.
pub async fn read(
    client: &tokio_postgres::Client,
    acknowledged: &[Uuid],
    failed_executions: &HashSet<(Uuid, i32)>,
    lease: Duration,
) -> Result<Evidence> {
    let finish_times = client
        .query(FINISH_TIMES, &[])
        .await?
        .iter()
        .map(|r| r.try_get("at"))
        .collect::<Result<Vec<f64>, _>>()?;
    let lost: i64 = client
        .query_one(NOT_COMPLETED, &[&acknowledged])
        .await?
        .try_get("lost")?;
    let mut doubles = Doubles::default();
    for row in client.query(REPEATED_EXECUTIONS, &[]).await? {
        let run_id: Uuid = row.try_get("run_id")?;
        let earlier: i32 = row.try_get("earlier_attempt")?;
        let earlier_finished: bool = row.try_get("earlier_finished")?;
        let within_lease: bool = row.try_get("within_lease")?;
        if failed_executions.contains(&(run_id, earlier)) {
            doubles.after_handler_failure += 1;
        } else if !earlier_finished && !within_lease {
            doubles.after_expired_lease += 1;
        } else {
            doubles.not_allowed += 1;
        }
    }
    let lease_secs = lease.as_secs_f64();
    let claims_within_a_lease: i64 = client
        .query_one(CLAIMS_WITHIN_A_LEASE, &[&lease_secs])
        .await?
        .try_get("claims")?;
    let claims_after_an_expired_lease: i64 = client
        .query_one(CLAIMS_AFTER_AN_EXPIRED_LEASE, &[&lease_secs])
        .await?
        .try_get("claims")?;
    Ok(Evidence {
        finish_times,
        lost,
        doubles,
        claims_within_a_lease,
        claims_after_an_expired_lease,
    })
}

/// Completions per second in `[from, to)`.
pub fn rate(finish_times: &[f64], from: f64, to: f64) -> f64 {
    if to <= from {
        return 0.0;
    }
    let lo = finish_times.partition_point(|&t| t < from);
    let hi = finish_times.partition_point(|&t| t < to);
    (hi - lo) as f64 / (to - from)
}

/// The lowest rate of a 1 s window from `from` to `to`, in steps of 100 ms.
pub fn worst(finish_times: &[f64], from: f64, to: f64) -> f64 {
    let mut worst = f64::INFINITY;
    for t in steps(from, to) {
        worst = worst.min(rate(finish_times, t, t + 1.0));
    }
    if worst.is_finite() {
        worst
    } else {
        rate(finish_times, from, to)
    }
}

/// Seconds from `from` until a 1 s window first completes at least
/// `target` runs per second (steps of 100 ms, windows ending by `until`);
/// `None` if none does.
pub fn recovery(finish_times: &[f64], from: f64, until: f64, target: f64) -> Option<f64> {
    steps(from, until)
        .find(|&t| rate(finish_times, t, t + 1.0) >= target)
        .map(|t| t - from)
}

/// Starts of the 1 s windows from `from` that end by `to`, 100 ms apart.
fn steps(from: f64, to: f64) -> impl Iterator<Item = f64> {
    (0u32..)
        .map(move |i| from + f64::from(i) * 0.1)
        .take_while(move |t| t + 1.0 <= to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_windows_and_recovery() {
        // 10 per second until 10.0, none until 13.0, then 10 per second.
        let times: Vec<f64> = (0..100)
            .map(|i| f64::from(i) / 10.0)
            .chain((130..200).map(|i| f64::from(i) / 10.0))
            .collect();
        assert_eq!(rate(&times, 5.0, 10.0), 10.0);
        assert_eq!(worst(&times, 9.0, 14.0), 0.0);
        // The first window [t, t+1) with 8 completions (13.0..=13.7)
        // starts at 12.8: 2.8 s after the fault ended at 10.0.
        let back = recovery(&times, 10.0, 20.0, 8.0).unwrap();
        assert!((back - 2.8).abs() < 0.05, "{back}");
        assert_eq!(recovery(&times, 10.0, 12.5, 8.0), None);
        assert_eq!(rate(&times, 3.0, 3.0), 0.0);
    }
}

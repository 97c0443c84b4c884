//! [`ExecutorOptions`]: the lease, retry and completion settings every
//! executor statek ships takes (the PostgreSQL executor here, the
//! in-memory one of statek-testing), with their limits.

use std::time::Duration;

use statek_core::MAX_FINISH_BATCH;

use crate::error::SchedulerError;

/// Lease, retry and completion settings of an executor: statek-scheduler's
/// [`PgRunQueueExecutor`](crate::PgRunQueueExecutor), and statek-testing's
/// `InMemoryExecutor`, which takes the same options.
///
/// Defaults: lease 30 s, heartbeat every lease/3, retry backoff 1 s doubling
/// per attempt up to 5 minutes; finished runs of batches recorded in group
/// commits of up to 256 runs, each waiting at most 1 ms for more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutorOptions {
    lease: Duration,
    heartbeat_every: Option<Duration>,
    retry_initial: Duration,
    retry_max: Duration,
    completion_batch: usize,
    completion_linger: Duration,
    idle_recheck: Option<Duration>,
}

/// The default of [`ExecutorOptions::idle_recheck`].
pub const DEFAULT_IDLE_RECHECK: Duration = Duration::from_secs(1);

impl Default for ExecutorOptions {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            heartbeat_every: Some(Duration::from_secs(10)),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            completion_batch: 256,
            completion_linger: Duration::from_millis(1),
            idle_recheck: Some(DEFAULT_IDLE_RECHECK),
        }
    }
}

impl ExecutorOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lease length (100 ms..=24 h); heartbeats default to a third of it.
    pub fn lease(mut self, lease: Duration) -> Result<Self, SchedulerError> {
        if lease < Duration::from_millis(100) || lease > Duration::from_secs(86_400) {
            return Err(SchedulerError::InvalidOption(format!(
                "lease must be 100 ms..=24 h, got {lease:?}"
            )));
        }
        self.lease = lease;
        self.heartbeat_every = self.heartbeat_every.map(|_| lease / 3);
        Ok(self)
    }

    /// Heartbeat period (shorter than the lease), or `None` to never extend
    /// leases.
    pub fn heartbeat_every(mut self, every: Option<Duration>) -> Result<Self, SchedulerError> {
        if let Some(period) = every {
            if period.is_zero() || period >= self.lease {
                return Err(SchedulerError::InvalidOption(format!(
                    "heartbeat period must be > 0 and shorter than the lease {:?}, got {period:?}",
                    self.lease
                )));
            }
        }
        self.heartbeat_every = every;
        Ok(self)
    }

    /// Retry backoff after a failed attempt: `initial` doubled per attempt,
    /// capped at `max` (0 <= initial <= max <= 1 day).
    pub fn retry_backoff(
        mut self,
        initial: Duration,
        max: Duration,
    ) -> Result<Self, SchedulerError> {
        if initial > max || max > Duration::from_secs(86_400) {
            return Err(SchedulerError::InvalidOption(format!(
                "retry backoff needs initial <= max <= 1 day, got {initial:?} and {max:?}"
            )));
        }
        self.retry_initial = initial;
        self.retry_max = max;
        Ok(self)
    }

    /// How finished runs of a batch ([`TenantExecutor::execute_batch`](crate::TenantExecutor::execute_batch))
    /// are recorded: completions and failures of up to `max_runs` runs
    /// (1..=1,024) in one statement, the first of them waiting at most
    /// `linger` (0..=1 s) for others to join; runs finishing while a write
    /// is under way form the next one. Each run is still fenced by its own
    /// token (a lost lease is that run's alone). A write that fails
    /// transiently is retried (50 ms doubling to 2 s) until it commits; the
    /// database then answers each run (recorded, or its lease lost, when
    /// its token no longer holds it). It is given up only once the run's
    /// handler was cancelled (shutdown) and its lease has run out. A write
    /// that fails non-retryably is retried run by run. A slot's outcome is
    /// known when its run's write committed; its permit returns as soon as
    /// the handler finished and the run has room among the runs waiting
    /// for their record: at most twice `max_runs` wait (default 512), so
    /// when the database records finishes more slowly than the Worker
    /// claims, finished handlers keep their permits and the Worker claims
    /// no faster than the database records. `execute_one` records each
    /// run alone, with the same retries and the same room.
    pub fn completion_batching(
        mut self,
        max_runs: usize,
        linger: Duration,
    ) -> Result<Self, SchedulerError> {
        if !(1..=MAX_FINISH_BATCH).contains(&max_runs) || linger > Duration::from_secs(1) {
            return Err(SchedulerError::InvalidOption(format!(
                "completion batching needs 1..={MAX_FINISH_BATCH} runs and a linger of at most 1 s, got {max_runs} and {linger:?}"
            )));
        }
        self.completion_batch = max_runs;
        self.completion_linger = linger;
        Ok(self)
    }

    /// Idle tenants cost no database probe: while a [`crate::Worker`]'s
    /// run notifications listen, a tenant whose slot a batch claim found
    /// idle (no claimable run) is *known empty*, and its next slots are
    /// decided idle without a claim statement (a batch whose tenants are
    /// all known empty sends none), until
    /// - a run notification of the tenant arrives (an enqueue or a
    ///   put-back committed; a run notified before its slot is decided is
    ///   never skipped), or
    /// - `recheck` has passed since the claim that found it empty
    ///   (10 ms..=60 s, default [`DEFAULT_IDLE_RECHECK`], 1 s): the bound
    ///   on how late a run is noticed that became claimable without a
    ///   notification (a delayed run's `available_at` passing, a retry
    ///   delay ending, a lease expiring on another replica).
    ///
    /// Nothing is known empty while no notification connection listens
    /// (no [`crate::Worker::with_notifications`], PgBouncer without a
    /// direct connection, a lost `LISTEN` connection until it listens
    /// again). The slots are consumed either way: a known-empty tenant's
    /// slot is idle, never handed to another tenant. `None` asks the
    /// database about every slot. See docs/guarantees.md, "Service lag".
    pub fn idle_recheck(mut self, recheck: Option<Duration>) -> Result<Self, SchedulerError> {
        if let Some(every) = recheck {
            if every < Duration::from_millis(10) || every > Duration::from_secs(60) {
                return Err(SchedulerError::InvalidOption(format!(
                    "idle recheck must be 10 ms..=60 s, got {every:?}"
                )));
            }
        }
        self.idle_recheck = recheck;
        Ok(self)
    }

    /// How long a claim holds a run before another claimer may take it.
    pub fn lease_length(&self) -> Duration {
        self.lease
    }

    /// The heartbeat period (`None`: the lease is never extended).
    pub fn heartbeat_period(&self) -> Option<Duration> {
        self.heartbeat_every
    }

    /// The retry backoff's first pause.
    pub fn retry_initial(&self) -> Duration {
        self.retry_initial
    }

    /// The retry backoff's longest pause.
    pub fn retry_max(&self) -> Duration {
        self.retry_max
    }

    /// Finished runs recorded in one group commit, at most.
    pub fn completion_batch(&self) -> usize {
        self.completion_batch
    }

    /// How long a group commit waits for more finished runs.
    pub fn completion_linger(&self) -> Duration {
        self.completion_linger
    }

    /// How often a tenant known to be empty is asked about again (`None`:
    /// never skipped).
    pub fn idle_recheck_period(&self) -> Option<Duration> {
        self.idle_recheck
    }

    /// The pause before attempt `attempt + 1` of a run whose attempt
    /// `attempt` (1 for the first) failed: the initial pause doubled per
    /// attempt, at most [`retry_max`](Self::retry_max).
    pub fn retry_after(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1).min(20))
            .unwrap_or(u32::MAX);
        self.retry_initial
            .checked_mul(factor)
            .unwrap_or(self.retry_max)
            .min(self.retry_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_limits() {
        let o = ExecutorOptions::new();
        assert!(o.lease(Duration::from_millis(99)).is_err());
        assert!(o.lease(Duration::from_secs(86_401)).is_err());
        let short = o.lease(Duration::from_secs(3)).unwrap();
        assert_eq!(short.heartbeat_period(), Some(Duration::from_secs(1)));
        assert!(short.heartbeat_every(Some(Duration::from_secs(3))).is_err());
        assert!(short.heartbeat_every(Some(Duration::ZERO)).is_err());
        assert_eq!(
            short.heartbeat_every(None).unwrap().heartbeat_period(),
            None
        );
        assert!(o
            .retry_backoff(Duration::from_secs(2), Duration::from_secs(1))
            .is_err());
    }

    #[test]
    fn retry_backoff_doubles_and_caps() {
        let o = ExecutorOptions::new();
        assert_eq!(o.retry_after(1), Duration::from_secs(1));
        assert_eq!(o.retry_after(2), Duration::from_secs(2));
        assert_eq!(o.retry_after(9), Duration::from_secs(256));
        assert_eq!(o.retry_after(10), Duration::from_secs(300));
        assert_eq!(o.retry_after(1000), Duration::from_secs(300));
    }
}

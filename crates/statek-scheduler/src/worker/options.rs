//! [`WorkerOptions`]: the validated options of a [`crate::Worker`].

use std::time::Duration;

use crate::SchedulerError;

/// Options of a [`crate::Worker`].
///
/// Defaults: at most 16 runs executing at once; reservation batches sized
/// by the Worker up to 4,096 slots; back off after one full cycle of idle
/// slots (`L` consecutive `Idle` outcomes); idle backoff from 10 ms
/// doubling to 1 s; 30 s for running handlers to finish at shutdown; a
/// halted shard re-checked every 5 s; database outages ridden out for up
/// to 60 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerOptions {
    pub(crate) concurrency: usize,
    pub(crate) max_batch: u32,
    pub(crate) idle_threshold: Option<u64>,
    pub(crate) backoff_initial: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) shutdown_grace: Duration,
    pub(crate) maintenance_every: Duration,
    pub(crate) halted_recheck: Duration,
    pub(crate) outage_budget: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            max_batch: statek_core::MAX_RESERVATION_BATCH,
            idle_threshold: None,
            backoff_initial: Duration::from_millis(10),
            backoff_max: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(30),
            maintenance_every: Duration::from_secs(10),
            halted_recheck: Duration::from_secs(5),
            outage_budget: DEFAULT_OUTAGE_BUDGET,
        }
    }
}

/// The default [`WorkerOptions::concurrency`]: 16 runs executing at once.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// The default [`WorkerOptions::outage_budget`]: 60 s, longer than a
/// PostgreSQL restart and a managed failover.
pub const DEFAULT_OUTAGE_BUDGET: Duration = Duration::from_secs(60);

/// The largest [`WorkerOptions::outage_budget`]: 1 hour.
pub const MAX_OUTAGE_BUDGET: Duration = Duration::from_secs(3600);

/// The largest [`WorkerOptions::concurrency`].
pub const MAX_CONCURRENCY: usize = 4096;

impl WorkerOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs executing at once on this replica (1..=4,096; default 16): the
    /// size of the Worker's pool of execution permits. A slot claims a run
    /// only with a free permit, so a claimed run never waits; a slot whose
    /// claim must wait for a permit waits before its claim (its run is not
    /// taken from the queue meanwhile, so another replica with capacity
    /// may serve its tenant's next slot). Size it for the runs' work: runs
    /// that wait on I/O (HTTP, LLM calls) can use many permits per core;
    /// CPU-bound runs about one per core. Each permit may hold one run's
    /// lease; heartbeats and completions share the store's pool.
    pub fn concurrency(mut self, runs: usize) -> Result<Self, SchedulerError> {
        if !(1..=MAX_CONCURRENCY).contains(&runs) {
            return Err(SchedulerError::InvalidOption(format!(
                "concurrency must be 1..={MAX_CONCURRENCY}, got {runs}"
            )));
        }
        self.concurrency = runs;
        Ok(self)
    }

    /// The largest reservation batch (1..=4,096 slots; default 4,096). The
    /// Worker sizes each batch itself (see [`crate::Worker`]); this caps it. A
    /// smaller cap bounds the slots one replica holds ahead of the others
    /// and the slots consumed unused at shutdown (at most one batch).
    pub fn max_batch(mut self, slots: u32) -> Result<Self, SchedulerError> {
        if !(1..=statek_core::MAX_RESERVATION_BATCH).contains(&slots) {
            return Err(SchedulerError::InvalidOption(format!(
                "max batch must be 1..={} slots, got {slots}",
                statek_core::MAX_RESERVATION_BATCH
            )));
        }
        self.max_batch = slots;
        Ok(self)
    }

    /// Consecutive slots without a run (`Idle` or `Limited` outcomes,
    /// 1..=1,000,000) after which the worker stops reserving and backs off.
    /// Default: the cycle length `L` of the live shard (after a rollout,
    /// the successor's), so every tenant's slot came up empty once.
    pub fn idle_threshold(mut self, slots: u64) -> Result<Self, SchedulerError> {
        if !(1..=1_000_000).contains(&slots) {
            return Err(SchedulerError::InvalidOption(format!(
                "idle threshold must be 1..=1000000 slots, got {slots}"
            )));
        }
        self.idle_threshold = Some(slots);
        Ok(self)
    }

    /// Idle backoff: starts at `initial` (1 ms..=1 s), doubles while idle,
    /// capped at `max` (`initial`..=60 s). The cap is also the longest a
    /// run that became claimable without a notification (e.g. a delayed
    /// run) waits to be noticed.
    pub fn idle_backoff(
        mut self,
        initial: Duration,
        max: Duration,
    ) -> Result<Self, SchedulerError> {
        if initial < Duration::from_millis(1)
            || initial > Duration::from_secs(1)
            || max < initial
            || max > Duration::from_secs(60)
        {
            return Err(SchedulerError::InvalidOption(format!(
                "idle backoff needs 1 ms <= initial <= 1 s and initial <= max <= 60 s, got {initial:?} and {max:?}"
            )));
        }
        self.backoff_initial = initial;
        self.backoff_max = max;
        Ok(self)
    }

    /// How often the executor's housekeeping runs
    /// ([`TenantExecutor::maintain`](crate::TenantExecutor::maintain); 100 ms..=1 hour, default 10 s).
    pub fn maintenance_every(mut self, every: Duration) -> Result<Self, SchedulerError> {
        if every < Duration::from_millis(100) || every > Duration::from_secs(3600) {
            return Err(SchedulerError::InvalidOption(format!(
                "maintenance period must be 100 ms..=1 hour, got {every:?}"
            )));
        }
        self.maintenance_every = every;
        Ok(self)
    }

    /// How often a Worker whose shard is halted in the database (after a
    /// reservation loss; `DurabilityError::ShardHalted`) tries to reserve again
    /// (100 ms..=10 minutes, default 5 s). Meanwhile it stays up, reserves
    /// nothing and exports `statek_shard_halted{shard} 1`; once an owner
    /// resumes the shard (`statek shard resume`) it goes on by itself.
    pub fn halted_recheck(mut self, every: Duration) -> Result<Self, SchedulerError> {
        if every < Duration::from_millis(100) || every > Duration::from_secs(600) {
            return Err(SchedulerError::InvalidOption(format!(
                "halted re-check period must be 100 ms..=10 minutes, got {every:?}"
            )));
        }
        self.halted_recheck = every;
        Ok(self)
    }

    /// How long the Worker rides out a database outage (1 s..=1 hour,
    /// default 60 s: longer than a PostgreSQL restart, fast or immediate,
    /// and a managed failover).
    ///
    /// While reservations fail with retryable errors (connection refused
    /// or cut, the server starting up or shutting down, `lock_timeout`,
    /// the response timeout), the Worker keeps trying, with the same
    /// reservation id while the outage lasts, pausing 50 ms doubling to
    /// 1 s between attempts; the first successful reservation ends the
    /// outage ([`crate::WorkerReport::outages`]). Slots whose claims fail
    /// with retryable errors round after round are judged the same way.
    /// An outage that lasts the whole budget ends the Worker with its last
    /// retryable error (as at shutdown: running handlers get the shutdown
    /// grace). A non-retryable error ends it at once, whatever the budget.
    ///
    /// Running handlers follow the lease rule meanwhile: heartbeats that
    /// cannot be written leave the lease at its last deadline, and a
    /// handler whose lease is about to expire is cancelled; a run whose
    /// lease expired during the outage may run again (at-least-once), as
    /// its lease allows.
    pub fn outage_budget(mut self, budget: Duration) -> Result<Self, SchedulerError> {
        if budget < Duration::from_secs(1) || budget > MAX_OUTAGE_BUDGET {
            return Err(SchedulerError::InvalidOption(format!(
                "outage budget must be 1 s..=1 hour, got {budget:?}"
            )));
        }
        self.outage_budget = budget;
        Ok(self)
    }

    /// How long running handlers may take to finish after shutdown is
    /// requested before they are cancelled (0..=1 hour).
    pub fn shutdown_grace(mut self, grace: Duration) -> Result<Self, SchedulerError> {
        if grace > Duration::from_secs(3600) {
            return Err(SchedulerError::InvalidOption(format!(
                "shutdown grace must be at most 1 hour, got {grace:?}"
            )));
        }
        self.shutdown_grace = grace;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_limits() {
        let o = WorkerOptions::new();
        assert_eq!(o.concurrency, 16);
        assert_eq!(o.max_batch, 4096);
        assert!(o.concurrency(0).is_err());
        assert!(o.concurrency(4096).is_ok());
        assert!(o.concurrency(4097).is_err());
        assert!(o.max_batch(0).is_err());
        assert_eq!(o.max_batch(16).unwrap().max_batch, 16);
        assert!(o.max_batch(4097).is_err());
        assert_eq!(o.max_batch(4096).unwrap().max_batch, 4096);
        assert!(o.idle_threshold(0).is_err());
        assert_eq!(o.halted_recheck, Duration::from_secs(5));
        assert_eq!(o.outage_budget, Duration::from_secs(60));
        assert!(o.outage_budget(Duration::from_millis(999)).is_err());
        assert_eq!(
            o.outage_budget(Duration::from_secs(1))
                .unwrap()
                .outage_budget,
            Duration::from_secs(1)
        );
        assert_eq!(
            o.outage_budget(Duration::from_secs(3600))
                .unwrap()
                .outage_budget,
            Duration::from_secs(3600)
        );
        assert!(o.outage_budget(Duration::from_secs(3601)).is_err());
        assert!(o.halted_recheck(Duration::from_millis(99)).is_err());
        assert_eq!(
            o.halted_recheck(Duration::from_millis(100))
                .unwrap()
                .halted_recheck,
            Duration::from_millis(100)
        );
        assert!(o.halted_recheck(Duration::from_secs(601)).is_err());
        assert!(o.idle_threshold(1_000_001).is_err());
        assert!(o
            .idle_backoff(Duration::ZERO, Duration::from_secs(1))
            .is_err());
        assert!(o
            .idle_backoff(Duration::from_millis(10), Duration::from_millis(5))
            .is_err());
        assert!(o
            .idle_backoff(Duration::from_millis(10), Duration::from_secs(61))
            .is_err());
        assert!(o.shutdown_grace(Duration::from_secs(3601)).is_err());
        assert!(o.maintenance_every(Duration::from_millis(99)).is_err());
        assert!(o.maintenance_every(Duration::from_secs(3601)).is_err());
        assert_eq!(
            o.shutdown_grace(Duration::ZERO).unwrap().shutdown_grace,
            Duration::ZERO
        );
    }
}

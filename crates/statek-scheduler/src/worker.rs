//! [`Worker`]: keeps ticks in flight, backs off when every tenant is idle,
//! wakes on `LISTEN/NOTIFY`, and shuts down gracefully.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use statek_policy::TenantId;
use statek_store_pg::RunNotifications;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use crate::executor::{TenantExecutor, TenantTickOutcome};
use crate::{DurableFairScheduler, SchedulerError, TickOutcome};

/// Pause before listening again after the notification connection failed,
/// doubling from the first to the second value between attempts.
const RELISTEN_PAUSE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// Options of a [`Worker`].
///
/// Defaults: 4 ticks in flight; back off after one full cycle of idle
/// slots (`L` consecutive `Idle` outcomes); idle backoff from 10 ms doubling
/// to 1 s; 30 s for running handlers to finish at shutdown; one slot
/// reserved per round trip (batch size 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerOptions {
    concurrency: usize,
    batch_size: u32,
    idle_threshold: Option<u64>,
    backoff_initial: Duration,
    backoff_max: Duration,
    shutdown_grace: Duration,
    maintenance_every: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            concurrency: 4,
            batch_size: 1,
            idle_threshold: None,
            backoff_initial: Duration::from_millis(10),
            backoff_max: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(30),
            maintenance_every: Duration::from_secs(10),
        }
    }
}

impl WorkerOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ticks in flight at once (1..=256).
    pub fn concurrency(mut self, ticks: usize) -> Result<Self, SchedulerError> {
        if !(1..=256).contains(&ticks) {
            return Err(SchedulerError::InvalidOption(format!(
                "concurrency must be 1..=256, got {ticks}"
            )));
        }
        self.concurrency = ticks;
        Ok(self)
    }

    /// Slots each tick loop reserves per round trip (1..=1024; default 1).
    /// With `k > 1` each loop reserves `k` contiguous slots in one
    /// transaction ([`DurableFairScheduler::tick_batch`]) and runs their
    /// tenants in sequence order: fewer commits on the shard's cursor row,
    /// at the price of up to `k - 1` slots of extra delay for a tenant
    /// whose slot is late in the batch, and of up to `k` slots consumed
    /// unused at shutdown. Bounds, counted in reservations, are unchanged.
    pub fn batch_size(mut self, k: u32) -> Result<Self, SchedulerError> {
        if !(1..=statek_store_pg::MAX_RESERVATION_BATCH).contains(&k) {
            return Err(SchedulerError::InvalidOption(format!(
                "batch size must be 1..={}, got {k}",
                statek_store_pg::MAX_RESERVATION_BATCH
            )));
        }
        self.batch_size = k;
        Ok(self)
    }

    /// Consecutive `Idle` outcomes (1..=1,000,000) after which the worker
    /// stops reserving and backs off. Default: the cycle length, so every
    /// tenant's slot came up empty once.
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
    /// ([`TenantExecutor::maintain`]; 100 ms..=1 hour, default 10 s).
    pub fn maintenance_every(mut self, every: Duration) -> Result<Self, SchedulerError> {
        if every < Duration::from_millis(100) || every > Duration::from_secs(3600) {
            return Err(SchedulerError::InvalidOption(format!(
                "maintenance period must be 100 ms..=1 hour, got {every:?}"
            )));
        }
        self.maintenance_every = every;
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

/// What a [`Worker`] did, counted over its whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Ticks (reservations consumed).
    pub ticks: u64,
    /// Ticks whose outcome was `Executed`.
    pub executed: u64,
    /// Ticks whose outcome was `ExecutionFailed`.
    pub execution_failed: u64,
    /// Ticks whose outcome was `Idle`.
    pub idle: u64,
    /// Ticks whose outcome was `Contended`.
    pub contended: u64,
    /// Ticks whose outcome was `Cancelled`.
    pub cancelled: u64,
    /// Idle backoff sleeps taken.
    pub backoffs: u64,
    /// Wake-ups by notification.
    pub wakeups: u64,
    /// Times the notification connection failed (or stopped answering its
    /// probe) and was opened again.
    pub listen_reconnects: u64,
    /// Transient tick errors survived.
    pub transient_errors: u64,
}

#[derive(Default)]
struct Counters {
    ticks: AtomicU64,
    executed: AtomicU64,
    execution_failed: AtomicU64,
    idle: AtomicU64,
    contended: AtomicU64,
    cancelled: AtomicU64,
    backoffs: AtomicU64,
    wakeups: AtomicU64,
    listen_reconnects: AtomicU64,
    transient_errors: AtomicU64,
}

impl Counters {
    fn report(&self) -> WorkerReport {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkerReport {
            ticks: get(&self.ticks),
            executed: get(&self.executed),
            execution_failed: get(&self.execution_failed),
            idle: get(&self.idle),
            contended: get(&self.contended),
            cancelled: get(&self.cancelled),
            backoffs: get(&self.backoffs),
            wakeups: get(&self.wakeups),
            listen_reconnects: get(&self.listen_reconnects),
            transient_errors: get(&self.transient_errors),
        }
    }
}

/// State shared by a worker's tick loops.
struct Shared<E> {
    scheduler: Arc<DurableFairScheduler<E>>,
    options: WorkerOptions,
    threshold: u64,
    /// Consecutive `Idle` outcomes; any other outcome resets it.
    idle_streak: AtomicU64,
    /// Current backoff in microseconds (0 = not backing off).
    backoff_micros: AtomicU64,
    wake: Notify,
    counters: Counters,
    sink: Option<mpsc::UnboundedSender<TickOutcome>>,
}

/// Runs a scheduler replica: keeps `concurrency` ticks in flight; when a
/// full cycle of slots found every tenant idle it stops reserving and backs
/// off (so an idle fleet does not burn reservations), and wakes at once when
/// a run is enqueued (`LISTEN/NOTIFY`), or when a cheap probe finds
/// claimable work after a backoff sleep.
///
/// Wake-up latency: a notification wakes every tick loop at once and resets
/// the idle streak, so the new run's tenant is selected within its
/// starvation bound in reservations; without a notification (a delayed
/// run), within the backoff cap (default 1 s) plus that bound.
///
/// Shutdown: when `shutdown` fires, no new slot is reserved; handlers that
/// are running get `shutdown_grace` to finish, then their cancellation
/// tokens fire and their runs are released.
pub struct Worker<E> {
    scheduler: Arc<DurableFairScheduler<E>>,
    options: WorkerOptions,
    notifications: Option<RunNotifications>,
    sink: Option<mpsc::UnboundedSender<TickOutcome>>,
}

impl<E: TenantExecutor + 'static> Worker<E> {
    /// A worker for `scheduler`.
    pub fn new(scheduler: Arc<DurableFairScheduler<E>>, options: WorkerOptions) -> Self {
        Self {
            scheduler,
            options,
            notifications: None,
            sink: None,
        }
    }

    /// Wakes idle tick loops on these notifications (see
    /// [`statek_store_pg::PgStore::listen_for_runs`]). Without them the
    /// worker relies on its backoff timer and probe. When the notification
    /// connection fails or stops answering its probe, the worker listens
    /// again through its scheduler's store (pausing 1 s doubling to 30 s
    /// between attempts; [`WorkerReport::listen_reconnects`]) and relies on
    /// the probe meanwhile.
    pub fn with_notifications(mut self, notifications: RunNotifications) -> Self {
        self.notifications = Some(notifications);
        self
    }

    /// Sends every tick outcome to `sink` (e.g. for a fairness monitor or
    /// your own metrics).
    pub fn with_outcome_sink(mut self, sink: mpsc::UnboundedSender<TickOutcome>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Runs until `shutdown` fires (then drains as described on [`Worker`])
    /// or a non-retryable error occurs.
    ///
    /// Before the first tick it runs the store's durability check
    /// ([`statek_store_pg::PgStore::ensure_durable`]).
    ///
    /// # Errors
    /// [`SchedulerError::Store`] with `DurabilityRefused` when the store's
    /// durability policy refuses the server (nothing is reserved); the
    /// first non-retryable [`SchedulerError`] of any tick loop (e.g.
    /// `CorruptData`, `PolicyDigestMismatch`, `ReservationsLostInFailover`);
    /// the other loops then stop as at shutdown.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerReport, SchedulerError> {
        // The durability check of a Worker's start: refuse (by the store's
        // policy) a server that can lose acknowledged reservations.
        self.scheduler
            .store()
            .ensure_durable()
            .await
            .map_err(|source| SchedulerError::Store { source, retries: 0 })?;
        let threshold = self
            .options
            .idle_threshold
            .unwrap_or_else(|| u64::from(self.scheduler.policy().cycle_length()));
        let shared = Arc::new(Shared {
            scheduler: self.scheduler,
            options: self.options,
            threshold,
            idle_streak: AtomicU64::new(0),
            backoff_micros: AtomicU64::new(0),
            wake: Notify::new(),
            counters: Counters::default(),
            sink: self.sink,
        });
        let notifications = self.notifications;
        // Handlers see `hard`, which fires only after the grace period.
        let hard = CancellationToken::new();
        let stop = shutdown.child_token();
        let mut loops = tokio::task::JoinSet::new();
        for _ in 0..shared.options.concurrency {
            let shared = Arc::clone(&shared);
            let (stop, hard) = (stop.clone(), hard.clone());
            loops.spawn(async move { tick_loop(shared, stop, hard).await });
        }
        let listener = notifications.map(|mut n| {
            let shared = Arc::clone(&shared);
            let stop = stop.clone();
            tokio::spawn(async move {
                loop {
                    let message = tokio::select! {
                        _ = stop.cancelled() => return,
                        message = n.recv() => message,
                    };
                    match message {
                        Some(Ok(_tenant)) => {
                            shared.counters.wakeups.fetch_add(1, Ordering::Relaxed);
                            shared.idle_streak.store(0, Ordering::Relaxed);
                            shared.backoff_micros.store(0, Ordering::Relaxed);
                            shared.wake.notify_waiters();
                            continue;
                        }
                        Some(Err(e)) => {
                            tracing::warn!(error = %crate::error::chain(&e), "run notifications failed; listening again, meanwhile relying on the backoff probe");
                        }
                        None => {
                            tracing::warn!("run notifications ended; listening again, meanwhile relying on the backoff probe");
                        }
                    }
                    // Listen again, pausing 1 s doubling to 30 s between
                    // attempts. Work notified meanwhile is found by the
                    // backoff probe.
                    let mut pause = RELISTEN_PAUSE.0;
                    n = loop {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep(pause) => {}
                        }
                        match shared.scheduler.store().listen_for_runs().await {
                            Ok(fresh) => break fresh,
                            Err(e) => {
                                tracing::warn!(error = %crate::error::chain(&e), "cannot listen for runs yet");
                                pause = (pause * 2).min(RELISTEN_PAUSE.1);
                            }
                        }
                    };
                    shared.counters.listen_reconnects.fetch_add(1, Ordering::Relaxed);
                    tracing::info!("listening for runs again");
                }
            })
        });

        let maintenance = {
            let shared = Arc::clone(&shared);
            let stop = stop.clone();
            tokio::spawn(async move {
                let every = shared.options.maintenance_every;
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(every) => {
                            shared.scheduler.executor().maintain().await;
                            publish_oldest(&shared.scheduler).await;
                        }
                    }
                }
            })
        };

        let mut first_error = None;
        let mut grace_timer = None;
        loop {
            let grace = async {
                match grace_timer {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                joined = loops.join_next() => match joined {
                    None => break,
                    Some(Ok(Ok(()))) => {}
                    Some(Ok(Err(e))) => {
                        first_error.get_or_insert(e);
                        stop.cancel();
                    }
                    Some(Err(join_error)) => {
                        tracing::error!(error = %join_error, "tick loop panicked");
                        stop.cancel();
                    }
                },
                _ = stop.cancelled(), if grace_timer.is_none() => {
                    shared.wake.notify_waiters();
                    grace_timer = Some(tokio::time::Instant::now() + shared.options.shutdown_grace);
                }
                _ = grace => {
                    tracing::warn!("shutdown grace elapsed; cancelling running handlers");
                    hard.cancel();
                    // Keep joining; handlers now stop promptly.
                    while let Some(joined) = loops.join_next().await {
                        if let Ok(Err(e)) = joined {
                            first_error.get_or_insert(e);
                        }
                    }
                    break;
                }
            }
        }
        if let Some(listener) = listener {
            listener.abort();
        }
        maintenance.abort();
        match first_error {
            Some(e) => Err(e),
            None => Ok(shared.counters.report()),
        }
    }
}

async fn tick_loop<E: TenantExecutor>(
    shared: Arc<Shared<E>>,
    stop: CancellationToken,
    hard: CancellationToken,
) -> Result<(), SchedulerError> {
    let mut consecutive_errors = 0u32;
    while !stop.is_cancelled() {
        if shared.idle_streak.load(Ordering::Relaxed) >= shared.threshold {
            back_off(&shared, &stop).await;
            if stop.is_cancelled() {
                break;
            }
        }
        // One result per slot: one slot, or a batch whose slots each
        // succeed or fail on their own.
        let results = if shared.options.batch_size > 1 {
            match shared
                .scheduler
                .tick_batch_until(shared.options.batch_size, &stop, &hard)
                .await
            {
                Ok(results) => results,
                Err(e) => vec![Err(e)],
            }
        } else {
            vec![shared.scheduler.tick(&hard).await]
        };
        let mut errors = Vec::new();
        for result in results {
            match result {
                Ok(outcome) => {
                    record(&shared, &outcome);
                    if let Some(sink) = &shared.sink {
                        let _ = sink.send(outcome);
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            consecutive_errors = 0;
            continue;
        }
        if errors
            .iter()
            .any(|e| matches!(e, SchedulerError::ShuttingDown))
        {
            break;
        }
        if let Some(index) = errors.iter().position(|e| !e.is_retryable()) {
            return Err(errors.swap_remove(index));
        }
        if consecutive_errors >= 10 {
            return Err(errors.swap_remove(0));
        }
        consecutive_errors += 1;
        shared
            .counters
            .transient_errors
            .fetch_add(errors.len() as u64, Ordering::Relaxed);
        let pause = Duration::from_millis(50) * consecutive_errors;
        for e in &errors {
            tracing::warn!(error = %crate::error::chain(e), pause_ms = pause.as_millis() as u64, "tick failed transiently");
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    Ok(())
}

/// Sets the oldest-retained-reservation gauge of the worker's shard.
async fn publish_oldest<E: TenantExecutor>(scheduler: &DurableFairScheduler<E>) {
    let shard = scheduler.policy().shard_id();
    match scheduler.store().oldest_reservation(shard).await {
        Ok(Some(oldest)) => {
            if let Ok(at) = oldest.duration_since(std::time::SystemTime::UNIX_EPOCH) {
                metrics::gauge!(
                    crate::metrics::RETAINED_OLDEST_TIMESTAMP_SECONDS,
                    "shard" => shard.to_string()
                )
                .set(at.as_secs_f64());
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(
            error = %crate::error::chain(&e),
            "cannot read the oldest retained reservation"
        ),
    }
}

fn record<E>(shared: &Shared<E>, outcome: &TickOutcome) {
    let c = &shared.counters;
    c.ticks.fetch_add(1, Ordering::Relaxed);
    let counter = match outcome.tenant_outcome() {
        TenantTickOutcome::Executed(_) => &c.executed,
        TenantTickOutcome::ExecutionFailed { .. } => &c.execution_failed,
        TenantTickOutcome::Idle => &c.idle,
        TenantTickOutcome::Contended => &c.contended,
        _ => &c.cancelled,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    if matches!(outcome.tenant_outcome(), TenantTickOutcome::Idle) {
        shared.idle_streak.fetch_add(1, Ordering::Relaxed);
    } else {
        shared.idle_streak.store(0, Ordering::Relaxed);
        shared.backoff_micros.store(0, Ordering::Relaxed);
    }
}

/// Sleeps for the current backoff (doubling it) unless woken by a
/// notification or shutdown; afterwards, if the executor can tell that
/// claimable work exists, resets the idle streak so the loops tick a full
/// lap again.
async fn back_off<E: TenantExecutor>(shared: &Shared<E>, stop: &CancellationToken) {
    let initial = u64::try_from(shared.options.backoff_initial.as_micros()).unwrap_or(u64::MAX);
    let max = u64::try_from(shared.options.backoff_max.as_micros()).unwrap_or(u64::MAX);
    let current = shared.backoff_micros.load(Ordering::Relaxed);
    let pause = if current == 0 {
        initial
    } else {
        current.min(max)
    };
    let _ = shared.backoff_micros.compare_exchange(
        current,
        pause.saturating_mul(2).min(max),
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    shared.counters.backoffs.fetch_add(1, Ordering::Relaxed);
    let woken = tokio::select! {
        _ = stop.cancelled() => return,
        _ = shared.wake.notified() => true,
        _ = tokio::time::sleep(Duration::from_micros(pause)) => false,
    };
    // Only the policy's tenants: runs of others can never take a slot.
    let tenants: Vec<TenantId> = shared
        .scheduler
        .policy()
        .tenants()
        .iter()
        .map(|w| w.tenant().clone())
        .collect();
    if !woken
        && shared
            .scheduler
            .executor()
            .has_claimable_work(&tenants)
            .await
            == Some(true)
    {
        shared.idle_streak.store(0, Ordering::Relaxed);
        shared.backoff_micros.store(0, Ordering::Relaxed);
        shared.wake.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_limits() {
        let o = WorkerOptions::new();
        assert!(o.concurrency(0).is_err());
        assert!(o.concurrency(256).is_ok());
        assert!(o.concurrency(257).is_err());
        assert!(o.batch_size(0).is_err());
        assert_eq!(o.batch_size(16).unwrap().batch_size, 16);
        assert!(o.batch_size(1025).is_err());
        assert!(o.idle_threshold(0).is_err());
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

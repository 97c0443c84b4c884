//! [`Worker`]: a producer of reservation batches over a bounded pool of
//! executing runs; backs off (reserving nothing) when every tenant is
//! idle, wakes on `LISTEN/NOTIFY`, and shuts down gracefully.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use statek_core::{
    ReservationSource, RunNotifications, RunPool, TenantExecutor, TenantTickOutcome,
};
#[cfg(feature = "postgres")]
use statek_store_pg::PgStore;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use crate::error::SchedulerError;
use crate::reserved_batch::{BatchHooks, ReservedBatch, UnclaimedSink};
use crate::scheduler::DurableFairScheduler;
use crate::tick_outcome::TickOutcome;

mod halt;
mod housekeeping;
mod listen;
mod options;
mod outage;
mod report;
mod shared;
mod sizer;

use halt::{halt_of, Halt};
use housekeeping::{housekeeping, maintain, publish_executing};
use listen::listen;
pub use options::{
    WorkerOptions, DEFAULT_CONCURRENCY, DEFAULT_OUTAGE_BUDGET, MAX_CONCURRENCY, MAX_OUTAGE_BUDGET,
};
use outage::{AfterFailure, Outage};
use report::Counters;
pub use report::WorkerReport;
use shared::{back_off, lock, record, work_found, Shared};
use sizer::BatchSizer;

/// Runs a scheduler replica as a producer over a bounded pool of
/// executing runs.
///
/// **Producer.** The Worker reserves slots in batches (one range row per
/// batch) only while it has a free execution permit, and hands each batch
/// to the executor's batch entry point
/// ([`TenantExecutor::execute_batch`]): claims are made in sequence order,
/// at most one run per free permit (an idle or contended slot takes no
/// permit beyond its claim), the claimed runs start at once and execute
/// concurrently, and a slot whose claim must wait for a permit waits
/// before its claim, so no slot is lost to the replica's own lack of
/// capacity. While a batch claims, the next one is reserved (only while a
/// permit is free), and claims for it once every slot of the batch before
/// is decided.
///
/// **Adaptive batches.** Each batch is sized so that its expected claims
/// fill the free permits, with an eighth of the busy permits more: (free +
/// busy / 8) divided by the fraction of recent slots that claimed a run,
/// 1..=[`WorkerOptions::max_batch`]. The few slots beyond the free
/// permits wait for the next permits to free and are claimed then, within
/// one claim statement, without a reservation in between. Under a full
/// backlog a batch is about the number of free permits; when most slots
/// belong to tenants with nothing to run, batches grow (an idle slot costs
/// no statement of its own: the batch is one range row and one claim
/// statement); when a batch claims little, the next one is larger again.
///
/// **Idle.** When a full cycle of slots (`L` of the live shard, also after
/// following a rollout, or [`WorkerOptions::idle_threshold`]) came back
/// idle or limited, the Worker reserves
/// nothing: it sleeps its backoff (10 ms doubling to 1 s), then asks
/// [`TenantExecutor::has_claimable_work`] for the policy's tenants and
/// reserves again only when that says yes (or cannot tell) or a
/// notification (`LISTEN/NOTIFY`) woke it. An idle fleet burns no
/// reservations.
///
/// What does not change: each slot maps to exactly one tenant; at most one
/// run per slot, and only that tenant's; an idle or contended slot is
/// consumed, never passed on; bounds in reservations are unchanged;
/// reservation retries reuse their id. Slots share scheduling
/// opportunities, not execution time: a tenant whose runs take long can
/// hold many permits.
///
/// **Shutdown.** When `shutdown` fires no new claim starts and nothing is
/// reserved; slots of the current batch not yet claimed for are consumed
/// unused and reported [`TenantTickOutcome::Cancelled`]; running handlers
/// get `shutdown_grace` to finish, then their cancellation tokens fire and
/// their runs are released.
pub struct Worker<E, R> {
    scheduler: Arc<DurableFairScheduler<E, R>>,
    options: WorkerOptions,
    notifications: Option<RunNotifications>,
    sink: Option<mpsc::UnboundedSender<TickOutcome>>,
}

/// A [`Worker`] reserving in PostgreSQL (feature `postgres`).
#[cfg(feature = "postgres")]
pub type PgWorker<E> = Worker<E, PgStore>;

impl<E: TenantExecutor + 'static, R: ReservationSource + 'static> Worker<E, R> {
    /// A worker for `scheduler`.
    pub fn new(scheduler: Arc<DurableFairScheduler<E, R>>, options: WorkerOptions) -> Self {
        Self {
            scheduler,
            options,
            notifications: None,
            sink: None,
        }
    }

    /// Wakes an idle worker on these notifications (see
    /// statek-store-pg's `PgStore::listen_for_runs`). Without them the
    /// worker relies on its backoff timer and probe. When the notification
    /// connection fails or stops answering its probe, the worker listens
    /// again through its executor ([`TenantExecutor::listen_for_runs`];
    /// pausing 1 s doubling to 30 s
    /// between attempts; [`WorkerReport::listen_reconnects`]) and relies on
    /// the probe meanwhile.
    pub fn with_notifications(mut self, notifications: RunNotifications) -> Self {
        self.notifications = Some(notifications);
        self
    }

    /// Sends every slot's outcome to `sink` (e.g. for a fairness monitor or
    /// your own metrics).
    pub fn with_outcome_sink(mut self, sink: mpsc::UnboundedSender<TickOutcome>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Runs until `shutdown` fires (then drains as described on [`Worker`])
    /// or a non-retryable error occurs.
    ///
    /// Before the first reservation it runs its reservation source's
    /// durability check ([`ReservationSource::ensure_durable`]; PostgreSQL:
    /// statek-store-pg's `PgStore::ensure_durable`).
    ///
    /// # Errors
    /// [`SchedulerError::Source`] of kind `DurabilityRefused` when the
    /// store's durability policy refuses the server (nothing is reserved);
    /// the first non-retryable [`SchedulerError`] of any reservation or
    /// slot (e.g. of kind `Corrupt` or `PolicyConflict`), or the last transient
    /// one once reservations (or slots' claims) have failed for the whole
    /// [`WorkerOptions::outage_budget`] (default 60 s) in a row; the worker
    /// then stops as at shutdown. A reservation loss (`ReservationsLostInFailover`) or a
    /// halted shard (`ShardHalted`) does not stop it: it reserves nothing
    /// and re-checks every [`WorkerOptions::halted_recheck`] until an owner
    /// resumes the shard.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerReport, SchedulerError> {
        // Help text and units for the recorder installed by now, if any.
        crate::metrics::describe_all();
        // Every series an alert reads, at 0, in that recorder too: a
        // Worker that ends at its first event (a lost reservation, a
        // conflict) must not take the only sample of a new series with it.
        crate::metrics::zero_series(&self.scheduler.policy());
        // The durability check of a Worker's start: refuse (by the store's
        // policy) a server that can lose acknowledged reservations.
        self.scheduler
            .source()
            .ensure_durable()
            .await
            .map_err(|source| SchedulerError::Source { source, retries: 0 })?;
        let shared = Arc::new(Shared {
            scheduler: self.scheduler,
            options: self.options,
            idle_streak: AtomicU64::new(0),
            backoff_micros: AtomicU64::new(0),
            wake: Notify::new(),
            counters: Counters::default(),
            sink: self.sink,
            fatal: Mutex::new(None),
            slot_errors: AtomicU64::new(0),
            last_slot_error: Mutex::new(None),
        });
        // Handlers see `hard`, which fires only after the grace period.
        let hard = CancellationToken::new();
        let stop = shutdown.child_token();
        let listener = self
            .notifications
            .map(|n| tokio::spawn(listen(Arc::clone(&shared), n, stop.clone())));
        let pool = RunPool::new(shared.options.concurrency);
        // The first housekeeping pass before the first reservation: the
        // timestamp gauges an alert reads exist from the start with their
        // values, and runs a dead predecessor left expired are released.
        housekeeping(&shared, &pool).await;
        let maintenance = tokio::spawn(maintain(Arc::clone(&shared), pool.clone(), stop.clone()));
        let mut batches = tokio::task::JoinSet::new();
        let produced = produce(&shared, &pool, &mut batches, &stop, &hard).await;
        stop.cancel();
        shared.wake.notify_waiters();
        // Drain: running handlers get the grace period, then are cancelled.
        let grace = tokio::time::sleep(shared.options.shutdown_grace);
        tokio::pin!(grace);
        loop {
            tokio::select! {
                joined = batches.join_next() => match joined {
                    None => break,
                    Some(Ok(())) => {}
                    Some(Err(join_error)) => tracing::error!(error = %join_error, "batch task panicked"),
                },
                () = &mut grace, if !hard.is_cancelled() => {
                    if !batches.is_empty() {
                        tracing::warn!("shutdown grace elapsed; cancelling running handlers");
                    }
                    hard.cancel();
                }
            }
        }
        if let Some(listener) = listener {
            listener.abort();
        }
        maintenance.abort();
        let fatal = lock(&shared.fatal).take();
        match fatal.map(Err).unwrap_or(produced) {
            Err(e) => Err(e),
            Ok(()) => Ok(shared.counters.report()),
        }
    }
}

/// The producer: reserve a batch while a permit is free, hand it to a
/// batch task, wait until its slots are decided, size the next one.
/// Returns at shutdown, or with the error that stops the worker.
/// A batch handed to its task, as the producer follows it.
struct InFlight {
    len: usize,
    /// Its slots known to be without a run (idle, contended, cancelled,
    /// failed).
    without_run: Arc<AtomicUsize>,
    /// Fires when the batch's first slot is decided (it holds permits, or
    /// found its slots without runs).
    started: CancellationToken,
    /// Fires when every slot of the batch is decided.
    decided: CancellationToken,
}

async fn produce<E: TenantExecutor + 'static, R: ReservationSource + 'static>(
    shared: &Arc<Shared<E, R>>,
    pool: &RunPool,
    batches: &mut tokio::task::JoinSet<()>,
    stop: &CancellationToken,
    hard: &CancellationToken,
) -> Result<(), SchedulerError> {
    let mut sizer = BatchSizer::new(shared.options.max_batch);
    let mut reservation_outage = Outage::new(shared.options.outage_budget);
    let mut slot_outage = Outage::new(shared.options.outage_budget);
    // While reservations fail, every attempt reuses one batch id (and its
    // size), so a batch whose commit acknowledgement was lost is answered
    // with its original range, never reserved twice.
    let mut pending: Option<(uuid::Uuid, u32)> = None;
    // Batches whose slots are not all decided, oldest first: at most one
    // claiming and one reserved behind it (its reservation overlaps the
    // other's claims; its claims wait for the other's to be decided).
    let mut ahead: VecDeque<InFlight> = VecDeque::new();
    // Decided batches to learn from once a permit is free again (by then
    // every outcome the replica's own capacity waited for is in).
    let mut learn: Vec<InFlight> = Vec::new();
    while !stop.is_cancelled() {
        while let Some(joined) = batches.try_join_next() {
            if let Err(join_error) = joined {
                tracing::error!(error = %join_error, "batch task panicked");
            }
        }
        while ahead.front().is_some_and(|b| b.decided.is_cancelled()) {
            learn.extend(ahead.pop_front());
        }
        if ahead.len() >= 2 {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = ahead[0].decided.cancelled() => continue,
            }
        }
        // A free permit below means spare capacity only once the batch
        // ahead has taken its own.
        if let Some(last) = ahead.back() {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = last.started.cancelled() => {}
            }
        }
        if lock(&shared.fatal).is_some() {
            break;
        }
        match slot_error_round(shared, &mut slot_outage) {
            Ok(None) => {}
            Ok(Some(pause)) => {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(pause) => {}
                }
            }
            Err(last) => return Err(last),
        }
        if shared.idle_streak.load(Ordering::Relaxed) >= shared.idle_threshold() {
            if !back_off(shared, stop).await {
                continue;
            }
            sizer.reset();
            learn.clear();
        }
        // Reserve only while a permit is free: wait for one (first come,
        // first served, so no slot waiting for a permit is overtaken),
        // then hand it back; the batch's claims take their own.
        let free = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            permit = pool.acquire() => permit,
        };
        for batch in learn.drain(..) {
            let without_run = batch.without_run.load(Ordering::Relaxed).min(batch.len);
            sizer.observe(batch.len, batch.len - without_run);
        }
        let (id, k) = *pending.get_or_insert_with(|| {
            (
                uuid::Uuid::now_v7(),
                sizer.next(pool.available() + 1, pool.capacity()),
            )
        });
        drop(free);
        let (batch, retries, policy) = match shared.scheduler.reserve_batch_counted(id, k).await {
            Ok(reserved) => reserved,
            Err(e) if halt_of(&e).is_some() => {
                // The shard is halted in the database (or this store just
                // found and recorded a loss that halts it): stay up,
                // reserve nothing, and look again until an owner resumes it.
                pending = None;
                reservation_outage.succeeded();
                if halt_of(&e) == Some(Halt::Found) {
                    tracing::error!(error = %crate::error::chain(&e), "acknowledged reservations were lost in a failover; the shard is halted");
                } else {
                    tracing::error!(error = %crate::error::chain(&e), recheck_ms = shared.options.halted_recheck.as_millis() as u64, "the shard is halted; reserving nothing until an owner resumes it");
                }
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(shared.options.halted_recheck) => {}
                }
                continue;
            }
            Err(e) => {
                if !e.is_retryable() {
                    return Err(e);
                }
                shared
                    .counters
                    .transient_errors
                    .fetch_add(1, Ordering::Relaxed);
                match reservation_outage.failed(std::time::Instant::now()) {
                    AfterFailure::Retry(pause) => pause_after_error(&e, pause, stop).await,
                    AfterFailure::GiveUp { failing_for } => {
                        tracing::error!(error = %crate::error::chain(&e), failing_ms = failing_for.as_millis() as u64, "reservations failed for the whole outage budget; stopping the worker");
                        return Err(e);
                    }
                }
                continue;
            }
        };
        pending = None;
        if reservation_outage.is_failing() {
            reservation_outage.succeeded();
            shared
                .counters
                .outages
                .store(reservation_outage.survived(), Ordering::Relaxed);
            tracing::info!("reserving again after an outage");
        }
        shared.counters.batches.fetch_add(1, Ordering::Relaxed);
        let shard = policy.shard_id().to_string();
        metrics::histogram!(crate::metrics::WORKER_BATCH_SLOTS, "shard" => shard.clone())
            .record(batch.len() as f64);
        publish_executing(&shard, pool, shared.scheduler.executor());
        let in_flight = InFlight {
            len: batch.len(),
            without_run: Arc::new(AtomicUsize::new(0)),
            started: CancellationToken::new(),
            decided: CancellationToken::new(),
        };
        let task = {
            let shared = Arc::clone(shared);
            let pool = pool.clone();
            let (stop, hard) = (stop.clone(), hard.clone());
            let (len, without_run) = (in_flight.len, Arc::clone(&in_flight.without_run));
            let (started, decided) = (in_flight.started.clone(), in_flight.decided.clone());
            // Claims go in sequence order: this batch's wait until every
            // slot of the one before is decided.
            let after = ahead.back().map(|b| b.decided.clone());
            async move {
                // Decided at the latest when the task ends, also on a panic.
                let _decided = (started.clone().drop_guard(), decided.clone().drop_guard());
                if let Some(after) = after {
                    after.cancelled().await;
                }
                // Idle and limited slots of the decision under way: added
                // to the idle streak when the decision is whole (see
                // `on_decided`), never slot by slot, so the producer never
                // sees a decision's idle slots without its claims.
                let idle_pending = AtomicU64::new(0);
                let sink = |_index: usize, result: Result<TickOutcome, SchedulerError>| {
                    deliver(&shared, &stop, &without_run, &idle_pending, result);
                };
                // Slots decided alike without a claim, counted at once
                // (each is still counted per tenant in the metrics); one
                // by one only for an outcome sink, which hears every slot.
                let unclaimed = |slots: usize, outcome: &TenantTickOutcome| {
                    without_run.fetch_add(slots, Ordering::Relaxed);
                    record(&shared, &idle_pending, outcome, slots as u64);
                };
                let unclaimed: Option<&UnclaimedSink<'_>> = if shared.sink.is_none() {
                    Some(&unclaimed)
                } else {
                    None
                };
                // Slots decided and slots known without a run when
                // `on_decided` last heard: newly decided slots that are
                // not (yet) without a run were claimed.
                let seen = Mutex::new((0_usize, 0_usize));
                let on_decided = |count: usize| {
                    started.cancel();
                    let unclaimed_now = without_run.load(Ordering::Relaxed);
                    let mut seen = lock(&seen);
                    let (decided_before, unclaimed_before) = *seen;
                    let claimed_now = count.saturating_sub(decided_before)
                        > unclaimed_now.saturating_sub(unclaimed_before);
                    if claimed_now {
                        work_found(&shared);
                    }
                    *seen = (count.max(decided_before), unclaimed_now);
                    drop(seen);
                    let idle = idle_pending.swap(0, Ordering::Relaxed);
                    if !claimed_now {
                        shared.idle_streak.fetch_add(idle, Ordering::Relaxed);
                    }
                    if count >= len {
                        decided.cancel();
                    }
                };
                let recorded = shared
                    .scheduler
                    .run_reserved_batch(
                        ReservedBatch {
                            policy: &policy,
                            reservations: batch,
                            retries,
                            pool: &pool,
                        },
                        BatchHooks {
                            stop: &stop,
                            cancel: &hard,
                            sink: &sink,
                            unclaimed,
                            on_decided: &on_decided,
                        },
                    )
                    .await;
                // Idle slots reported after the batch's last decision (none
                // in practice) still count.
                shared
                    .idle_streak
                    .fetch_add(idle_pending.swap(0, Ordering::Relaxed), Ordering::Relaxed);
                if let Some((first, outcomes)) = recorded {
                    shared
                        .scheduler
                        .record_outcomes(policy.shard_id(), first, outcomes, true)
                        .await;
                }
            }
        };
        batches.spawn(task);
        ahead.push_back(in_flight);
    }
    Ok(())
}

/// Slot errors since the last look: none (`Ok(None)`, and the streak of
/// failing rounds ends), a pause (50 ms doubling to 1 s) while rounds with
/// slot errors have come in a row for less than the outage budget, or,
/// once they have lasted the budget, the last error, which stops the
/// worker.
fn slot_error_round<E, R>(
    shared: &Shared<E, R>,
    outage: &mut Outage,
) -> Result<Option<Duration>, SchedulerError> {
    let errors = shared.slot_errors.swap(0, Ordering::Relaxed);
    if errors == 0 {
        outage.succeeded();
        return Ok(None);
    }
    match outage.failed(std::time::Instant::now()) {
        AfterFailure::Retry(pause) => Ok(Some(pause)),
        AfterFailure::GiveUp { failing_for } => match lock(&shared.last_slot_error).take() {
            Some(last) => {
                tracing::error!(
                    errors,
                    failing_ms = failing_for.as_millis() as u64,
                    "slot errors in every round for the whole outage budget; stopping the worker"
                );
                Err(last)
            }
            None => Ok(Some(outage::MAX_PAUSE)),
        },
    }
}

/// Logs a failed reservation round and pauses (the outage's backoff).
async fn pause_after_error(e: &SchedulerError, pause: Duration, stop: &CancellationToken) {
    tracing::warn!(error = %crate::error::chain(e), pause_ms = pause.as_millis() as u64, "reservation failed transiently");
    tokio::select! {
        () = stop.cancelled() => {}
        () = tokio::time::sleep(pause) => {}
    }
}

/// One slot's result: counted, sent to the sink; a non-retryable error
/// stops the worker.
fn deliver<E, R>(
    shared: &Shared<E, R>,
    stop: &CancellationToken,
    without_run: &AtomicUsize,
    idle_pending: &AtomicU64,
    result: Result<TickOutcome, SchedulerError>,
) {
    match result {
        Ok(outcome) => {
            if !matches!(
                outcome.tenant_outcome(),
                TenantTickOutcome::Executed(_) | TenantTickOutcome::ExecutionFailed { .. }
            ) {
                without_run.fetch_add(1, Ordering::Relaxed);
            }
            record(shared, idle_pending, outcome.tenant_outcome(), 1);
            if let Some(sink) = &shared.sink {
                let _ = sink.send(outcome);
            }
        }
        Err(e) => {
            without_run.fetch_add(1, Ordering::Relaxed);
            shared.counters.ticks.fetch_add(1, Ordering::Relaxed);
            if e.is_retryable() {
                tracing::warn!(error = %crate::error::chain(&e), "slot failed transiently");
                shared
                    .counters
                    .transient_errors
                    .fetch_add(1, Ordering::Relaxed);
                shared.slot_errors.fetch_add(1, Ordering::Relaxed);
                *lock(&shared.last_slot_error) = Some(e);
            } else {
                tracing::error!(error = %crate::error::chain(&e), "slot failed; stopping the worker");
                lock(&shared.fatal).get_or_insert(e);
                stop.cancel();
            }
        }
    }
}

//! The state a [`Worker`](super::Worker)'s producer, batch tasks,
//! listener and housekeeping share, and what each of them does to it: the
//! outcome counters, the idle streak and the backoff.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use statek_core::{ReservationSource, TenantExecutor, TenantTickOutcome};
use statek_policy::TenantId;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::options::WorkerOptions;
use super::report::Counters;
use crate::error::SchedulerError;
use crate::scheduler::DurableFairScheduler;
use crate::tick_outcome::TickOutcome;

/// State shared by a worker's producer, batches and listener.
pub(super) struct Shared<E, R> {
    pub(super) scheduler: Arc<DurableFairScheduler<E, R>>,
    pub(super) options: WorkerOptions,
    /// Consecutive `Idle` outcomes; any other outcome resets it.
    pub(super) idle_streak: AtomicU64,
    /// Current backoff in microseconds (0 = not backing off).
    pub(super) backoff_micros: AtomicU64,
    pub(super) wake: Notify,
    pub(super) counters: Counters,
    pub(super) sink: Option<mpsc::UnboundedSender<TickOutcome>>,
    /// The first non-retryable error of any slot.
    pub(super) fatal: Mutex<Option<SchedulerError>>,
    /// Retryable slot errors since the producer last looked.
    pub(super) slot_errors: AtomicU64,
    /// The last of them.
    pub(super) last_slot_error: Mutex<Option<SchedulerError>>,
}

impl<E: TenantExecutor, R: ReservationSource> Shared<E, R> {
    /// Slots in a row without a run (`Idle`, `Limited`) before the worker
    /// backs off: [`WorkerOptions::idle_threshold`], else the cycle length
    /// `L` of the live shard's policy, read each time, so that it follows
    /// a rollout to a shard with another `L`.
    pub(super) fn idle_threshold(&self) -> u64 {
        self.options
            .idle_threshold
            .unwrap_or_else(|| u64::from(self.scheduler.policy().cycle_length()))
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Counts `slots` slots of `outcome`; idle and limited ones go to
/// `idle_pending`, the decision under way's (see the batch task).
pub(super) fn record<E, R>(
    shared: &Shared<E, R>,
    idle_pending: &AtomicU64,
    outcome: &TenantTickOutcome,
    slots: u64,
) {
    let c = &shared.counters;
    c.ticks.fetch_add(slots, Ordering::Relaxed);
    let counter = match outcome {
        TenantTickOutcome::Executed(_) => &c.executed,
        TenantTickOutcome::ExecutionFailed { .. } => &c.execution_failed,
        TenantTickOutcome::Idle => &c.idle,
        TenantTickOutcome::Contended => &c.contended,
        TenantTickOutcome::Limited => &c.limited,
        TenantTickOutcome::Debt => &c.debt,
        _ => &c.cancelled,
    };
    counter.fetch_add(slots, Ordering::Relaxed);
    // A limited slot is an idle one for the backoff: the tenant's limits,
    // not the queue, decide when it can run again. A run's outcome comes
    // when it finishes, long after its slot was decided (and after the
    // idle slots that followed it): its claim ended the streak then
    // ([`work_found`]), and its outcome leaves the streak alone.
    match outcome {
        TenantTickOutcome::Idle | TenantTickOutcome::Limited => {
            idle_pending.fetch_add(slots, Ordering::Relaxed);
        }
        TenantTickOutcome::Executed(_) | TenantTickOutcome::ExecutionFailed { .. } => {}
        // Contended and debt slots (the tenant has work: a debt slot
        // repays, it does not wait for runs), and cancelled ones.
        _ => work_found(shared),
    }
}

/// A slot was decided with work found (a run claimed, or a contended
/// slot): the idle streak ends and the backoff starts over.
pub(super) fn work_found<E, R>(shared: &Shared<E, R>) {
    shared.idle_streak.store(0, Ordering::Relaxed);
    shared.backoff_micros.store(0, Ordering::Relaxed);
}

/// Sleeps for the current backoff (doubling it) unless woken by a
/// notification or shutdown. Returns whether to reserve again: woken by a
/// notification, or the executor says (or cannot tell whether) the
/// policy's tenants have claimable work; then the idle streak is reset.
pub(super) async fn back_off<E: TenantExecutor, R: ReservationSource>(
    shared: &Shared<E, R>,
    stop: &CancellationToken,
) -> bool {
    let initial = u64::try_from(shared.options.backoff_initial.as_micros()).unwrap_or(u64::MAX);
    let max = u64::try_from(shared.options.backoff_max.as_micros()).unwrap_or(u64::MAX);
    let current = shared.backoff_micros.load(Ordering::Relaxed);
    let pause = if current == 0 {
        initial
    } else {
        current.min(max)
    };
    shared
        .backoff_micros
        .store(pause.saturating_mul(2).min(max), Ordering::Relaxed);
    shared.counters.backoffs.fetch_add(1, Ordering::Relaxed);
    let woken = tokio::select! {
        () = stop.cancelled() => return false,
        () = shared.wake.notified() => true,
        () = tokio::time::sleep(Duration::from_micros(pause)) => false,
    };
    // Only the policy's tenants: runs of others can never take a slot.
    let tenants: Vec<TenantId> = shared
        .scheduler
        .policy()
        .tenants()
        .iter()
        .map(|w| w.tenant().clone())
        .collect();
    let reserve = woken
        || shared
            .scheduler
            .executor()
            .has_claimable_work(&tenants)
            .await
            != Some(false);
    if reserve {
        shared.idle_streak.store(0, Ordering::Relaxed);
    }
    reserve
}

//! What a [`Worker`](super::Worker) counts while it runs
//! ([`Counters`]) and reports when it ends ([`WorkerReport`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// What a [`Worker`](super::Worker) did, counted over its whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Slots consumed (reservations), each with one outcome.
    pub ticks: u64,
    /// Reservation batches (one range row, or one row for a single slot,
    /// each).
    pub batches: u64,
    /// Slots whose outcome was `Executed`.
    pub executed: u64,
    /// Slots whose outcome was `ExecutionFailed`.
    pub execution_failed: u64,
    /// Slots whose outcome was `Idle`.
    pub idle: u64,
    /// Slots whose outcome was `Contended`.
    pub contended: u64,
    /// Slots whose outcome was `Limited` (the tenant's cap or rate held it
    /// back); they count like idle slots towards the backoff.
    pub limited: u64,
    /// Slots whose outcome was `Debt` (cost mode: the tenant was in debt
    /// after the slot's credit); they do not count towards the backoff.
    pub debt: u64,
    /// Slots whose outcome was `Cancelled` (consumed unused at shutdown,
    /// or a run cancelled and released).
    pub cancelled: u64,
    /// Idle backoff sleeps taken.
    pub backoffs: u64,
    /// Wake-ups by notification (of a run of the policy's tenants).
    pub wakeups: u64,
    /// Times the notification connection failed (or stopped answering its
    /// probe) and was opened again.
    pub listen_reconnects: u64,
    /// Transient errors survived (a reservation that failed after its
    /// retries, or a slot whose claim failed for good or whose executor
    /// returned a retryable error). A completion that could not be written
    /// within a lease is not counted here: its slot is `ExecutionFailed`
    /// (lease lost) and the run executes again.
    pub transient_errors: u64,
    /// Outages ridden out: streaks of failing reservations that a
    /// successful reservation ended within
    /// [`WorkerOptions::outage_budget`](crate::WorkerOptions::outage_budget).
    pub outages: u64,
}

/// The live counters behind a [`WorkerReport`], shared by the producer,
/// the batch tasks and the listener.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) ticks: AtomicU64,
    pub(super) batches: AtomicU64,
    pub(super) executed: AtomicU64,
    pub(super) execution_failed: AtomicU64,
    pub(super) idle: AtomicU64,
    pub(super) contended: AtomicU64,
    pub(super) limited: AtomicU64,
    pub(super) debt: AtomicU64,
    pub(super) cancelled: AtomicU64,
    pub(super) backoffs: AtomicU64,
    pub(super) wakeups: AtomicU64,
    pub(super) listen_reconnects: AtomicU64,
    pub(super) transient_errors: AtomicU64,
    pub(super) outages: AtomicU64,
}

impl Counters {
    /// What was counted so far.
    pub(super) fn report(&self) -> WorkerReport {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkerReport {
            ticks: get(&self.ticks),
            batches: get(&self.batches),
            executed: get(&self.executed),
            execution_failed: get(&self.execution_failed),
            idle: get(&self.idle),
            contended: get(&self.contended),
            limited: get(&self.limited),
            debt: get(&self.debt),
            cancelled: get(&self.cancelled),
            backoffs: get(&self.backoffs),
            wakeups: get(&self.wakeups),
            listen_reconnects: get(&self.listen_reconnects),
            transient_errors: get(&self.transient_errors),
            outages: get(&self.outages),
        }
    }
}

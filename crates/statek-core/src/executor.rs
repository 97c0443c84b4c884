//! The tenant-isolated executor: what runs behind a reserved slot. The
//! [`TenantExecutor`] trait, and its default batch entry point
//! [`execute_each`], which starts each slot's `execute_one` in sequence
//! order as permits free, for executors that do not claim many slots in
//! one statement.

use std::future::Future;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use statek_policy::TenantId;
use tokio_util::sync::CancellationToken;

use crate::batch::SlotBatch;
use crate::notifications::RunNotifications;
use crate::outcome::TenantTickOutcome;
use crate::source_error::SourceError;
use crate::tickets::SlotTickets;

/// A tenant-isolated executor: given a tenant, claim and run at most one of
/// that tenant's runs, never another tenant's.
///
/// Implement it to plug your own per-tenant queue into
/// statek-scheduler's `DurableFairScheduler`; statek-scheduler's `PgRunQueueExecutor` is the
/// default, on statek's PostgreSQL run queue. An implementation must not
/// wait for a run another claimer holds (report
/// [`TenantTickOutcome::Contended`] instead) and should return promptly
/// after `shutdown` fires.
pub trait TenantExecutor: Send + Sync {
    /// The executor's error type (store failures, not handler failures:
    /// those are [`TenantTickOutcome::ExecutionFailed`]).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Claims and runs at most one run of `tenant`.
    fn execute_one(
        &self,
        tenant: &TenantId,
        shutdown: &CancellationToken,
    ) -> impl Future<Output = Result<TenantTickOutcome, Self::Error>> + Send;

    /// Runs the slots of a reserved batch (sequence order, each mapped to
    /// its tenant), following the protocol of [`SlotBatch`]: claims in
    /// sequence order, at most one run per permit taken from the batch's
    /// pool, starts every claimed run at once (runs of a batch execute
    /// concurrently: none waits for another to finish), and reports each
    /// slot's outcome through its ticket (one per slot, or one per range
    /// of slots decided alike without a claim). Returns when every ticket
    /// has been reported (a ticket dropped unreported reports its slots
    /// abandoned).
    ///
    /// The default calls [`execute_one`](Self::execute_one) per slot,
    /// each after taking a permit, in sequence order
    /// ([`execute_each`]), so existing executors work
    /// unchanged; statek-scheduler's `PgRunQueueExecutor` claims for many slots in
    /// one statement instead ([`crate::claim_and_run`]).
    fn execute_batch<'a>(
        &'a self,
        batch: SlotBatch<'a, Self::Error>,
        tickets: SlotTickets<'a, Self::Error>,
    ) -> impl Future<Output = ()> + Send + 'a {
        execute_each(self, batch, tickets)
    }

    /// Whether an error of this executor is transient.
    fn is_retryable(error: &Self::Error) -> bool;

    /// Whether this executor keeps cost mode's ledger (docs/guarantees.md,
    /// "Cost mode: the bound"): it credits each slot's tenant in
    /// [`execute_batch`](Self::execute_batch) with the batch's
    /// [`SlotBatch::cost_fairness`], reports a slot of a tenant in debt
    /// with a claimable run as [`TenantTickOutcome::Debt`], and charges
    /// every attempt once, with its finish. Default `false`: a scheduler
    /// then refuses a cost-mode policy (statek-scheduler's
    /// `SchedulerError::UnsupportedFairness`) rather than share slots
    /// while the policy promises cost. In cost mode a scheduler hands
    /// every slot to `execute_batch`, never to
    /// [`execute_one`](Self::execute_one).
    fn enforces_cost_fairness(&self) -> bool {
        false
    }

    /// Whether any of `tenants` (the policy's tenants) has claimable work
    /// now, if the executor can tell cheaply (`None`: unknown). Work of
    /// other tenants does not count: no slot of the policy could run it;
    /// neither does work its tenant's limits hold back now (a slot would
    /// be [`TenantTickOutcome::Limited`]).
    /// An idle statek-scheduler's `Worker` asks this instead of reserving slots to
    /// find out.
    fn has_claimable_work(
        &self,
        tenants: &[TenantId],
    ) -> impl Future<Output = Option<bool>> + Send {
        let _ = tenants;
        std::future::ready(None)
    }

    /// Periodic housekeeping, run by a statek-scheduler's `Worker` every
    /// `WorkerOptions::maintenance_every` (default: nothing). The
    /// PostgreSQL executor runs the lease expiry pass here, so a run whose
    /// worker died on its last attempt ends `failed` instead of `running`.
    fn maintain(&self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// Listens for wake-ups of this executor's queue (a run of a tenant
    /// became claimable), for a statek-scheduler's `Worker` whose notification
    /// connection failed and that listens again (default: `None`, the
    /// executor has none; the Worker then relies on its backoff probe,
    /// [`has_claimable_work`](Self::has_claimable_work)).
    /// statek-scheduler's `PgRunQueueExecutor` opens `LISTEN statek_runs` through its
    /// store (statek-store-pg's `PgStore::listen_for_runs`).
    fn listen_for_runs(
        &self,
    ) -> impl Future<Output = Option<Result<RunNotifications, SourceError>>> + Send {
        std::future::ready(None)
    }

    /// A statek-scheduler's `Worker` received a run notification of `tenant` (one
    /// of its policy's tenants), before it decides any slot after this
    /// call. Default: nothing. statek-scheduler's `PgRunQueueExecutor` asks the
    /// database about the tenant's next slot again (it may have skipped
    /// the tenant as known empty; see
    /// `ExecutorOptions::idle_recheck`).
    fn run_notified(&self, tenant: &TenantId) {
        let _ = tenant;
    }

    /// A statek-scheduler's `Worker`'s notification connection started (`true`) or
    /// stopped (`false`) listening. Default: nothing.
    /// statek-scheduler's `PgRunQueueExecutor` skips known-empty tenants only while
    /// at least one connection listens.
    fn notifications_listening(&self, listening: bool) {
        let _ = listening;
    }

    /// A statek-scheduler's `Worker`'s notification connection dropped wake-ups
    /// unread (more than [`BUFFERED_WAKEUPS`](crate::BUFFERED_WAKEUPS) waited):
    /// any tenant may have been notified. Default: nothing.
    /// statek-scheduler's `PgRunQueueExecutor` forgets which tenants it knows to be
    /// empty and asks the database about each again.
    fn notifications_missed(&self) {}

    /// Runs whose handler has finished and whose outcome the executor has
    /// not recorded yet (`None`: the executor does not say). A
    /// statek-scheduler's `Worker` publishes it as
    /// `statek_worker_runs_awaiting_record`
    /// beside its executing runs. statek-scheduler's `PgRunQueueExecutor` lets at
    /// most twice its completion batch wait; at that bound its Worker
    /// claims nothing more until records commit.
    fn runs_awaiting_record(&self) -> Option<usize> {
        None
    }
}

/// The default [`TenantExecutor::execute_batch`]: for each slot in
/// sequence order, wait for a permit, then start
/// [`TenantExecutor::execute_one`] for its tenant; runs of a batch execute
/// concurrently, each holding its permit until it returns. A slot counts
/// as decided once its `execute_one` has been polled once; claims stay in
/// sequence order for an `execute_one` that sends its claim before its
/// first await (the claims themselves are separate statements, so two in
/// flight at once may commit in either order).
pub async fn execute_each<X: TenantExecutor + ?Sized>(
    executor: &X,
    batch: SlotBatch<'_, X::Error>,
    mut tickets: SlotTickets<'_, X::Error>,
) {
    let mut running = FuturesUnordered::new();
    while !tickets.is_empty() {
        // Poll the running ones first, so each started future runs to its
        // first await (its claim) before the next slot is considered.
        let permit = tokio::select! {
            biased;
            Some(()) = running.next(), if !running.is_empty() => continue,
            permits = batch.permits(1) => permits,
        };
        let Some(mut permits) = permit else {
            break;
        };
        let permit = permits.pop();
        drop(permits);
        let Some(ticket) = tickets.ticket() else {
            break;
        };
        let tenant = &ticket.slot().tenant;
        running.push(async move {
            let outcome = executor.execute_one(tenant, batch.cancel()).await;
            // Reported before the permit returns, so whoever takes the
            // permit next sees this slot's outcome.
            ticket.report(outcome);
            drop(permit);
        });
        // Its first poll (an `execute_one` that claims first runs up to
        // its claim's first await) before the slot counts as decided, so
        // the batch after this one, which waits for that, claims later.
        while let Some(Some(())) = running.next().now_or_never() {}
        batch.decided(tickets.issued());
    }
    tickets.cancel_rest();
    while running.next().await.is_some() {}
}

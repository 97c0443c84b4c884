//! The tenant-isolated executor: what runs behind a reserved slot.

use std::future::Future;
use std::time::SystemTime;

use statek_policy::TenantId;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::batch::SlotBatch;

/// A run executed (successfully or not) for a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutedRun {
    /// The run.
    pub run_id: Uuid,
    /// 1 on the first execution of the run.
    pub attempt: u32,
    /// Database time from which the run was claimable.
    pub available_at: SystemTime,
    /// Database time of the claim.
    pub claimed_at: SystemTime,
}

/// What the tenant's executor did with one slot. Whatever it is, the slot is
/// consumed: an empty or contended queue never passes its slot to another
/// tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TenantTickOutcome {
    /// One run was claimed and its handler succeeded.
    Executed(ExecutedRun),
    /// One run was claimed and its handler failed (or its lease was lost);
    /// the run is retried later or marked failed by the queue.
    ExecutionFailed {
        /// The run.
        run: ExecutedRun,
        /// The handler's error, or why the outcome could not be recorded.
        error: String,
    },
    /// The tenant had no claimable run.
    Idle,
    /// The tenant had claimable runs, but other claimers held all of them.
    Contended,
    /// The tenant had claimable runs, but its concurrency cap or rate
    /// limit (PostgreSQL run queue: `statek_store_pg::TenantLimits`) let it
    /// start none for this slot. The slot is consumed like an idle one: a
    /// [`crate::Worker`] backs off on it as on `Idle`.
    Limited,
    /// Shutdown was requested; no run was started, or the running one was
    /// cancelled and released.
    Cancelled,
}

impl TenantTickOutcome {
    /// A short lowercase label: `executed`, `execution_failed`, `idle`,
    /// `contended`, `limited`, `cancelled`.
    pub fn label(&self) -> &'static str {
        match self {
            TenantTickOutcome::Executed(_) => "executed",
            TenantTickOutcome::ExecutionFailed { .. } => "execution_failed",
            TenantTickOutcome::Idle => "idle",
            TenantTickOutcome::Contended => "contended",
            TenantTickOutcome::Limited => "limited",
            TenantTickOutcome::Cancelled => "cancelled",
        }
    }
}

/// A tenant-isolated executor: given a tenant, claim and run at most one of
/// that tenant's runs, never another tenant's.
///
/// Implement it to plug your own per-tenant queue into
/// [`crate::DurableFairScheduler`]; [`crate::PgRunQueueExecutor`] is the
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
    /// slot's outcome exactly once. Returns when every slot has been
    /// reported.
    ///
    /// The default calls [`execute_one`](Self::execute_one) per slot,
    /// each after taking a permit, in sequence order
    /// ([`crate::execute_each`]), so existing executors work
    /// unchanged; [`crate::PgRunQueueExecutor`] claims for many slots in
    /// one statement instead.
    fn execute_batch(&self, batch: &SlotBatch<'_, Self::Error>) -> impl Future<Output = ()> + Send {
        crate::batch::execute_each(self, batch)
    }

    /// Whether an error of this executor is transient.
    fn is_retryable(error: &Self::Error) -> bool;

    /// Whether any of `tenants` (the policy's tenants) has claimable work
    /// now, if the executor can tell cheaply (`None`: unknown). Work of
    /// other tenants does not count: no slot of the policy could run it;
    /// neither does work its tenant's limits hold back now (a slot would
    /// be [`TenantTickOutcome::Limited`]).
    /// An idle [`crate::Worker`] asks this instead of reserving slots to
    /// find out.
    fn has_claimable_work(
        &self,
        tenants: &[TenantId],
    ) -> impl Future<Output = Option<bool>> + Send {
        let _ = tenants;
        std::future::ready(None)
    }

    /// Periodic housekeeping, run by a [`crate::Worker`] every
    /// [`crate::WorkerOptions::maintenance_every`] (default: nothing). The
    /// PostgreSQL executor runs the lease expiry pass here, so a run whose
    /// worker died on its last attempt ends `failed` instead of `running`.
    fn maintain(&self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
}

//! [`InMemoryExecutor`]: a [`TenantExecutor`] on an in-process run queue,
//! for tests and for embedding statek's fair order without a run table.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use statek_core::lease::{run_under_lease, Heartbeat, LeaseState};
use statek_core::{
    claim_and_run, BatchSlot, EnqueuedRun, ExecutedRun, Run, RunHandler, RunPermit, RunResult,
    SlotBatch, SlotStart, SlotTickets, TenantExecutor, TenantTickOutcome, Unclaimed,
    MAX_ATTEMPTS_LIMIT, MAX_PAYLOAD_BYTES, MAX_PRIORITY, MIN_PRIORITY,
};
use statek_policy::TenantId;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::memory_queue::{lock, Claim, Clock, Queue};
use statek_scheduler::SchedulerError;

pub use crate::memory_queue::{MemoryRunState, MemoryRunStatus};

/// The longest accepted enqueue delay: 366 days (as in the PostgreSQL
/// queue).
const MAX_DELAY: Duration = Duration::from_secs(366 * 86_400);

/// Lease and retry settings of [`InMemoryExecutor`]: the same type, defaults
/// and limits as [`ExecutorOptions`](statek_scheduler::ExecutorOptions) (lease 30 s, heartbeat every
/// lease/3, retry backoff 1 s doubling up to 5 minutes). Durations run on
/// tokio's clock.
pub type InMemoryExecutorOptions = statek_scheduler::ExecutorOptions;

struct Shared<H> {
    queue: Arc<Mutex<Queue>>,
    clock: Clock,
    handler: H,
    options: InMemoryExecutorOptions,
}

impl<H> Shared<H> {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        lock(&self.queue)
    }
}

/// A [`TenantExecutor`] on an in-process run queue with the PostgreSQL
/// queue's semantics: per tenant, highest priority first, then FIFO by
/// (available time, insertion order),
/// leases with fencing tokens and heartbeats, attempts, retry backoff and
/// `failed` after the last attempt. Statek's conformance suite runs the same
/// cases against it and `PgRunQueueExecutor` (statek-scheduler, feature `postgres`).
///
/// Cost mode: [`execute_batch`](TenantExecutor::execute_batch) keeps the
/// ledger (see [`enforces_cost_fairness`](TenantExecutor::enforces_cost_fairness));
/// [`execute_one`](TenantExecutor::execute_one) knows no policy, so a run
/// it claims is neither credited for nor charged (a scheduler never calls
/// it for a cost-mode shard).
///
/// Use it to test code built on statek without a run table (the
/// [`DurableFairScheduler`](statek_scheduler::DurableFairScheduler) reserves them from a
/// [`crate::InMemoryReservations`] then), or call [`TenantExecutor::execute_one`] directly. It is
/// `Send + Sync` and cheap to clone (clones share one queue); concurrent
/// ticks are safe: claims happen under a mutex that is never held across
/// an await.
///
/// Outcomes: a run leased by another in-flight tick is not claimable until
/// its lease expires, exactly as in PostgreSQL, so a tenant whose only run
/// is in flight is `Idle`. `Contended` means claimable runs exist but all
/// are locked by another session: [`lock_run`](Self::lock_run) simulates
/// such a lock (PostgreSQL's `SELECT … FOR UPDATE`). State lives in memory
/// only: nothing survives the process, and completed and failed runs stay
/// in memory until the executor is dropped.
///
/// ```
/// use statek_policy::TenantId;
/// use statek_core::{Run, RunError, TenantExecutor, TenantTickOutcome};
/// use statek_testing::{InMemoryExecutor, InMemoryExecutorOptions};
/// use tokio_util::sync::CancellationToken;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
/// runtime.block_on(async {
///     let handler = |run: Run, _cancel: CancellationToken| async move {
///         if run.payload == b"bad" {
///             return Err(RunError::new("bad payload"));
///         }
///         Ok(())
///     };
///     let executor = InMemoryExecutor::new(handler, InMemoryExecutorOptions::new());
///     let tenant = TenantId::try_from("tenant-a")?;
///     let first = executor.enqueue(&tenant, b"hello".to_vec())?;
///     executor.enqueue(&tenant, b"bad".to_vec())?;
///     let shutdown = CancellationToken::new();
///
///     // FIFO: the first run first.
///     match executor.execute_one(&tenant, &shutdown).await? {
///         TenantTickOutcome::Executed(run) => assert_eq!((run.run_id, run.attempt), (first.run_id, 1)),
///         other => panic!("expected Executed, got {other:?}"),
///     }
///     let failed = executor.execute_one(&tenant, &shutdown).await?;
///     assert_eq!(failed.label(), "execution_failed");
///     // The failed run backs off (1 s by default): nothing is claimable now.
///     assert_eq!(executor.execute_one(&tenant, &shutdown).await?, TenantTickOutcome::Idle);
///     assert_eq!(executor.count_live_runs(), 1);
///     Ok::<(), Box<dyn std::error::Error>>(())
/// })
/// # }
/// ```
pub struct InMemoryExecutor<H> {
    shared: Arc<Shared<H>>,
}

impl<H> std::fmt::Debug for InMemoryExecutor<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let live = self.shared.queue().live_count();
        f.debug_struct("InMemoryExecutor")
            .field("live_runs", &live)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

impl<H> Clone for InMemoryExecutor<H> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// A simulated row lock on one run of an [`InMemoryExecutor`], from
/// [`InMemoryExecutor::lock_run`]; dropping it releases the lock.
#[derive(Debug)]
#[must_use = "the lock is released when the guard is dropped"]
pub struct MemoryRunLock {
    queue: Arc<Mutex<Queue>>,
    run_id: Uuid,
}

impl Drop for MemoryRunLock {
    fn drop(&mut self) {
        lock(&self.queue).unlock_run(self.run_id);
    }
}

impl<H: RunHandler> InMemoryExecutor<H> {
    /// An empty queue whose runs `handler` executes.
    pub fn new(handler: H, options: InMemoryExecutorOptions) -> Self {
        Self {
            shared: Arc::new(Shared {
                queue: Arc::new(Mutex::new(Queue::default())),
                clock: Clock::now(),
                handler,
                options,
            }),
        }
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.shared.handler
    }

    /// Adds a run to `tenant`'s queue: available at once, 5 attempts at
    /// most.
    ///
    /// # Errors
    /// [`SchedulerError::InvalidOption`] for a payload over
    /// [`MAX_PAYLOAD_BYTES`].
    pub fn enqueue(
        &self,
        tenant: &TenantId,
        payload: impl Into<Vec<u8>>,
    ) -> Result<EnqueuedRun, SchedulerError> {
        self.enqueue_with(tenant, payload, 5, Duration::ZERO)
    }

    /// Adds a run allowed `max_attempts` executions (1..=1000), claimable
    /// after `delay` (at most 366 days, tokio's clock).
    ///
    /// # Errors
    /// [`SchedulerError::InvalidOption`] for a payload over
    /// [`MAX_PAYLOAD_BYTES`] or an argument out of range.
    pub fn enqueue_with(
        &self,
        tenant: &TenantId,
        payload: impl Into<Vec<u8>>,
        max_attempts: u32,
        delay: Duration,
    ) -> Result<EnqueuedRun, SchedulerError> {
        self.enqueue_prioritised(tenant, payload, max_attempts, delay, 0)
    }

    /// [`enqueue_with`](Self::enqueue_with) at `priority`
    /// ([`MIN_PRIORITY`]..=[`MAX_PRIORITY`]),
    /// as `statek_store_pg::NewRun::priority`: the tenant's highest
    /// priority is claimed first, FIFO within one priority, never across
    /// tenants. (Tenant limits, caps and rates, exist only in the
    /// PostgreSQL run queue: this executor never reports
    /// [`TenantTickOutcome::Limited`].)
    ///
    /// # Errors
    /// As [`enqueue_with`](Self::enqueue_with), and
    /// [`SchedulerError::InvalidOption`] for a priority out of range.
    pub fn enqueue_prioritised(
        &self,
        tenant: &TenantId,
        payload: impl Into<Vec<u8>>,
        max_attempts: u32,
        delay: Duration,
        priority: i32,
    ) -> Result<EnqueuedRun, SchedulerError> {
        if !(MIN_PRIORITY..=MAX_PRIORITY).contains(&priority) {
            return Err(SchedulerError::InvalidOption(format!(
                "priority must be {}..={}, got {priority}",
                MIN_PRIORITY, MAX_PRIORITY
            )));
        }
        let payload = payload.into();
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(SchedulerError::InvalidOption(format!(
                "payload is {} bytes, the limit is {MAX_PAYLOAD_BYTES}",
                payload.len()
            )));
        }
        if !(1..=MAX_ATTEMPTS_LIMIT).contains(&max_attempts) {
            return Err(SchedulerError::InvalidOption(format!(
                "max_attempts must be 1..={MAX_ATTEMPTS_LIMIT}, got {max_attempts}"
            )));
        }
        if delay > MAX_DELAY {
            return Err(SchedulerError::InvalidOption(format!(
                "delay must be at most 366 days, got {delay:?}"
            )));
        }
        let now = Instant::now();
        let available_at = now + delay;
        let run_id =
            self.shared
                .queue()
                .enqueue(tenant, payload, max_attempts, priority, now, available_at);
        Ok(EnqueuedRun {
            run_id,
            enqueued_at: self.shared.clock.system(now),
            available_at: self.shared.clock.system(available_at),
            deduplicated: false,
        })
    }

    /// Cancels a run that is `Available` or `Running`. A running run's
    /// executor learns it at its next heartbeat (the lease is lost), which
    /// fires the handler's cancellation token; its completion is then not
    /// recorded. Returns false if the run had already finished or does not
    /// exist.
    pub fn cancel_run(&self, run_id: Uuid) -> bool {
        self.shared.queue().cancel(run_id)
    }

    /// A snapshot of a run, `None` for an unknown id.
    pub fn run(&self, run_id: Uuid) -> Option<MemoryRunStatus> {
        self.shared.queue().status(run_id)
    }

    /// `tenant`'s balance in cost mode's ledger, in cost units (`None`
    /// before the executor decided any cost-mode slot).
    pub fn cost_balance(&self, tenant: &TenantId) -> Option<i128> {
        self.shared.queue().balance(tenant)
    }

    /// Number of runs still `Available` or `Running`, over all tenants.
    pub fn count_live_runs(&self) -> u64 {
        self.shared.queue().live_count()
    }

    /// Simulates another session holding run `run_id`'s row lock: until
    /// the guard is dropped, claims skip the run without waiting, and a
    /// tenant whose claimable runs are all locked reports
    /// [`TenantTickOutcome::Contended`]. `None` for an unknown id or a run
    /// already locked.
    pub fn lock_run(&self, run_id: Uuid) -> Option<MemoryRunLock> {
        if !self.shared.queue().lock_run(run_id) {
            return None;
        }
        Some(MemoryRunLock {
            queue: Arc::clone(&self.shared.queue),
            run_id,
        })
    }

    /// Runs the handler under its lease (see [`crate::lease::run_under_lease`]);
    /// heartbeats extend the lease in the in-memory queue.
    async fn run_with_heartbeats(
        &self,
        run: &Run,
        token: Uuid,
        cancel: &CancellationToken,
        claimed: Instant,
    ) -> (RunResult, LeaseState) {
        let shared = &self.shared;
        let lease = shared.options.lease_length();
        let run_id = run.run_id;
        let (result, state, _lease_held_until) = run_under_lease(
            shared.handler.handle(run, cancel.clone()),
            run_id,
            lease,
            shared.options.heartbeat_period(),
            claimed,
            cancel,
            move || {
                std::future::ready(if shared.queue().heartbeat(run_id, token, lease) {
                    Heartbeat::Extended
                } else {
                    Heartbeat::Lost
                })
            },
        )
        .await;
        (result, state)
    }

    /// Runs a claimed run's handler under its lease and records how it
    /// ended.
    async fn run_claimed(
        &self,
        run: Box<Run>,
        token: Uuid,
        shutdown: &CancellationToken,
        claimed: Instant,
        permit: Option<RunPermit>,
    ) -> TenantTickOutcome {
        // The permit goes back once the outcome is recorded (and, in cost
        // mode, charged) under the queue's lock, when this returns: at no
        // moment does the Worker hold more attempts claimed and not yet
        // charged than its concurrency.
        let _permit = permit;
        let executed = ExecutedRun {
            run_id: run.run_id,
            attempt: run.attempt,
            available_at: run.available_at,
            claimed_at: run.claimed_at,
        };
        let cancel = shutdown.child_token();
        let shared = &self.shared;
        let (result, lease_state) = self
            .run_with_heartbeats(&run, token, &cancel, claimed)
            .await;
        if lease_state == LeaseState::LostOnServer {
            return TenantTickOutcome::ExecutionFailed {
                run: executed,
                error: "lease lost while the handler ran".into(),
            };
        }
        let (cost, clamped) = statek_core::charged_cost(&result, statek_core::MAX_RUN_COST);
        let count_cost = || {
            statek_scheduler::metrics::count_recorded_cost(&run.tenant, cost, clamped);
        };
        match result {
            Ok(_) => {
                if shared.queue().complete(run.run_id, token, cost) {
                    count_cost();
                    TenantTickOutcome::Executed(executed)
                } else {
                    TenantTickOutcome::ExecutionFailed {
                        run: executed,
                        error: "lease lost before completion was recorded".into(),
                    }
                }
            }
            Err(error) => {
                let shutting_down = shutdown.is_cancelled();
                let retry_after = if shutting_down {
                    Duration::ZERO
                } else {
                    shared.options.retry_after(run.attempt)
                };
                let message = error.to_string();
                let recorded = shared
                    .queue()
                    .fail(run.run_id, token, &message, retry_after, cost);
                if recorded {
                    count_cost();
                }
                if !recorded {
                    TenantTickOutcome::ExecutionFailed {
                        run: executed,
                        error: format!("{message}; lease lost before the failure was recorded"),
                    }
                } else if shutting_down {
                    TenantTickOutcome::Cancelled
                } else {
                    TenantTickOutcome::ExecutionFailed {
                        run: executed,
                        error: message,
                    }
                }
            }
        }
    }
}

impl<H: RunHandler> TenantExecutor for InMemoryExecutor<H> {
    type Error = std::convert::Infallible;

    async fn execute_one(
        &self,
        tenant: &TenantId,
        shutdown: &CancellationToken,
    ) -> Result<TenantTickOutcome, Self::Error> {
        if shutdown.is_cancelled() {
            return Ok(TenantTickOutcome::Cancelled);
        }
        let claimed = Instant::now();
        let claim = self.shared.queue().claim(
            tenant,
            self.shared.options.lease_length(),
            &self.shared.clock,
            false,
        );
        Ok(match claim {
            Claim::Claimed(run, token) => {
                self.run_claimed(run, token, shutdown, claimed, None).await
            }
            Claim::Idle => TenantTickOutcome::Idle,
            Claim::Contended => TenantTickOutcome::Contended,
        })
    }

    /// Claims for the batch's slots under one lock of the queue, in
    /// sequence order, at most one run per free permit, and runs the
    /// claimed runs concurrently.
    async fn execute_batch<'a>(
        &'a self,
        batch: SlotBatch<'a, Self::Error>,
        tickets: SlotTickets<'a, Self::Error>,
    ) {
        let shared = &self.shared;
        claim_and_run(
            batch,
            tickets,
            |e: &Self::Error| match *e {},
            |slots: &[BatchSlot], max_runs: usize| {
                let claimed_at = Instant::now();
                let mut queue = shared.queue();
                let mut starts = Vec::with_capacity(slots.len());
                let mut claimed = 0;
                let cost = batch.cost_fairness();
                for slot in slots {
                    if claimed == max_runs {
                        break;
                    }
                    if let Some(cost) = cost {
                        // Cost mode: credit first; a tenant in debt with a
                        // claimable run has a debt slot (without one, the
                        // slot is idle, whatever the balance).
                        if queue.credit(&slot.tenant, cost).is_debt() {
                            let unclaimed = if queue
                                .any_claimable(std::slice::from_ref(&slot.tenant), claimed_at)
                            {
                                Unclaimed::Debt
                            } else {
                                Unclaimed::Idle
                            };
                            SlotStart::unclaimed(unclaimed).push_into(&mut starts);
                            continue;
                        }
                    }
                    match queue.claim(
                        &slot.tenant,
                        shared.options.lease_length(),
                        &shared.clock,
                        cost.is_some(),
                    ) {
                        Claim::Claimed(run, token) => {
                            claimed += 1;
                            SlotStart::Claimed((run, token, claimed_at))
                        }
                        Claim::Idle => SlotStart::unclaimed(Unclaimed::Idle),
                        Claim::Contended => SlotStart::unclaimed(Unclaimed::Contended),
                    }
                    .push_into(&mut starts);
                }
                drop(queue);
                std::future::ready(Ok(starts))
            },
            |(run, token, claimed_at): (Box<Run>, Uuid, Instant),
             permit: Option<RunPermit>| async move {
                Ok(self
                    .run_claimed(run, token, batch.cancel(), claimed_at, permit)
                    .await)
            },
        )
        .await;
    }

    fn is_retryable(error: &Self::Error) -> bool {
        match *error {}
    }

    /// Cost mode: each batch slot credits its tenant in the executor's
    /// ledger ([`statek_policy::CostLedger`]) before its claim; every
    /// attempt such a slot claims is charged once, under the queue's lock
    /// with its finish (its reported cost), or the policy's default when
    /// it is cancelled while running or taken over after its lease
    /// expired. One ledger per executor (its clones share it), across
    /// shards: a rollout to other cost parameters cuts positive balances
    /// to the new cap and keeps debts.
    fn enforces_cost_fairness(&self) -> bool {
        true
    }

    async fn has_claimable_work(&self, tenants: &[TenantId]) -> Option<bool> {
        Some(self.shared.queue().any_claimable(tenants, Instant::now()))
    }
}

#[cfg(test)]
mod tests;

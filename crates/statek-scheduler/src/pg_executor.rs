//! The default [`TenantExecutor`]: statek's PostgreSQL run queue and a user
//! [`RunHandler`], which sees each claimed run as a [`Run`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use statek_core::lease::{run_under_lease, Heartbeat, LeaseState};
use statek_core::{
    claim_and_run, BatchSlot, ExecutedRun, Run, RunError, RunHandler, RunNotifications, RunPermit,
    SlotBatch, SlotClass, SlotStart, SourceError, TenantExecutor, TenantTickOutcome,
};
use statek_policy::TenantId;
use statek_store_pg::{
    ClaimOutcome, ClaimedRun, FinishOutcome, FinishRun, PgStore, RunFinish, RunLease, StoreError,
    MAX_FINISH_BATCH,
};
use tokio_util::sync::CancellationToken;

use crate::error::SchedulerError;
use crate::finish_recording::{flush_finished, record_alone, PendingFinish, Recorded};
use crate::group_commit::GroupCommit;
use crate::idle_set::IdleSet;

mod batch_claim;

use batch_claim::{merge_claims, plan_claim, PendingClaim};

fn run_outcome(tenant: &TenantId, outcome: &'static str) {
    metrics::counter!(
        crate::metrics::RUN_OUTCOMES_TOTAL,
        "tenant" => tenant.to_string(),
        "outcome" => outcome
    )
    .increment(1);
}

/// How a finished run is recorded: by its own statement, or in a group
/// commit with other finished runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recording {
    Direct,
    Grouped,
}

/// The group commit of finished runs of one executor (and its clones),
/// and the room for runs waiting for their record.
#[derive(Clone)]
struct Completions {
    commit: Arc<GroupCommit<PendingFinish, Recorded>>,
    /// One permit per finished run waiting for its record, at most
    /// [`RECORDS_PER_FLUSH_WAITING`] flushes' worth: a handler that
    /// finished keeps its run permit until its run has room here, so when
    /// records fall behind the claims (a slow disk, a busy server) the
    /// Worker stops claiming instead of piling up runs that finished
    /// unrecorded, each holding memory and a lease that runs out.
    room: Arc<Semaphore>,
}

impl std::fmt::Debug for Completions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Completions")
    }
}

/// Finished runs that may wait for their record, in completion batches
/// ([`ExecutorOptions::completion_batching`]): one flush under way and one
/// filling behind it.
const RECORDS_PER_FLUSH_WAITING: usize = 2;

/// The room's size: its permits when no finished run waits for its record.
fn room_size(options: &ExecutorOptions) -> usize {
    RECORDS_PER_FLUSH_WAITING * options.completion_batch
}

/// Expired runs handled per expiry pass.
const EXPIRY_PASS_LIMIT: u32 = 100;

/// Lease, retry and completion settings of [`PgRunQueueExecutor`].
///
/// Defaults: lease 30 s, heartbeat every lease/3, retry backoff 1 s doubling
/// per attempt up to 5 minutes; finished runs of batches recorded in group
/// commits of up to 256 runs, each waiting at most 1 ms for more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutorOptions {
    pub(crate) lease: Duration,
    pub(crate) heartbeat_every: Option<Duration>,
    pub(crate) retry_initial: Duration,
    pub(crate) retry_max: Duration,
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

    /// How finished runs of a batch ([`TenantExecutor::execute_batch`])
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

    pub(crate) fn retry_after(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1).min(20))
            .unwrap_or(u32::MAX);
        self.retry_initial
            .checked_mul(factor)
            .unwrap_or(self.retry_max)
            .min(self.retry_max)
    }
}

/// [`TenantExecutor`] on statek's PostgreSQL run queue: claims the tenant's
/// highest-priority, oldest claimable run (skipping locked ones) within the
/// tenant's limits (a capped or rate-limited tenant's slot is
/// [`TenantTickOutcome::Limited`]), runs the handler with
/// automatic heartbeats, then completes or fails the run under its fencing
/// token.
#[derive(Debug, Clone)]
pub struct PgRunQueueExecutor<H> {
    store: PgStore,
    handler: H,
    options: ExecutorOptions,
    completions: Completions,
    /// Tenants known empty ([`ExecutorOptions::idle_recheck`]); `None`
    /// asks about every slot.
    idle: Option<Arc<IdleSet>>,
    /// (tenant, state) pairs of [`crate::metrics::RUNS`] set so far.
    published_counts: Arc<std::sync::Mutex<std::collections::BTreeSet<(String, &'static str)>>>,
}

impl<H: RunHandler> PgRunQueueExecutor<H> {
    /// An executor on `store`'s run queue.
    pub fn new(store: PgStore, handler: H, options: ExecutorOptions) -> Self {
        let completions = Completions {
            commit: Arc::new(GroupCommit::new(
                options.completion_batch,
                options.completion_linger,
            )),
            room: Arc::new(Semaphore::new(room_size(&options))),
        };
        Self {
            store,
            handler,
            idle: options
                .idle_recheck
                .map(|every| Arc::new(IdleSet::new(every))),
            options,
            completions,
            published_counts: Arc::default(),
        }
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// Runs the handler under its lease (see [`crate::lease::run_under_lease`]);
    /// heartbeats extend the lease in PostgreSQL.
    async fn run_with_heartbeats(
        &self,
        run: &Run,
        held: &RunLease,
        cancel: &CancellationToken,
        claim_sent: Instant,
    ) -> (Result<(), RunError>, LeaseState, Instant) {
        let (store, lease) = (&self.store, self.options.lease);
        run_under_lease(
            self.handler.handle(run, cancel.clone()),
            held.run_id(),
            lease,
            self.options.heartbeat_every,
            claim_sent,
            cancel,
            move || async move {
                match store.heartbeat_run(held, lease).await {
                    Ok(_) => Heartbeat::Extended,
                    Err(StoreError::LeaseLost { .. }) => Heartbeat::Lost,
                    Err(e) => {
                        tracing::warn!(run_id = %held.run_id(), error = %crate::error::chain(&e), "heartbeat failed");
                        Heartbeat::Failed
                    }
                }
            },
        )
        .await
    }

    /// Runs a claimed run's handler under its lease and records how it
    /// ended (completion or failure, fenced by its token).
    async fn run_claimed(
        &self,
        run: Box<ClaimedRun>,
        shutdown: &CancellationToken,
        claim_sent: Instant,
        permit: Option<RunPermit>,
        recording: Recording,
    ) -> Result<TenantTickOutcome, StoreError> {
        // The handler sees the run; the fencing token stays here.
        let held = run.lease;
        let run = Run::from(*run);
        let tenant = &run.tenant;
        let executed = ExecutedRun {
            run_id: run.run_id,
            attempt: run.attempt,
            available_at: run.available_at,
            claimed_at: run.claimed_at,
        };
        let cancel = shutdown.child_token();
        let (result, lease_state, lease_held_until) = self
            .run_with_heartbeats(&run, &held, &cancel, claim_sent)
            .await;
        let pending = |finish: RunFinish| PendingFinish {
            finish: match finish {
                RunFinish::Complete => FinishRun::complete(held),
                RunFinish::Fail { error, retry_after } => FinishRun::fail(held, error, retry_after),
            },
            lease_held_until,
            cancel: shutdown.clone(),
        };
        if lease_state == LeaseState::LostOnServer {
            // Nothing to record: the permit goes back at once.
            drop(permit);
            run_outcome(tenant, "lease_lost");
            return Ok(TenantTickOutcome::ExecutionFailed {
                run: executed,
                error: "lease lost while the handler ran".into(),
            });
        }
        // The handler is done: its permit goes back before the outcome is
        // recorded, once the run has room among the runs waiting for their
        // record (the room is never closed; were it, the run would simply
        // not wait).
        let _room = Arc::clone(&self.completions.room)
            .acquire_owned()
            .await
            .ok();
        drop(permit);
        // Expired locally: the token may still hold (nobody re-claimed), so
        // the outcome is still recorded under it; the store says if not.
        match result {
            Ok(()) => match self.record(pending(RunFinish::Complete), recording).await {
                Ok(FinishOutcome::Completed | FinishOutcome::AlreadyRecorded) => {
                    run_outcome(tenant, "completed");
                    Ok(TenantTickOutcome::Executed(executed))
                }
                Ok(_) => {
                    run_outcome(tenant, "lease_lost");
                    Ok(TenantTickOutcome::ExecutionFailed {
                        run: executed,
                        error: "lease lost before completion was recorded".into(),
                    })
                }
                Err(e) => Err(e),
            },
            Err(error) => {
                let shutting_down = shutdown.is_cancelled();
                let retry_after = if shutting_down {
                    Duration::ZERO
                } else {
                    self.options.retry_after(run.attempt)
                };
                let failed = self
                    .record(
                        pending(RunFinish::Fail {
                            error: error.to_string(),
                            retry_after,
                        }),
                        recording,
                    )
                    .await;
                match failed {
                    Ok(
                        FinishOutcome::Retrying { .. }
                        | FinishOutcome::Failed
                        | FinishOutcome::AlreadyRecorded,
                    ) if shutting_down => {
                        run_outcome(tenant, "cancelled");
                        Ok(TenantTickOutcome::Cancelled)
                    }
                    Ok(
                        outcome @ (FinishOutcome::Retrying { .. }
                        | FinishOutcome::Failed
                        | FinishOutcome::AlreadyRecorded),
                    ) => {
                        run_outcome(
                            tenant,
                            match outcome {
                                FinishOutcome::Failed => "failed",
                                _ => "retrying",
                            },
                        );
                        Ok(TenantTickOutcome::ExecutionFailed {
                            run: executed,
                            error: error.to_string(),
                        })
                    }
                    Ok(_) => {
                        run_outcome(tenant, "lease_lost");
                        Ok(TenantTickOutcome::ExecutionFailed {
                            run: executed,
                            error: format!("{error}; lease lost before the failure was recorded"),
                        })
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Records a finished run until the record commits
    /// (`crate::finish_recording`): alone, or in the next group commit of
    /// finished runs; both through `finish_runs`, fenced by its token.
    /// A record given up at shutdown (handlers cancelled, lease run out)
    /// answers [`FinishOutcome::LeaseLost`]: the run may execute again, as
    /// its lease allows.
    async fn record(
        &self,
        item: PendingFinish,
        recording: Recording,
    ) -> Result<FinishOutcome, StoreError> {
        let store = &self.store;
        if recording == Recording::Grouped {
            let flush = |items: Vec<PendingFinish>| flush_finished(store, items);
            match self.completions.commit.submit(item.clone(), flush).await {
                Some(Recorded::Outcome(outcome)) => return Ok(outcome),
                Some(Recorded::GaveUp(error)) => {
                    tracing::error!(run_id = %item.finish.lease().run_id(), error, "finished run not recorded before its lease ran out at shutdown; it may execute again");
                    return Ok(FinishOutcome::LeaseLost);
                }
                // A non-retryable flush, or one interrupted (its leader
                // dropped): this run alone, which answers AlreadyRecorded
                // when the flush did commit it.
                Some(Recorded::Alone) | None => {}
            }
        }
        Ok(record_alone(store, &item)
            .await?
            .unwrap_or(FinishOutcome::LeaseLost))
    }
}

impl<H: RunHandler> PgRunQueueExecutor<H> {
    /// Sets [`crate::metrics::RUNS`] (every tenant and state, 0 for a pair
    /// seen before and now empty) and the run retention backlog gauge.
    async fn publish_run_counts(&self) {
        match self.store.count_runs().await {
            Ok(counts) => {
                let mut seen = self
                    .published_counts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                let now: std::collections::BTreeMap<(String, &'static str), u64> = counts
                    .iter()
                    .map(|c| ((c.tenant.to_string(), c.state.as_str()), c.runs))
                    .collect();
                for key in seen.iter() {
                    if !now.contains_key(key) {
                        metrics::gauge!(crate::metrics::RUNS, "tenant" => key.0.clone(), "state" => key.1)
                            .set(0.0);
                    }
                }
                for ((tenant, state), runs) in &now {
                    metrics::gauge!(crate::metrics::RUNS, "tenant" => tenant.clone(), "state" => *state)
                        .set(*runs as f64);
                }
                seen.extend(now.into_keys());
            }
            Err(e) => {
                tracing::warn!(error = %crate::error::chain(&e), "cannot count runs");
            }
        }
        match self.store.oldest_finished_run().await {
            Ok(Some(oldest)) => {
                if let Ok(at) = oldest.duration_since(std::time::SystemTime::UNIX_EPOCH) {
                    metrics::gauge!(crate::metrics::RUNS_FINISHED_OLDEST_TIMESTAMP_SECONDS)
                        .set(at.as_secs_f64());
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %crate::error::chain(&e), "cannot read the oldest finished run");
            }
        }
    }
}

impl<H: RunHandler> TenantExecutor for PgRunQueueExecutor<H> {
    type Error = StoreError;

    async fn execute_one(
        &self,
        tenant: &TenantId,
        shutdown: &CancellationToken,
    ) -> Result<TenantTickOutcome, StoreError> {
        if shutdown.is_cancelled() {
            return Ok(TenantTickOutcome::Cancelled);
        }
        let claim_sent = Instant::now();
        let run = match self.store.claim_run(tenant, self.options.lease).await? {
            ClaimOutcome::Claimed(run) => run,
            ClaimOutcome::Idle => return Ok(TenantTickOutcome::Idle),
            ClaimOutcome::Limited => return Ok(TenantTickOutcome::Limited),
            // Contended, or any answer without a run.
            _ => return Ok(TenantTickOutcome::Contended),
        };
        self.run_claimed(run, shutdown, claim_sent, None, Recording::Direct)
            .await
    }

    async fn execute_batch(&self, batch: &SlotBatch<'_, StoreError>) {
        let lease = self.options.lease;
        let shard = batch.shard().to_string();
        // The claim of the slots being claimed for, kept across its
        // retries: a retry sends the same tokens, so a claim whose
        // acknowledgement was lost is answered from the claim history
        // (`PgStore::claim_slots`), its runs handed back, not abandoned.
        // Kept with the slots it was made for and which of them it asks
        // about, so that a notification between two sends cannot change
        // the claim.
        let pending: std::sync::Mutex<Option<Arc<PendingClaim>>> = std::sync::Mutex::new(None);
        let (pending, shard) = (&pending, &shard);
        claim_and_run(
            batch,
            StoreError::is_retryable,
            |slots: &[BatchSlot], max_runs: usize| {
                let pairs: Vec<(u64, TenantId)> = slots
                    .iter()
                    .map(|s| (s.sequence, s.tenant.clone()))
                    .collect();
                async move {
                    loop {
                        let claim = {
                            let mut kept = pending.lock().unwrap_or_else(|p| p.into_inner());
                            match kept.as_ref() {
                                Some(claim)
                                    if claim.slots == pairs && claim.max_runs == max_runs =>
                                {
                                    Arc::clone(claim)
                                }
                                _ => {
                                    let claim = Arc::new(plan_claim(
                                        self.idle.as_deref(),
                                        batch,
                                        pairs.clone(),
                                        lease,
                                        max_runs,
                                    )?);
                                    *kept = Some(Arc::clone(&claim));
                                    claim
                                }
                            }
                        };
                        let Some(request) = claim.request.as_ref() else {
                            // Every tenant known empty: no statement.
                            *pending.lock().unwrap_or_else(|p| p.into_inner()) = None;
                            metrics::counter!(crate::metrics::SLOTS_KNOWN_IDLE_TOTAL, "shard" => shard.clone())
                                .increment(claim.slots.len() as u64);
                            return Ok((0..claim.slots.len())
                                .map(|_| SlotStart::DoneAs(TenantTickOutcome::Idle, SlotClass::IdleKnown))
                                .collect());
                        };
                        let claim_sent = Instant::now();
                        metrics::counter!(crate::metrics::CLAIM_STATEMENTS_TOTAL, "shard" => shard.clone())
                            .increment(1);
                        let claims = self.store.claim_slots(request).await?;
                        *pending.lock().unwrap_or_else(|p| p.into_inner()) = None;
                        let (starts, known_idle) = merge_claims(self.idle.as_deref(), &claim, claims, claim_sent);
                        metrics::counter!(crate::metrics::SLOTS_KNOWN_IDLE_TOTAL, "shard" => shard.clone())
                            .increment(known_idle);
                        if !starts.is_empty() {
                            return Ok(starts);
                        }
                        // The first slot's tenant was notified while the
                        // claim was in flight and nothing was claimed:
                        // claim again, asking about it this time.
                    }
                }
            },
            |(run, claim_sent): (Box<ClaimedRun>, Instant), permit: Option<RunPermit>| async move {
                self.run_claimed(run, batch.cancel(), claim_sent, permit, Recording::Grouped)
                    .await
            },
        )
        .await;
    }

    fn is_retryable(error: &StoreError) -> bool {
        error.is_retryable()
    }

    async fn maintain(&self) {
        self.publish_run_counts().await;
        let expired = match self.store.find_expired_runs(EXPIRY_PASS_LIMIT).await {
            Ok(expired) => expired,
            Err(e) => {
                tracing::warn!(error = %crate::error::chain(&e), "expiry pass: cannot list expired runs");
                return;
            }
        };
        for run in &expired {
            match self.store.rescue_expired_run(run).await {
                Ok(statek_store_pg::RescueOutcome::Failed) => {
                    tracing::warn!(run_id = %run.lease.run_id(), "run expired on its last attempt: failed");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(run_id = %run.lease.run_id(), error = %crate::error::chain(&e), "expiry pass failed")
                }
            }
        }
    }

    async fn listen_for_runs(&self) -> Option<Result<RunNotifications, SourceError>> {
        Some(
            self.store
                .listen_for_runs()
                .await
                .map_err(SourceError::from),
        )
    }

    fn run_notified(&self, tenant: &TenantId) {
        if let Some(idle) = &self.idle {
            idle.notified(tenant);
        }
    }

    fn notifications_listening(&self, listening: bool) {
        if let Some(idle) = &self.idle {
            if listening {
                idle.listening_started();
            } else {
                idle.listening_stopped();
            }
        }
    }

    fn notifications_missed(&self) {
        if let Some(idle) = &self.idle {
            idle.forget();
        }
    }

    fn runs_awaiting_record(&self) -> Option<usize> {
        let free = self.completions.room.available_permits();
        Some(room_size(&self.options).saturating_sub(free))
    }

    async fn has_claimable_work(&self, tenants: &[TenantId]) -> Option<bool> {
        match self.store.any_claimable_runs(tenants).await {
            Ok(any) => {
                if any {
                    // Some tenant has work the idle set may not know of (a
                    // delayed run came due, a lease expired): ask about
                    // every tenant again.
                    if let Some(idle) = &self.idle {
                        idle.forget();
                    }
                }
                Some(any)
            }
            Err(e) => {
                tracing::warn!(error = %crate::error::chain(&e), "cannot probe the run queue");
                None
            }
        }
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
        assert_eq!(short.heartbeat_every, Some(Duration::from_secs(1)));
        assert!(short.heartbeat_every(Some(Duration::from_secs(3))).is_err());
        assert!(short.heartbeat_every(Some(Duration::ZERO)).is_err());
        assert_eq!(short.heartbeat_every(None).unwrap().heartbeat_every, None);
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

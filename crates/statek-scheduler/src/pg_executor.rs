//! The default [`TenantExecutor`]: statek's PostgreSQL run queue and a user
//! [`RunHandler`], which sees each claimed run as a [`Run`].

use statek_store_pg::RunQueueError;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use statek_core::lease::{run_under_lease, Heartbeat, LeaseState};
use statek_core::{
    claim_and_run, BatchSlot, ExecutedRun, Run, RunHandler, RunNotifications, RunPermit, RunResult,
    SlotBatch, SlotStart, SlotTickets, SourceError, TenantExecutor, TenantTickOutcome, Unclaimed,
};
use statek_policy::{CostFairness, SchedulerShardId, TenantId};
use statek_store_pg::{
    ClaimOutcome, ClaimedRun, FinishAs, FinishOutcome, FinishRun, PgStore, RunLease, StoreError,
};
use tokio_util::sync::CancellationToken;

use crate::executor_options::ExecutorOptions;
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
    RECORDS_PER_FLUSH_WAITING * options.completion_batch()
}

/// Expired runs handled per expiry pass.
const EXPIRY_PASS_LIMIT: u32 = 100;

/// [`TenantExecutor`] on statek's PostgreSQL run queue: claims the tenant's
/// highest-priority, oldest claimable run (skipping locked ones) within the
/// tenant's limits (a capped or rate-limited tenant's slot is
/// [`TenantTickOutcome::Limited`]), runs the handler with
/// automatic heartbeats, then completes or fails the run under its fencing
/// token.
///
/// Cost mode (migration V19): the batches of a cost shard are claimed
/// through `statek.claim_cost_slots`, which keeps the ledger in the
/// database ([`TenantTickOutcome::Debt`] slots; each attempt charged once
/// when it ends). [`TenantExecutor::execute_one`] claims outside the fair
/// order (`statek.claim_run`, no slot): such a run is neither credited
/// for nor charged (a scheduler never calls it for a cost-mode shard).
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
    /// The cost shard of the latest cost-mode batch: its schedule's
    /// ledger is read into [`crate::metrics::COST_BALANCE`] by
    /// [`TenantExecutor::maintain`].
    cost_shard: Arc<std::sync::Mutex<Option<SchedulerShardId>>>,
}

impl<H: RunHandler> PgRunQueueExecutor<H> {
    /// An executor on `store`'s run queue.
    pub fn new(store: PgStore, handler: H, options: ExecutorOptions) -> Self {
        let completions = Completions {
            commit: Arc::new(GroupCommit::new(
                options.completion_batch(),
                options.completion_linger(),
            )),
            room: Arc::new(Semaphore::new(room_size(&options))),
        };
        Self {
            store,
            handler,
            idle: options
                .idle_recheck_period()
                .map(|every| Arc::new(IdleSet::new(every))),
            options,
            completions,
            published_counts: Arc::default(),
            cost_shard: Arc::default(),
        }
    }

    /// Sets [`crate::metrics::COST_BALANCE`] of every tenant in the ledger
    /// of the latest cost shard's schedule (nothing before a cost-mode
    /// batch).
    async fn publish_cost_balances(&self) {
        let shard = self
            .cost_shard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(shard) = shard else {
            return;
        };
        match self.store.cost_balances(&shard).await {
            Ok(balances) => {
                for standing in balances {
                    crate::metrics::publish_cost_balance(&standing.tenant, standing.balance);
                }
            }
            Err(e) => tracing::warn!(
                shard = %shard,
                error = %crate::error::chain(&e),
                "cannot read the cost ledger"
            ),
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
    ) -> (RunResult, LeaseState, Instant) {
        let (store, lease) = (&self.store, self.options.lease_length());
        run_under_lease(
            self.handler.handle(run, cancel.clone()),
            held.run_id(),
            lease,
            self.options.heartbeat_period(),
            claim_sent,
            cancel,
            move || async move {
                match store.heartbeat_run(held, lease).await {
                    Ok(_) => Heartbeat::Extended,
                    Err(StoreError::RunQueue(RunQueueError::LeaseLost { .. })) => Heartbeat::Lost,
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
    /// ended (completion or failure, fenced by its token). `charged`: the
    /// cost parameters of the cost-mode slot that claimed it (the trigger
    /// `runs_charge_cost` charges it with its finish; counted here once
    /// that committed).
    async fn run_claimed(
        &self,
        run: Box<ClaimedRun>,
        shutdown: &CancellationToken,
        claim_sent: Instant,
        permit: Option<RunPermit>,
        recording: Recording,
        charged: Option<CostFairness>,
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
        let pending = |finish: FinishAs, cost: Option<u64>| PendingFinish {
            finish: match finish {
                FinishAs::Complete => FinishRun::complete(held),
                FinishAs::Fail { error, retry_after } => FinishRun::fail(held, error, retry_after),
            }
            .with_cost(cost),
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
        // The attempt's cost goes with its finish, in the same statement,
        // and is counted once that committed.
        let (cost, clamped) = statek_core::charged_cost(&result, statek_core::MAX_RUN_COST);
        let count_cost = |recorded: &Result<FinishOutcome, StoreError>| {
            if matches!(
                recorded,
                Ok(FinishOutcome::Completed
                    | FinishOutcome::Retrying { .. }
                    | FinishOutcome::Failed
                    | FinishOutcome::AlreadyRecorded)
            ) {
                crate::metrics::count_recorded_cost(tenant, cost, clamped);
                if let Some(charged) = &charged {
                    crate::metrics::count_cost_charge(tenant, charged, cost);
                }
            }
        };
        match result {
            Ok(_) => {
                let recorded = self
                    .record(pending(FinishAs::Complete, cost), recording)
                    .await;
                count_cost(&recorded);
                match recorded {
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
                }
            }
            Err(error) => {
                let shutting_down = shutdown.is_cancelled();
                let retry_after = if shutting_down {
                    Duration::ZERO
                } else {
                    self.options.retry_after(run.attempt)
                };
                let failed = self
                    .record(
                        pending(
                            FinishAs::Fail {
                                error: error.to_string(),
                                retry_after,
                            },
                            cost,
                        ),
                        recording,
                    )
                    .await;
                count_cost(&failed);
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
        let run = match self
            .store
            .claim_run(tenant, self.options.lease_length())
            .await?
        {
            ClaimOutcome::Claimed(run) => run,
            ClaimOutcome::Idle => return Ok(TenantTickOutcome::Idle),
            ClaimOutcome::Limited => return Ok(TenantTickOutcome::Limited),
            // Contended, or any answer without a run.
            _ => return Ok(TenantTickOutcome::Contended),
        };
        self.run_claimed(run, shutdown, claim_sent, None, Recording::Direct, None)
            .await
    }

    async fn execute_batch<'a>(
        &'a self,
        batch: SlotBatch<'a, StoreError>,
        tickets: SlotTickets<'a, StoreError>,
    ) {
        let lease = self.options.lease_length();
        let shard = batch.shard().to_string();
        if batch.cost_fairness().is_some() {
            let mut kept = self.cost_shard.lock().unwrap_or_else(|p| p.into_inner());
            if kept.as_ref() != Some(batch.shard()) {
                *kept = Some(batch.shard().clone());
            }
        }
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
            tickets,
            StoreError::is_retryable,
            |slots: &'a [BatchSlot], max_runs: usize| {
                async move {
                    loop {
                        let claim = {
                            let mut kept = pending.lock().unwrap_or_else(|p| p.into_inner());
                            match kept.as_ref() {
                                Some(claim) if claim.is_for(slots, max_runs) => Arc::clone(claim),
                                _ => {
                                    let claim = Arc::new(plan_claim(
                                        self.idle.as_deref(),
                                        &batch,
                                        slots,
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
                                .increment(claim.len as u64);
                            return Ok(vec![SlotStart::Unclaimed {
                                outcome: Unclaimed::IdleKnown,
                                slots: claim.len,
                            }]);
                        };
                        let claim_sent = Instant::now();
                        metrics::counter!(crate::metrics::CLAIM_STATEMENTS_TOTAL, "shard" => shard.clone())
                            .increment(1);
                        let claims = self.store.claim_slots(request).await?;
                        *pending.lock().unwrap_or_else(|p| p.into_inner()) = None;
                        let (starts, known_idle) = merge_claims(self.idle.as_deref(), &claim, slots, claims, claim_sent);
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
                self.run_claimed(
                    run,
                    batch.cancel(),
                    claim_sent,
                    permit,
                    Recording::Grouped,
                    batch.cost_fairness().copied(),
                )
                .await
            },
        )
        .await;
    }

    fn is_retryable(error: &StoreError) -> bool {
        error.is_retryable()
    }

    /// The database keeps cost mode's ledger (migration V19): a batch of a
    /// cost shard is claimed through `statek.claim_cost_slots`, which
    /// decides debt slots, and each attempt it claims is charged once by
    /// the statement that ends it (docs/guarantees.md, "Cost mode: the
    /// bound").
    fn enforces_cost_fairness(&self) -> bool {
        true
    }

    async fn maintain(&self) {
        self.publish_run_counts().await;
        self.publish_cost_balances().await;
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

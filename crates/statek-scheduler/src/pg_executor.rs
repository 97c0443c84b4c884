//! The default [`TenantExecutor`]: statek's PostgreSQL run queue and a user
//! [`RunHandler`].

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use statek_policy::TenantId;
use statek_store_pg::{ClaimOutcome, ClaimedRun, FailOutcome, PgStore, StoreError};
use tokio_util::sync::CancellationToken;

use crate::executor::{ExecutedRun, TenantExecutor, TenantTickOutcome};
use crate::lease::{run_under_lease, Heartbeat, LeaseState};
use crate::SchedulerError;

fn run_outcome(tenant: &TenantId, outcome: &'static str) {
    metrics::counter!(
        crate::metrics::RUN_OUTCOMES_TOTAL,
        "tenant" => tenant.to_string(),
        "outcome" => outcome
    )
    .increment(1);
}

/// Expired runs handled per expiry pass.
const EXPIRY_PASS_LIMIT: u32 = 100;

/// A handler failure: the run is retried after a backoff while attempts
/// remain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RunError {
    message: String,
}

impl RunError {
    /// A failure with a message (stored as the run's `last_error`).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// User code that executes one claimed run.
///
/// `cancel` fires when the run's lease is lost (a heartbeat found another
/// owner) or on shutdown; a handler should stop promptly then. Heartbeats
/// run automatically while the handler runs.
pub trait RunHandler: Send + Sync {
    /// Executes the run.
    fn handle(
        &self,
        run: &ClaimedRun,
        cancel: CancellationToken,
    ) -> impl Future<Output = Result<(), RunError>> + Send;
}

/// Lease and retry settings of [`PgRunQueueExecutor`].
///
/// Defaults: lease 30 s, heartbeat every lease/3, retry backoff 1 s doubling
/// per attempt up to 5 minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutorOptions {
    pub(crate) lease: Duration,
    pub(crate) heartbeat_every: Option<Duration>,
    retry_initial: Duration,
    retry_max: Duration,
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            heartbeat_every: Some(Duration::from_secs(10)),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
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

/// [`TenantExecutor`] on statek's PostgreSQL run queue: claims the oldest
/// claimable run of the tenant (skipping locked ones), runs the handler with
/// automatic heartbeats, then completes or fails the run under its fencing
/// token.
#[derive(Debug, Clone)]
pub struct PgRunQueueExecutor<H> {
    store: PgStore,
    handler: H,
    options: ExecutorOptions,
}

impl<H: RunHandler> PgRunQueueExecutor<H> {
    /// An executor on `store`'s run queue.
    pub fn new(store: PgStore, handler: H, options: ExecutorOptions) -> Self {
        Self {
            store,
            handler,
            options,
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
        run: &ClaimedRun,
        cancel: &CancellationToken,
        claim_sent: Instant,
    ) -> (Result<(), RunError>, LeaseState) {
        let (store, held, lease) = (&self.store, &run.lease, self.options.lease);
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
            ClaimOutcome::Contended => return Ok(TenantTickOutcome::Contended),
        };
        let executed = ExecutedRun {
            run_id: run.lease.run_id(),
            attempt: run.attempt,
            available_at: run.available_at,
            claimed_at: run.claimed_at,
        };
        let cancel = shutdown.child_token();
        let (result, lease_state) = self.run_with_heartbeats(&run, &cancel, claim_sent).await;
        if lease_state == LeaseState::LostOnServer {
            run_outcome(tenant, "lease_lost");
            return Ok(TenantTickOutcome::ExecutionFailed {
                run: executed,
                error: "lease lost while the handler ran".into(),
            });
        }
        // Expired locally: the token may still hold (nobody re-claimed), so
        // the outcome is still recorded under it; the store says if not.
        match result {
            Ok(()) => match self.store.complete_run(&run.lease).await {
                Ok(()) => {
                    run_outcome(tenant, "completed");
                    Ok(TenantTickOutcome::Executed(executed))
                }
                Err(StoreError::LeaseLost { .. }) => {
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
                    .store
                    .fail_run(&run.lease, &error.to_string(), retry_after)
                    .await;
                match failed {
                    Ok(_) if shutting_down => {
                        run_outcome(tenant, "cancelled");
                        Ok(TenantTickOutcome::Cancelled)
                    }
                    Ok(outcome) => {
                        run_outcome(
                            tenant,
                            match outcome {
                                FailOutcome::Retrying { .. } => "retrying",
                                FailOutcome::Failed => "failed",
                            },
                        );
                        Ok(TenantTickOutcome::ExecutionFailed {
                            run: executed,
                            error: error.to_string(),
                        })
                    }
                    Err(StoreError::LeaseLost { .. }) => {
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

    fn is_retryable(error: &StoreError) -> bool {
        error.is_retryable()
    }

    async fn maintain(&self) {
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

    async fn has_claimable_work(&self, tenants: &[TenantId]) -> Option<bool> {
        match self.store.any_claimable_runs(tenants).await {
            Ok(any) => Some(any),
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

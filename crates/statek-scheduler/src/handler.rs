//! What user code sees: [`RunHandler`] executes one claimed [`Run`] and
//! fails with a [`RunError`]. The same handler runs on every executor
//! statek ships ([`crate::PgRunQueueExecutor`], [`crate::InMemoryExecutor`]),
//! so a production handler can be unit-tested without PostgreSQL.

use std::future::Future;
use std::time::SystemTime;

use statek_policy::TenantId;
use statek_store_pg::ClaimedRun;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A claimed run as its [`RunHandler`] sees it, whichever executor claimed
/// it.
///
/// [`crate::PgRunQueueExecutor`] builds it from the store's
/// [`ClaimedRun`] (database times; the fencing token stays with the
/// executor, which heartbeats, completes and fails the run under it);
/// [`crate::InMemoryExecutor`] from its in-process queue (wall-clock
/// times derived from tokio's clock, so a test under
/// `tokio::time::pause` sees consistent, advancing times).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Run {
    /// The run.
    pub run_id: Uuid,
    /// The tenant it belongs to.
    pub tenant: TenantId,
    /// The payload given at enqueue.
    pub payload: Vec<u8>,
    /// 1 on the first execution, raised by every claim.
    pub attempt: u32,
    /// Executions allowed in total.
    pub max_attempts: u32,
    /// When it was enqueued.
    pub enqueued_at: SystemTime,
    /// From when it was claimable.
    pub available_at: SystemTime,
    /// When this claim happened.
    pub claimed_at: SystemTime,
    /// When the lease expires unless extended by a heartbeat.
    pub lease_expires_at: SystemTime,
}

impl Run {
    /// A run as a handler sees it. Executors build it; a test of a handler
    /// may build one directly.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        run_id: Uuid,
        tenant: TenantId,
        payload: Vec<u8>,
        attempt: u32,
        max_attempts: u32,
        enqueued_at: SystemTime,
        available_at: SystemTime,
        claimed_at: SystemTime,
        lease_expires_at: SystemTime,
    ) -> Self {
        Self {
            run_id,
            tenant,
            payload,
            attempt,
            max_attempts,
            enqueued_at,
            available_at,
            claimed_at,
            lease_expires_at,
        }
    }
}

impl From<ClaimedRun> for Run {
    fn from(claimed: ClaimedRun) -> Self {
        Self {
            run_id: claimed.lease.run_id(),
            tenant: claimed.tenant,
            payload: claimed.payload,
            attempt: claimed.attempt,
            max_attempts: claimed.max_attempts,
            enqueued_at: claimed.enqueued_at,
            available_at: claimed.available_at,
            claimed_at: claimed.claimed_at,
            lease_expires_at: claimed.lease_expires_at,
        }
    }
}

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

/// User code that executes one claimed run, on any of statek's executors.
///
/// `cancel` fires when the run's lease is lost (a heartbeat found another
/// owner) or on shutdown; a handler should stop promptly then. Heartbeats
/// run automatically while the handler runs. Any
/// `Fn(Run, CancellationToken) -> Fut` closure with
/// `Fut: Future<Output = Result<(), RunError>> + Send` is a handler.
pub trait RunHandler: Send + Sync {
    /// Executes the run.
    fn handle(
        &self,
        run: &Run,
        cancel: CancellationToken,
    ) -> impl Future<Output = Result<(), RunError>> + Send;
}

impl<F, Fut> RunHandler for F
where
    F: Fn(Run, CancellationToken) -> Fut + Send + Sync,
    Fut: Future<Output = Result<(), RunError>> + Send,
{
    fn handle(
        &self,
        run: &Run,
        cancel: CancellationToken,
    ) -> impl Future<Output = Result<(), RunError>> + Send {
        self(run.clone(), cancel)
    }
}

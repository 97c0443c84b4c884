//! What user code sees: [`RunHandler`] executes one claimed [`Run`] and
//! fails with a [`RunError`]. The same handler runs on every executor
//! statek ships (statek-scheduler's `PgRunQueueExecutor` and
//! `InMemoryExecutor`), and a crate of handlers needs only this crate, so
//! a production handler can be unit-tested without PostgreSQL.

use std::future::Future;
use std::time::SystemTime;

use statek_policy::TenantId;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A claimed run as its [`RunHandler`] sees it, whichever executor claimed
/// it.
///
/// statek-scheduler's `PgRunQueueExecutor` builds it from the store's
/// claimed run (database times; the fencing token stays with the
/// executor, which heartbeats, completes and fails the run under it);
/// `InMemoryExecutor` from its in-process queue (wall-clock
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn run(payload: &[u8]) -> Run {
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        Run::new(
            Uuid::nil(),
            TenantId::try_from("tenant-a").unwrap_or_else(|e| panic!("{e}")),
            payload.to_vec(),
            1,
            3,
            at,
            at,
            at,
            at + Duration::from_secs(30),
        )
    }

    /// A handler tested as a user would, with no executor and no database:
    /// a closure is a handler, and its error is the run's `last_error`.
    #[tokio::test]
    async fn a_closure_is_a_handler_and_its_error_keeps_its_message() {
        let handler = |run: Run, _cancel: CancellationToken| async move {
            if run.payload.is_empty() {
                Err(RunError::new(format!("run {} has no payload", run.run_id)))
            } else {
                Ok(())
            }
        };
        let cancel = CancellationToken::new();
        assert_eq!(handler.handle(&run(b"x"), cancel.clone()).await, Ok(()));
        let error = handler.handle(&run(b""), cancel).await;
        assert_eq!(
            error.map_err(|e| e.to_string()),
            Err(format!("run {} has no payload", Uuid::nil()))
        );
    }
}

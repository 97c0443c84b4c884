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

/// The largest cost an attempt is charged: 2^40 units, the largest value
/// of any cost parameter of a policy
/// ([`MAX_COST_PARAMETER`](statek_policy::MAX_COST_PARAMETER)). A larger
/// reported cost is recorded as this much (and counted in the metric
/// `statek_run_cost_clamped_total`).
pub const MAX_RUN_COST: u64 = statek_policy::MAX_COST_PARAMETER;

/// What a handler's successful attempt reports: its cost, if it knows one.
///
/// A cost is in whatever unit the handlers of a platform agree on (tokens,
/// CPU-milliseconds, cents), an integer of `0..=`[`MAX_RUN_COST`] (a
/// larger one is recorded as [`MAX_RUN_COST`]). The executors record it
/// with the attempt's finish, in the same statement; the PostgreSQL run
/// queue keeps it in the attempt's claim evidence (`statek.run_attempts`,
/// column `cost`). `None`: the attempt reported none.
///
/// ```
/// use statek_core::Completed;
/// assert_eq!(Completed::new().cost(), None);
/// assert_eq!(Completed::with_cost(1_250).cost(), Some(1_250));
/// assert_eq!(Completed::from(()), Completed::new());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Completed {
    cost: Option<u64>,
}

impl Completed {
    /// A success that reports no cost.
    #[must_use]
    pub const fn new() -> Self {
        Self { cost: None }
    }

    /// A success that cost `cost` units.
    #[must_use]
    pub const fn with_cost(cost: u64) -> Self {
        Self { cost: Some(cost) }
    }

    /// The reported cost, as reported (not yet clamped to
    /// [`MAX_RUN_COST`]).
    #[must_use]
    pub const fn cost(&self) -> Option<u64> {
        self.cost
    }
}

/// `Ok(())` from a closure handler: a success without a cost.
impl From<()> for Completed {
    fn from((): ()) -> Self {
        Self::new()
    }
}

/// What a [`RunHandler`] returns.
pub type RunResult = Result<Completed, RunError>;

/// A handler failure: the run is retried after a backoff while attempts
/// remain. It may carry the failed attempt's cost
/// ([`with_cost`](Self::with_cost)), recorded as a success's is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RunError {
    message: String,
    cost: Option<u64>,
}

impl RunError {
    /// A failure with a message (stored as the run's `last_error`).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            cost: None,
        }
    }

    /// The same failure, having cost `cost` units (see [`Completed`]).
    #[must_use]
    pub fn with_cost(mut self, cost: u64) -> Self {
        self.cost = Some(cost);
        self
    }

    /// The failed attempt's reported cost, if any.
    #[must_use]
    pub fn cost(&self) -> Option<u64> {
        self.cost
    }
}

/// The cost an attempt that ended with `result` is recorded with: the
/// reported cost, at most `max_cost`; `None` when it reported none. The
/// second value says whether the report was above `max_cost` (counted in
/// `statek_run_cost_clamped_total`).
///
/// ```
/// use statek_core::{charged_cost, Completed, RunError};
/// assert_eq!(charged_cost(&Ok(Completed::with_cost(7)), 40), (Some(7), false));
/// assert_eq!(charged_cost(&Err(RunError::new("x").with_cost(90)), 40), (Some(40), true));
/// assert_eq!(charged_cost(&Ok(Completed::new()), 40), (None, false));
/// ```
#[must_use]
pub fn charged_cost(result: &RunResult, max_cost: u64) -> (Option<u64>, bool) {
    let reported = match result {
        Ok(completed) => completed.cost(),
        Err(error) => error.cost(),
    };
    match reported {
        Some(cost) if cost > max_cost => (Some(max_cost), true),
        other => (other, false),
    }
}

/// User code that executes one claimed run, on any of statek's executors.
///
/// `cancel` fires when the run's lease is lost (a heartbeat found another
/// owner) or on shutdown; a handler should stop promptly then. Heartbeats
/// run automatically while the handler runs. The result may carry the
/// attempt's cost ([`Completed::with_cost`], [`RunError::with_cost`]).
/// Any `Fn(Run, CancellationToken) -> Fut` closure with
/// `Fut: Future<Output = Result<T, RunError>> + Send` and
/// `T: Into<Completed>` (so `Ok(())` as well as `Ok(Completed::with_cost(n))`)
/// is a handler; a closure that never succeeds names `T` itself
/// (`Err::<(), _>(RunError::new("…"))`).
///
/// ```
/// use statek_core::{Completed, Run, RunHandler, RunResult};
/// use tokio_util::sync::CancellationToken;
///
/// struct Summarise;
///
/// impl RunHandler for Summarise {
///     async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
///         let tokens = run.payload.len() as u64; // whatever the work used
///         Ok(Completed::with_cost(tokens))
///     }
/// }
/// ```
pub trait RunHandler: Send + Sync {
    /// Executes the run.
    fn handle(
        &self,
        run: &Run,
        cancel: CancellationToken,
    ) -> impl Future<Output = RunResult> + Send;
}

impl<F, Fut, T> RunHandler for F
where
    F: Fn(Run, CancellationToken) -> Fut + Send + Sync,
    Fut: Future<Output = Result<T, RunError>> + Send,
    T: Into<Completed>,
{
    fn handle(
        &self,
        run: &Run,
        cancel: CancellationToken,
    ) -> impl Future<Output = RunResult> + Send {
        let future = self(run.clone(), cancel);
        async move { future.await.map(Into::into) }
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
        assert_eq!(
            handler.handle(&run(b"x"), cancel.clone()).await,
            Ok(Completed::new())
        );
        let error = handler.handle(&run(b""), cancel).await;
        assert_eq!(
            error.map_err(|e| e.to_string()),
            Err(format!("run {} has no payload", Uuid::nil()))
        );
    }

    /// A closure reports its attempt's cost on success and on failure;
    /// the executors clamp it to the largest they charge.
    #[tokio::test]
    async fn a_closure_reports_its_cost_and_the_charge_is_clamped() {
        let handler = |run: Run, _cancel: CancellationToken| async move {
            let cost = run.payload.len() as u64;
            if run.payload.starts_with(b"!") {
                Err(RunError::new("refused").with_cost(cost))
            } else {
                Ok(Completed::with_cost(cost))
            }
        };
        let cancel = CancellationToken::new();
        let done = handler.handle(&run(b"abc"), cancel.clone()).await;
        assert_eq!(done, Ok(Completed::with_cost(3)));
        assert_eq!(charged_cost(&done, 2), (Some(2), true));
        assert_eq!(charged_cost(&done, 3), (Some(3), false));
        let failed = handler.handle(&run(b"!x"), cancel).await;
        assert_eq!(failed.as_ref().map_err(RunError::cost), Err(Some(2)));
        assert_eq!(charged_cost(&failed, MAX_RUN_COST), (Some(2), false));
        assert_eq!(
            charged_cost(&Ok(Completed::with_cost(u64::MAX)), MAX_RUN_COST),
            (Some(1 << 40), true)
        );
    }
}

//! Recording finished runs until the record commits: the retry rule of the
//! PostgreSQL run-queue executor's completions and failures.
//!
//! A run whose handler finished is recorded (`PgStore::finish_runs`,
//! fenced by its lease token, idempotent: a retry after a lost
//! acknowledgement answers `AlreadyRecorded`) and retried with backoff
//! (50 ms doubling to 2 s; each attempt bounded by the store's response
//! timeout) for as long as the error is transient, however long that is,
//! until it commits. The database then decides each run alone: recorded,
//! or `LeaseLost` when its token no longer holds it (the lease expired and
//! the run was rescued or claimed again, or it was cancelled); the other
//! runs of the same flush are recorded all the same.
//!
//! Two things end the retries without a record:
//! - the run's handler token was cancelled (the Worker's shutdown grace
//!   ran out, or the caller's shutdown) *and* the time until which the
//!   queue may still hold its lease has passed: the run is claimable again
//!   and may execute again, as its lease allows. This bounds a shutdown
//!   during an outage by the grace plus one lease.
//! - a flush of many runs that fails non-retryably, or on a lock not
//!   granted within `lock_timeout` (55P03: a session holds one of its
//!   rows): each of its runs is then recorded alone, so one run's error or
//!   lock is that run's alone, and a run whose own record fails
//!   non-retryably returns that error (nothing silent).

use std::time::Duration;

use statek_store_pg::{FinishOutcome, FinishRun, PgStore, StoreError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// First pause after a failed attempt; doubled per attempt up to
/// [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// SQLSTATE 55P03: a lock was not granted within `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// A finished run waiting for its record: what to record, until when the
/// queue may hold its lease, and its handler's cancellation token.
#[derive(Debug, Clone)]
pub(crate) struct PendingFinish {
    pub(crate) finish: FinishRun,
    pub(crate) lease_held_until: Instant,
    pub(crate) cancel: CancellationToken,
}

impl PendingFinish {
    /// Whether to stop trying: shutting down and the lease has run out.
    fn may_give_up(&self) -> bool {
        self.cancel.is_cancelled() && Instant::now() >= self.lease_held_until
    }
}

/// What a flush did for one run.
#[derive(Debug, Clone)]
pub(crate) enum Recorded {
    /// The database's answer for the run.
    Outcome(FinishOutcome),
    /// The flush failed non-retryably: record this run alone.
    Alone,
    /// Not recorded: shutting down and the lease ran out during the
    /// retries (the last error's text).
    GaveUp(String),
}

/// Doubles `pause` up to [`MAX_PAUSE`].
fn next_pause(pause: Duration) -> Duration {
    (pause * 2).min(MAX_PAUSE)
}

/// Records `items` in flushes of one statement, retrying transient errors
/// (see the module docs); one [`Recorded`] per item, in order.
pub(crate) async fn flush_finished(store: &PgStore, items: Vec<PendingFinish>) -> Vec<Recorded> {
    let mut out: Vec<Option<Recorded>> = vec![None; items.len()];
    let mut open: Vec<usize> = (0..items.len()).collect();
    let mut pause = FIRST_PAUSE;
    while !open.is_empty() {
        let batch: Vec<FinishRun> = open.iter().map(|&i| items[i].finish.clone()).collect();
        match store.finish_runs(&batch).await {
            Ok(outcomes) => {
                for (&i, outcome) in open.iter().zip(outcomes) {
                    out[i] = Some(Recorded::Outcome(outcome));
                }
                break;
            }
            // One locked run (a session holding its row, 55P03 after
            // `lock_timeout`) must not hold back the others of its flush:
            // each is then recorded alone, by its own task, and only the
            // locked one waits.
            Err(e) if open.len() > 1 && e.sqlstate() == Some(LOCK_NOT_AVAILABLE) => {
                tracing::warn!(runs = open.len(), error = %crate::error::chain(&e), "a row of a flush of finished runs is locked; recording each alone");
                break;
            }
            Err(e) if e.is_retryable() => {
                let error = crate::error::chain(&e).to_string();
                open.retain(|&i| {
                    let give_up = items[i].may_give_up();
                    if give_up {
                        out[i] = Some(Recorded::GaveUp(error.clone()));
                    }
                    !give_up
                });
                if open.is_empty() {
                    break;
                }
                tracing::warn!(
                    runs = open.len(),
                    error,
                    pause_ms = pause.as_millis() as u64,
                    "recording finished runs failed transiently; retrying"
                );
                tokio::time::sleep(pause).await;
                pause = next_pause(pause);
            }
            Err(e) => {
                tracing::warn!(runs = open.len(), error = %crate::error::chain(&e), "recording finished runs failed; recording each alone");
                break;
            }
        }
    }
    out.into_iter()
        .map(|recorded| recorded.unwrap_or(Recorded::Alone))
        .collect()
}

/// Records one run alone, retrying transient errors (see the module
/// docs): its outcome, `None` when given up.
///
/// # Errors
/// The first non-retryable error of the run's own record.
pub(crate) async fn record_alone(
    store: &PgStore,
    item: &PendingFinish,
) -> Result<Option<FinishOutcome>, StoreError> {
    let mut pause = FIRST_PAUSE;
    loop {
        match store.finish_runs(std::slice::from_ref(&item.finish)).await {
            Ok(outcomes) => {
                return match outcomes.as_slice() {
                    [outcome] => Ok(Some(*outcome)),
                    _ => Err(StoreError::CorruptData {
                        what: "run finish",
                        detail: format!("1 finished run, {} answers", outcomes.len()),
                    }),
                };
            }
            Err(e) if e.is_retryable() => {
                if item.may_give_up() {
                    tracing::error!(run_id = %item.finish.lease().run_id(), error = %crate::error::chain(&e), "finished run not recorded before its lease ran out at shutdown; it may execute again");
                    return Ok(None);
                }
                tracing::warn!(run_id = %item.finish.lease().run_id(), error = %crate::error::chain(&e), pause_ms = pause.as_millis() as u64, "recording a finished run failed transiently; retrying");
                tokio::time::sleep(pause).await;
                pause = next_pause(pause);
            }
            Err(e) => return Err(e),
        }
    }
}

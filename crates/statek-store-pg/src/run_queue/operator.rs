//! The operator's view of runs: list (paged), look up, retry, and counts
//! per tenant and state (`statek runs list|cancel|retry`, the `statek_runs`
//! gauge).

use crate::RunQueueError;
use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use statek_policy::TenantId;
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Most runs one [`PgStore::list_runs`] page holds.
pub const MAX_LIST_LIMIT: u32 = 10_000;

/// The columns of a listed run.
macro_rules! listed_columns {
    () => {
        "run_id, tenant_id, queue_seq, state, priority, attempt, max_attempts, enqueued_at, \
         available_at, finished_at, last_error"
    };
}

/// Newest first; `$2` the state or NULL, `$3` the cursor or NULL, `$4`
/// the page size plus one (to know whether another page follows).
const LIST_RUNS: &str = concat!(
    "SELECT ",
    listed_columns!(),
    " FROM statek.runs
    WHERE ($2::text IS NULL OR state = $2) AND ($3::bigint IS NULL OR queue_seq < $3)
      AND ($1::text IS NULL)
    ORDER BY queue_seq DESC
    LIMIT $4"
);

/// [`LIST_RUNS`] of one tenant `$1` (its own statement: its own index).
const LIST_TENANT_RUNS: &str = concat!(
    "SELECT ",
    listed_columns!(),
    " FROM statek.runs
    WHERE tenant_id = $1
      AND ($2::text IS NULL OR state = $2) AND ($3::bigint IS NULL OR queue_seq < $3)
    ORDER BY queue_seq DESC
    LIMIT $4"
);

const SELECT_RUN: &str = concat!(
    "SELECT ",
    listed_columns!(),
    " FROM statek.runs WHERE run_id = $1"
);

/// A failed or cancelled run becomes available now, with its attempts
/// so far kept (the claim history numbers attempts for good) and, when it
/// had used them all, as many again as it was allowed (at most 1000).
/// Through `statek.retry_run` (migration V13), `$2` the most attempts a
/// run may have.
const RETRY_RUN: &str = concat!(
    "SELECT ",
    listed_columns!(),
    " FROM statek.retry_run($1, $2)"
);

const COUNT_RUNS: &str = "
    SELECT tenant_id, state, count(*) AS runs
    FROM statek.runs GROUP BY tenant_id, state ORDER BY tenant_id, state";

const OLDEST_FINISHED: &str = "
    SELECT min(finished_at) AS oldest FROM statek.runs
    WHERE state IN ('completed', 'failed', 'cancelled')";

/// A run's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum RunState {
    /// Waiting to be claimed (maybe not before its available time).
    Available,
    /// Claimed under a lease (maybe an expired one).
    Running,
    /// Its handler succeeded.
    Completed,
    /// Its last allowed attempt failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl RunState {
    /// Every state, live ones first.
    pub const ALL: [RunState; 5] = [
        RunState::Available,
        RunState::Running,
        RunState::Completed,
        RunState::Failed,
        RunState::Cancelled,
    ];

    /// The stored name: `available`, `running`, `completed`, `failed`,
    /// `cancelled`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunState::Available => "available",
            RunState::Running => "running",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        }
    }

    /// Completed, failed or cancelled.
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            RunState::Completed | RunState::Failed | RunState::Cancelled
        )
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunState {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self, StoreError> {
        RunState::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| {
                StoreError::InvalidArgument(format!(
                    "unknown run state {:?}: expected available, running, completed, failed or cancelled",
                    text.chars().take(40).collect::<String>()
                ))
            })
    }
}

/// One run as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunListing {
    /// The run.
    pub run_id: Uuid,
    /// Its tenant.
    pub tenant: TenantId,
    /// The per-insert sequence: the paging cursor of [`PgStore::list_runs`].
    pub queue_seq: u64,
    /// Its state.
    pub state: RunState,
    /// Its priority.
    pub priority: i32,
    /// Claims so far.
    pub attempt: u32,
    /// Executions allowed.
    pub max_attempts: u32,
    /// Database time of the enqueue.
    pub enqueued_at: SystemTime,
    /// Database time from which it is (or was) claimable.
    pub available_at: SystemTime,
    /// Database time it finished, if it did.
    pub finished_at: Option<SystemTime>,
    /// The last failure's text.
    pub last_error: Option<String>,
}

/// One page of [`PgStore::list_runs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPage {
    /// Newest first.
    pub runs: Vec<RunListing>,
    /// The cursor of the next page (`after`), `None` on the last page.
    pub next: Option<u64>,
}

/// Runs of one tenant in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCounts {
    /// The tenant.
    pub tenant: TenantId,
    /// The state.
    pub state: RunState,
    /// How many.
    pub runs: u64,
}

fn corrupt(detail: String) -> StoreError {
    StoreError::corrupt("run", detail)
}

fn tenant_of(text: &str) -> Result<TenantId, StoreError> {
    TenantId::try_from(text).map_err(|e| corrupt(format!("tenant id: {e}")))
}

fn state_of(text: &str) -> Result<RunState, StoreError> {
    text.parse().map_err(|_| corrupt(format!("state {text:?}")))
}

fn listing(row: &tokio_postgres::Row) -> Result<RunListing, StoreError> {
    let tenant: String = row.try_get("tenant_id")?;
    let state: String = row.try_get("state")?;
    let seq: i64 = row.try_get("queue_seq")?;
    let attempt: i32 = row.try_get("attempt")?;
    let max_attempts: i32 = row.try_get("max_attempts")?;
    Ok(RunListing {
        run_id: row.try_get("run_id")?,
        tenant: tenant_of(&tenant)?,
        queue_seq: u64::try_from(seq).map_err(|_| corrupt(format!("queue_seq {seq}")))?,
        state: state_of(&state)?,
        priority: row.try_get("priority")?,
        attempt: u32::try_from(attempt).map_err(|_| corrupt(format!("attempt {attempt}")))?,
        max_attempts: u32::try_from(max_attempts)
            .map_err(|_| corrupt(format!("max_attempts {max_attempts}")))?,
        enqueued_at: row.try_get("enqueued_at")?,
        available_at: row.try_get("available_at")?,
        finished_at: row.try_get("finished_at")?,
        last_error: row.try_get("last_error")?,
    })
}

impl PgStore {
    /// One page of runs, newest first (by per-insert sequence): of
    /// `tenant` or all tenants, in `state` or any, at most `limit`
    /// (1..=[`MAX_LIST_LIMIT`]), after the cursor `after` (the
    /// [`RunPage::next`] of the page before; `None` for the first).
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for a limit out of range or a
    /// cursor above `i64::MAX`; connection and server errors.
    pub async fn list_runs(
        &self,
        tenant: Option<&TenantId>,
        state: Option<RunState>,
        limit: u32,
        after: Option<u64>,
    ) -> Result<RunPage, StoreError> {
        if !(1..=MAX_LIST_LIMIT).contains(&limit) {
            return Err(StoreError::InvalidArgument(format!(
                "limit must be 1..={MAX_LIST_LIMIT}, got {limit}"
            )));
        }
        let after = after
            .map(|a| {
                i64::try_from(a).map_err(|_| {
                    StoreError::InvalidArgument(format!("cursor {a} exceeds i64::MAX"))
                })
            })
            .transpose()?;
        let tenant_text = tenant.map(TenantId::as_str);
        let state_text = state.map(|s| s.as_str());
        let fetch = i64::from(limit) + 1;
        let sql = if tenant.is_some() {
            LIST_TENANT_RUNS
        } else {
            LIST_RUNS
        };
        let rows = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query(
                        sql,
                        &[
                            (&tenant_text, Type::TEXT),
                            (&state_text, Type::TEXT),
                            (&after, Type::INT8),
                            (&fetch, Type::INT8),
                        ],
                    )
                    .await?)
            })
            .await?;
        let mut runs = rows.iter().map(listing).collect::<Result<Vec<_>, _>>()?;
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let next = if runs.len() > limit {
            runs.truncate(limit);
            runs.last().map(|r| r.queue_seq)
        } else {
            None
        };
        Ok(RunPage { runs, next })
    }

    /// One run, `None` for an unknown (or pruned) id.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn run(&self, run_id: Uuid) -> Result<Option<RunListing>, StoreError> {
        let row = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db.query_opt(SELECT_RUN, &[(&run_id, Type::UUID)]).await?)
            })
            .await?;
        row.as_ref().map(listing).transpose()
    }

    /// Makes a `failed` or `cancelled` run `available` again now (which
    /// wakes listening workers). Its attempt count is kept; a run that had
    /// used all its attempts is allowed as many again (at most
    /// [`statek_core::MAX_ATTEMPTS_LIMIT`] in total).
    ///
    /// # Errors
    /// [`RunQueueError::RunNotFound`](crate::RunQueueError::RunNotFound); [`RunQueueError::RunStateConflict`](crate::RunQueueError::RunStateConflict) for a
    /// run that is live or completed, or has used 1000 attempts;
    /// connection and server errors.
    pub async fn retry_run(&self, run_id: Uuid) -> Result<RunListing, StoreError> {
        let limit = i32::try_from(statek_core::MAX_ATTEMPTS_LIMIT).unwrap_or(i32::MAX);
        let row = self
            .with_durable_write(async |db: &Db<'_>| {
                Ok(db
                    .query_opt(RETRY_RUN, &[(&run_id, Type::UUID), (&limit, Type::INT4)])
                    .await?)
            })
            .await?;
        if let Some(row) = row {
            return listing(&row);
        }
        match self.run(run_id).await? {
            None => Err(StoreError::RunQueue(RunQueueError::RunNotFound { run_id })),
            Some(run) => Err(StoreError::RunQueue(RunQueueError::RunStateConflict {
                run_id,
                state: run.state.to_string(),
                action: "retry",
                needs: "failed or cancelled, with fewer than 1000 attempts used",
            })),
        }
    }

    /// Runs per tenant and state (states without runs are left out), by
    /// tenant then state. Reads the whole run table: keep it small with
    /// [`PgStore::prune_finished_runs`].
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn count_runs(&self) -> Result<Vec<RunCounts>, StoreError> {
        let rows = self
            .with_response_timeout(async |db: &Db<'_>| Ok(db.query(COUNT_RUNS, &[]).await?))
            .await?;
        rows.iter()
            .map(|row| {
                let tenant: String = row.try_get("tenant_id")?;
                let state: String = row.try_get("state")?;
                let runs: i64 = row.try_get("runs")?;
                Ok(RunCounts {
                    tenant: tenant_of(&tenant)?,
                    state: state_of(&state)?,
                    runs: u64::try_from(runs).unwrap_or(0),
                })
            })
            .collect()
    }

    /// The finish time of the oldest finished run still kept (`None` when
    /// none is): the backlog of run retention.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn oldest_finished_run(&self) -> Result<Option<SystemTime>, StoreError> {
        self.with_response_timeout(async |db: &Db<'_>| {
            Ok(db
                .query_one(OLDEST_FINISHED, &[])
                .await?
                .try_get("oldest")?)
        })
        .await
    }
}

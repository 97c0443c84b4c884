//! Completion batching: many finished runs recorded in one statement.
//!
//! A worker that executes many runs at once finishes them many at once.
//! [`PgStore::finish_runs`] records up to [`MAX_FINISH_BATCH`] completions
//! and failures in ONE statement (one round trip, one implicit
//! transaction), with exactly the fencing of [`PgStore::complete_run`] and
//! [`PgStore::fail_run`]: a run changes only while its lease token still
//! holds it, and its attempt gets its finish time once, on the run row
//! that holds the attempt's claim (`claim_finished_at`, migration V13; a
//! claim made before V13 gets a failure's time on its claim row, a
//! completion's is the run's `finished_at`). Each run gets its own
//! [`FinishOutcome`], in input order: a lost lease fails that run alone,
//! the others still commit.
//!
//! **Idempotence.** A flush whose commit acknowledgement was lost (the
//! connection dropped, the response timed out) may be sent again with the
//! same input. Nothing is recorded twice: a run that the first attempt
//! finished is no longer held by its token, and its attempt already has a
//! finish time (`statek.run_attempt_finished_at`: the claim's, or the
//! run's when the run completed on that attempt), so the retry reports
//! [`FinishOutcome::AlreadyRecorded`] for it and changes nothing. The
//! answer relies on one fact, true of every statement that touches the
//! evidence: only the token holder's complete or fail gives an attempt
//! its finish time (a completed run is never claimed again) —
//! [`PgStore::complete_run`], [`PgStore::fail_run`] and this batch, each
//! for the claim of the token whose run it just finished. The claims
//! ([`PgStore::claim_run`], [`PgStore::claim_runs_for_slots`]) only insert
//! unfinished claims; the expiry rescue ([`PgStore::rescue_expired_run`])
//! and [`PgStore::cancel_run`] never touch the history, so a claim lost to
//! an expired lease or a cancellation stays unfinished and its token gets
//! [`FinishOutcome::LeaseLost`], on every attempt.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::run_queue::{failure_text, retry_secs};
use crate::statement::{Db, Param};
use crate::{PgStore, RunLease, StoreError};
use statek_core::{MAX_FINISH_BATCH, MAX_RUN_COST};

/// The kinds of `$3` of [`FINISH_RUNS`] (a drift between these and the
/// SQL answers states the kind cannot produce: [`StoreError::CorruptData`]).
const COMPLETE: &str = "complete";
const FAIL: &str = "fail";

/// `$1` run ids, `$2` lease tokens, `$3` kinds (`complete` or `fail`), `$4`
/// retry delays in seconds (0 for a completion), `$5` error texts (NULL
/// for a completion), `$6` costs (NULL: none reported; migration V18),
/// one element per finished run in input order
/// (`ord`, 1-based): one call of the SECURITY DEFINER function
/// `statek.finish_runs` (migration V11, which holds the statement; V12
/// leaves a completion's claim row alone), the only writer of attempt
/// finish times. Answers one row per input element, in input order: the
/// run's new state when this call finished it, else whether the attempt of
/// that token already has a finish time (a replay).
const FINISH_RUNS: &str = "
    SELECT * FROM statek.finish_runs($1::uuid[], $2::uuid[], $3::text[], $4::float8[],
                                     $5::text[], $6::bigint[])";

/// [`FINISH_RUNS`] without `$6`, for a finish whose attempts report no
/// cost: the five-argument form V18 keeps (it records none), so a
/// finish without costs works on a database not migrated to V18 yet.
const FINISH_RUNS_WITHOUT_COSTS: &str = "
    SELECT * FROM statek.finish_runs($1::uuid[], $2::uuid[], $3::text[], $4::float8[],
                                     $5::text[])";

/// How one finished run is recorded: completed, or failed (retried while
/// attempts remain). Named apart from [`FinishRun`], the run to finish,
/// which holds its lease and this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishAs {
    /// The run succeeded: `completed`.
    Complete,
    /// The execution failed: the run is available again `retry_after`
    /// from now (database clock, at most 366 days) while attempts remain,
    /// else `failed`. `error` is stored as the run's last error, each NUL
    /// replaced by U+FFFD and cut to at most 4 KiB on a character
    /// boundary, exactly as [`PgStore::fail_run`] stores it.
    Fail {
        /// The error text.
        error: String,
        /// The delay before the next attempt.
        retry_after: Duration,
    },
}

/// One finished run for [`PgStore::finish_runs`]: the lease its claim
/// issued and what to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishRun {
    lease: RunLease,
    finish: FinishAs,
    cost: Option<u64>,
}

impl FinishRun {
    /// The run of `lease` succeeded.
    pub fn complete(lease: RunLease) -> Self {
        Self {
            lease,
            finish: FinishAs::Complete,
            cost: None,
        }
    }

    /// The execution of `lease`'s run failed with `error`; retry after
    /// `retry_after` (see [`FinishAs::Fail`]; the limit is checked by
    /// [`PgStore::finish_runs`]).
    pub fn fail(lease: RunLease, error: impl Into<String>, retry_after: Duration) -> Self {
        Self {
            lease,
            finish: FinishAs::Fail {
                error: error.into(),
                retry_after,
            },
            cost: None,
        }
    }

    /// The same finish, recording that the attempt cost `cost` units
    /// (`0..=`[`MAX_RUN_COST`](statek_core::MAX_RUN_COST); `None`: it
    /// reported none), kept with the attempt's finish in
    /// `statek.run_attempts.cost` (migration V18). An executor clamps a
    /// handler's report first (`statek_core::charged_cost`).
    #[must_use]
    pub fn with_cost(mut self, cost: Option<u64>) -> Self {
        self.cost = cost;
        self
    }

    /// The cost recorded with the finish.
    pub fn cost(&self) -> Option<u64> {
        self.cost
    }

    /// The lease presented.
    pub fn lease(&self) -> &RunLease {
        &self.lease
    }

    /// What is recorded.
    pub fn finish(&self) -> &FinishAs {
        &self.finish
    }
}

/// What [`PgStore::finish_runs`] did with one finished run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FinishOutcome {
    /// A completion: the run is `completed` now.
    Completed,
    /// A failure with attempts left: the run is claimable again at this
    /// database time.
    Retrying {
        /// When it becomes available.
        available_at: SystemTime,
    },
    /// A failure of the run's last attempt: the run is `failed` now.
    Failed,
    /// Nothing changed: this very lease token's claim was already finished
    /// (by an earlier call, e.g. a retried flush whose first commit
    /// acknowledgement was lost). What that call recorded stands.
    AlreadyRecorded,
    /// Nothing changed: the token no longer holds the run (its lease
    /// expired and another worker claimed it, it was rescued by the expiry
    /// pass or cancelled, or the run does not exist), and its claim was
    /// not finished by this token. As [`RunQueueError::LeaseLost`](crate::RunQueueError::LeaseLost) of the
    /// single-run calls.
    LeaseLost,
}

impl PgStore {
    /// Records up to [`MAX_FINISH_BATCH`] finished runs (completions and
    /// failures, in any mix) in ONE statement: one round trip, one
    /// implicit transaction, under the response timeout.
    ///
    /// Each run is fenced exactly like [`PgStore::complete_run`] and
    /// [`PgStore::fail_run`]: it changes only while its lease token still
    /// holds it (`running` under that token), and that attempt gets its
    /// finish time once (a completion's on the run row, a failure's on
    /// its claim history row). Returns one
    /// [`FinishOutcome`] per input element, in input order. A lost lease is
    /// [`FinishOutcome::LeaseLost`] for that run alone; the others are
    /// recorded all the same.
    ///
    /// **Retries are safe.** Calling again with the same input after an
    /// error (a retryable one, or a lost acknowledgement) records nothing
    /// twice: each run the earlier call recorded answers
    /// [`FinishOutcome::AlreadyRecorded`], each run it did not record is
    /// recorded now. A retry racing a first attempt still in flight
    /// waits for its row locks and then answers as after it. The retry's outcome tells
    /// only that the earlier one committed, not which outcome it had
    /// (read the run for that).
    ///
    /// Empty input returns an empty vector without a round trip.
    ///
    /// # Errors
    /// - [`StoreError::InvalidArgument`]: more than [`MAX_FINISH_BATCH`]
    ///   runs, the same run twice (by run id, whatever the tokens), a
    ///   `retry_after` over 366 days, or a cost above
    ///   [`MAX_RUN_COST`](statek_core::MAX_RUN_COST). Nothing is sent.
    /// - [`StoreError::CorruptData`]: the answer does not match the input
    ///   (row count, order, run ids, a state the finish cannot produce).
    /// - [`MigrationError::Behind`](crate::MigrationError::Behind): an attempt reports a cost and the
    ///   database is not migrated to V18 (nothing was recorded).
    /// - connection and server errors ([`StoreError::is_retryable`] tells
    ///   whether the same call may be repeated; it always may be, see
    ///   above). On any error the call may or may not have committed.
    pub async fn finish_runs(&self, runs: &[FinishRun]) -> Result<Vec<FinishOutcome>, StoreError> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        if runs.len() > MAX_FINISH_BATCH {
            return Err(StoreError::InvalidArgument(format!(
                "{} finished runs, at most {MAX_FINISH_BATCH} per call",
                runs.len()
            )));
        }
        let mut first_at: HashMap<Uuid, usize> = HashMap::with_capacity(runs.len());
        let mut run_ids = Vec::with_capacity(runs.len());
        let mut tokens = Vec::with_capacity(runs.len());
        let mut kinds = Vec::with_capacity(runs.len());
        let mut retry = Vec::with_capacity(runs.len());
        let mut errors: Vec<Option<String>> = Vec::with_capacity(runs.len());
        let mut costs: Vec<Option<i64>> = Vec::with_capacity(runs.len());
        for (index, run) in runs.iter().enumerate() {
            let run_id = run.lease.run_id();
            if let Some(first) = first_at.insert(run_id, index) {
                return Err(StoreError::InvalidArgument(format!(
                    "run {run_id} is finished twice (at {first} and {index})"
                )));
            }
            run_ids.push(run_id);
            tokens.push(run.lease.token());
            costs.push(match run.cost {
                None => None,
                Some(cost) if cost <= MAX_RUN_COST => i64::try_from(cost).ok(),
                Some(cost) => {
                    return Err(StoreError::InvalidArgument(format!(
                        "finished run {index} ({run_id}): cost {cost} is above the largest \
                         recorded, {MAX_RUN_COST} (2^40)"
                    )))
                }
            });
            match &run.finish {
                FinishAs::Complete => {
                    kinds.push(COMPLETE);
                    retry.push(0.0_f64);
                    errors.push(None);
                }
                FinishAs::Fail { error, retry_after } => {
                    kinds.push(FAIL);
                    retry.push(retry_secs(*retry_after).map_err(|e| match e {
                        StoreError::InvalidArgument(why) => StoreError::InvalidArgument(format!(
                            "finished run {index} ({run_id}): {why}"
                        )),
                        other => other,
                    })?);
                    errors.push(Some(failure_text(error)));
                }
            }
        }
        let with_costs = costs.iter().any(Option::is_some);
        let rows = self
            .with_durable_write(async |db: &Db<'_>| {
                let params: [Param<'_>; 6] = [
                    (&run_ids, Type::UUID_ARRAY),
                    (&tokens, Type::UUID_ARRAY),
                    (&kinds, Type::TEXT_ARRAY),
                    (&retry, Type::FLOAT8_ARRAY),
                    (&errors, Type::TEXT_ARRAY),
                    (&costs, Type::INT8_ARRAY),
                ];
                Ok(if with_costs {
                    db.query(FINISH_RUNS, &params).await?
                } else {
                    db.query(FINISH_RUNS_WITHOUT_COSTS, &params[..5]).await?
                })
            })
            .await
            // No six-argument form: the database is older than V18.
            .map_err(|e| {
                if with_costs {
                    e.schema_behind(18, "recording an attempt's cost")
                } else {
                    e
                }
            })?;
        if rows.len() != runs.len() {
            return Err(StoreError::corrupt(
                "run finish",
                format!("{} finished runs, {} answers", runs.len(), rows.len()),
            ));
        }
        let mut out = Vec::with_capacity(runs.len());
        for (index, (run, row)) in runs.iter().zip(&rows).enumerate() {
            let ord: i64 = row.try_get("ord")?;
            let run_id: Uuid = row.try_get("run_id")?;
            if usize::try_from(ord).ok() != Some(index + 1) || run_id != run.lease.run_id() {
                return Err(StoreError::corrupt(
                    "run finish",
                    format!(
                        "finished run {index} ({}) answered as {ord} ({run_id})",
                        run.lease.run_id()
                    ),
                ));
            }
            let state: Option<String> = row.try_get("state")?;
            let outcome = match (&run.finish, state.as_deref()) {
                (_, None) if row.try_get::<_, bool>("already_recorded")? => {
                    FinishOutcome::AlreadyRecorded
                }
                (_, None) => FinishOutcome::LeaseLost,
                (FinishAs::Complete, Some("completed")) => FinishOutcome::Completed,
                (FinishAs::Fail { .. }, Some("available")) => FinishOutcome::Retrying {
                    available_at: row.try_get("available_at")?,
                },
                (FinishAs::Fail { .. }, Some("failed")) => FinishOutcome::Failed,
                (_, Some(other)) => {
                    return Err(StoreError::corrupt(
                        "run finish",
                        format!("run {run_id} finished as {other:?}"),
                    ))
                }
            };
            out.push(outcome);
        }
        Ok(out)
    }
}

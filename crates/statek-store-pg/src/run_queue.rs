//! The per-tenant run queue behind the default tenant-isolated executor.
//!
//! A claim looks at one tenant only and is one statement: the candidate is
//! chosen in a `MATERIALIZED` CTE with `FOR UPDATE SKIP LOCKED`, highest
//! priority first, then oldest by (available time, per-insert sequence),
//! and leased with a fresh token. A tenant's limits (`limits.rs`) are
//! checked inside the same statement; a tenant they hold back is
//! [`ClaimOutcome::Limited`].
//!
//! Runs may be enqueued in the caller's own transaction and many at a time
//! in one statement (`run_queue/enqueue.rs`); operators list, cancel and
//! retry them (`run_queue/operator.rs`).
//! Heartbeat, complete and fail succeed only while that token still matches
//! (fencing); otherwise they report [`RunQueueError::LeaseLost`](crate::RunQueueError::LeaseLost). An expired
//! lease makes the run claimable again, so execution is at-least-once.
//!
//! [`PgStore::claim_runs_for_slots`] claims for every slot of a reserved
//! batch in one statement (each slot still only from its own tenant), and
//! every claim, single or batch, is recorded with its lease token, claim
//! time and the slot's shard and sequence when it has one: on the run row
//! it updates (migration V13), moved into the claim history
//! `statek.run_claims` when a later claim of the run replaces it. The view
//! `statek.run_attempts` shows every attempt.
//!
//! Finished runs may also be recorded many at a time:
//! [`PgStore::finish_runs`] (`completion.rs`) completes and fails up to
//! [`statek_core::MAX_FINISH_BATCH`] runs in one statement, each still fenced by
//! its token, and answers a replayed batch with
//! [`crate::FinishOutcome::AlreadyRecorded`].

use crate::RunQueueError;
use std::time::{Duration, SystemTime};

use statek_core::EnqueuedRun;
use statek_policy::TenantId;
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Shortest and longest lease, in seconds.
const LEASE_RANGE_SECS: (f64, f64) = (0.001, 86_400.0);

/// Inserts a run; with an idempotency key already used by the tenant,
/// inserts nothing (and the existing run is read with `SELECT_BY_KEY`).
const INSERT_RUN: &str = "
    INSERT INTO statek.runs
        (run_id, tenant_id, payload, max_attempts, available_at, idempotency_key, priority)
    VALUES ($1, $2, $3, $4, clock_timestamp() + make_interval(secs => $5), $6, $7)
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING enqueued_at, available_at";

const SELECT_BY_KEY: &str = "
    SELECT run_id, payload, enqueued_at, available_at
    FROM statek.runs
    WHERE tenant_id = $1 AND idempotency_key = $2";

/// Cancels a live run through `statek.cancel_run` (migration V13): one
/// row when it did.
const CANCEL_RUN: &str = "SELECT 1 AS cancelled WHERE statek.cancel_run($1)";

/// Phase one of the expiry pass: runs whose lease has expired, with the
/// token that was read (oldest expiry first).
const SELECT_EXPIRED: &str = "
    SELECT run_id, lease_token
    FROM statek.runs
    WHERE state = 'running' AND lease_expires_at <= clock_timestamp()
    ORDER BY lease_expires_at
    LIMIT $1";

/// Phase two: put one expired run back (or fail it at its last attempt),
/// only if it is still running under the token read in phase one and its
/// lease is still expired. A run completed, failed, heartbeated or
/// re-claimed in between changes nothing. Through
/// `statek.rescue_expired_run` (migration V13): the new state, no row when
/// nothing changed.
const RESCUE_EXPIRED: &str = "
    SELECT rescued.state
    FROM statek.rescue_expired_run($1, $2) AS rescued(state)
    WHERE rescued.state IS NOT NULL";

/// The predicate of a run claimable at the instant `now.t`, shared by the
/// claims and the contention probes so that both judge the same instant (a
/// backoff ending between the two statements must not turn an idle tenant
/// into a contended one).
macro_rules! claimable_now {
    () => {
        "state IN ('available', 'running')
         AND available_at <= now.t
         AND (state = 'available' OR lease_expires_at <= now.t)
         AND attempt < max_attempts"
    };
}

/// [`claimable_now!`] for a run of tenant $1.
macro_rules! claimable {
    () => {
        concat!("tenant_id = $1 AND ", claimable_now!())
    };
}

mod claim_recovery;
mod enqueue;
mod operator;
mod run;
mod slot_claim;
pub use enqueue::{MAX_ENQUEUE_BATCH, MAX_ENQUEUE_BATCH_BYTES};
pub use operator::{RunCounts, RunListing, RunPage, RunState, MAX_LIST_LIMIT};
pub use run::{
    ClaimOutcome, ClaimedRun, ExpiredRun, FailOutcome, NewRun, RescueOutcome, RunLease,
    MAX_IDEMPOTENCY_KEY_LENGTH,
};
#[cfg(feature = "test-support")]
pub(crate) use slot_claim::CLAIM_FOR_SLOTS;
pub use slot_claim::{SlotClaim, SlotClaimRequest, MAX_CLAIM_SLOTS};

/// One claim of tenant $1 with token $2 and lease $3 s: one call of the
/// SECURITY DEFINER function `statek.claim_run` (migration V11): `allowed`
/// is what its limits let it start now (1 without limits, 0 when capped or
/// rate-limited), the claimed columns its best claimable run, if any.
const CLAIM_RUN: &str = "SELECT * FROM statek.claim_run($1::text, $2::uuid, $3::float8)";

/// Is there a run claimable (locked or not) at the instant $2 the claim
/// judged? Asked only after a claim found nothing, to tell `Contended` from
/// `Idle`. A scalar subquery in index order with `LIMIT 1`, not `EXISTS`:
/// PostgreSQL drops `ORDER BY`/`LIMIT` inside `EXISTS`, and then may plan a
/// sequential scan when few tenants have runs, reading the whole table for
/// a tenant that has none.
const PROBE_CLAIMABLE: &str = concat!(
    "SELECT (SELECT true FROM statek.runs CROSS JOIN (SELECT $2::timestamptz AS t) AS now WHERE ",
    claimable!(),
    " ORDER BY priority DESC, available_at, queue_seq LIMIT 1) IS NOT NULL AS claimable"
);

/// Is any run of the tenants $1 claimable now, limits included? One
/// ordered index probe per tenant (see [`PROBE_CLAIMABLE`] for why not
/// `EXISTS`), and for a tenant with limits whether its cap and rate leave
/// room (read without the claim's lock: an answer, not a promise); used by
/// idle workers instead of burning reservations, so a capped tenant's
/// backlog does not keep a fleet reserving `Limited` slots.
const ANY_CLAIMABLE: &str = concat!(
    "
    WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
    SELECT count(found.run_id) > 0 AS claimable
    FROM unnest($1::text[]) AS wanted(tenant_id) CROSS JOIN now
    LEFT JOIN statek.tenant_limits AS l ON l.tenant_id = wanted.tenant_id
    CROSS JOIN LATERAL (
        SELECT runs.run_id FROM statek.runs
        WHERE runs.tenant_id = wanted.tenant_id AND ",
    claimable_now!(),
    "
        ORDER BY runs.priority DESC, runs.available_at, runs.queue_seq
        LIMIT 1
    ) AS found
    WHERE (l.max_running IS NULL
           OR (SELECT count(*) FROM statek.runs AS r
               WHERE r.tenant_id = wanted.tenant_id AND r.state = 'running'
                 AND r.lease_expires_at > now.t) < l.max_running)
      AND (l.rate_limit IS NULL
           OR statek.tenant_claims_since(
                  wanted.tenant_id, now.t - make_interval(secs => l.rate_window_ms / 1000.0))
              < l.rate_limit)"
);

/// Through `statek.heartbeat_run` (migration V13): the new expiry, no row
/// when the token no longer holds the run.
const HEARTBEAT_RUN: &str = "
    SELECT beat.lease_expires_at
    FROM statek.heartbeat_run($1, $2, $3) AS beat(lease_expires_at)
    WHERE beat.lease_expires_at IS NOT NULL";

/// Completes a held run, through `statek.finish_runs` (migration V11): the
/// run row's `finished_at` is the attempt's finish time (V12; the claim row
/// is not written); `done` counts the runs completed.
const COMPLETE_RUN: &str = "
    SELECT count(f.state) AS done
    FROM statek.finish_runs(ARRAY[$1::uuid], ARRAY[$2::uuid], ARRAY['complete'],
                            ARRAY[0::float8], ARRAY[NULL::text]) AS f";

/// Records a failed execution of a held run (available again after $3 s
/// while attempts remain, else `failed`) and sets the finish time of its
/// claim, through `statek.finish_runs`; no row when the token no longer
/// holds the run.
const FAIL_RUN: &str = "
    SELECT f.state, f.available_at
    FROM statek.finish_runs(ARRAY[$1::uuid], ARRAY[$2::uuid], ARRAY['fail'],
                            ARRAY[$3::float8], ARRAY[$4::text]) AS f
    WHERE f.state IS NOT NULL";

const COUNT_LIVE_RUNS_OF: &str = "
    SELECT count(*) AS live FROM statek.runs
    WHERE state IN ('available', 'running') AND tenant_id = ANY($1)";

const COUNT_LIVE_RUNS: &str = "
    SELECT count(*) AS live FROM statek.runs WHERE state IN ('available', 'running')";

fn lease_secs(lease: Duration) -> Result<f64, StoreError> {
    let secs = lease.as_secs_f64();
    if !(LEASE_RANGE_SECS.0..=LEASE_RANGE_SECS.1).contains(&secs) {
        return Err(StoreError::InvalidArgument(format!(
            "lease must be 1 ms..=24 h, got {lease:?}"
        )));
    }
    Ok(secs)
}

/// The longest `retry_after` of a failure: 366 days.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(366 * 86_400);

/// `retry_after` in seconds, at most [`MAX_RETRY_AFTER`].
pub(crate) fn retry_secs(retry_after: Duration) -> Result<f64, StoreError> {
    if retry_after > MAX_RETRY_AFTER {
        return Err(StoreError::InvalidArgument(format!(
            "retry_after must be at most 366 days, got {retry_after:?}"
        )));
    }
    Ok(retry_after.as_secs_f64())
}

/// Longest recorded error text, in bytes.
const MAX_ERROR_BYTES: usize = 4096;

/// A failure's error text as stored in `last_error`: text columns refuse
/// NUL, so each NUL becomes U+FFFD; the message is kept, cut to at most
/// [`MAX_ERROR_BYTES`] bytes on a character boundary.
pub(crate) fn failure_text(error: &str) -> String {
    let mut error = error.replace('\0', "\u{FFFD}");
    if error.len() > MAX_ERROR_BYTES {
        let mut end = MAX_ERROR_BYTES;
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        error.truncate(end);
    }
    error
}

/// The claimed run in a row of a claim statement (columns `payload`,
/// `attempt`, `max_attempts`, `enqueued_at`, `available_at`, `claimed_at`,
/// `lease_expires_at`), leased by `lease`.
pub(crate) fn claimed_run(
    row: &tokio_postgres::Row,
    tenant: &TenantId,
    lease: RunLease,
) -> Result<ClaimedRun, StoreError> {
    Ok(ClaimedRun {
        tenant: tenant.clone(),
        payload: row.try_get("payload")?,
        attempt: non_negative_u32(row.try_get("attempt")?, "attempt")?,
        max_attempts: non_negative_u32(row.try_get("max_attempts")?, "max_attempts")?,
        enqueued_at: row.try_get("enqueued_at")?,
        available_at: row.try_get("available_at")?,
        claimed_at: row.try_get("claimed_at")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        lease,
    })
}

fn non_negative_u32(value: i32, what: &'static str) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| StoreError::corrupt("run", format!("{what} {value}")))
}

impl PgStore {
    /// Adds a run to its tenant's queue, in a transaction of its own (to
    /// enqueue in yours, [`PgStore::enqueue_in`]).
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for a payload over
    /// [`MAX_PAYLOAD_BYTES`](statek_core::MAX_PAYLOAD_BYTES), `max_attempts` outside 1..=1000 or a delay over
    /// one year; [`RunQueueError::InvalidPriority`](crate::RunQueueError::InvalidPriority); connection and server
    /// errors.
    pub async fn enqueue(&self, run: &NewRun) -> Result<EnqueuedRun, StoreError> {
        run.check()?;
        let run_id = Uuid::now_v7();
        let max_attempts = i32::try_from(run.max_attempts).unwrap_or(i32::MAX);
        let delay_secs = run.delay.as_secs_f64();
        self.with_durable_write(async |db: &Db<'_>| {
            let inserted = db
                .query_opt(
                    INSERT_RUN,
                    &[
                        (&run_id, Type::UUID),
                        (&run.tenant.as_str(), Type::TEXT),
                        (&run.payload, Type::BYTEA),
                        (&max_attempts, Type::INT4),
                        (&delay_secs, Type::FLOAT8),
                        (&run.idempotency_key, Type::TEXT),
                        (&run.priority, Type::INT4),
                    ],
                )
                .await?;
            if let Some(row) = inserted {
                return Ok(EnqueuedRun {
                    run_id,
                    enqueued_at: row.try_get("enqueued_at")?,
                    available_at: row.try_get("available_at")?,
                    deduplicated: false,
                });
            }
            // The key is taken (ON CONFLICT waited for a concurrent inserter).
            let row = db
                .query_opt(
                    SELECT_BY_KEY,
                    &[
                        (&run.tenant.as_str(), Type::TEXT),
                        (&run.idempotency_key, Type::TEXT),
                    ],
                )
                .await?
                .ok_or_else(|| StoreError::corrupt("run", "idempotency key vanished"))?;
            let payload: Vec<u8> = row.try_get("payload")?;
            let existing: Uuid = row.try_get("run_id")?;
            if payload != run.payload {
                return Err(StoreError::RunQueue(RunQueueError::IdempotencyConflict {
                    run_id: existing,
                }));
            }
            Ok(EnqueuedRun {
                run_id: existing,
                enqueued_at: row.try_get("enqueued_at")?,
                available_at: row.try_get("available_at")?,
                deduplicated: true,
            })
        })
        .await
    }

    /// Cancels a run that is `available` or `running`. A running run's
    /// worker learns it at its next heartbeat (`LeaseLost`), which fires the
    /// handler's cancellation token. Returns false if the run had already
    /// finished (or does not exist).
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn cancel_run(&self, run_id: Uuid) -> Result<bool, StoreError> {
        self.with_durable_write(async |db: &Db<'_>| {
            Ok(db.execute(CANCEL_RUN, &[(&run_id, Type::UUID)]).await? == 1)
        })
        .await
    }

    /// Phase one of the expiry pass: up to `limit` (1..=10,000) runs whose
    /// lease has expired, oldest expiry first. Claims already re-take
    /// expired runs; the pass exists to fail runs that expired on their
    /// last attempt and to make expired runs visible.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for a limit out of range; connection
    /// and server errors.
    pub async fn find_expired_runs(&self, limit: u32) -> Result<Vec<ExpiredRun>, StoreError> {
        if !(1..=10_000).contains(&limit) {
            return Err(StoreError::InvalidArgument(format!(
                "limit must be 1..=10000, got {limit}"
            )));
        }
        let limit = i64::from(limit);
        let rows = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db.query(SELECT_EXPIRED, &[(&limit, Type::INT8)]).await?)
            })
            .await?;
        rows.iter()
            .map(|row| {
                Ok(ExpiredRun {
                    lease: RunLease {
                        run_id: row.try_get("run_id")?,
                        token: row.try_get("lease_token")?,
                    },
                })
            })
            .collect()
    }

    /// Phase two of the expiry pass, for one run read by
    /// [`PgStore::find_expired_runs`]: requeue it (or fail it after its last
    /// attempt) only if it is still running under the same token with an
    /// expired lease.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn rescue_expired_run(&self, run: &ExpiredRun) -> Result<RescueOutcome, StoreError> {
        let row = self
            .with_durable_write(async |db: &Db<'_>| {
                Ok(db
                    .query_opt(
                        RESCUE_EXPIRED,
                        &[
                            (&run.lease.run_id, Type::UUID),
                            (&run.lease.token, Type::UUID),
                        ],
                    )
                    .await?)
            })
            .await?;
        Ok(match row {
            None => RescueOutcome::Unchanged,
            Some(row) if row.try_get::<_, String>(0)? == "failed" => RescueOutcome::Failed,
            Some(_) => RescueOutcome::Requeued,
        })
    }

    /// Claims the best claimable run of `tenant` (and of no other tenant):
    /// highest priority, then oldest; leasing it for `lease` (1 ms..=24 h,
    /// database clock). Locked candidates are skipped, never waited for.
    /// A tenant whose limits leave no room is [`ClaimOutcome::Limited`]
    /// when it has a claimable run.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for a lease out of range; connection
    /// and server errors.
    pub async fn claim_run(
        &self,
        tenant: &TenantId,
        lease: Duration,
    ) -> Result<ClaimOutcome, StoreError> {
        let lease_secs = lease_secs(lease)?;
        let token = Uuid::now_v7();
        self.with_durable_write(async |db: &Db<'_>| {
            let row = db
                .query_one(
                    CLAIM_RUN,
                    &[
                        (&tenant.as_str(), Type::TEXT),
                        (&token, Type::UUID),
                        (&lease_secs, Type::FLOAT8),
                    ],
                )
                .await?;
            let run_id: Option<Uuid> = row.try_get("run_id")?;
            let Some(run_id) = run_id else {
                let judged_at: SystemTime = row.try_get("judged_at")?;
                let allowed: i64 = row.try_get("allowed")?;
                let exists: bool = db
                    .query_one(
                        PROBE_CLAIMABLE,
                        &[
                            (&tenant.as_str(), Type::TEXT),
                            (&judged_at, Type::TIMESTAMPTZ),
                        ],
                    )
                    .await?
                    .try_get("claimable")?;
                return Ok(if exists && allowed < 1 {
                    ClaimOutcome::Limited
                } else if exists {
                    ClaimOutcome::Contended
                } else {
                    ClaimOutcome::Idle
                });
            };
            Ok(ClaimOutcome::Claimed(Box::new(claimed_run(
                &row,
                tenant,
                RunLease { run_id, token },
            )?)))
        })
        .await
    }

    /// Extends a held lease to `lease` from now (database clock); returns the
    /// new expiry.
    ///
    /// # Errors
    /// [`RunQueueError::LeaseLost`](crate::RunQueueError::LeaseLost) when the token no longer matches or the run
    /// left `running`; connection and server errors.
    pub async fn heartbeat_run(
        &self,
        held: &RunLease,
        lease: Duration,
    ) -> Result<SystemTime, StoreError> {
        let lease_secs = lease_secs(lease)?;
        self.with_durable_write(async |db: &Db<'_>| {
            let row = db
                .query_opt(
                    HEARTBEAT_RUN,
                    &[
                        (&held.run_id, Type::UUID),
                        (&held.token, Type::UUID),
                        (&lease_secs, Type::FLOAT8),
                    ],
                )
                .await?
                .ok_or(StoreError::RunQueue(RunQueueError::LeaseLost {
                    run_id: held.run_id,
                }))?;
            Ok(row.try_get("lease_expires_at")?)
        })
        .await
    }

    /// Marks a held run `completed`.
    ///
    /// # Errors
    /// [`RunQueueError::LeaseLost`](crate::RunQueueError::LeaseLost) when the token no longer matches (another
    /// worker owns the run now, or it already finished); connection and
    /// server errors.
    pub async fn complete_run(&self, held: &RunLease) -> Result<(), StoreError> {
        self.with_durable_write(async |db: &Db<'_>| {
            let changed: i64 = db
                .query_one(
                    COMPLETE_RUN,
                    &[(&held.run_id, Type::UUID), (&held.token, Type::UUID)],
                )
                .await?
                .try_get("done")?;
            if changed == 0 {
                return Err(StoreError::RunQueue(RunQueueError::LeaseLost {
                    run_id: held.run_id,
                }));
            }
            Ok(())
        })
        .await
    }

    /// Records a failed execution: the run becomes available again after
    /// `retry_after` (at most 366 days, database clock) while attempts
    /// remain, else `failed`. `error` is stored as `last_error`, each NUL
    /// replaced by U+FFFD and cut to at most 4 KiB on a character boundary.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for a `retry_after` over 366 days;
    /// [`RunQueueError::LeaseLost`](crate::RunQueueError::LeaseLost) when the token no longer matches; connection
    /// and server errors.
    pub async fn fail_run(
        &self,
        held: &RunLease,
        error: &str,
        retry_after: Duration,
    ) -> Result<FailOutcome, StoreError> {
        let retry_secs = retry_secs(retry_after)?;
        let error = failure_text(error);
        self.with_durable_write(async |db: &Db<'_>| {
            let row = db
                .query_opt(
                    FAIL_RUN,
                    &[
                        (&held.run_id, Type::UUID),
                        (&held.token, Type::UUID),
                        (&retry_secs, Type::FLOAT8),
                        (&error.as_str(), Type::TEXT),
                    ],
                )
                .await?
                .ok_or(StoreError::RunQueue(RunQueueError::LeaseLost {
                    run_id: held.run_id,
                }))?;
            let state: String = row.try_get("state")?;
            Ok(if state == "failed" {
                FailOutcome::Failed
            } else {
                FailOutcome::Retrying {
                    available_at: row.try_get("available_at")?,
                }
            })
        })
        .await
    }

    /// Whether any of `tenants` (a policy's tenants) has a run claimable
    /// now, without claiming it. Runs of other tenants do not count: a
    /// worker must not reserve slots for work its policy cannot reach.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn any_claimable_runs(&self, tenants: &[TenantId]) -> Result<bool, StoreError> {
        let ids: Vec<&str> = tenants.iter().map(TenantId::as_str).collect();
        self.with_response_timeout(async |db: &Db<'_>| {
            Ok(db
                .query_one(ANY_CLAIMABLE, &[(&ids, Type::TEXT_ARRAY)])
                .await?
                .try_get("claimable")?)
        })
        .await
    }

    /// Number of runs still `available` or `running` of the given tenants.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn count_live_runs_of(&self, tenants: &[TenantId]) -> Result<u64, StoreError> {
        let ids: Vec<&str> = tenants.iter().map(TenantId::as_str).collect();
        let count: i64 = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query_one(COUNT_LIVE_RUNS_OF, &[(&ids, Type::TEXT_ARRAY)])
                    .await?
                    .try_get("live")?)
            })
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Number of runs still `available` or `running`, over all tenants.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn count_live_runs(&self) -> Result<u64, StoreError> {
        let count: i64 = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db.query_one(COUNT_LIVE_RUNS, &[]).await?.try_get("live")?)
            })
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

//! Claims for the slots of a reserved batch, in one statement
//! ([`PgStore::claim_slots`], [`PgStore::claim_runs_for_slots`] and
//! [`PgStore::claim_runs_for_slots_up_to`]), and the request a claim
//! sends ([`SlotClaimRequest`]): its slots and the lease tokens made for
//! them once, so that a retry after a lost acknowledgement is answered
//! from the claim history by those tokens (`claim_recovery.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use statek_policy::TenantId;
use tokio_postgres::types::Type;
use uuid::Uuid;

use super::{claimed_run, lease_secs, ClaimedRun, RunLease};
use crate::statement::Db;
use crate::{PgStore, StoreError};

/// What one slot of [`PgStore::claim_runs_for_slots`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotClaim {
    /// A run of the slot's tenant, leased with its own token.
    Claimed(Box<ClaimedRun>),
    /// The tenant has claimable runs, but every one this claim did not take
    /// for an earlier slot was locked by another claimer.
    Contended,
    /// The tenant has no claimable run left for this slot.
    Idle,
    /// The tenant has claimable runs, but its concurrency cap or rate
    /// limit ([`crate::TenantLimits`]) lets it start none for this slot
    /// now. The slot is consumed like an idle one.
    Limited,
    /// Only in a recovered answer ([`PgStore::claim_slots`] sent again):
    /// the earlier attempt claimed `run_id` for this slot with the token
    /// it sent, but that token no longer holds the run (its lease expired
    /// and it was rescued or claimed again, or it was cancelled). The run
    /// is not this claim's to execute; the slot is consumed.
    LeaseLost {
        /// The run the slot claimed.
        run_id: Uuid,
    },
}

/// One claim for the slots of a reserved batch, made once and sent with
/// [`PgStore::claim_slots`] as often as it takes: the shard, the slots
/// `(sequence, tenant)` in increasing sequence order, the lease, the most
/// runs to claim, and one fresh lease token per slot, made here.
///
/// **Retries.** The tokens never change, so sending the same request again
/// after an error (a lost commit acknowledgement, a terminated backend, a
/// response timeout) cannot claim twice: every send after the first reads
/// the claim history (`statek.run_claims`) for the request's slots first,
/// and when the earlier send committed it answers what that send claimed,
/// the same runs with the same tokens, instead of abandoning them to wait
/// out their leases. See [`PgStore::claim_slots`].
#[derive(Debug)]
pub struct SlotClaimRequest {
    shard: statek_policy::SchedulerShardId,
    slots: Vec<(u64, TenantId)>,
    pub(super) sequences: Vec<i64>,
    pub(super) tokens: Vec<Uuid>,
    lease_secs: f64,
    pub(super) max_runs: i64,
    /// Set at the first send: later sends read the claim history first.
    sent: AtomicBool,
}

impl SlotClaimRequest {
    /// A claim for `slots` (`(sequence, tenant)`, the tenant each slot
    /// maps to) of `shard`, at most [`MAX_CLAIM_SLOTS`] of them in
    /// increasing sequence order, each claimed run leased for `lease`
    /// (1 ms..=24 h, database clock), claiming at most `max_runs`
    /// (1..=[`MAX_CLAIM_SLOTS`]) runs. Pass the shard the slots were
    /// reserved on: it is recorded as given, not looked up.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`]: a lease or `max_runs` out of range,
    /// more than [`MAX_CLAIM_SLOTS`] slots, slots not in increasing
    /// sequence order, a sequence above `i64::MAX`.
    pub fn new(
        shard: &statek_policy::SchedulerShardId,
        slots: &[(u64, TenantId)],
        lease: Duration,
        max_runs: usize,
    ) -> Result<Self, StoreError> {
        let lease_secs = lease_secs(lease)?;
        if !(1..=MAX_CLAIM_SLOTS).contains(&max_runs) {
            return Err(StoreError::InvalidArgument(format!(
                "max_runs must be 1..={MAX_CLAIM_SLOTS}, got {max_runs}"
            )));
        }
        let max_runs = i64::try_from(max_runs).unwrap_or(i64::MAX);
        if slots.len() > MAX_CLAIM_SLOTS {
            return Err(StoreError::InvalidArgument(format!(
                "{} slots, at most {MAX_CLAIM_SLOTS} per claim",
                slots.len()
            )));
        }
        if slots.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(StoreError::InvalidArgument(
                "slots must be in increasing sequence order".into(),
            ));
        }
        let sequences = slots
            .iter()
            .map(|(s, _)| {
                i64::try_from(*s).map_err(|_| {
                    StoreError::InvalidArgument(format!("sequence {s} exceeds i64::MAX"))
                })
            })
            .collect::<Result<Vec<i64>, _>>()?;
        Ok(Self {
            shard: shard.clone(),
            slots: slots.to_vec(),
            sequences,
            tokens: slots.iter().map(|_| Uuid::now_v7()).collect(),
            lease_secs,
            max_runs,
            sent: AtomicBool::new(false),
        })
    }

    /// The shard the slots were reserved on.
    pub fn shard(&self) -> &statek_policy::SchedulerShardId {
        &self.shard
    }

    /// The slots, `(sequence, tenant)` in sequence order.
    pub fn slots(&self) -> &[(u64, TenantId)] {
        &self.slots
    }

    /// The lease token each slot's run gets if the slot claims one, in
    /// slot order; the same on every send.
    pub fn tokens(&self) -> &[Uuid] {
        &self.tokens
    }

    /// The most runs the claim takes.
    pub fn max_runs(&self) -> usize {
        usize::try_from(self.max_runs).unwrap_or(MAX_CLAIM_SLOTS)
    }

    /// Whether the request was sent before (a later send reads the claim
    /// history first).
    pub fn was_sent(&self) -> bool {
        self.sent.load(Ordering::Acquire)
    }
}

/// The largest number of slots one [`PgStore::claim_runs_for_slots`] call
/// takes: a batch reservation's largest size.
pub const MAX_CLAIM_SLOTS: usize = crate::batch::MAX_RESERVATION_BATCH as usize;

/// A claim for a batch of slots, in one statement. `$1` sequences, `$2`
/// tenants, `$3` fresh lease tokens, one per slot in sequence order
/// (`ord`); `$4` the lease in seconds; `$5` the shard; `$6` the most runs
/// to claim. Per tenant, one `SKIP LOCKED` pick of as many of its
/// claimable runs as it has slots and its limits allow
/// (`statek.claim_allowance`, which locks a limited tenant's limits row),
/// highest priority first, then by available time, then per-insert
/// sequence; the tenant's k-th slot in sequence order takes its k-th
/// run. Of these pairs only the first `$6` in slot order are claimed
/// (`kept`); the slots after the last kept pair are *undecided* when
/// pairs were left over (their picked runs are unlocked at commit, nothing
/// of them is written) and are answered with `decided = false`. Each
/// claimed run gets its slot's token and its own expiry
/// (`clock_timestamp()`), and one row of claim history naming the slot.
/// A decided slot without a run is contended when a claimable run of its
/// tenant exists that this statement did not take (locked by another
/// claimer), else idle; limited instead of contended when the slot is
/// beyond what the tenant's limits allowed.
pub(crate) const CLAIM_FOR_SLOTS: &str = concat!(
    "
    WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
    slots AS MATERIALIZED (
        SELECT s.sequence, s.tenant_id, s.token, s.ord,
               row_number() OVER (PARTITION BY s.tenant_id ORDER BY s.ord) AS nth
        FROM unnest($1::bigint[], $2::text[], $3::uuid[]) WITH ORDINALITY
             AS s(sequence, tenant_id, token, ord)
    ),
    demand AS MATERIALIZED (
        SELECT tenant_id, count(*) AS wanted FROM slots GROUP BY tenant_id
    ),
    -- Tenants with any claimable run now, locked or not: one ordered index
    -- probe each (a scalar subquery: PostgreSQL drops ORDER BY/LIMIT inside
    -- EXISTS). Only they are picked from and probed for contention; the
    -- others' slots are idle (with many tenants and few busy ones, that
    -- is most of a batch).
    live AS MATERIALIZED (
        SELECT d.tenant_id, d.wanted
        FROM demand AS d CROSS JOIN now
        WHERE (SELECT true FROM statek.runs
               WHERE runs.tenant_id = d.tenant_id AND ",
    claimable_now!(),
    "
               ORDER BY runs.priority DESC, runs.available_at, runs.queue_seq
               LIMIT 1)
    ),
    -- How many runs each live tenant may start now (migration V9): as many
    -- as it wants without limits, else what its cap and rate leave. The
    -- function locks the limited tenants' limits rows until commit, so
    -- every claimer of such a tenant, on any replica, counts after the
    -- previous one committed. It is not called at all when no live tenant
    -- has limits: the uncorrelated EXISTS is a one-time filter above the
    -- call in a CTE of its own (inside the LEFT JOIN below, the planner
    -- made it a join filter and ran the function for every claim).
    limited_live AS MATERIALIZED (
        SELECT d.tenant_id, d.wanted FROM live AS d
        WHERE EXISTS (SELECT 1 FROM statek.tenant_limits AS l WHERE l.tenant_id = d.tenant_id)
    ),
    limited_allowance AS MATERIALIZED (
        SELECT f.tenant_id, f.allowed
        FROM statek.claim_allowance(
            ARRAY(SELECT tenant_id FROM limited_live ORDER BY tenant_id),
            ARRAY(SELECT wanted FROM limited_live ORDER BY tenant_id)) AS f
        WHERE EXISTS (SELECT 1 FROM limited_live)
    ),
    allowance AS MATERIALIZED (
        SELECT d.tenant_id, coalesce(a.allowed, d.wanted) AS allowed
        FROM live AS d
        LEFT JOIN limited_allowance AS a ON a.tenant_id = d.tenant_id
    ),
    picked AS MATERIALIZED (
        SELECT p.run_id, d.tenant_id,
               row_number() OVER (PARTITION BY d.tenant_id
                                  ORDER BY p.priority DESC, p.available_at, p.queue_seq) AS nth
        FROM live AS d JOIN allowance AS a ON a.tenant_id = d.tenant_id
        CROSS JOIN now
        CROSS JOIN LATERAL (
            SELECT runs.run_id, runs.priority, runs.available_at, runs.queue_seq
            FROM statek.runs
            WHERE runs.tenant_id = d.tenant_id AND ",
    claimable_now!(),
    "
            ORDER BY runs.priority DESC, runs.available_at, runs.queue_seq
            LIMIT a.allowed
            FOR UPDATE OF runs SKIP LOCKED
        ) AS p
    ),
    all_pairs AS MATERIALIZED (
        SELECT s.ord, s.sequence, s.token, p.run_id,
               row_number() OVER (ORDER BY s.ord) AS rank
        FROM slots AS s
        JOIN picked AS p ON p.tenant_id = s.tenant_id AND p.nth = s.nth
    ),
    pairs AS MATERIALIZED (
        SELECT ord, sequence, token, run_id FROM all_pairs WHERE rank <= $6
    ),
    -- The last decided slot: every slot when no pair was left over, else
    -- the slot of the last kept pair.
    cutoff AS MATERIALIZED (
        SELECT CASE WHEN (SELECT count(*) FROM all_pairs) > $6
                    THEN (SELECT max(ord) FROM pairs)
                    ELSE (SELECT max(ord) FROM slots) END AS ord
    ),
    claimed AS (
        UPDATE statek.runs AS r
        SET state = 'running',
            attempt = r.attempt + 1,
            lease_token = pairs.token,
            lease_expires_at = clock_timestamp() + make_interval(secs => $4),
            claimed_at = clock_timestamp()
        FROM pairs
        WHERE r.run_id = pairs.run_id
        RETURNING pairs.ord, r.run_id, r.tenant_id, r.payload, r.attempt, r.max_attempts,
                  r.enqueued_at, r.available_at, r.claimed_at, r.lease_expires_at, r.lease_token
    ),
    history AS (
        INSERT INTO statek.run_claims
            (run_id, attempt, tenant_id, shard_id, sequence, lease_token, claimed_at)
        SELECT c.run_id, c.attempt, c.tenant_id, $5, pairs.sequence, c.lease_token, c.claimed_at
        FROM claimed AS c JOIN pairs ON pairs.ord = c.ord
        RETURNING run_id
    ),
    -- Tenants with a decided slot left without a run: is a claimable run
    -- of theirs left that this statement did not pick (locked by another
    -- claimer)? One probe per tenant, not per slot, and an ordered one
    -- (ORDER BY ... LIMIT 1 on runs_claim_priority_idx's order): a plain EXISTS
    -- lets the planner pick a sequential scan when few tenants have runs,
    -- which reads the whole table for every tenant that has none.
    short AS MATERIALIZED (
        SELECT DISTINCT s.tenant_id
        FROM slots AS s CROSS JOIN cutoff
        WHERE s.ord <= cutoff.ord AND s.ord NOT IN (SELECT ord FROM pairs)
          AND s.tenant_id IN (SELECT tenant_id FROM live)
    ),
    contention AS MATERIALIZED (
        SELECT short.tenant_id, left_over.run_id IS NOT NULL AS contended
        FROM short CROSS JOIN now
        LEFT JOIN LATERAL (
            SELECT runs.run_id
            FROM statek.runs
            WHERE runs.tenant_id = short.tenant_id AND ",
    claimable_now!(),
    "
              AND runs.run_id NOT IN (SELECT run_id FROM all_pairs)
            ORDER BY runs.priority DESC, runs.available_at, runs.queue_seq
            LIMIT 1
        ) AS left_over ON true
    )
    SELECT s.ord, s.sequence, s.tenant_id AS slot_tenant, s.ord <= cutoff.ord AS decided,
           c.run_id, c.tenant_id, c.payload,
           c.attempt, c.max_attempts, c.enqueued_at, c.available_at, c.claimed_at,
           c.lease_expires_at, c.lease_token,
           (SELECT count(*) FROM history) AS recorded,
           c.run_id IS NULL AND coalesce(ct.contended, false) AS contended,
           c.run_id IS NULL AND coalesce(ct.contended, false)
               AND s.nth > coalesce(al.allowed, s.nth) AS limited
    FROM slots AS s CROSS JOIN cutoff
    LEFT JOIN claimed AS c ON c.ord = s.ord
    LEFT JOIN contention AS ct ON ct.tenant_id = s.tenant_id
    LEFT JOIN allowance AS al ON al.tenant_id = s.tenant_id
    ORDER BY s.ord"
);

impl PgStore {
    /// Sends `request`: claims, in ONE statement, at most one run per slot
    /// with the request's tokens (see
    /// [`claim_runs_for_slots_up_to`](Self::claim_runs_for_slots_up_to)
    /// for what a slot gets and the decided prefix of the answer).
    ///
    /// **Sending again is safe, and recovers.** The first send runs the
    /// claim statement. Every later send of the same request (after any
    /// error: the first may or may not have committed) first reads the
    /// claim history of the request's slots. When the earlier send
    /// committed, its claims are there under the tokens it sent, and the
    /// answer is recovered from them without claiming anything: each slot
    /// that claimed a run answers [`SlotClaim::Claimed`] with the same run
    /// and token (attempt, claim time and lease expiry as that claim wrote
    /// them), or [`SlotClaim::LeaseLost`] when the token no longer holds
    /// the run. Which of idle, contended or limited an earlier slot
    /// without a run was is not recorded; a recovered answer reports such
    /// a slot [`SlotClaim::Contended`] (consumed, and never taken for an
    /// empty queue). The recovered decided prefix is every slot when the
    /// earlier send claimed fewer than `max_runs` runs, else the slots up
    /// to its last claimed one (the slots after it claimed nothing and may
    /// be claimed for in a later request). When the history has nothing
    /// for the slots, the earlier send did not commit and the statement is
    /// sent again, with the same tokens. A send whose statement meets a
    /// claim that committed meanwhile (the unique key of shard and
    /// sequence) reads the history too and answers from it the same way.
    ///
    /// One gap is left: an earlier send that the server is still
    /// executing when the later one reads the history (its response timed
    /// out, the server had not finished) is not seen, and the runs it then
    /// commits wait out their leases unless the later statement meets its
    /// claims on the unique key. A terminated backend or a lost
    /// acknowledgement after the commit leaves no such send behind.
    ///
    /// # Errors
    /// - [`StoreError::SlotAlreadyClaimed`]: a slot of the request's shard
    ///   claimed a run under a token this request did not send (another
    ///   claim for the same slot); nothing of this send is kept.
    /// - [`StoreError::CorruptData`]: an answer that does not match the
    ///   request (row count, sequences, tenants, claim count).
    /// - connection and server errors: send the request again.
    pub async fn claim_slots(
        &self,
        request: &SlotClaimRequest,
    ) -> Result<Vec<SlotClaim>, StoreError> {
        if request.slots.is_empty() {
            return Ok(Vec::new());
        }
        if request.sent.swap(true, Ordering::AcqRel) {
            if let Some(recovered) = self.recover_slot_claims(request).await? {
                return Ok(recovered);
            }
        }
        match self.send_slot_claim(request).await {
            Err(StoreError::SlotAlreadyClaimed { shard }) => {
                match self.recover_slot_claims(request).await? {
                    Some(recovered) => Ok(recovered),
                    None => Err(StoreError::SlotAlreadyClaimed { shard }),
                }
            }
            answered => answered,
        }
    }

    /// Claims, in ONE statement, at most one run per slot of a reserved
    /// batch: `slots` are `(sequence, tenant)` in sequence order (the
    /// tenant the slot maps to), at most [`MAX_CLAIM_SLOTS`], each sequence
    /// once. For each slot the run comes from that slot's tenant only; a
    /// tenant holding `n` slots gets up to `n` of its runs, highest
    /// priority first, then oldest (available time, then insertion order),
    /// its earliest slot the first run. A tenant with limits
    /// ([`crate::TenantLimits`]) gets no more runs than its cap and rate
    /// leave; its slots beyond that are [`SlotClaim::Limited`] while it
    /// has claimable runs. Locked runs are skipped (`FOR UPDATE SKIP LOCKED`),
    /// never waited for. Each claimed run gets its own lease token and
    /// expiry `lease` from its claim (1 ms..=24 h, database clock), and
    /// one row of claim history (`statek.run_claims`: shard, the slot's
    /// sequence, run, attempt, token, claim time; the finish time is set by
    /// complete or fail), so the database shows which slot ran which run.
    /// A slot claims at most one run, ever: the history refuses a second
    /// claim for the same `(shard, sequence)`.
    ///
    /// Returns one [`SlotClaim`] per slot, in the order given.
    ///
    /// This call makes its tokens itself and sends once: to retry a claim
    /// whose acknowledgement may have been lost without abandoning what it
    /// claimed, build a [`SlotClaimRequest`] and send it with
    /// [`claim_slots`](Self::claim_slots).
    ///
    /// # Errors
    /// - [`StoreError::InvalidArgument`]: a lease out of range, more than
    ///   [`MAX_CLAIM_SLOTS`] slots, slots not in increasing sequence order,
    ///   or a sequence above `i64::MAX`.
    /// - [`StoreError::SlotAlreadyClaimed`]: a slot of `shard` already
    ///   claimed a run (nothing of this call is kept).
    /// - connection and server errors. The shard is recorded as given, not
    ///   looked up (a foreign key would wait for the shard's cursor lock):
    ///   pass the shard the slots were reserved on.
    pub async fn claim_runs_for_slots(
        &self,
        slots: &[(u64, TenantId)],
        shard: &statek_policy::SchedulerShardId,
        lease: Duration,
    ) -> Result<Vec<SlotClaim>, StoreError> {
        self.claim_runs_for_slots_up_to(slots, shard, lease, slots.len().clamp(1, MAX_CLAIM_SLOTS))
            .await
    }

    /// [`claim_runs_for_slots`](Self::claim_runs_for_slots) that claims at
    /// most `max_runs` runs (1..=[`MAX_CLAIM_SLOTS`]): what a worker with
    /// `max_runs` free execution permits calls, so that it never claims a
    /// run it cannot start at once.
    ///
    /// The answer is the *decided prefix* of `slots`: one [`SlotClaim`] per
    /// slot, in the order given, up to and including the slot of the
    /// `max_runs`-th claimed run; every slot when fewer runs could be
    /// claimed. Slots after the prefix were not claimed for (nothing of
    /// them is written; runs picked for them are unlocked when the
    /// statement commits) and may be passed again in a later call, when
    /// permits have freed. With `max_runs >= slots.len()` every slot is
    /// decided.
    ///
    /// # Errors
    /// As [`claim_runs_for_slots`](Self::claim_runs_for_slots), and
    /// [`StoreError::InvalidArgument`] for `max_runs` out of range.
    pub async fn claim_runs_for_slots_up_to(
        &self,
        slots: &[(u64, TenantId)],
        shard: &statek_policy::SchedulerShardId,
        lease: Duration,
        max_runs: usize,
    ) -> Result<Vec<SlotClaim>, StoreError> {
        self.claim_slots(&SlotClaimRequest::new(shard, slots, lease, max_runs)?)
            .await
    }

    /// Sends the claim statement of `request` once.
    async fn send_slot_claim(
        &self,
        request: &SlotClaimRequest,
    ) -> Result<Vec<SlotClaim>, StoreError> {
        let (slots, shard) = (&request.slots, &request.shard);
        let tenants: Vec<&str> = slots.iter().map(|(_, t)| t.as_str()).collect();
        let rows = self
            .with_durable_write(async |db: &Db<'_>| {
                db.query(
                    CLAIM_FOR_SLOTS,
                    &[
                        (&request.sequences, Type::INT8_ARRAY),
                        (&tenants, Type::TEXT_ARRAY),
                        (&request.tokens, Type::UUID_ARRAY),
                        (&request.lease_secs, Type::FLOAT8),
                        (&shard.as_str(), Type::TEXT),
                        (&request.max_runs, Type::INT8),
                    ],
                )
                .await
                .map_err(|e| {
                    let constraint = e.as_db_error().and_then(|db| db.constraint());
                    if constraint == Some("run_claims_shard_sequence_key") {
                        StoreError::SlotAlreadyClaimed {
                            shard: shard.clone(),
                        }
                    } else {
                        StoreError::from(e)
                    }
                })
            })
            .await?;
        if rows.len() != slots.len() {
            return Err(StoreError::corrupt(
                "slot claim",
                format!("{} slots, {} answers", slots.len(), rows.len()),
            ));
        }
        let mut claimed_count = 0_i64;
        let mut out = Vec::with_capacity(slots.len());
        for ((sequence, tenant), row) in slots.iter().zip(&rows) {
            if !row.try_get::<_, bool>("decided")? {
                // The decided prefix ends here (slots are answered in order).
                break;
            }
            let answered: i64 = row.try_get("sequence")?;
            let slot_tenant: String = row.try_get("slot_tenant")?;
            if i64::try_from(*sequence).ok() != Some(answered) || slot_tenant != tenant.as_str() {
                return Err(StoreError::corrupt(
                    "slot claim",
                    format!("slot {sequence} of {tenant} answered as {answered} of {slot_tenant}"),
                ));
            }
            let run_id: Option<Uuid> = row.try_get("run_id")?;
            let Some(run_id) = run_id else {
                out.push(if row.try_get::<_, bool>("limited")? {
                    SlotClaim::Limited
                } else if row.try_get::<_, bool>("contended")? {
                    SlotClaim::Contended
                } else {
                    SlotClaim::Idle
                });
                continue;
            };
            let run_tenant: String = row.try_get("tenant_id")?;
            if run_tenant != tenant.as_str() {
                return Err(StoreError::corrupt(
                    "slot claim",
                    format!("slot {sequence} of {tenant} claimed run {run_id} of {run_tenant}"),
                ));
            }
            claimed_count += 1;
            out.push(SlotClaim::Claimed(Box::new(claimed_run(
                row,
                tenant,
                RunLease {
                    run_id,
                    token: row.try_get("lease_token")?,
                },
            )?)));
        }
        let recorded: i64 = rows
            .first()
            .map(|row| row.try_get("recorded"))
            .transpose()?
            .unwrap_or(0);
        if recorded != claimed_count {
            return Err(StoreError::corrupt(
                "slot claim",
                format!("{claimed_count} runs claimed, {recorded} claims recorded"),
            ));
        }
        Ok(out)
    }
}

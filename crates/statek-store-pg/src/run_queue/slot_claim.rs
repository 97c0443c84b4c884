//! Claims for the slots of a reserved batch, in one statement
//! ([`PgStore::claim_slots`], [`PgStore::claim_runs_for_slots`] and
//! [`PgStore::claim_runs_for_slots_up_to`]), and the request a claim
//! sends ([`SlotClaimRequest`]): its slots and the lease tokens made for
//! them once, so that a retry after a lost acknowledgement is answered
//! from the claim history by those tokens (`claim_recovery.rs`).

use crate::RunQueueError;
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
    /// Cost mode (a request [`in_cost_mode`](SlotClaimRequest::in_cost_mode)):
    /// the tenant has claimable runs, but its balance in the shard's cost
    /// ledger is negative after the slot's credit (migration V19,
    /// `statek.claim_cost_slots`). The slot is consumed without a claim.
    Debt,
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
/// the claims recorded for the request's slots first (run rows and history),
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
    /// The shard shares cost: claimed through `statek.claim_cost_slots`.
    cost_mode: bool,
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
            cost_mode: false,
            sent: AtomicBool::new(false),
        })
    }

    /// The request for a shard that shares cost (`[fairness] unit =
    /// "cost"`): sent through `statek.claim_cost_slots` (migration V19),
    /// which decides each tenant's debt slots on the shard's ledger first
    /// ([`SlotClaim::Debt`]). The database refuses a slot-mode claim of a
    /// cost shard's slots, and a cost-mode claim of a slot shard's.
    #[must_use]
    pub fn in_cost_mode(mut self) -> Self {
        self.cost_mode = true;
        self
    }

    /// Whether the request is for a shard that shares cost.
    pub fn is_cost_mode(&self) -> bool {
        self.cost_mode
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
pub const MAX_CLAIM_SLOTS: usize = statek_core::MAX_RESERVATION_BATCH as usize;

/// A claim for a batch of slots: one call of the SECURITY DEFINER function
/// `statek.claim_slots` (migration V11, which holds the statement and
/// documents it), the only writer of slot claims. `$1` sequences, `$2`
/// tenants, `$3` fresh lease tokens, one per slot in sequence order
/// (`ord`); `$4` the lease in seconds; `$5` the shard; `$6` the most runs
/// to claim. The function refuses (SQLSTATE SK002,
/// [`RunQueueError::ClaimRefused`](crate::RunQueueError::ClaimRefused)) a slot that is in no reservation range of
/// the shard or whose tenant is not the cycle's tenant at `sequence mod
/// L`. Per tenant, one `SKIP LOCKED` pick of as many of its claimable runs
/// as it has slots and its limits allow (`statek.claim_allowance`),
/// highest priority first, then by available time, then per-insert
/// sequence; the tenant's k-th slot in sequence order takes its k-th run.
/// Of these pairs only the first `$6` in slot order are claimed; the slots
/// after the last kept pair are *undecided* when pairs were left over and
/// are answered with `decided = false`. Each claimed run gets its slot's
/// token, its own expiry and one row of claim history naming the slot. A
/// decided slot without a run is contended when a claimable run of its
/// tenant exists that this statement did not take (locked by another
/// claimer), else idle; limited instead of contended when the slot is
/// beyond what the tenant's limits allowed.
pub(crate) const CLAIM_FOR_SLOTS: &str = "
    SELECT * FROM statek.claim_slots($1::bigint[], $2::text[], $3::uuid[], $4::float8,
                                     $5::text, $6::bigint)";

/// [`CLAIM_FOR_SLOTS`] for the slots of a cost shard, through
/// `statek.claim_cost_slots` (migration V19): the same arguments and
/// answer, and the column `debt` (a decided slot consumed because its
/// tenant, with a claimable run, was in debt). Per tenant in id order, its
/// ledger row is locked, its slots credited and its first slots while its
/// balance is negative made debt slots; the other slots are claimed for
/// as by [`CLAIM_FOR_SLOTS`].
pub(crate) const CLAIM_FOR_COST_SLOTS: &str = "
    SELECT * FROM statek.claim_cost_slots($1::bigint[], $2::text[], $3::uuid[], $4::float8,
                                          $5::text, $6::bigint)";

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
    /// - [`RunQueueError::SlotAlreadyClaimed`](crate::RunQueueError::SlotAlreadyClaimed): a slot of the request's shard
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
            Err(StoreError::RunQueue(RunQueueError::SlotAlreadyClaimed { shard })) => {
                match self.recover_slot_claims(request).await? {
                    Some(recovered) => Ok(recovered),
                    None => Err(StoreError::RunQueue(RunQueueError::SlotAlreadyClaimed {
                        shard,
                    })),
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
    /// its claim recorded on its row (migration V13: shard, the slot's
    /// sequence, attempt, token, claim time; the finish sets its finish
    /// time there), so `statek.run_attempts` shows which slot ran which
    /// run. A slot claims at most one run, ever: the database refuses a
    /// second claim for the same `(shard, sequence)`.
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
    /// - [`RunQueueError::SlotAlreadyClaimed`](crate::RunQueueError::SlotAlreadyClaimed): a slot of `shard` already
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
                    if request.cost_mode {
                        CLAIM_FOR_COST_SLOTS
                    } else {
                        CLAIM_FOR_SLOTS
                    },
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
                    // The history's key, or the key of the attempts on
                    // run rows (V13): either way the slot claimed before.
                    if matches!(
                        constraint,
                        Some("run_claims_shard_sequence_key" | "runs_claim_slot_key")
                    ) {
                        StoreError::RunQueue(RunQueueError::SlotAlreadyClaimed {
                            shard: shard.clone(),
                        })
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
                out.push(if request.cost_mode && row.try_get::<_, bool>("debt")? {
                    SlotClaim::Debt
                } else if row.try_get::<_, bool>("limited")? {
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

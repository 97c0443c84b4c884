//! A batch claim sent again, answered from the claim history: what an
//! earlier send of the same [`SlotClaimRequest`] claimed, found by the
//! lease tokens it sent, so that a claim whose commit acknowledgement was
//! lost hands its runs to the caller instead of leaving them to wait out
//! their leases.

use crate::RunQueueError;
use tokio_postgres::types::Type;
use uuid::Uuid;

use super::{claimed_run, RunLease, SlotClaim, SlotClaimRequest};
use crate::statement::Db;
use crate::{PgStore, StoreError};

/// `$1` the request's sequences, `$2` its tokens (one per slot, `ord`
/// 1-based), `$3` the shard. One row per slot, in slot order: the claim
/// recorded for that shard and sequence (its run and token, unique per
/// shard and sequence), on the run row that holds it as its current
/// attempt (migration V13) or in the history, and the run while that
/// claim's token still holds it (`running` under that token).
const RECOVER_SLOT_CLAIMS: &str = "
    SELECT s.ord, s.sequence, s.token AS sent_token,
           c.run_id AS claimed_run_id, c.lease_token AS claim_token,
           r.run_id, r.tenant_id, r.payload, r.attempt, r.max_attempts, r.enqueued_at,
           r.available_at, r.claimed_at, r.lease_expires_at, r.lease_token
    FROM unnest($1::bigint[], $2::uuid[]) WITH ORDINALITY AS s(sequence, token, ord)
    LEFT JOIN LATERAL (
        SELECT held.run_id, held.claim_token AS lease_token
        FROM statek.runs AS held
        WHERE held.claim_shard_id = $3 AND held.claim_sequence = s.sequence
        UNION ALL
        SELECT moved.run_id, moved.lease_token
        FROM statek.run_claims AS moved
        WHERE moved.shard_id = $3 AND moved.sequence = s.sequence
        LIMIT 1
    ) AS c ON true
    LEFT JOIN statek.runs AS r
           ON r.run_id = c.run_id AND r.lease_token = c.lease_token AND r.state = 'running'
    ORDER BY s.ord";

impl PgStore {
    /// What an earlier send of `request` claimed, read from the claim
    /// history: `None` when no slot of the request has a claim (nothing
    /// committed), else the recovered decided prefix (see
    /// [`PgStore::claim_slots`]).
    ///
    /// # Errors
    /// [`RunQueueError::SlotAlreadyClaimed`](crate::RunQueueError::SlotAlreadyClaimed) when a slot's claim carries a
    /// token the request did not send; [`StoreError::CorruptData`] for an
    /// answer that does not match the request; connection and server
    /// errors.
    pub(super) async fn recover_slot_claims(
        &self,
        request: &SlotClaimRequest,
    ) -> Result<Option<Vec<SlotClaim>>, StoreError> {
        let shard = request.shard();
        let rows = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query(
                        RECOVER_SLOT_CLAIMS,
                        &[
                            (&request.sequences, Type::INT8_ARRAY),
                            (&request.tokens, Type::UUID_ARRAY),
                            (&shard.as_str(), Type::TEXT),
                        ],
                    )
                    .await?)
            })
            .await?;
        let slots = request.slots();
        if rows.len() != slots.len() {
            return Err(StoreError::corrupt(
                "slot claim recovery",
                format!("{} slots, {} answers", slots.len(), rows.len()),
            ));
        }
        // Per slot: the run its earlier send claimed, if any.
        let mut claimed: Vec<Option<Uuid>> = Vec::with_capacity(rows.len());
        for ((sequence, _), row) in slots.iter().zip(&rows) {
            let answered: i64 = row.try_get("sequence")?;
            if i64::try_from(*sequence).ok() != Some(answered) {
                return Err(StoreError::corrupt(
                    "slot claim recovery",
                    format!("slot {sequence} answered as {answered}"),
                ));
            }
            let run_id: Option<Uuid> = row.try_get("claimed_run_id")?;
            if run_id.is_some() {
                let sent: Uuid = row.try_get("sent_token")?;
                let token: Option<Uuid> = row.try_get("claim_token")?;
                if token != Some(sent) {
                    return Err(StoreError::RunQueue(RunQueueError::SlotAlreadyClaimed {
                        shard: shard.clone(),
                    }));
                }
            }
            claimed.push(run_id);
        }
        let count = claimed.iter().filter(|c| c.is_some()).count();
        let Some(last) = claimed.iter().rposition(Option::is_some) else {
            return Ok(None);
        };
        // Fewer claims than max_runs: the earlier send decided every slot;
        // else it decided at least up to its last claimed slot.
        let decided = if count < request.max_runs() {
            slots.len()
        } else {
            last + 1
        };
        let mut out = Vec::with_capacity(decided);
        for (((_, tenant), row), run_id) in slots.iter().zip(&rows).zip(&claimed).take(decided) {
            let Some(run_id) = *run_id else {
                out.push(SlotClaim::Contended);
                continue;
            };
            let held: Option<Uuid> = row.try_get("run_id")?;
            if held.is_none() {
                out.push(SlotClaim::LeaseLost { run_id });
                continue;
            }
            let run_tenant: String = row.try_get("tenant_id")?;
            if run_tenant != tenant.as_str() {
                return Err(StoreError::corrupt(
                    "slot claim recovery",
                    format!("a slot of {tenant} claimed run {run_id} of {run_tenant}"),
                ));
            }
            out.push(SlotClaim::Claimed(Box::new(claimed_run(
                row,
                tenant,
                RunLease {
                    run_id,
                    token: row.try_get("lease_token")?,
                },
            )?)));
        }
        tracing::info!(
            shard = %shard,
            first_sequence = slots.first().map_or(0, |(s, _)| *s),
            slots = slots.len(),
            recovered = count,
            "batch claim recovered from the claim history by its tokens"
        );
        Ok(Some(out))
    }
}

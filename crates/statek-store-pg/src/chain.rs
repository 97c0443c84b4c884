//! Reading a schedule's chain of shards (migration V8): its first shard
//! and its live (last) shard. Used by registration (`shard.rs`) and by
//! rollouts (`succession.rs`).

use crate::RolloutError;
use statek_policy::{ScheduleId, SchedulerShardId};
use tokio_postgres::types::Type;

use crate::statement::Db;
use crate::StoreError;

/// Chains are short in practice (one shard per policy change); this cap
/// only keeps a corrupt chain from making a reader loop.
const MAX_CHAIN_LENGTH: i64 = 1_000_000;

/// The last shard of the chain that starts at `$1`, following successors.
const LIVE_OF_CHAIN: &str = "
    WITH RECURSIVE chain AS (
        SELECT s.shard_id, s.successor_id, 0::bigint AS depth
        FROM statek.scheduler_shards AS s
        WHERE s.shard_id = $1
        UNION ALL
        SELECT n.shard_id, n.successor_id, c.depth + 1
        FROM chain AS c
        JOIN statek.scheduler_shards AS n ON n.shard_id = c.successor_id
        WHERE c.depth < $2
    )
    SELECT shard_id, successor_id FROM chain ORDER BY depth DESC LIMIT 1";

/// The first shard of schedule `$1`.
const FIRST_OF_SCHEDULE: &str = "
    SELECT shard_id FROM statek.scheduler_shards
    WHERE schedule_id = $1 AND predecessor_id IS NULL";

/// The live shard of the chain through `shard` (`shard` itself while it is
/// not sealed).
pub(crate) async fn live_shard_of_chain(
    db: &Db<'_>,
    shard: &SchedulerShardId,
) -> Result<SchedulerShardId, StoreError> {
    let row = db
        .query_opt(
            LIVE_OF_CHAIN,
            &[
                (&shard.as_str(), Type::TEXT),
                (&MAX_CHAIN_LENGTH, Type::INT8),
            ],
        )
        .await?
        .ok_or_else(|| {
            StoreError::Rollout(RolloutError::UnknownShard {
                shard: shard.clone(),
            })
        })?;
    let last: String = row.try_get("shard_id")?;
    let dangling: Option<String> = row.try_get("successor_id")?;
    if let Some(successor) = dangling {
        return Err(StoreError::corrupt(
            "shard chain",
            format!("shard {last} names successor {successor}, which is not registered"),
        ));
    }
    SchedulerShardId::try_from(last.as_str())
        .map_err(|e| StoreError::corrupt("shard chain", format!("shard id: {e}")))
}

/// The live shard of `schedule`.
pub(crate) async fn live_shard_of_schedule(
    db: &Db<'_>,
    schedule: &ScheduleId,
) -> Result<SchedulerShardId, StoreError> {
    let first = db
        .query_opt(FIRST_OF_SCHEDULE, &[(&schedule.as_str(), Type::TEXT)])
        .await?
        .ok_or_else(|| {
            StoreError::corrupt(
                "shard chain",
                format!("schedule {schedule} has no first shard"),
            )
        })?;
    let first: String = first.try_get("shard_id")?;
    let first = SchedulerShardId::try_from(first.as_str())
        .map_err(|e| StoreError::corrupt("shard chain", format!("shard id: {e}")))?;
    live_shard_of_chain(db, &first).await
}

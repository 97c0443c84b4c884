//! Retention: prune throughput over old rows, reservation latency while a
//! prune runs, and reservation latency as retained rows grow.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use statek_policy::WeightedFairnessPolicy;
use statek_store_pg::{PgStore, SchedulerFairnessRetentionPolicy};

use super::load::{Measured, Until};
use super::reserve::statek_single;

/// The prune phase's figures.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct PruneMeasured {
    /// Old rows before the prune.
    pub old_rows: u64,
    /// Batch size.
    pub batch: u32,
    /// Rows deleted.
    pub deleted: u64,
    /// Batches run (the last one deletes 0).
    pub batches: u64,
    /// Seconds until nothing was left.
    pub seconds: f64,
    /// Rows deleted per second.
    pub rows_per_second: f64,
}

/// Inserts `count` reservation rows of `policy`'s shard, two days old, at
/// the shard's cursor, and moves the cursor past them: what a shard looks
/// like after `count` reservations that are now due for pruning. Ids are
/// time-ordered UUIDv7s, as real reservation ids are. No reserver may run
/// meanwhile.
pub async fn insert_old_rows(
    client: &tokio_postgres::Client,
    policy: &WeightedFairnessPolicy,
    count: u64,
) -> Result<Duration> {
    let started = Instant::now();
    let shard = policy.shard_id().as_str();
    let from: i64 = client
        .query_one(
            "SELECT next_sequence FROM statek.scheduler_shards WHERE shard_id = $1",
            &[&shard],
        )
        .await?
        .try_get(0)?;
    let count = i64::try_from(count)?;
    let digest = policy.digest();
    let digest: &[u8] = digest.as_bytes();
    client
        .execute(
            "INSERT INTO statek.scheduler_reservations
                 (reservation_id, shard_id, sequence, slot, policy_digest, reserved_at)
             SELECT (substr(t.h, 1, 8) || '-' || substr(t.h, 9, 4) || '-7'
                     || lpad(to_hex(t.g % 4096), 3, '0') || '-8'
                     || lpad(to_hex((t.g / 4096) % 4096), 3, '0') || '-'
                     || lpad(to_hex(t.g), 12, '0'))::uuid,
                    $1, $2::bigint + t.g, (($2::bigint + t.g) % $4::bigint)::integer, $5, t.at
             FROM (SELECT g, at,
                          lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0') AS h
                   FROM (SELECT g, now() - interval '2 days' + g * interval '10 microseconds' AS at
                         FROM generate_series(0::bigint, $3::bigint - 1) AS g) AS s) AS t",
            &[
                &shard,
                &from,
                &count,
                &i64::from(policy.cycle_length()),
                &digest,
            ],
        )
        .await?;
    client
        .execute(
            "UPDATE statek.scheduler_shards SET next_sequence = $2 WHERE shard_id = $1",
            &[&shard, &(from + count)],
        )
        .await?;
    client
        .batch_execute("VACUUM ANALYZE statek.scheduler_reservations")
        .await?;
    Ok(started.elapsed())
}

/// Prunes everything older than an hour in batches of `batch`, while
/// nothing else runs or while reservers run (the caller decides).
pub async fn prune_all(store: &PgStore, old_rows: u64, batch: u32) -> Result<PruneMeasured> {
    let retention = SchedulerFairnessRetentionPolicy::new(Duration::from_secs(3600), batch)?;
    let started = Instant::now();
    let (mut deleted, mut batches) = (0_u64, 0_u64);
    loop {
        let report = store
            .prune_scheduler_fairness_reservations(&retention)
            .await?;
        batches += 1;
        deleted += report.deleted;
        if report.drained() {
            break;
        }
        if report.blocked() {
            tokio::time::sleep(statek_store_pg::PruneReport::RETRY_PAUSE).await;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(PruneMeasured {
        old_rows,
        batch,
        deleted,
        batches,
        seconds,
        rows_per_second: deleted as f64 / seconds,
    })
}

/// Reservation load (`clients` callers) while `prune_all` runs, ending when
/// the prune ends; returns both.
pub async fn reserve_while_pruning(
    url: &str,
    policy: &WeightedFairnessPolicy,
    clients: usize,
    old_rows: u64,
    batch: u32,
) -> Result<(Measured, PruneMeasured)> {
    let pruner = super::reserve::store(url, 1)?;
    let stop = tokio_util::sync::CancellationToken::new();
    let load = {
        let (url, policy, stop) = (url.to_owned(), policy.clone(), stop.clone());
        tokio::spawn(
            async move { statek_single(&url, &policy, clients, Until::Cancelled(stop)).await },
        )
    };
    let pruned = prune_all(&pruner, old_rows, batch).await;
    stop.cancel();
    let measured = load.await??;
    Ok((measured, pruned?))
}

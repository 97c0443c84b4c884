//! Arrivals during a window: every [`ARRIVAL_EVERY`](super::shape::ARRIVAL_EVERY)
//! one run for each fed tenant, in one plain INSERT (so the feeder costs the
//! server one statement per tick, whichever side runs), and the queue's
//! contents when a side starts.

use std::time::Duration;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;

/// Empties the run queue, as the superuser: the claim history (migration
/// V7) refers to runs and refuses TRUNCATE to every other role, so the
/// superuser steps around its trigger.
const EMPTY_RUNS: &str = "SET session_replication_role = replica;
     TRUNCATE statek.runs CASCADE;
     RESET session_replication_role";

/// One run for each tenant of `$1`, available now.
const ARRIVE: &str = "INSERT INTO statek.runs (run_id, tenant_id, payload)
    SELECT gen_random_uuid(), tenant, ''::bytea FROM unnest($1::text[]) AS tenant";

/// Empties the queue and loads `backlog` (`(tenant, runs)`), interleaved
/// across tenants so every tenant's runs span the queue (a tenant with
/// fewer runs simply ends earlier).
pub async fn load(client: &tokio_postgres::Client, backlog: &[(String, u64)]) -> Result<()> {
    client.batch_execute(EMPTY_RUNS).await?;
    let tenants: Vec<String> = backlog.iter().map(|b| b.0.clone()).collect();
    let runs: Vec<i64> = backlog
        .iter()
        .map(|b| i64::try_from(b.1))
        .collect::<Result<_, _>>()?;
    client
        .execute(
            "INSERT INTO statek.runs (run_id, tenant_id, payload)
             SELECT gen_random_uuid(), b.tenant, ''::bytea
             FROM unnest($1::text[], $2::bigint[]) AS b (tenant, runs),
                  generate_series(0, b.runs - 1) AS g
             ORDER BY g, b.tenant",
            &[&tenants, &runs],
        )
        .await
        .context("loading the backlog")?;
    client.batch_execute("VACUUM ANALYZE statek.runs").await?;
    Ok(())
}

/// Feeds `tenants` one run each every `every` until `stop` fires (a tick
/// that falls behind is sent late, not skipped, so the arrival rate holds).
pub async fn start(
    url: &str,
    tenants: Vec<String>,
    every: Duration,
    stop: CancellationToken,
) -> Result<tokio::task::JoinHandle<Result<u64>>> {
    let client = crate::bench::connection::connect(url).await?;
    Ok(tokio::spawn(async move {
        if tenants.is_empty() {
            return Ok(0);
        }
        let arrive = client.prepare(ARRIVE).await?;
        let mut ticks = tokio::time::interval(every);
        let mut fed = 0;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return Ok(fed),
                _ = ticks.tick() => {
                    fed += client.execute(&arrive, &[&tenants]).await?;
                }
            }
        }
    }))
}

//! The faults of `cargo xtask chaos`, each real: a restarted server, killed
//! backends, connections taken by other clients, sessions idle in
//! transaction holding row locks.
//!
//! The sessions and statements here are the harness's, not statek's: they
//! are what an operator, a failing network or another application does to
//! statek's database.

use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use statek_store_pg::StoreConfig;

use crate::pg::RunningServer;

/// One fault, with its length where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `pg_ctl stop -m fast`, then start again on the same port.
    RestartFast,
    /// `pg_ctl stop -m immediate` (crash recovery at start), then start.
    RestartImmediate,
    /// `pg_terminate_backend` of every backend of the cell's database once.
    TerminateOnce,
    /// The same every second for the length.
    TerminateEverySecond(Duration),
    /// Other clients hold every connection the server admits.
    PoolExhausted(Duration),
    /// A session idle in transaction holds row locks on every queued run of
    /// one tenant (`t-a`).
    TenantRowsLocked(Duration),
    /// A session idle in transaction holds the shard row: reservations
    /// wait their `lock_timeout` and fail, retryably.
    ShardRowLocked(Duration),
}

impl Fault {
    /// The cell's name in the table.
    pub fn name(self) -> String {
        let secs = |d: Duration| d.as_secs();
        match self {
            Fault::RestartFast => "restart -m fast".to_owned(),
            Fault::RestartImmediate => "restart -m immediate".to_owned(),
            Fault::TerminateOnce => "terminate all once".to_owned(),
            Fault::TerminateEverySecond(d) => format!("terminate all 1/s {}s", secs(d)),
            Fault::PoolExhausted(d) => format!("connections taken {}s", secs(d)),
            Fault::TenantRowsLocked(d) => format!("tenant rows locked {}s", secs(d)),
            Fault::ShardRowLocked(d) => format!("shard row locked {}s", secs(d)),
        }
    }

    /// How soon after the fault ends throughput must be back to 80%:
    /// 15 s after a restarted server accepts connections, 5 s otherwise.
    pub fn recovery_bound(self) -> Duration {
        match self {
            Fault::RestartFast | Fault::RestartImmediate => Duration::from_secs(15),
            _ => Duration::from_secs(5),
        }
    }
}

/// When a fault began and ended (for a restart: when the server accepted
/// connections again), and what it did.
#[derive(Debug, Clone)]
pub struct Injected {
    pub began: SystemTime,
    pub ended: SystemTime,
    pub detail: String,
}

const TERMINATE: &str = "SELECT count(pg_terminate_backend(pid)) AS killed FROM pg_stat_activity
     WHERE datname = $1 AND pid <> pg_backend_pid()";

const LOCK_TENANT_ROWS: &str = "SELECT count(*) AS locked FROM (
         SELECT run_id FROM statek.runs WHERE tenant_id = $1 AND state = 'available' FOR UPDATE
     ) AS held";

const LOCK_SHARD_ROW: &str =
    "SELECT count(*) AS locked FROM (SELECT shard_id FROM statek.scheduler_shards WHERE shard_id = $1 FOR UPDATE) AS held";

/// Injects `fault` into the server (`admin`: its `postgres` database;
/// `cell`: the cell's database named `database`).
pub async fn inject(
    fault: Fault,
    server: &RunningServer,
    admin: &StoreConfig,
    cell: &StoreConfig,
    database: &str,
) -> Result<Injected> {
    let began = SystemTime::now();
    let detail = match fault {
        Fault::RestartFast | Fault::RestartImmediate => {
            let mode = if fault == Fault::RestartFast {
                "fast"
            } else {
                "immediate"
            };
            let asked = std::time::Instant::now();
            let (down, up) = tokio::task::block_in_place(|| server.restart(mode))?;
            return Ok(Injected {
                began,
                ended: SystemTime::now(),
                detail: format!(
                    "stopped after {} ms, accepting connections {} ms later",
                    down.duration_since(asked).as_millis(),
                    up.duration_since(down).as_millis()
                ),
            });
        }
        Fault::TerminateOnce => {
            let killed = terminate(admin, database).await?;
            format!("{killed} backends terminated")
        }
        Fault::TerminateEverySecond(length) => {
            let mut killed = 0;
            let rounds = length.as_secs().max(1);
            for round in 0..rounds {
                killed += terminate(admin, database).await?;
                if round + 1 < rounds {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            format!("{killed} backends terminated in {rounds} rounds")
        }
        Fault::PoolExhausted(length) => {
            let mut held = Vec::new();
            let mut refusal = String::from("none");
            while held.len() < 1000 {
                match cell.connect_client().await {
                    Ok(client) => held.push(client),
                    Err(e) => {
                        refusal = e.to_string();
                        break;
                    }
                }
            }
            tokio::time::sleep(length).await;
            let opened = held.len();
            drop(held);
            format!("{opened} connections held; the next was refused: {refusal}")
        }
        Fault::TenantRowsLocked(length) => {
            hold_locks(cell, LOCK_TENANT_ROWS, "t-a", length).await?
        }
        Fault::ShardRowLocked(length) => {
            hold_locks(cell, LOCK_SHARD_ROW, "chaos-v1", length).await?
        }
    };
    Ok(Injected {
        began,
        ended: SystemTime::now(),
        detail,
    })
}

async fn terminate(admin: &StoreConfig, database: &str) -> Result<i64> {
    let client = admin.connect_client().await?;
    let row = client
        .query_one(TERMINATE, &[&database])
        .await
        .context("terminating backends")?;
    Ok(row.try_get("killed")?)
}

/// Opens a transaction, takes the locks of `sql`, stays idle in it for
/// `length`, then rolls back.
async fn hold_locks(cell: &StoreConfig, sql: &str, key: &str, length: Duration) -> Result<String> {
    let mut client = cell.connect_client().await?;
    let tx = client.transaction().await?;
    let locked: i64 = tx.query_one(sql, &[&key]).await?.try_get("locked")?;
    tokio::time::sleep(length).await;
    tx.rollback().await?;
    Ok(format!("{locked} rows locked, idle in transaction"))
}

//! Section `enqueue` (issue 14): enqueue throughput, one run per statement
//! (`PgStore::enqueue`) against many runs in one statement
//! (`PgStore::enqueue_many`, arrays through `unnest`), one client, runs of
//! eight tenants with 32-byte payloads. Target: at least 50,000 runs/s in
//! bulk. The run table is emptied afterwards.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::{Deserialize, Serialize};
use statek_policy::TenantId;
use statek_store_pg::NewRun;

use super::target::Target;

/// Runs per statement measured, in order (1 is `enqueue`).
pub const SIZES: [usize; 3] = [1, 1_000, 10_000];
/// The bulk size the target is judged on.
pub const TARGET_SIZE: usize = 10_000;
/// Runs per second the bulk enqueue must reach.
pub const TARGET_RUNS_PER_SECOND: f64 = 50_000.0;

/// One measured size.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EnqueueRow {
    /// Runs per statement.
    pub runs_per_statement: usize,
    /// Runs enqueued in the window.
    pub runs: u64,
    /// Statements (commits) in the window.
    pub statements: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Runs per second.
    pub runs_per_second: f64,
    /// Mean time of one statement, milliseconds.
    pub mean_statement_ms: f64,
}

/// Empties the run queue as the superuser (the claim history refuses
/// TRUNCATE to every other role).
const EMPTY_RUNS: &str = "SET session_replication_role = replica;
     TRUNCATE statek.run_claims, statek.runs;
     RESET session_replication_role";

/// Measures every size of [`SIZES`] for `window` each.
pub async fn run(url: &str, window: Duration) -> Result<Vec<EnqueueRow>> {
    let store = super::reserve::store(url, 2)?;
    let client = super::connection::connect(url).await?;
    let tenants: Vec<TenantId> = (0..8)
        .map(|i| TenantId::try_from(format!("bench-enqueue-{i}").as_str()))
        .collect::<Result<_, _>>()?;
    let mut rows = Vec::new();
    for size in SIZES {
        eprintln!("==> enqueue, {size} run(s) per statement");
        let batch: Vec<NewRun> = (0..size)
            .map(|i| NewRun::new(tenants[i % tenants.len()].clone(), vec![7_u8; 32]))
            .collect();
        let started = Instant::now();
        let (mut runs, mut statements) = (0_u64, 0_u64);
        while started.elapsed() < window {
            if size == 1 {
                store.enqueue(&batch[0]).await?;
            } else {
                store.enqueue_many(&batch).await?;
            }
            runs += size as u64;
            statements += 1;
        }
        let seconds = started.elapsed().as_secs_f64();
        let row = EnqueueRow {
            runs_per_statement: size,
            runs,
            statements,
            seconds,
            runs_per_second: runs as f64 / seconds,
            mean_statement_ms: seconds * 1000.0 / statements.max(1) as f64,
        };
        eprintln!(
            "    {:.0} runs/s ({} runs in {} statements, {:.2} ms each)",
            row.runs_per_second, row.runs, row.statements, row.mean_statement_ms
        );
        rows.push(row);
        client.batch_execute(EMPTY_RUNS).await?;
    }
    Ok(rows)
}

/// The bulk enqueue target.
pub fn target(rows: &[EnqueueRow]) -> Option<Target> {
    let what = format!("bulk enqueue, {TARGET_SIZE} runs per statement");
    if rows.is_empty() {
        return None;
    }
    Some(
        match rows.iter().find(|r| r.runs_per_statement == TARGET_SIZE) {
            Some(row) => {
                Target::value_at_least(what, row.runs_per_second, TARGET_RUNS_PER_SECOND, "runs/s")
            }
            None => Target::not_measured(what, ">= 50000 runs/s", "size not measured"),
        },
    )
}

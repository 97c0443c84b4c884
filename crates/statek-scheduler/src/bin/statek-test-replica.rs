//! A scheduler replica as its own OS process, for the multi-process tests
//! (feature `test-support`; not for production use).
//!
//! Usage: `statek-test-replica "<connection string>"`. Registers policy
//! tenant-a:3/tenant-b:1 on shard `primary-v1`, runs a [`Worker`] with 2
//! runs executing at once, a 1 s lease and heartbeats, and prints one line per
//! event to stdout:
//! - `executed <run_id> <attempt>` after a run completed;
//! - `hang <run_id> <attempt>` when a run with payload `hang` starts its
//!   first attempt (it then hangs until cancelled; later attempts succeed).
//!
//! Runs with payload `work` sleep 2 ms. Closing stdin shuts it down.
//!
//! `statek-test-replica "<connection string>" cost` runs the Worker on
//! the cost-mode shard `cost-v1` instead (tenant-a:3/tenant-b:1, q = 2,
//! C_max = 40, default 40, b_cap = 40), with completion batches of at
//! most 4 (5 ms linger); runs with payload `cost=N ms=M` sleep M ms and
//! report cost N, so costs are reported out of claim order.
//!
//! `statek-test-replica "<connection string>" ticks <k>` instead ticks the
//! scheduler in a loop (`tick` for k = 1, else `tick_batch(k)`), following
//! rollouts, and prints one line per slot: `tick <shard> <sequence>
//! <tenant> <outcome>`, or `error <message>` for a failed tick. Runs
//! complete at once, under a 30 s lease.

#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunError,
    RunHandler, RunResult, SchedulerOptions, TenantTickOutcome, Worker, WorkerOptions,
};
use statek_store_pg::PgStore;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

struct Handler;

impl RunHandler for Handler {
    async fn handle(&self, run: &Run, cancel: CancellationToken) -> RunResult {
        if run.payload.is_empty() {
            return Ok(Completed::new());
        }
        if run.payload == b"hang" && run.attempt == 1 {
            println!("hang {} {}", run.run_id, run.attempt);
            let _ = std::io::stdout().flush();
            cancel.cancelled().await;
            return Err(RunError::new("cancelled"));
        }
        if let Some((cost, ms)) = cost_and_delay(&run.payload) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            return Ok(Completed::with_cost(cost));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(Completed::new())
    }
}

/// `cost=N ms=M`.
fn cost_and_delay(payload: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(payload).ok()?;
    let (cost, ms) = text.strip_prefix("cost=")?.split_once(" ms=")?;
    Some((cost.parse().ok()?, ms.parse().ok()?))
}

/// The `cost` mode's policy (the multi-process test registers the same).
fn cost_policy() -> Result<WeightedFairnessPolicy, statek_policy::PolicyError> {
    Ok(WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("cost-v1")?,
        [
            TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?,
            TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?,
        ],
    )?
    .with_fairness(statek_policy::FairnessUnit::Cost(
        statek_policy::CostFairness::new(2, 40, 40, 40)?,
    )))
}

fn policy() -> Result<WeightedFairnessPolicy, statek_policy::PolicyError> {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1")?,
        [
            TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?,
            TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?,
        ],
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: statek-test-replica <connection string>")?;
    // The test server is fast, not durable: report, do not refuse.
    let store = PgStore::new(
        statek_store_pg::StoreConfig::from_url(&url)?
            .durability_policy(statek_store_pg::DurabilityPolicy::AllowNoDurability),
    )?;
    // The Worker mode's 1 s lease lets the multi-process tests see a hung
    // run re-claimed soon; the ticks mode's runs complete at once, and a
    // 30 s lease keeps a stalled replica from losing one to another.
    let ticks = std::env::args().nth(2).as_deref() == Some("ticks");
    let cost = std::env::args().nth(2).as_deref() == Some("cost");
    let lease = Duration::from_secs(if ticks { 30 } else { 1 });
    let mut options = ExecutorOptions::new().lease(lease)?;
    if cost {
        options = options.completion_batching(4, Duration::from_millis(5))?;
    }
    let executor = PgRunQueueExecutor::new(store.clone(), Handler, options);
    let policy = if cost { cost_policy()? } else { policy()? };
    let scheduler = Arc::new(
        DurableFairScheduler::register(store.clone(), policy, executor, SchedulerOptions::new())
            .await?,
    );
    if ticks {
        let k: u32 = std::env::args()
            .nth(3)
            .ok_or("ticks needs a batch size")?
            .parse()?;
        return tick_until_stdin_closes(&scheduler, k).await;
    }
    let (sink, mut outcomes) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::new(scheduler, WorkerOptions::new().concurrency(2)?)
        .with_notifications(store.listen_for_runs().await?)
        .with_outcome_sink(sink);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let printer = tokio::spawn(async move {
        while let Some(outcome) = outcomes.recv().await {
            if let TenantTickOutcome::Executed(run) = outcome.tenant_outcome() {
                println!("executed {} {}", run.run_id, run.attempt);
                let _ = std::io::stdout().flush();
            }
        }
    });
    // Run until stdin closes.
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    shutdown.cancel();
    let report = running.await??;
    let _ = printer.await;
    eprintln!("replica done: {report:?}");
    Ok(())
}

/// The `ticks` mode: tick until stdin closes, one line per slot.
async fn tick_until_stdin_closes<E: statek_scheduler::TenantExecutor>(
    scheduler: &DurableFairScheduler<E, PgStore>,
    k: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    let stop = CancellationToken::new();
    let closed = stop.clone();
    tokio::spawn(async move {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
        closed.cancel();
    });
    let never = CancellationToken::new();
    let print =
        |result: Result<statek_scheduler::TickOutcome, statek_scheduler::SchedulerError>| {
            match result {
                Ok(o) => println!(
                    "tick {} {} {} {}",
                    o.reservation().shard(),
                    o.reservation().sequence(),
                    o.tenant(),
                    o.tenant_outcome().label()
                ),
                Err(e) => println!("error {e}"),
            }
        };
    while !stop.is_cancelled() {
        if k == 1 {
            print(scheduler.tick(&never).await);
        } else {
            match scheduler.tick_batch(k, &never).await {
                Ok(results) => results.into_iter().for_each(print),
                Err(e) => println!("error {e}"),
            }
        }
        let _ = std::io::stdout().flush();
    }
    Ok(())
}

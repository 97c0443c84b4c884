use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerOptions,
};
use statek_store_pg::{NewRun, PgStore};
use tokio_util::sync::CancellationToken;

struct MyHandler;

impl RunHandler for MyHandler {
    async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
        // Do the tenant's work; `_cancel` fires if the lease is lost or on shutdown.
        println!("running {} for {}", run.run_id, run.tenant);
        // What the attempt cost, if it knows (tokens, CPU-ms): kept with its claim.
        Ok(Completed::with_cost(1))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // e.g. DATABASE_URL=postgres://statek@127.0.0.1/statek?sslmode=verify-full
    // A server whose commits are not durable (fsync off, as the development
    // server of `cargo xtask pg start`) is refused by default; to try this
    // against one, build the store with `PgStore::new(StoreConfig::from_url(&url)?
    // .durability_policy(DurabilityPolicy::AllowNoDurability))` instead.
    let store = PgStore::connect(&std::env::var("DATABASE_URL")?)?;
    store.migrate().await?;
    // Cycle [a, a, b, a]: tenant-a waits at most 2 reservations, tenant-b at most 4.
    let policy = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1")?,
        [
            TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?,
            TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?,
        ],
    )?;
    store
        .enqueue(&NewRun::new(
            TenantId::try_from("tenant-b")?,
            b"hello".to_vec(),
        ))
        .await?;

    let executor = PgRunQueueExecutor::new(store.clone(), MyHandler, ExecutorOptions::new());
    let scheduler =
        DurableFairScheduler::register(store, policy, executor, SchedulerOptions::new()).await?;
    let shutdown = CancellationToken::new();
    for _ in 0..8 {
        let outcome = scheduler.tick(&shutdown).await?;
        println!(
            "sequence {} slot {} -> {}: {}",
            outcome.reservation().sequence(),
            outcome.reservation().slot(),
            outcome.tenant(),
            outcome.tenant_outcome().label()
        );
    }
    Ok(())
}

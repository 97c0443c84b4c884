//! Build a retention policy and prune one batch of old reservation rows.
//! Connects to `DATABASE_URL` (the retention role).

use std::time::Duration;

use statek_store_pg::{PgStore, SchedulerFairnessRetentionPolicy};

// Kept as the seed wrote it (the doctest in statek-store-pg's crate docs
// shows the same lines).
#[rustfmt::skip]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = PgStore::connect(&std::env::var("DATABASE_URL")?)?;

    let policy = SchedulerFairnessRetentionPolicy::new(
        Duration::from_secs(24 * 60 * 60),
        1_000,
    )?;

    let report = store
        .prune_scheduler_fairness_reservations(policy)
        .await?;

    println!("deleted {} rows older than {:?}", report.deleted, report.cutoff);
    Ok(())
}

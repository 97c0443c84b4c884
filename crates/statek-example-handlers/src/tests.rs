//! The handler's unit tests: called directly on a built `Run`, then run by
//! a real scheduler over statek-testing's in-memory doubles.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::SystemTime;

use statek_policy::TenantId;
use statek_scheduler::{DurableFairScheduler, SchedulerOptions};
use statek_testing::{
    InMemoryExecutor, InMemoryExecutorOptions, InMemoryReservations, MemoryRunState,
};
use uuid::Uuid;

use super::*;

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn run(payload: &[u8]) -> Run {
    let now = SystemTime::now();
    Run::new(
        uuid_for_test(),
        tenant("tenant-a"),
        payload.to_vec(),
        1,
        3,
        now,
        now,
        now,
        now,
    )
}

/// A fixed UUIDv7 (the handler never reads it).
fn uuid_for_test() -> Uuid {
    Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001)
}

#[tokio::test]
async fn resize_refuses_empty_and_oversized_images() {
    let ok = Resize.handle(&run(b"png"), CancellationToken::new()).await;
    assert_eq!(ok, Ok(Completed::new()));
    let empty = Resize.handle(&run(b""), CancellationToken::new()).await;
    assert_eq!(
        empty.unwrap_err().to_string(),
        "empty payload: no image to resize"
    );
    let big = Resize
        .handle(&run(&[0; MAX_IMAGE_BYTES + 1]), CancellationToken::new())
        .await;
    assert_eq!(
        big.unwrap_err().to_string(),
        "image of 65 bytes, at most 64"
    );
}

/// Ticked by a real scheduler: tenant-b's two slots of the first eight
/// (cycle [a, a, b, a]) run its two runs in FIFO order; tenant-a has none,
/// and its slots are consumed idle, never passed on.
#[tokio::test]
async fn a_scheduler_runs_the_handler_in_tenant_bs_slots() {
    let policy = statek_testing::policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let executor = InMemoryExecutor::new(Resize, InMemoryExecutorOptions::new());
    let good = executor
        .enqueue(&tenant("tenant-b"), b"png".to_vec())
        .unwrap();
    let bad = executor.enqueue(&tenant("tenant-b"), Vec::new()).unwrap();
    let scheduler = DurableFairScheduler::register(
        InMemoryReservations::new(),
        policy,
        executor,
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    let mut labels = Vec::new();
    for _ in 0..8 {
        let outcome = scheduler.tick(&shutdown).await.unwrap();
        labels.push(outcome.tenant_outcome().label());
    }
    assert_eq!(
        labels,
        [
            "idle",
            "idle",
            "executed",
            "idle",
            "idle",
            "idle",
            "execution_failed",
            "idle"
        ]
    );
    let executor = scheduler.executor();
    assert_eq!(
        executor.run(good.run_id).unwrap().state,
        MemoryRunState::Completed
    );
    let failed = executor.run(bad.run_id).unwrap();
    assert_eq!(failed.state, MemoryRunState::Available);
    assert_eq!(
        failed.last_error.as_deref(),
        Some("empty payload: no image to resize")
    );
}

//! DurableFairScheduler against a real PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::RolloutError;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Registration, Run,
    RunError, RunHandler, RunResult, SchedulerError, SchedulerOptions, SourceErrorKind,
    TenantTickOutcome,
};
use statek_store_pg::testing::{policy, TestDatabase};
use statek_store_pg::{NewRun, StoreError};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Default)]
struct Count(AtomicU32);

impl RunHandler for Count {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Completed::new())
    }
}

struct Fail;

impl RunHandler for Fail {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        Err(RunError::new("handler says no"))
    }
}

#[tokio::test]
async fn four_replicas_follow_one_cycle() {
    let db = TestDatabase::create().await;
    let p = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let mut replicas = Vec::new();
    for _ in 0..4 {
        let store = db.store(); // a separate pool per replica
        let executor =
            PgRunQueueExecutor::new(store.clone(), Count::default(), ExecutorOptions::new());
        replicas.push(
            DurableFairScheduler::register(store, p.clone(), executor, SchedulerOptions::new())
                .await
                .unwrap(),
        );
    }
    assert!(matches!(
        replicas[0].registration(),
        Registration::Registered { .. }
    ));
    for r in &replicas[1..] {
        assert!(matches!(r.registration(), Registration::Idempotent { .. }));
    }
    let shutdown = CancellationToken::new();
    let outcomes = join_all(replicas.iter().map(|r| r.tick(&shutdown))).await;
    let mut by_sequence = BTreeMap::new();
    for o in outcomes {
        let o = o.unwrap();
        assert_eq!(o.tenant_outcome(), &TenantTickOutcome::Idle);
        assert_eq!(o.retries(), 0);
        by_sequence.insert(o.reservation().sequence(), o.tenant().as_str().to_owned());
    }
    assert_eq!(
        by_sequence.into_iter().collect::<Vec<_>>(),
        vec![
            (0, "tenant-a".to_owned()),
            (1, "tenant-a".to_owned()),
            (2, "tenant-b".to_owned()),
            (3, "tenant-a".to_owned()),
        ]
    );
}

#[tokio::test]
async fn slots_are_consumed_whatever_the_queue_holds() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let a = TenantId::try_from("tenant-a").unwrap();
    let b = TenantId::try_from("tenant-b").unwrap();
    // a is busy (10 runs), b has exactly one run.
    for _ in 0..10 {
        store
            .enqueue(&NewRun::new(a.clone(), vec![]))
            .await
            .unwrap();
    }
    store
        .enqueue(&NewRun::new(b.clone(), vec![]))
        .await
        .unwrap();
    let executor = PgRunQueueExecutor::new(store.clone(), Count::default(), ExecutorOptions::new());
    let scheduler =
        DurableFairScheduler::register(store.clone(), p, executor, SchedulerOptions::new())
            .await
            .unwrap();
    let shutdown = CancellationToken::new();
    let mut labels = Vec::new();
    for _ in 0..8 {
        let o = scheduler.tick(&shutdown).await.unwrap();
        labels.push(format!("{}:{}", o.tenant(), o.tenant_outcome().label()));
    }
    // b's second slot (sequence 6) finds b empty: the slot is consumed, not
    // given to busy a.
    assert_eq!(
        labels,
        [
            "tenant-a:executed",
            "tenant-a:executed",
            "tenant-b:executed",
            "tenant-a:executed",
            "tenant-a:executed",
            "tenant-a:executed",
            "tenant-b:idle",
            "tenant-a:executed",
        ]
    );
    assert_eq!(scheduler.executor().handler().0.load(Ordering::SeqCst), 7);
    assert_eq!(store.count_live_runs().await.unwrap(), 10 - 6);

    shutdown.cancel();
    assert!(matches!(
        scheduler.tick(&shutdown).await,
        Err(SchedulerError::ShuttingDown)
    ));
    let stored = store
        .load_shard(scheduler.policy().shard_id())
        .await
        .unwrap();
    assert_eq!(stored.next_sequence(), 8);
}

#[tokio::test]
async fn handler_failures_are_reported_and_retried_later() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy("primary-v1", &[("tenant-a", 1)]);
    let a = TenantId::try_from("tenant-a").unwrap();
    store
        .enqueue(&NewRun::new(a.clone(), vec![]).max_attempts(3))
        .await
        .unwrap();
    // A backoff far longer than the test: the retry is later, however
    // slow the machine.
    let options = ExecutorOptions::new()
        .retry_backoff(Duration::from_secs(600), Duration::from_secs(600))
        .unwrap();
    let executor = PgRunQueueExecutor::new(store.clone(), Fail, options);
    let scheduler =
        DurableFairScheduler::register(store.clone(), p, executor, SchedulerOptions::new())
            .await
            .unwrap();
    let shutdown = CancellationToken::new();
    let o = scheduler.tick(&shutdown).await.unwrap();
    match o.tenant_outcome() {
        TenantTickOutcome::ExecutionFailed { run, error } => {
            assert_eq!(run.attempt, 1);
            assert_eq!(error, "handler says no");
        }
        other => panic!("expected ExecutionFailed, got {other:?}"),
    }
    // Backing off: the next slot finds the tenant idle.
    assert_eq!(
        scheduler.tick(&shutdown).await.unwrap().tenant_outcome(),
        &TenantTickOutcome::Idle
    );
    assert_eq!(store.count_live_runs().await.unwrap(), 1);
}

#[tokio::test]
async fn a_conflicting_policy_is_refused_before_any_claim() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = TenantId::try_from("tenant-a").unwrap();
    store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    let original = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    store.register(&original).await.unwrap();
    let changed = policy("primary-v1", &[("tenant-a", 1), ("tenant-b", 1)]);
    let executor = PgRunQueueExecutor::new(store.clone(), Count::default(), ExecutorOptions::new());
    let err =
        DurableFairScheduler::register(store.clone(), changed, executor, SchedulerOptions::new())
            .await
            .unwrap_err();
    assert!(
        matches!(
            &err,
            SchedulerError::Source { source, .. }
                if source.kind() == SourceErrorKind::PolicyConflict
                    && matches!(
                        source.downcast_ref::<StoreError>(),
                        Some(StoreError::Rollout(RolloutError::PolicyConflict { .. }))
                    )
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(store.count_live_runs().await.unwrap(), 1);
}

#[tokio::test]
async fn a_replica_that_compiles_another_cycle_is_refused_before_any_claim() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = TenantId::try_from("tenant-a").unwrap();
    store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    let p = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    store.register(&p).await.unwrap();
    // As if the registering replica had compiled another cycle: a superuser
    // rewrites the stored cycle digest with the shard's triggers disabled.
    db.client()
        .await
        .batch_execute(
            "SET session_replication_role = replica; \
             UPDATE statek.scheduler_shards SET cycle_digest = sha256('another build') \
             WHERE shard_id = 'primary-v1'",
        )
        .await
        .unwrap();
    let executor = PgRunQueueExecutor::new(store.clone(), Count::default(), ExecutorOptions::new());
    let err =
        DurableFairScheduler::register(store.clone(), p.clone(), executor, SchedulerOptions::new())
            .await
            .unwrap_err();
    match &err {
        SchedulerError::CycleMismatch(mismatch) => {
            assert_eq!(mismatch.shard.as_str(), "primary-v1");
            // printf 'another build' | sha256sum
            assert_eq!(
                mismatch.stored.to_string(),
                "db45811d226b12d0521bc4af42bb9b0167446da3f240e3c704475ba1cecb3288"
            );
            assert_eq!(mismatch.local, p.cycle_digest());
            assert_eq!(
                err.to_string(),
                format!(
                    "shard primary-v1 was registered with cycle digest {}, but this build \
                     compiles cycle digest {} from the same policy: refusing to tick",
                    mismatch.stored, mismatch.local
                )
            );
        }
        other => panic!("expected CycleMismatch, got {other:?}"),
    }
    assert!(!err.is_retryable());
    // Nothing was reserved or claimed.
    assert_eq!(store.next_sequence(p.shard_id()).await.unwrap(), 0);
    assert_eq!(store.count_live_runs().await.unwrap(), 1);
    // An untampered shard registers and ticks as before.
    let q = policy("primary-v2", &[("tenant-a", 3), ("tenant-b", 1)]);
    let executor = PgRunQueueExecutor::new(store.clone(), Count::default(), ExecutorOptions::new());
    DurableFairScheduler::register(store.clone(), q, executor, SchedulerOptions::new())
        .await
        .unwrap();
}

#[tokio::test]
async fn the_scheduler_refuses_to_tick_on_corrupt_data() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let executor = PgRunQueueExecutor::new(store.clone(), Count::default(), ExecutorOptions::new());
    let scheduler =
        DurableFairScheduler::register(store.clone(), p, executor, SchedulerOptions::new())
            .await
            .unwrap();
    let shutdown = CancellationToken::new();
    scheduler.tick(&shutdown).await.unwrap();
    // Someone with owner rights switches the trigger off and rewrites L.
    db.client()
        .await
        .batch_execute(
            "ALTER TABLE statek.scheduler_shards DISABLE TRIGGER scheduler_shards_immutable;
             UPDATE statek.scheduler_shards SET cycle_length = 5;
             ALTER TABLE statek.scheduler_shards ENABLE TRIGGER scheduler_shards_immutable;",
        )
        .await
        .unwrap();
    let err = scheduler.tick(&shutdown).await.unwrap_err();
    assert!(
        matches!(
            &err,
            SchedulerError::Source { source, .. } if source.is_corrupt()
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    // And the bytes: a tampered policy stops reservations altogether.
    db.client()
        .await
        .batch_execute(
            "ALTER TABLE statek.scheduler_shards DISABLE TRIGGER scheduler_shards_immutable;
             UPDATE statek.scheduler_shards SET cycle_length = 4, policy_bytes = policy_bytes || ' '::bytea;
             ALTER TABLE statek.scheduler_shards ENABLE TRIGGER scheduler_shards_immutable;",
        )
        .await
        .unwrap();
    let before = store
        .next_sequence(scheduler.policy().shard_id())
        .await
        .unwrap();
    let err = scheduler.tick(&shutdown).await.unwrap_err();
    assert!(
        matches!(
            &err,
            SchedulerError::Source { source, .. } if source.is_corrupt()
        ),
        "{err:?}"
    );
    assert_eq!(
        store
            .next_sequence(scheduler.policy().shard_id())
            .await
            .unwrap(),
        before
    );
    // The counting handler never ran: no run was ever enqueued or claimed.
    assert_eq!(scheduler.executor().handler().0.load(Ordering::SeqCst), 0);
}

/// A batch of 8 slots behaves as 8 single ticks: the same tenants in the
/// same order, the same consumed-when-empty rule, one cursor advance of 8.
/// Mixed with single ticks, the sequence stays contiguous.
#[tokio::test]
async fn a_batch_tick_runs_its_slots_in_sequence_order() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let a = TenantId::try_from("tenant-a").unwrap();
    let b = TenantId::try_from("tenant-b").unwrap();
    for _ in 0..10 {
        store
            .enqueue(&NewRun::new(a.clone(), vec![]))
            .await
            .unwrap();
    }
    store
        .enqueue(&NewRun::new(b.clone(), vec![]))
        .await
        .unwrap();
    let executor = PgRunQueueExecutor::new(store.clone(), Count::default(), ExecutorOptions::new());
    let scheduler =
        DurableFairScheduler::register(store.clone(), p, executor, SchedulerOptions::new())
            .await
            .unwrap();
    let shutdown = CancellationToken::new();
    let first = scheduler.tick(&shutdown).await.unwrap();
    assert_eq!(first.reservation().sequence(), 0);
    let outcomes: Vec<_> = scheduler
        .tick_batch(8, &shutdown)
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let labels: Vec<String> = outcomes
        .iter()
        .map(|o| {
            format!(
                "{}:{}:{}",
                o.reservation().sequence(),
                o.tenant(),
                o.tenant_outcome().label()
            )
        })
        .collect();
    assert_eq!(
        labels,
        [
            "1:tenant-a:executed",
            "2:tenant-b:executed",
            "3:tenant-a:executed",
            "4:tenant-a:executed",
            "5:tenant-a:executed",
            "6:tenant-b:idle",
            "7:tenant-a:executed",
            "8:tenant-a:executed",
        ]
    );
    assert!(outcomes.iter().all(|o| o.retries() == 0));
    assert_eq!(scheduler.executor().handler().0.load(Ordering::SeqCst), 8);
    let next = scheduler.tick(&shutdown).await.unwrap();
    assert_eq!(
        (next.reservation().sequence(), next.tenant().as_str()),
        (9, "tenant-a")
    );
    // A bad size is refused before anything is reserved.
    match scheduler.tick_batch(0, &shutdown).await {
        Err(SchedulerError::Source { source, retries: 0 })
            if source.kind() == SourceErrorKind::InvalidArgument
                && matches!(
                    source.downcast_ref::<StoreError>(),
                    Some(StoreError::InvalidArgument(_))
                ) => {}
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // At shutdown: refused before reserving.
    shutdown.cancel();
    assert!(matches!(
        scheduler.tick_batch(4, &shutdown).await,
        Err(SchedulerError::ShuttingDown)
    ));
    let stored = store
        .load_shard(scheduler.policy().shard_id())
        .await
        .unwrap();
    assert_eq!(stored.next_sequence(), 10);
}

/// A `min-gap-v2` shard end to end: registered (the database accepts its
/// slot map: every tenant its weight's number of times, the cycle digest
/// matching), read back byte-identical, and run in its own order, which
/// differs from `swrr-v1`'s for these weights; the claim evidence names
/// each slot's run in that order.
#[tokio::test]
async fn a_min_gap_v2_shard_registers_and_runs_its_own_cycle() {
    use statek_policy::{CycleOptimality, PolicyAlgorithm};
    let db = TestDatabase::create().await;
    let store = db.store();
    let weights = [("tenant-a", 3), ("tenant-b", 2), ("tenant-c", 1)];
    let p = WeightedFairnessPolicy::with_algorithm(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        PolicyAlgorithm::MinGapV2,
        weights
            .iter()
            .map(|(t, w)| TenantFairnessWeight::new(TenantId::try_from(*t).unwrap(), *w).unwrap()),
    )
    .unwrap();
    // {3, 2, 1}: 4/3 at best, which min-gap-v2's search proves; swrr-v1's
    // cycle is another one (3/2).
    assert_eq!(p.cycle_optimality(), CycleOptimality::ProvenOptimal);
    let order = |p: &WeightedFairnessPolicy| -> Vec<String> {
        p.cycle().iter().map(ToString::to_string).collect()
    };
    let cycle = order(&p);
    assert_eq!(
        cycle,
        ["tenant-a", "tenant-b", "tenant-a", "tenant-b", "tenant-a", "tenant-c"]
    );
    assert_ne!(order(&policy("primary-v1", &weights)), cycle);
    for (tenant, weight) in weights {
        for _ in 0..2 * weight {
            store
                .enqueue(&NewRun::new(TenantId::try_from(tenant).unwrap(), vec![]))
                .await
                .unwrap();
        }
    }
    let executor = PgRunQueueExecutor::new(store.clone(), Count::default(), ExecutorOptions::new());
    let scheduler =
        DurableFairScheduler::register(store.clone(), p.clone(), executor, SchedulerOptions::new())
            .await
            .unwrap();
    assert!(matches!(
        scheduler.registration(),
        Registration::Registered { .. }
    ));
    assert_eq!(store.load_shard(p.shard_id()).await.unwrap().policy(), &p);
    let shutdown = CancellationToken::new();
    let outcomes = scheduler.tick_batch(12, &shutdown).await.unwrap();
    let labels: Vec<String> = outcomes
        .into_iter()
        .map(|o| {
            let o = o.unwrap();
            format!(
                "{}:{}:{}",
                o.reservation().sequence(),
                o.tenant(),
                o.tenant_outcome().label()
            )
        })
        .collect();
    let expected: Vec<String> = (0..12)
        .map(|sequence| format!("{sequence}:{}:executed", cycle[sequence % 6]))
        .collect();
    assert_eq!(labels, expected);
    assert_eq!(scheduler.executor().handler().0.load(Ordering::SeqCst), 12);
    // The evidence: each slot claimed one run of its cycle tenant.
    let rows = db
        .client()
        .await
        .query(
            "SELECT sequence, tenant_id FROM statek.run_attempts
             WHERE shard_id = 'primary-v1' ORDER BY sequence",
            &[],
        )
        .await
        .unwrap();
    let claimed: Vec<String> = rows
        .iter()
        .map(|row| format!("{}:{}", row.get::<_, i64>(0), row.get::<_, String>(1)))
        .collect();
    let expected: Vec<String> = (0..12)
        .map(|sequence| format!("{sequence}:{}", cycle[sequence % 6]))
        .collect();
    assert_eq!(claimed, expected);
}

//! Unit tests of the in-memory executor.

use super::*;
use statek_core::RunError;

fn tenant(name: &str) -> TenantId {
    TenantId::try_from(name).unwrap()
}

async fn ok(_run: Run, _cancel: CancellationToken) -> Result<(), RunError> {
    Ok(())
}

fn executed_id(outcome: TenantTickOutcome) -> Uuid {
    match outcome {
        TenantTickOutcome::Executed(run) => run.run_id,
        other => panic!("expected Executed, got {other:?}"),
    }
}

#[test]
fn enqueue_limits() {
    let executor = InMemoryExecutor::new(ok, InMemoryExecutorOptions::new());
    let a = tenant("a");
    let big = vec![0; MAX_PAYLOAD_BYTES + 1];
    assert!(executor.enqueue(&a, big).is_err());
    assert!(executor
        .enqueue_with(&a, vec![], 0, Duration::ZERO)
        .is_err());
    assert!(executor
        .enqueue_with(&a, vec![], 1001, Duration::ZERO)
        .is_err());
    assert!(executor
        .enqueue_with(&a, vec![], 1, MAX_DELAY + Duration::from_secs(1))
        .is_err());
    assert_eq!(executor.count_live_runs(), 0);
}

#[tokio::test]
async fn delayed_runs_wait_and_fifo_follows_available_time() {
    let executor = InMemoryExecutor::new(ok, InMemoryExecutorOptions::new());
    let a = tenant("a");
    let shutdown = CancellationToken::new();
    let later = executor
        .enqueue_with(&a, vec![], 5, Duration::from_millis(300))
        .unwrap();
    let now = executor.enqueue(&a, vec![]).unwrap();
    assert!(later.available_at > now.available_at);
    assert_eq!(
        executor.has_claimable_work(std::slice::from_ref(&a)).await,
        Some(true)
    );
    let first = executor.execute_one(&a, &shutdown).await.unwrap();
    assert_eq!(executed_id(first), now.run_id);
    assert_eq!(
        executor.has_claimable_work(std::slice::from_ref(&a)).await,
        Some(false)
    );
    assert_eq!(
        executor.execute_one(&a, &shutdown).await.unwrap(),
        TenantTickOutcome::Idle
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = executor.execute_one(&a, &shutdown).await.unwrap();
    assert_eq!(executed_id(second), later.run_id);
    assert_eq!(executor.count_live_runs(), 0);
}

#[tokio::test]
async fn other_tenants_and_shutdown() {
    let executor = InMemoryExecutor::new(ok, InMemoryExecutorOptions::new());
    let shutdown = CancellationToken::new();
    executor.enqueue(&tenant("b"), vec![]).unwrap();
    assert_eq!(
        executor.execute_one(&tenant("a"), &shutdown).await.unwrap(),
        TenantTickOutcome::Idle
    );
    shutdown.cancel();
    assert_eq!(
        executor.execute_one(&tenant("b"), &shutdown).await.unwrap(),
        TenantTickOutcome::Cancelled
    );
    assert_eq!(executor.count_live_runs(), 1);
}

#[tokio::test]
async fn a_locked_run_is_contended_until_unlocked() {
    let executor = InMemoryExecutor::new(ok, InMemoryExecutorOptions::new());
    let a = tenant("a");
    let shutdown = CancellationToken::new();
    let run = executor.enqueue(&a, vec![]).unwrap();
    let lock = executor.lock_run(run.run_id).unwrap();
    assert!(executor.lock_run(run.run_id).is_none());
    assert!(executor.lock_run(Uuid::nil()).is_none());
    assert_eq!(
        executor.execute_one(&a, &shutdown).await.unwrap(),
        TenantTickOutcome::Contended
    );
    drop(lock);
    let executed = executor.execute_one(&a, &shutdown).await.unwrap();
    assert_eq!(executed_id(executed), run.run_id);
}

#[tokio::test]
async fn cancelling_a_running_run_fires_its_token_at_the_next_heartbeat() {
    let handler = |_run: Run, cancel: CancellationToken| async move {
        cancel.cancelled().await;
        Err::<(), _>(RunError::new("stopped"))
    };
    let options = InMemoryExecutorOptions::new()
        .lease(Duration::from_millis(300))
        .unwrap();
    let executor = InMemoryExecutor::new(handler, options);
    let a = tenant("a");
    let run = executor.enqueue(&a, vec![]).unwrap();
    let ticking = {
        let executor = executor.clone();
        let a = a.clone();
        tokio::spawn(async move {
            executor
                .execute_one(&a, &CancellationToken::new())
                .await
                .unwrap()
        })
    };
    while executor.run(run.run_id).unwrap().state != MemoryRunState::Running {
        tokio::task::yield_now().await;
    }
    assert!(executor.cancel_run(run.run_id));
    assert!(!executor.cancel_run(run.run_id));
    match ticking.await.unwrap() {
        TenantTickOutcome::ExecutionFailed {
            run: executed,
            error,
        } => {
            assert_eq!(executed.run_id, run.run_id);
            assert_eq!(error, "lease lost while the handler ran");
        }
        other => panic!("expected ExecutionFailed, got {other:?}"),
    }
    let status = executor.run(run.run_id).unwrap();
    assert_eq!(
        (status.state, status.attempt),
        (MemoryRunState::Cancelled, 1)
    );
    assert_eq!(executor.count_live_runs(), 0);
}

#[tokio::test]
async fn claimable_work_counts_only_the_given_tenants() {
    let executor = InMemoryExecutor::new(ok, InMemoryExecutorOptions::new());
    let (a, outsider) = (tenant("a"), tenant("outsider"));
    executor.enqueue(&outsider, vec![]).unwrap();
    assert_eq!(
        executor.has_claimable_work(std::slice::from_ref(&a)).await,
        Some(false)
    );
    assert_eq!(
        executor
            .has_claimable_work(std::slice::from_ref(&outsider))
            .await,
        Some(true)
    );
    executor.enqueue(&a, vec![]).unwrap();
    assert_eq!(
        executor.has_claimable_work(std::slice::from_ref(&a)).await,
        Some(true)
    );
}

/// Cost mode's charges on the queue itself: an attempt claimed by a
/// cost-mode slot is charged once (its report at its finish; the default
/// when its lease expired and another claim took it over); an attempt
/// claimed outside cost mode is never charged.
#[tokio::test]
async fn cost_mode_charges_each_attempt_once() {
    use statek_policy::CostFairness;
    let cost = CostFairness::new(5, 10, 6, 20).unwrap();
    let clock = Clock::now();
    let lease = Duration::from_millis(20);
    let a = tenant("a");
    let mut queue = Queue::default();
    assert_eq!(queue.balance(&a), None);
    let now = Instant::now();
    let first = queue.enqueue(&a, vec![], 3, 0, now, now);
    let second = queue.enqueue(&a, vec![], 3, 0, now, now);
    // 0 + 5; claim the first run.
    assert_eq!(queue.credit(&a, &cost).balance, 5);
    let Claim::Claimed(run, token) = queue.claim(&a, lease, &clock, true) else {
        panic!("expected a claim");
    };
    assert_eq!(run.run_id, first);
    // Its lease expires; the next cost-mode claim takes it over and
    // charges the expired attempt the default, 6: 5 − 6.
    tokio::time::sleep(Duration::from_millis(40)).await;
    let Claim::Claimed(again, retaken) = queue.claim(&a, lease, &clock, true) else {
        panic!("expected a claim");
    };
    assert_eq!((again.run_id, again.attempt), (first, 2));
    assert_eq!(queue.balance(&a), Some(-1));
    // The old holder's finish is refused and charges nothing.
    assert!(!queue.complete(first, token, Some(1)));
    assert_eq!(queue.balance(&a), Some(-1));
    // The new holder reports 50, charged C_max = 10.
    assert!(queue.complete(first, retaken, Some(50)));
    assert_eq!(queue.balance(&a), Some(-11));
    // A claim outside cost mode (`execute_one`) is never charged.
    let Claim::Claimed(other, other_token) = queue.claim(&a, lease, &clock, false) else {
        panic!("expected a claim");
    };
    assert_eq!(other.run_id, second);
    assert!(queue.fail(second, other_token, "boom", Duration::ZERO, Some(3)));
    assert_eq!(queue.balance(&a), Some(-11));
    // A new cap cuts nothing negative: −11 + 5 = −6 with b_cap 0.
    let tighter = CostFairness::new(5, 10, 6, 0).unwrap();
    assert_eq!(queue.credit(&a, &tighter).balance, -6);
}

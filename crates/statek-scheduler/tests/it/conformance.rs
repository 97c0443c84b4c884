//! statek's executor conformance suite
//! (`statek_testing::executor_conformance`) run
//! against both executors statek ships: `PgRunQueueExecutor` (one fresh
//! database per case, so it needs `STATEK_TEST_DATABASE_URL`) and
//! `InMemoryExecutor` (no database). The harnesses below are also the
//! model for a user's own executor.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantId};
use statek_scheduler::{ExecutorOptions, PgRunQueueExecutor};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{NewRun, PgStore};
use statek_testing::executor_conformance::{
    self as conformance, Harness, Settings, Status, SuiteHandler,
};
use statek_testing::{
    InMemoryExecutor, InMemoryExecutorOptions, InMemoryReservations, MemoryRunLock, MemoryRunState,
};
use tokio::sync::oneshot;
use uuid::Uuid;

/// The PostgreSQL run queue, one fresh database per case.
struct Pg {
    store: PgStore,
    db: TestDatabase,
}

impl Harness for Pg {
    type Executor = PgRunQueueExecutor<SuiteHandler>;
    type Lock = (oneshot::Sender<()>, tokio::task::JoinHandle<()>);
    type Source = PgStore;

    fn source(&self) -> PgStore {
        self.store.clone()
    }

    async fn next_sequence(&self, shard: &SchedulerShardId) -> u64 {
        self.store.next_sequence(shard).await.unwrap()
    }

    async fn new(handler: SuiteHandler, s: Settings) -> (Self, Self::Executor) {
        let db = TestDatabase::create().await;
        let options = ExecutorOptions::new()
            .lease(s.lease)
            .unwrap()
            .heartbeat_every(s.heartbeat_every)
            .unwrap()
            .retry_backoff(s.retry_initial, s.retry_max)
            .unwrap();
        let store = db.store();
        let executor = PgRunQueueExecutor::new(db.store(), handler, options);
        (Self { store, db }, executor)
    }

    async fn enqueue(&self, tenant: &TenantId, payload: &[u8], max_attempts: u32) -> Uuid {
        let run = NewRun::new(tenant.clone(), payload.to_vec()).max_attempts(max_attempts);
        self.store.enqueue(&run).await.unwrap().run_id
    }

    async fn enqueue_at(&self, tenant: &TenantId, payload: &[u8], priority: i32) -> Uuid {
        let run = NewRun::new(tenant.clone(), payload.to_vec()).priority(priority);
        self.store.enqueue(&run).await.unwrap().run_id
    }

    async fn status(&self, run_id: Uuid) -> Status {
        let row = self
            .db
            .client()
            .await
            .query_one(
                "SELECT state, attempt, last_error FROM statek.runs WHERE run_id = $1",
                &[&run_id],
            )
            .await
            .unwrap();
        let state: String = row.get(0);
        let attempt: i32 = row.get(1);
        let history = self.store.run_history(&[run_id]).await.unwrap();
        Status {
            state: state_name(&state),
            attempt: u32::try_from(attempt).unwrap(),
            last_error: row.get(2),
            attempt_costs: history[0].claims.iter().map(|claim| claim.cost).collect(),
        }
    }

    /// Another session: `SELECT … FOR UPDATE` in an open transaction,
    /// rolled back on unlock.
    async fn lock(&self, run_id: Uuid) -> Self::Lock {
        let db = self.db.clone();
        let (locked_tx, locked_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel::<()>();
        let session = tokio::spawn(async move {
            let client = db.client().await;
            client.batch_execute("BEGIN").await.unwrap();
            let rows = client
                .query(
                    "SELECT 1 FROM statek.runs WHERE run_id = $1 FOR UPDATE",
                    &[&run_id],
                )
                .await
                .unwrap();
            locked_tx.send(rows.len()).unwrap();
            let _ = release_rx.await;
            client.batch_execute("ROLLBACK").await.unwrap();
        });
        assert_eq!(locked_rx.await.unwrap(), 1);
        (release_tx, session)
    }

    async fn unlock(&self, (release, session): Self::Lock) {
        release.send(()).unwrap();
        session.await.unwrap();
    }

    async fn count_by_state(&self, ids: &[Uuid]) -> BTreeMap<(&'static str, u32), usize> {
        let rows = self
            .db
            .client()
            .await
            .query(
                "SELECT state, attempt, count(*) FROM statek.runs
                 WHERE run_id = ANY($1) GROUP BY state, attempt",
                &[&ids],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|row| {
                let state: String = row.get(0);
                let attempt: i32 = row.get(1);
                let count: i64 = row.get(2);
                (
                    (state_name(&state), u32::try_from(attempt).unwrap()),
                    usize::try_from(count).unwrap(),
                )
            })
            .collect()
    }
}

fn state_name(state: &str) -> &'static str {
    match state {
        "available" => "available",
        "running" => "running",
        "completed" => "completed",
        "failed" => "failed",
        "cancelled" => "cancelled",
        other => panic!("unknown state {other}"),
    }
}

/// The in-process run queue.
struct Memory {
    executor: InMemoryExecutor<SuiteHandler>,
    source: InMemoryReservations,
}

impl Harness for Memory {
    type Executor = InMemoryExecutor<SuiteHandler>;
    type Lock = MemoryRunLock;
    type Source = InMemoryReservations;

    fn source(&self) -> InMemoryReservations {
        self.source.clone()
    }

    async fn next_sequence(&self, shard: &SchedulerShardId) -> u64 {
        self.source.next_sequence(shard).unwrap()
    }

    async fn new(handler: SuiteHandler, s: Settings) -> (Self, Self::Executor) {
        let options = InMemoryExecutorOptions::new()
            .lease(s.lease)
            .unwrap()
            .heartbeat_every(s.heartbeat_every)
            .unwrap()
            .retry_backoff(s.retry_initial, s.retry_max)
            .unwrap();
        let executor = InMemoryExecutor::new(handler, options);
        (
            Self {
                executor: executor.clone(),
                source: InMemoryReservations::new(),
            },
            executor,
        )
    }

    async fn enqueue(&self, tenant: &TenantId, payload: &[u8], max_attempts: u32) -> Uuid {
        self.executor
            .enqueue_with(tenant, payload.to_vec(), max_attempts, Duration::ZERO)
            .unwrap()
            .run_id
    }

    async fn enqueue_at(&self, tenant: &TenantId, payload: &[u8], priority: i32) -> Uuid {
        self.executor
            .enqueue_prioritised(tenant, payload.to_vec(), 5, Duration::ZERO, priority)
            .unwrap()
            .run_id
    }

    async fn status(&self, run_id: Uuid) -> Status {
        let run = self.executor.run(run_id).unwrap();
        Status {
            state: match run.state {
                MemoryRunState::Available => "available",
                MemoryRunState::Running => "running",
                MemoryRunState::Completed => "completed",
                MemoryRunState::Failed => "failed",
                MemoryRunState::Cancelled => "cancelled",
                other => panic!("unknown state {other:?}"),
            },
            attempt: run.attempt,
            last_error: run.last_error,
            attempt_costs: run.attempt_costs,
        }
    }

    async fn lock(&self, run_id: Uuid) -> MemoryRunLock {
        self.executor.lock_run(run_id).unwrap()
    }

    async fn unlock(&self, lock: MemoryRunLock) {
        drop(lock);
    }

    async fn count_by_state(&self, ids: &[Uuid]) -> BTreeMap<(&'static str, u32), usize> {
        let mut counts = BTreeMap::new();
        for id in ids {
            let status = self.status(*id).await;
            *counts.entry((status.state, status.attempt)).or_insert(0) += 1;
        }
        counts
    }
}

macro_rules! conformance_suite {
    ($module:ident, $harness:ty) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fifo_per_tenant() {
                conformance::fifo_per_tenant::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tenant_isolation() {
                conformance::tenant_isolation::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn priorities_order_a_tenant_and_never_cross_tenants() {
                conformance::priorities_order_a_tenant_and_never_cross_tenants::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn idle_tenant_consumes_its_slot() {
                conformance::idle_tenant_consumes_its_slot::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn failing_handler_retries_then_fails() {
                conformance::failing_handler_retries_then_fails::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn reported_costs_are_kept_with_their_attempts() {
                conformance::reported_costs_are_kept_with_their_attempts::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn in_flight_run_is_not_waited_for() {
                conformance::in_flight_run_is_not_waited_for::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn locked_runs_are_skipped_then_contended() {
                conformance::locked_runs_are_skipped_then_contended::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_expired_lease_is_claimed_again() {
                conformance::an_expired_lease_is_claimed_again::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_batch_claims_per_slot_in_sequence_order() {
                conformance::a_batch_claims_per_slot_in_sequence_order::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_batch_runs_its_runs_concurrently() {
                conformance::a_batch_runs_its_runs_concurrently::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cost_mode_debt_is_repaid_by_slots() {
                conformance::cost_mode_debt_is_repaid_by_slots::<$harness>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sixteen_tickers_execute_each_run_once() {
                conformance::sixteen_tickers_execute_each_run_once::<$harness>().await;
            }
        }
    };
}

conformance_suite!(pg, Pg);
conformance_suite!(memory, Memory);

/// The entry point a user calls ([`conformance::exercise`]) runs every
/// case: here against the in-memory executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exercise_runs_every_case() {
    assert_eq!(conformance::CASES.len(), 13);
    conformance::exercise::<Memory>().await;
}

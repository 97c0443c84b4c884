//! Finished runs are never dropped while the process lives, against a real
//! PostgreSQL with real faults: the PostgreSQL executor's completions go
//! through a relay that loses a commit acknowledgement, refuses
//! connections for longer than a lease, or whose backends are terminated
//! (`pg_terminate_backend`), and its batch claim loses its
//! acknowledgement. Reservations go directly to the server, so each fault
//! hits the executor's own statements.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, PgScheduler, Run,
    RunHandler, RunResult, SchedulerOptions, TenantTickOutcome,
};
use statek_store_pg::testing::fault_proxy::{Fault, FaultProxy};
use statek_store_pg::testing::{test_store_config, TestDatabase};
use statek_store_pg::{ClaimOutcome, NewRun, PgStore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Cycle [t-a, t-b].
fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("t-a", 1), ("t-b", 1)])
}

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

/// What the handler does once per execution, before it returns `Ok`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Act {
    /// Nothing.
    Nothing,
    /// Arms the relay to lose the next commit acknowledgement (once).
    LoseNextAck,
    /// Takes the relay down for 2.5 s (once).
    Outage,
    /// Terminates every other backend of the test database (once).
    TerminateBackends,
    /// Waits 700 ms (past a 500 ms lease); `t-a`'s run is then claimed by
    /// another claimer.
    OutliveLease,
}

struct Handler {
    act: Act,
    once: AtomicBool,
    proxy: Arc<FaultProxy>,
    direct: PgStore,
    db: TestDatabase,
    /// Executions per run.
    executed: Mutex<BTreeMap<Uuid, u32>>,
}

impl RunHandler for Handler {
    async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
        *self.executed.lock().unwrap().entry(run.run_id).or_default() += 1;
        let first = !self.once.swap(true, Ordering::SeqCst);
        match self.act {
            Act::Nothing => {}
            Act::LoseNextAck if first => self.proxy.arm(Fault::AfterCommit),
            Act::Outage if first => {
                self.proxy.down();
                let proxy = Arc::clone(&self.proxy);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(2_500)).await;
                    proxy.up();
                });
            }
            Act::TerminateBackends if first => {
                let client = self.db.client().await;
                let terminated: i64 = client
                    .query_one(
                        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n
                         FROM pg_stat_activity
                         WHERE datname = current_database() AND pid <> pg_backend_pid()
                           AND backend_type = 'client backend'",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get("n");
                assert!(terminated >= 1, "{terminated}");
            }
            Act::OutliveLease => {
                tokio::time::sleep(Duration::from_millis(700)).await;
                if run.tenant.as_str() == "t-a" {
                    let taken = self
                        .direct
                        .claim_run(&run.tenant, Duration::from_secs(60))
                        .await
                        .unwrap();
                    assert!(matches!(taken, ClaimOutcome::Claimed(_)), "{taken:?}");
                }
            }
            _ => {}
        }
        Ok(Completed::new())
    }
}

struct Setup {
    db: TestDatabase,
    proxy: Arc<FaultProxy>,
    scheduler: PgScheduler<PgRunQueueExecutor<Handler>>,
    runs: BTreeMap<String, Uuid>,
}

/// One run for each tenant; the executor's store goes through a relay.
async fn setup(act: Act, options: ExecutorOptions) -> Setup {
    let db = TestDatabase::create().await;
    let direct = db.store();
    let proxy = Arc::new(FaultProxy::start(db.pg_config()).await);
    let through_proxy =
        PgStore::new(test_store_config(proxy.pg_config()).pool_size(2).unwrap()).unwrap();
    let mut runs = BTreeMap::new();
    for t in ["t-a", "t-b"] {
        let run = direct
            .enqueue(&NewRun::new(tenant(t), b"x".to_vec()))
            .await
            .unwrap();
        runs.insert(t.to_owned(), run.run_id);
    }
    let handler = Handler {
        act,
        once: AtomicBool::new(false),
        proxy: Arc::clone(&proxy),
        direct: direct.clone(),
        db: db.clone(),
        executed: Mutex::default(),
    };
    let executor = PgRunQueueExecutor::new(through_proxy, handler, options);
    let scheduler =
        DurableFairScheduler::register(direct, policy(), executor, SchedulerOptions::new())
            .await
            .unwrap();
    Setup {
        db,
        proxy,
        scheduler,
        runs,
    }
}

/// `(state, attempt)` of each run and the finish times of its claims, by
/// run id.
async fn evidence(db: &TestDatabase) -> BTreeMap<Uuid, (String, i32, Vec<bool>)> {
    let client = db.client().await;
    let mut out = BTreeMap::new();
    for row in client
        .query(
            "SELECT r.run_id, r.state, r.attempt,
                    array(SELECT c.finished_at IS NOT NULL FROM statek.run_attempts AS c
                          WHERE c.run_id = r.run_id ORDER BY c.attempt) AS finished
             FROM statek.runs AS r",
            &[],
        )
        .await
        .unwrap()
    {
        out.insert(
            row.get("run_id"),
            (row.get("state"), row.get("attempt"), row.get("finished")),
        );
    }
    out
}

fn completed_once(setup: &Setup) -> BTreeMap<Uuid, (String, i32, Vec<bool>)> {
    setup
        .runs
        .values()
        .map(|id| (*id, ("completed".to_owned(), 1, vec![true])))
        .collect()
}

fn executed_once(setup: &Setup) -> BTreeMap<Uuid, u32> {
    setup.runs.values().map(|id| (*id, 1)).collect()
}

fn executions(setup: &Setup) -> BTreeMap<Uuid, u32> {
    setup
        .scheduler
        .executor()
        .handler()
        .executed
        .lock()
        .unwrap()
        .clone()
}

/// Runs one batch of both slots; the run id each slot executed, or its
/// outcome's label.
async fn tick_both(setup: &Setup) -> Vec<Result<Uuid, String>> {
    let outcomes = setup
        .scheduler
        .tick_batch(2, &CancellationToken::new())
        .await
        .unwrap();
    outcomes
        .into_iter()
        .map(|outcome| match outcome.unwrap().tenant_outcome() {
            TenantTickOutcome::Executed(run) => Ok(run.run_id),
            TenantTickOutcome::ExecutionFailed { error, .. } => Err(error.clone()),
            other => Err(other.label().to_owned()),
        })
        .collect()
}

fn both_executed(setup: &Setup) -> Vec<Result<Uuid, String>> {
    vec![Ok(setup.runs["t-a"]), Ok(setup.runs["t-b"])]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_whose_acknowledgement_is_lost_commits_once() {
    let setup = setup(Act::LoseNextAck, ExecutorOptions::new()).await;
    assert_eq!(tick_both(&setup).await, both_executed(&setup));
    assert_eq!(setup.proxy.fired(), 1);
    assert_eq!(evidence(&setup.db).await, completed_once(&setup));
    assert_eq!(executions(&setup), executed_once(&setup));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_run_record_whose_acknowledgement_is_lost_commits_once() {
    // `tick` records its run alone, with the same retries.
    let setup = setup(Act::LoseNextAck, ExecutorOptions::new()).await;
    let shutdown = CancellationToken::new();
    let first = setup.scheduler.tick(&shutdown).await.unwrap();
    assert_eq!(
        first.tenant_outcome().label(),
        "executed",
        "{:?}",
        first.tenant_outcome()
    );
    assert_eq!(setup.proxy.fired(), 1);
    let second = setup.scheduler.tick(&shutdown).await.unwrap();
    assert_eq!(second.tenant_outcome().label(), "executed");
    assert_eq!(evidence(&setup.db).await, completed_once(&setup));
    assert_eq!(executions(&setup), executed_once(&setup));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_across_an_outage_longer_than_the_lease_commits_once() {
    // Lease 1 s, no heartbeats; the relay refuses connections for 2.5 s
    // from the moment the first handler ran. Nobody else claims the runs,
    // so their tokens still hold when the server is back.
    let options = ExecutorOptions::new()
        .lease(Duration::from_secs(1))
        .unwrap()
        .heartbeat_every(None)
        .unwrap();
    let setup = setup(Act::Outage, options).await;
    assert_eq!(tick_both(&setup).await, both_executed(&setup));
    assert_eq!(evidence(&setup.db).await, completed_once(&setup));
    assert_eq!(executions(&setup), executed_once(&setup));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_whose_connection_is_terminated_commits_once() {
    let setup = setup(Act::TerminateBackends, ExecutorOptions::new()).await;
    assert_eq!(tick_both(&setup).await, both_executed(&setup));
    assert_eq!(evidence(&setup.db).await, completed_once(&setup));
    assert_eq!(executions(&setup), executed_once(&setup));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_reports_lease_lost_for_the_run_another_claim_took_alone() {
    // Lease 500 ms, no heartbeats, both runs in one flush (up to 2 runs,
    // 1 s linger). Both handlers outlive their leases; t-a's run is then
    // claimed by another claimer, t-b's is not: its token still holds.
    let options = ExecutorOptions::new()
        .lease(Duration::from_millis(500))
        .unwrap()
        .heartbeat_every(None)
        .unwrap()
        .completion_batching(2, Duration::from_secs(1))
        .unwrap();
    let setup = setup(Act::OutliveLease, options).await;
    assert_eq!(
        tick_both(&setup).await,
        [
            Err("lease lost before completion was recorded".to_owned()),
            Ok(setup.runs["t-b"]),
        ]
    );
    assert_eq!(
        evidence(&setup.db).await,
        BTreeMap::from([
            (
                setup.runs["t-a"],
                ("running".to_owned(), 2, vec![false, false])
            ),
            (setup.runs["t-b"], ("completed".to_owned(), 1, vec![true])),
        ])
    );
    assert_eq!(executions(&setup), executed_once(&setup));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_claim_whose_acknowledgement_is_lost_runs_its_runs_at_once() {
    // Lease 60 s: a claim abandoned to its lease would leave both slots
    // without a run here.
    let options = ExecutorOptions::new()
        .lease(Duration::from_secs(60))
        .unwrap();
    let setup = setup(Act::Nothing, options).await;
    // The executor's first commit point through the relay is the claim.
    setup.proxy.arm(Fault::AfterCommit);
    assert_eq!(tick_both(&setup).await, both_executed(&setup));
    assert_eq!(setup.proxy.fired(), 1);
    assert_eq!(evidence(&setup.db).await, completed_once(&setup));
    assert_eq!(executions(&setup), executed_once(&setup));
}

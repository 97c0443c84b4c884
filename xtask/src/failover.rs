//! `cargo xtask failover`: a real failover under load, run by `cargo xtask
//! test` on PostgreSQL 17.
//!
//! Each trial starts a durable primary and a streaming standby (fresh pair),
//! registers a shard, and runs replicas (each its own `PgStore` on a
//! multi-host URL with `target_session_attrs=read-write`) that reserve in a
//! loop, plus a `Worker` executing runs. Then the primary is killed with
//! SIGKILL, the standby promoted, and the load goes on against it.
//!
//! - Asynchronous trial, lag forced (the walsender is stopped for 1 s before
//!   the crash): acknowledged reservations are lost, and every replica that
//!   lost one reports exactly its lost ids (`ReservationsLostInFailover`)
//!   before it reserves on the new primary; none goes unreported.
//! - Synchronous trials (`synchronous_standby_names` set, statek's default
//!   `synchronous_commit = on`): no acknowledged reservation is lost, every
//!   replay returns its original sequence, and the promoted server's
//!   sequences are contiguous.
//!
//! The durability check is asserted on both kinds of pair: an asynchronous
//! standby is a refused risk, a synchronous one is none.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunError, RunHandler,
    SchedulerOptions, Worker, WorkerOptions,
};
use statek_store_pg::{DurabilityPolicy, DurabilityRisk, NewRun, PgStore, StoreConfig, StoreError};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::pg::{self, PgMajor, ReplicaPair, Replication};

/// Options of `cargo xtask failover`.
#[derive(Debug, Clone, clap::Args)]
pub struct FailoverArgs {
    /// Synchronous failovers (each on a fresh pair).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub synchronous: u32,
    /// Asynchronous failovers with forced lag (each on a fresh pair).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=50))]
    pub asynchronous: u32,
    /// Reserving replicas per trial.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub replicas: u32,
    /// PostgreSQL major version.
    #[arg(long, value_enum, default_value_t = PgMajor::V17)]
    pub pg: PgMajor,
}

/// One replica's acknowledged reservations and what it reported.
#[derive(Debug, Default)]
struct ReplicaLog {
    /// (id, sequence, timeline) in acknowledgement order.
    acknowledged: Vec<(Uuid, u64, u32)>,
    /// Replays (a retry after an error found the reservation): (id, sequence).
    replays: Vec<(Uuid, u64)>,
    /// The ids it reported lost, and whether it had reserved on the new
    /// timeline before reporting.
    reported: Option<(Vec<Uuid>, bool)>,
    /// Its first acknowledgement on the new timeline.
    first_on_new: Option<Instant>,
}

/// What one trial measured.
#[derive(Debug)]
struct Trial {
    replication: Replication,
    stall: bool,
    acknowledged: usize,
    lost: usize,
    reported: usize,
    replays: usize,
    promoted_cursor: u64,
    crash_to_first: Option<Duration>,
    runs_completed: u64,
}

struct NoopHandler;

impl RunHandler for NoopHandler {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> Result<(), RunError> {
        Ok(())
    }
}

fn policy() -> Result<WeightedFairnessPolicy> {
    Ok(WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("failover-v1")?,
        [
            TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?,
            TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?,
        ],
    )?)
}

fn store(url: &str, policy: DurabilityPolicy) -> Result<PgStore> {
    store_waiting(url, policy, Duration::from_secs(10))
}

/// The set-up (migrations, registration, 2,000 enqueues) waits longer
/// than the workload: on a loaded machine (CI, or builds beside it) a
/// migration's or a synchronous commit's fsyncs on primary and standby
/// took more than 10 s.
fn setup_store(url: &str, policy: DurabilityPolicy) -> Result<PgStore> {
    store_waiting(url, policy, Duration::from_secs(120))
}

fn store_waiting(url: &str, policy: DurabilityPolicy, response: Duration) -> Result<PgStore> {
    Ok(PgStore::new(
        StoreConfig::from_url(url)?
            .pool_size(2)?
            .create_timeout(Duration::from_secs(2))?
            // A crashed primary closes its sockets, so the workload never
            // waits this long for it.
            .response_timeout(response)?
            .durability_policy(policy),
    )?)
}

/// Runs the trials; fails on the first broken promise.
pub fn run(args: &FailoverArgs) -> Result<()> {
    let server = pg::Server::provision(args.pg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut trials = Vec::new();
    let plan = std::iter::repeat_n(Replication::Asynchronous, args.asynchronous as usize).chain(
        std::iter::repeat_n(Replication::Synchronous, args.synchronous as usize),
    );
    for (index, replication) in plan.enumerate() {
        let pair = server.start_pair(replication)?;
        // Every asynchronous trial, and every second synchronous one, holds
        // replication back for 1 s before the crash.
        let stall = replication == Replication::Asynchronous || index % 2 == 0;
        let trial = runtime
            .block_on(trial(&pair, replication, args.replicas, stall))
            .with_context(|| format!("failover trial {} ({replication:?})", index + 1))?;
        println!(
            "failover {}: {:?}{}: {} acknowledged, {} lost, {} reported lost, {} replays, \
             promoted cursor {}, crash to first reservation on the new primary {}, {} runs completed",
            index + 1,
            trial.replication,
            if trial.stall { " (replication stalled 1 s)" } else { "" },
            trial.acknowledged,
            trial.lost,
            trial.reported,
            trial.replays,
            trial.promoted_cursor,
            trial
                .crash_to_first
                .map_or_else(|| "n/a".to_owned(), |d| format!("{} ms", d.as_millis())),
            trial.runs_completed
        );
        pair.stop()?;
        trials.push(trial);
    }
    let synchronous: Vec<&Trial> = trials
        .iter()
        .filter(|t| t.replication == Replication::Synchronous)
        .collect();
    println!(
        "failover: {} trials; synchronous: {} failovers, {} acknowledged, {} lost; \
         asynchronous with lag: {} lost, {} reported",
        trials.len(),
        synchronous.len(),
        synchronous.iter().map(|t| t.acknowledged).sum::<usize>(),
        synchronous.iter().map(|t| t.lost).sum::<usize>(),
        trials
            .iter()
            .filter(|t| t.replication == Replication::Asynchronous)
            .map(|t| t.lost)
            .sum::<usize>(),
        trials
            .iter()
            .filter(|t| t.replication == Replication::Asynchronous)
            .map(|t| t.reported)
            .sum::<usize>(),
    );
    Ok(())
}

async fn trial(
    pair: &ReplicaPair,
    replication: Replication,
    replicas: u32,
    stall: bool,
) -> Result<Trial> {
    let policy = policy()?;
    let url = pair.failover_url();

    // The durability check sees the standby as it is.
    let strict = setup_store(&pair.primary_url(), DurabilityPolicy::Require)?;
    strict.migrate().await.context("migrations")?;
    let report = strict
        .durability_report()
        .await
        .context("durability report")?;
    match replication {
        Replication::Asynchronous => {
            ensure!(
                report.risks()
                    == vec![DurabilityRisk::AsynchronousStandbys {
                        standbys: vec![pg::STANDBY_NAME.to_owned()]
                    }],
                "asynchronous pair: {report}"
            );
            ensure!(
                matches!(
                    strict.register(&policy).await,
                    Err(StoreError::DurabilityRefused { .. })
                ),
                "the default policy must refuse an asynchronous standby"
            );
        }
        Replication::Synchronous => {
            ensure!(
                report.risks().is_empty(),
                "synchronous pair has risks: {report}"
            );
        }
    }
    let accepted = match replication {
        Replication::Asynchronous => DurabilityPolicy::AllowAsynchronousStandbys,
        Replication::Synchronous => DurabilityPolicy::Require,
    };
    let admin = setup_store(&url, accepted)?;
    admin.register(&policy).await.context("registration")?;
    let tenant_a = TenantId::try_from("tenant-a")?;
    for _ in 0..2_000 {
        admin
            .enqueue(&NewRun::new(tenant_a.clone(), Vec::new()))
            .await
            .context("enqueue")?;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let new_timeline = Arc::new(AtomicU64::new(0));
    let logs: Vec<Arc<Mutex<ReplicaLog>>> = (0..replicas)
        .map(|_| Arc::new(Mutex::new(ReplicaLog::default())))
        .collect();
    let mut tasks = Vec::new();
    for log in &logs {
        let store = store(&url, accepted)?;
        let (policy, log, stop, new_timeline) = (
            policy.clone(),
            Arc::clone(log),
            Arc::clone(&stop),
            Arc::clone(&new_timeline),
        );
        tasks.push(tokio::spawn(async move {
            reserve_loop(store, policy, log, stop, new_timeline).await
        }));
    }
    // One Worker executing runs on the same shard (restarted after a
    // transient end, as a supervisor would).
    let worker_stop = CancellationToken::new();
    let worker = {
        let store = store(&url, accepted)?;
        let policy = policy.clone();
        let stop = worker_stop.clone();
        tokio::spawn(async move { worker_loop(store, policy, stop).await })
    };

    tokio::time::sleep(Duration::from_millis(1_500)).await;
    if stall {
        // Hold replication back: what an asynchronous standby will miss,
        // and what a synchronous one makes commits wait for.
        let pid = walsender_pid(&pair.primary_url()).await?;
        pair.signal_walsender(pid, "STOP")?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let crashed_at = Instant::now();
    pair.crash_primary()?;
    pair.promote_standby()?;
    let promoted = connect(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres",
        pair.standby_port
    ))
    .await?;
    let timeline: i32 = promoted
        .query_one("SELECT statek.server_timeline()", &[])
        .await?
        .get(0);
    let checkpoint_timeline: i32 = promoted
        .query_one("SELECT timeline_id FROM pg_control_checkpoint()", &[])
        .await?
        .get(0);
    ensure!(timeline == 2, "promoted timeline {timeline}, expected 2");
    eprintln!(
        "xtask: promoted; pg_walfile_name shows timeline {timeline} at once, \
         pg_control_checkpoint() shows {checkpoint_timeline}"
    );
    new_timeline.store(2, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await??;
    }
    worker_stop.cancel();
    let runs_completed = worker.await??;

    // What the promoted server holds.
    // A row is one reservation or one batch (a range of `sequence_count`
    // sequences from `sequence`, migration V5: the Worker reserves in
    // batches); `held` maps each row's id to its first sequence.
    let rows = promoted
        .query(
            "SELECT reservation_id, sequence, sequence_count FROM statek.scheduler_reservations
             WHERE shard_id = 'failover-v1' ORDER BY sequence",
            &[],
        )
        .await?;
    let held: HashMap<Uuid, u64> = rows
        .iter()
        .map(|row| {
            (
                row.get(0),
                u64::try_from(row.get::<_, i64>(1)).unwrap_or(u64::MAX),
            )
        })
        .collect();
    let mut sequences: Vec<u64> = Vec::new();
    for row in &rows {
        let first = u64::try_from(row.get::<_, i64>(1)).unwrap_or(u64::MAX);
        let count = u64::try_from(row.get::<_, i32>(2)).unwrap_or(0);
        sequences.extend(first..first.saturating_add(count));
    }
    let cursor: i64 = promoted
        .query_one(
            "SELECT next_sequence FROM statek.scheduler_shards WHERE shard_id = 'failover-v1'",
            &[],
        )
        .await?
        .get(0);
    let cursor = u64::try_from(cursor)?;
    ensure!(
        sequences == (0..cursor).collect::<Vec<_>>(),
        "the promoted server's sequences are not 0..{cursor} (holes or repeats)"
    );

    let mut acknowledged = 0;
    let mut lost_total = 0;
    let mut reported_total = 0;
    let mut replays = 0;
    let mut first_on_new: Option<Instant> = None;
    for (index, log) in logs.iter().enumerate() {
        let log = log.lock().map_err(|_| anyhow::anyhow!("poisoned log"))?;
        acknowledged += log.acknowledged.len();
        replays += log.replays.len();
        // An id acknowledged twice must carry one sequence.
        let mut by_id: BTreeMap<Uuid, u64> = BTreeMap::new();
        for &(id, sequence, _) in &log.acknowledged {
            if let Some(previous) = by_id.insert(id, sequence) {
                ensure!(
                    previous == sequence,
                    "replica {index}: id {id} acknowledged at {previous} and {sequence}"
                );
            }
        }
        for &(id, sequence) in &log.replays {
            ensure!(
                by_id.get(&id) == Some(&sequence),
                "replica {index}: replay of {id} returned {sequence}, not its original sequence"
            );
        }
        let lost: HashSet<Uuid> = log
            .acknowledged
            .iter()
            .filter(|&&(id, sequence, timeline)| timeline == 1 && held.get(&id) != Some(&sequence))
            .map(|&(id, _, _)| id)
            .collect();
        lost_total += lost.len();
        if let Some((reported, reserved_first)) = &log.reported {
            reported_total += reported.len();
            let reported: HashSet<Uuid> = reported.iter().copied().collect();
            ensure!(
                reported == lost,
                "replica {index} reported {} lost ids, {} were lost",
                reported.len(),
                lost.len()
            );
            ensure!(
                !reserved_first,
                "replica {index} reserved on the new primary before it reported its loss"
            );
        } else {
            ensure!(
                lost.is_empty(),
                "replica {index} lost {} acknowledged reservations and did not report it",
                lost.len()
            );
        }
        if let Some(at) = log.first_on_new {
            first_on_new = Some(first_on_new.map_or(at, |f| f.min(at)));
        }
    }
    match replication {
        Replication::Asynchronous => ensure!(
            lost_total > 0,
            "the forced lag lost nothing: the asynchronous trial proves nothing"
        ),
        Replication::Synchronous => {
            ensure!(lost_total == 0, "synchronous failover lost {lost_total}");
            ensure!(reported_total == 0, "synchronous failover reported losses");
        }
    }
    Ok(Trial {
        replication,
        stall,
        acknowledged,
        lost: lost_total,
        reported: reported_total,
        replays,
        promoted_cursor: cursor,
        crash_to_first: first_on_new.map(|at| at.saturating_duration_since(crashed_at)),
        runs_completed,
    })
}

async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

async fn walsender_pid(primary_url: &str) -> Result<i32> {
    let client = connect(primary_url).await?;
    let row = client
        .query_one(
            "SELECT pid FROM pg_stat_replication WHERE application_name = $1",
            &[&pg::STANDBY_NAME],
        )
        .await?;
    Ok(row.get(0))
}

/// Reserves until `stop`, retrying each id until it is acknowledged; ends
/// at a reported loss (the store halts the shard).
async fn reserve_loop(
    store: PgStore,
    policy: WeightedFairnessPolicy,
    log: Arc<Mutex<ReplicaLog>>,
    stop: Arc<AtomicBool>,
    new_timeline: Arc<AtomicU64>,
) -> Result<()> {
    let digest = policy.digest();
    while !stop.load(Ordering::SeqCst) {
        let id = Uuid::now_v7();
        let mut retried = false;
        loop {
            match store.reserve(policy.shard_id(), &digest, id).await {
                Ok(reservation) => {
                    let timeline = reservation.timeline().unwrap_or(0);
                    let mut log = log.lock().map_err(|_| anyhow::anyhow!("poisoned log"))?;
                    if retried && reservation.replayed() {
                        log.replays.push((id, reservation.sequence()));
                    }
                    log.acknowledged
                        .push((id, reservation.sequence(), timeline));
                    let new = u32::try_from(new_timeline.load(Ordering::SeqCst)).unwrap_or(0);
                    if new != 0 && timeline == new && log.first_on_new.is_none() {
                        log.first_on_new = Some(Instant::now());
                    }
                    break;
                }
                Err(StoreError::ReservationsLostInFailover(lost)) => {
                    let mut log = log.lock().map_err(|_| anyhow::anyhow!("poisoned log"))?;
                    let reserved_first = log.acknowledged.iter().any(|&(_, _, t)| t >= 2);
                    log.reported = Some((
                        lost.lost.iter().map(|l| l.reservation_id).collect(),
                        reserved_first,
                    ));
                    return Ok(());
                }
                Err(e) if e.is_retryable() => {
                    if stop.load(Ordering::SeqCst) && new_timeline.load(Ordering::SeqCst) == 0 {
                        return Ok(());
                    }
                    retried = true;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => bail!("replica reservation failed: {e}"),
            }
        }
    }
    Ok(())
}

/// A Worker on the shard, restarted after it ends on a transient error;
/// returns the runs it executed (counted from its tick outcomes, so a
/// Worker that ends with an error still counts its runs). A reported loss
/// ends it (as it should).
async fn worker_loop(
    store: PgStore,
    policy: WeightedFairnessPolicy,
    stop: CancellationToken,
) -> Result<u64> {
    let executed = Arc::new(AtomicU64::new(0));
    let (sink, mut outcomes) =
        tokio::sync::mpsc::unbounded_channel::<statek_scheduler::TickOutcome>();
    let counter = {
        let executed = Arc::clone(&executed);
        tokio::spawn(async move {
            while let Some(outcome) = outcomes.recv().await {
                if outcome.tenant_outcome().label() == "executed" {
                    executed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    while !stop.is_cancelled() {
        let executor = PgRunQueueExecutor::new(store.clone(), NoopHandler, ExecutorOptions::new());
        let scheduler = match DurableFairScheduler::register(
            store.clone(),
            policy.clone(),
            executor,
            SchedulerOptions::new().reserve_attempts(10)?,
        )
        .await
        {
            Ok(scheduler) => Arc::new(scheduler),
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match Worker::new(scheduler, WorkerOptions::new().concurrency(2)?)
            .with_outcome_sink(sink.clone())
            .run(stop.clone())
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_retryable() => {}
            Err(statek_scheduler::SchedulerError::Store {
                source: StoreError::ReservationsLostInFailover(_),
                ..
            }) => break,
            Err(e) => return Err(e.into()),
        }
    }
    drop(sink);
    counter.await?;
    Ok(executed.load(Ordering::Relaxed))
}

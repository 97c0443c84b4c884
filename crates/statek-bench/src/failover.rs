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

use statek_store_pg::DurabilityError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerOptions, Worker, WorkerOptions,
};
use statek_store_pg::{DurabilityPolicy, DurabilityRisk, NewRun, PgStore, StoreConfig, StoreError};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::failover_judge::{judge, Evidence, ReplicaLog};
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

/// What one trial measured.
#[derive(Debug)]
struct Trial {
    replication: Replication,
    stall: bool,
    acknowledged: usize,
    lost: usize,
    reported: usize,
    replays: usize,
    worker_lost: usize,
    refused: usize,
    promoted_cursor: u64,
    crash_to_first: Option<Duration>,
    runs_completed: u64,
}

struct NoopHandler;

impl RunHandler for NoopHandler {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        Ok(Completed::new())
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
            "failover {}: {:?}{}: {} acknowledged, {} lost, {} reported lost, {} replays \
             (each checked against the standby before the promotion), Worker batches lost {}, \
             {} replicas refused by the halt, promoted cursor {}, crash to first reservation \
             on the new primary {}, {} runs completed",
            index + 1,
            trial.replication,
            if trial.stall {
                " (replication stalled 1 s)"
            } else {
                ""
            },
            trial.acknowledged,
            trial.lost,
            trial.reported,
            trial.replays,
            trial.worker_lost,
            trial.refused,
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
                    Err(StoreError::Durability(DurabilityError::Refused { .. }))
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
    // transient end, as a supervisor would); its batches are judged too.
    let worker_stop = CancellationToken::new();
    let worker_batches: Arc<Mutex<Vec<(Uuid, u64)>>> = Arc::default();
    let worker = {
        let store = store(&url, accepted)?;
        let policy = policy.clone();
        let stop = worker_stop.clone();
        let batches = Arc::clone(&worker_batches);
        tokio::spawn(async move { worker_loop(store, policy, stop, batches).await })
    };
    // A second shard, reserved once on the old primary and never again
    // before the promotion: the first store to reserve on it afterwards
    // has nothing to re-read, and must halt it as unverified.
    let idle = idle_policy()?;
    let idle_first = if replication == Replication::Synchronous {
        admin.register(&idle).await.context("idle shard")?;
        let first = admin
            .reserve(idle.shard_id(), &idle.digest(), Uuid::now_v7())
            .await
            .context("idle shard's reservation")?;
        Some(first.sequence())
    } else {
        None
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
    // What the standby holds before the promotion, once it has replayed
    // all it received: what every replay must return.
    let before_promotion = standby_rows(pair.standby_port).await?;
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

    // The halts the database recorded, read by a new store on the new
    // primary (as an operator would).
    let operator = setup_store(&url, accepted)?;
    let halts = operator.shard_halts(policy.shard_id()).await?;
    let recorded_lost: HashMap<Uuid, u64> = halts
        .iter()
        .flat_map(|h| {
            h.lost
                .iter()
                .map(|l| (l.reservation_id, l.acknowledged_sequence))
        })
        .collect();
    let logs: Vec<ReplicaLog> = logs
        .iter()
        .map(|log| {
            log.lock()
                .map(|l| l.clone())
                .map_err(|_| anyhow::anyhow!("poisoned log"))
        })
        .collect::<Result<_>>()?;
    let evidence = Evidence {
        held,
        before_promotion,
        worker_batches: worker_batches
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned log"))?
            .clone(),
        recorded_lost,
    };
    let verdict = judge(replication == Replication::Asynchronous, &logs, &evidence)?;
    let first_on_new = logs.iter().filter_map(|l| l.first_on_new).min();
    match replication {
        Replication::Asynchronous => {
            check_halted_then_resumed(&operator, &policy, &halts, &evidence).await?;
        }
        Replication::Synchronous => {
            ensure!(halts.is_empty(), "a synchronous failover recorded halts");
            // A new store after the promotion (the live replicas reserved
            // on timeline 2 first): it reserves.
            operator
                .reserve(policy.shard_id(), &policy.digest(), Uuid::now_v7())
                .await
                .context("a new store after a failover without loss")?;
            if let Some(first) = idle_first {
                check_unverified(&operator, &idle, first).await?;
            }
        }
    }
    Ok(Trial {
        replication,
        stall,
        acknowledged: verdict.acknowledged,
        lost: verdict.lost,
        reported: verdict.reported,
        replays: verdict.replays,
        worker_lost: verdict.worker_lost,
        refused: verdict.refused,
        promoted_cursor: cursor,
        crash_to_first: first_on_new.map(|at| at.saturating_duration_since(crashed_at)),
        runs_completed,
    })
}

fn idle_policy() -> Result<WeightedFairnessPolicy> {
    Ok(WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("failover-idle-v1")?,
        [TenantFairnessWeight::new(
            TenantId::try_from("tenant-a")?,
            1,
        )?],
    )?)
}

/// After an asynchronous failover that lost reservations: the shard is
/// halted for a new store (a restarted process) too, an owner's resume
/// covers every lost sequence with its reissued ranges, and then the new
/// store reserves at the cursor.
async fn check_halted_then_resumed(
    operator: &PgStore,
    policy: &WeightedFairnessPolicy,
    halts: &[statek_store_pg::ShardHalt],
    evidence: &Evidence,
) -> Result<()> {
    ensure!(
        halts.iter().any(statek_store_pg::ShardHalt::is_open),
        "no open halt after a loss: {halts:?}"
    );
    match operator
        .reserve(policy.shard_id(), &policy.digest(), Uuid::now_v7())
        .await
    {
        Err(StoreError::Durability(DurabilityError::ShardHalted(h))) => ensure!(
            h.halts.len() == halts.iter().filter(|h| h.is_open()).count(),
            "a restarted process sees {} open halts, the database {}",
            h.halts.len(),
            halts.len()
        ),
        other => bail!("a restarted process was not refused by the halt: {other:?}"),
    }
    let resumed = operator
        .resume_shard(policy.shard_id(), Some("failover harness"))
        .await?;
    let ranges: Vec<_> = resumed
        .iter()
        .filter_map(|h| h.resume.as_ref().map(|r| r.reissued))
        .collect();
    for halt in &resumed {
        for lost in &halt.lost {
            for sequence in
                lost.acknowledged_sequence..lost.acknowledged_sequence + u64::from(lost.count)
            {
                ensure!(
                    ranges.iter().any(|r| r.contains(sequence)),
                    "lost sequence {sequence} is in no reissued range {ranges:?}"
                );
            }
        }
    }
    let cursor = operator.next_sequence(policy.shard_id()).await?;
    let next = operator
        .reserve(policy.shard_id(), &policy.digest(), Uuid::now_v7())
        .await
        .context("reserving after the resume")?;
    ensure!(
        next.sequence() == cursor,
        "after the resume the next reservation got {}, the cursor was {cursor}",
        next.sequence()
    );
    eprintln!(
        "xtask: {} halt(s) recorded {} lost id(s) ({} of them the Worker's batches); a restarted \
         process was refused; resumed with reissued ranges {:?}",
        halts.len(),
        evidence.recorded_lost.len(),
        evidence
            .worker_batches
            .iter()
            .filter(|(id, _)| evidence.recorded_lost.contains_key(id))
            .count(),
        ranges.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
    Ok(())
}

/// The idle shard, last reserved on timeline 1 and not since: a new store
/// halts it as unverified (from 1 to 2); after the resume it reserves.
async fn check_unverified(
    operator: &PgStore,
    idle: &WeightedFairnessPolicy,
    first: u64,
) -> Result<()> {
    let fresh = setup_store_for(operator)?;
    match fresh
        .reserve(idle.shard_id(), &idle.digest(), Uuid::now_v7())
        .await
    {
        Err(StoreError::Durability(DurabilityError::ShardHalted(h))) => {
            let halt = &h.halts[0];
            ensure!(
                h.halts.len() == 1
                    && halt.cause == statek_store_pg::HaltCause::Unverified
                    && (halt.from_timeline, halt.to_timeline) == (1, 2)
                    && halt.cursor_at_detection == first + 1,
                "unexpected unverified halt: {h:?}"
            );
        }
        other => bail!("a new store reserved on a shard last reserved on timeline 1: {other:?}"),
    }
    let resumed = operator.resume_shard(idle.shard_id(), None).await?;
    ensure!(
        resumed.len() == 1
            && resumed[0]
                .resume
                .as_ref()
                .map(|r| (r.reissued.first, r.reissued.end))
                == Some((first + 1, None)),
        "unexpected resume of the unverified halt: {resumed:?}"
    );
    let next = fresh
        .reserve(idle.shard_id(), &idle.digest(), Uuid::now_v7())
        .await?;
    ensure!(next.sequence() == first + 1, "after the resume: {next:?}");
    eprintln!("xtask: a new store halted the idle shard as unverified (timeline 1 to 2); resumed");
    Ok(())
}

fn setup_store_for(like: &PgStore) -> Result<PgStore> {
    Ok(PgStore::new(like.config().clone())?)
}

/// The standby's reservation rows (id to first sequence) once it has
/// replayed every WAL record it received (its primary is gone).
async fn standby_rows(port: u16) -> Result<HashMap<Uuid, u64>> {
    let standby = connect(&format!("postgres://postgres@127.0.0.1:{port}/postgres")).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let caught_up: bool = standby
            .query_one(
                "SELECT coalesce(pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn(), true)",
                &[],
            )
            .await?
            .get(0);
        if caught_up {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the standby did not replay what it received in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rows = standby
        .query(
            "SELECT reservation_id, sequence FROM statek.scheduler_reservations
             WHERE shard_id = 'failover-v1'",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            (
                row.get::<_, Uuid>(0),
                u64::try_from(row.get::<_, i64>(1)).unwrap_or(u64::MAX),
            )
        })
        .collect())
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
/// at a reported loss (after checking that the store is then refused by
/// the halt it recorded) or at a refusal by the halt.
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
                Err(StoreError::Durability(DurabilityError::ReservationsLostInFailover(lost))) => {
                    {
                        let mut log = log.lock().map_err(|_| anyhow::anyhow!("poisoned log"))?;
                        let reserved_first = log.acknowledged.iter().any(|&(_, _, t)| t >= 2);
                        log.reported = Some((
                            lost.lost.iter().map(|l| l.reservation_id).collect(),
                            reserved_first,
                        ));
                    }
                    // Recorded in the database: the next reservation of
                    // this store is refused by the halt.
                    match store
                        .reserve(policy.shard_id(), &digest, Uuid::now_v7())
                        .await
                    {
                        Err(StoreError::Durability(DurabilityError::ShardHalted(_))) => {}
                        other => {
                            bail!("after its reported loss a replica got {other:?}, not the halt")
                        }
                    }
                    return Ok(());
                }
                Err(StoreError::Durability(DurabilityError::ShardHalted(_))) => {
                    log.lock()
                        .map_err(|_| anyhow::anyhow!("poisoned log"))?
                        .refused = true;
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
/// Worker that ends with an error still counts its runs) and logs each
/// batch it acknowledged into `batches` (batch id, first sequence). A
/// loss or a halt does not end it: it waits for the resume.
async fn worker_loop(
    store: PgStore,
    policy: WeightedFairnessPolicy,
    stop: CancellationToken,
    batches: Arc<Mutex<Vec<(Uuid, u64)>>>,
) -> Result<u64> {
    let executed = Arc::new(AtomicU64::new(0));
    let (sink, mut outcomes) =
        tokio::sync::mpsc::unbounded_channel::<statek_scheduler::TickOutcome>();
    let counter = {
        let executed = Arc::clone(&executed);
        tokio::spawn(async move {
            let mut first: HashMap<Uuid, u64> = HashMap::new();
            while let Some(outcome) = outcomes.recv().await {
                if outcome.tenant_outcome().label() == "executed" {
                    executed.fetch_add(1, Ordering::Relaxed);
                }
                let r = outcome.reservation();
                let entry = first.entry(r.id()).or_insert(r.sequence());
                *entry = (*entry).min(r.sequence());
            }
            if let Ok(mut batches) = batches.lock() {
                batches.extend(first);
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
            Err(e) => return Err(e.into()),
        }
    }
    drop(sink);
    counter.await?;
    Ok(executed.load(Ordering::Relaxed))
}

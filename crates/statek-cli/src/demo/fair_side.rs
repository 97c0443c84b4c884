//! The statek side of the demo: `--replicas` Workers (each with its own
//! pool, default options: 16 runs executing at once, woken by
//! LISTEN/NOTIFY) tick one shard until every run is done or
//! `--max-reservations` is reached.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use statek_policy::{ScheduleId, SchedulerShardId, TenantId, WeightedFairnessPolicy};
use statek_scheduler::Reservation;
use statek_scheduler::{
    DurableFairScheduler, ExecutorOptions, FairnessMonitor, FairnessReport, MonitorOptions,
    PgRunQueueExecutor, PgScheduler, SchedulerOptions, TickOutcome, Worker, WorkerOptions,
    WorkerReport,
};
use statek_store_pg::PgStore;
use tokio_util::sync::CancellationToken;

use super::args::DemoArgs;
use super::lock::lock;
use super::side::{demo_store_config, wait_until_done, DemoHandler};
use super::workload::{self, Arrivals, Workload};
use crate::out::outln;

type Scheduler = PgScheduler<PgRunQueueExecutor<DemoHandler>>;

/// What the statek side observed.
pub struct FairSide {
    pub arrivals: Arrivals,
    pub origin: Option<std::time::SystemTime>,
    pub ticks: Vec<TickOutcome>,
    pub rows: Vec<Reservation>,
    pub start_sequence: u64,
    pub end_sequence: u64,
    pub monitor: FairnessReport,
}

/// Registers one scheduler per replica (the first binds the policy, the
/// rest verify it).
async fn register_replicas(
    args: &DemoArgs,
    url: &str,
    policy: &WeightedFairnessPolicy,
    schedule: Option<&ScheduleId>,
) -> Result<Vec<Arc<Scheduler>>> {
    let mut replicas = Vec::new();
    for i in 0..args.replicas {
        let store = PgStore::new(demo_store_config(url)?)?;
        let executor = PgRunQueueExecutor::new(
            store.clone(),
            DemoHandler::new(args),
            ExecutorOptions::new(),
        );
        let scheduler = DurableFairScheduler::register_in(
            store,
            policy.clone(),
            schedule.cloned(),
            executor,
            SchedulerOptions::new(),
        )
        .await
        .with_context(|| format!("replica {i} could not register shard {}", policy.shard_id()))?;
        let how = match scheduler.registration() {
            statek_scheduler::Registration::Registered { .. } => "registered the policy",
            _ => "verified the stored policy (idempotent)",
        };
        outln!("replica {i}: {how}")?;
        replicas.push(Arc::new(scheduler));
    }
    Ok(replicas)
}

/// Runs the statek side.
pub async fn run(
    args: &DemoArgs,
    url: &str,
    admin: &PgStore,
    policy: &WeightedFairnessPolicy,
    schedule: Option<&ScheduleId>,
    workload: &Workload,
) -> Result<FairSide> {
    let shard = policy.shard_id().clone();
    let replicas = register_replicas(args, url, policy, schedule).await?;
    let tenants: Vec<TenantId> = policy
        .tenants()
        .iter()
        .map(|t| t.tenant().clone())
        .collect();
    let leftover = admin.count_live_runs_of(&tenants).await?;
    if leftover > 0 {
        outln!("note: {leftover} runs of these tenants are already queued (an earlier demo?); they run too")?;
    }
    let start_sequence = admin.next_sequence(&shard).await?;
    let arrivals: Arrivals = Arc::default();
    let queued = Instant::now();
    let origin = workload::enqueue_backlog(
        admin,
        &workload.backlog_tenant,
        args.backlog,
        Some(start_sequence),
        &arrivals,
    )
    .await?;
    outln!(
        "statek: queued {} backlog runs for {} in {:.1} s; starting {} at sequence {start_sequence}",
        args.backlog,
        workload.backlog_tenant,
        queued.elapsed().as_secs_f64(),
        crate::out::count(u64::from(args.replicas), "replica", "replicas")
    )?;

    let stop = CancellationToken::new();
    let started = Instant::now();
    let made = Arc::new(AtomicU64::new(0));
    let watcher = limit_watcher(
        admin.clone(),
        shard.clone(),
        start_sequence,
        u64::from(args.max_reservations),
        Arc::clone(&made),
        stop.clone(),
    );
    let (sink, mut outcomes) = tokio::sync::mpsc::unbounded_channel::<TickOutcome>();
    let mut tasks = tokio::task::JoinSet::new();
    for scheduler in &replicas {
        let notifications = scheduler.store().listen_for_runs().await?;
        let worker = Worker::new(Arc::clone(scheduler), WorkerOptions::new())
            .with_notifications(notifications)
            .with_outcome_sink(sink.clone());
        tasks.spawn(worker.run(stop.clone()));
    }
    drop(sink);
    let ticks: Arc<Mutex<Vec<TickOutcome>>> = Arc::default();
    let collector = {
        let ticks = Arc::clone(&ticks);
        let mut monitor =
            FairnessMonitor::with_options(policy, start_sequence, MonitorOptions::new());
        let shard = shard.clone();
        tokio::spawn(async move {
            let mut seen = 0u64;
            while let Some(outcome) = outcomes.recv().await {
                monitor.observe(&outcome);
                seen += 1;
                if seen % 1000 == 0 {
                    statek_scheduler::metrics::publish_fairness(&shard, &monitor.report());
                }
                lock(&ticks).push(outcome);
            }
            monitor.flush();
            statek_scheduler::metrics::publish_fairness(&shard, &monitor.report());
            monitor
        })
    };
    let producer = workload::start_trickle(
        admin.clone(),
        Some(shard.clone()),
        workload.trickle_tenants.clone(),
        args.trickle,
        Arc::clone(&arrivals),
        stop.clone(),
    );
    let stop_reason = wait_until_done(
        admin,
        &tenants,
        producer,
        &mut tasks,
        &stop,
        started,
        &arrivals,
        || format!("{} reservations", made.load(Ordering::Relaxed)),
    )
    .await?;
    let stop_reason = stop_reason
        .unwrap_or_else(|| format!("reservation limit {} reached", args.max_reservations));
    stop.cancel();
    watcher.await.context("reservation limit watcher")?;
    let mut reports: Vec<WorkerReport> = Vec::new();
    while let Some(result) = tasks.join_next().await {
        reports.push(result.context("replica task")??);
    }
    let monitor = collector.await.context("outcome collector")?;
    let elapsed = started.elapsed();
    let end_sequence = admin.next_sequence(&shard).await?;
    let ticks = std::mem::take(&mut *lock(&ticks));
    for (i, r) in reports.iter().enumerate() {
        outln!(
            "worker {i}: {} ticks, {} executed, {} idle, {} contended, {} idle backoffs, {} wake-ups, {} transient errors",
            r.ticks, r.executed, r.idle, r.contended, r.backoffs, r.wakeups, r.transient_errors
        )?;
    }
    outln!(
        "statek stopped: {stop_reason}; {} ticks by {} in {:.1} s ({:.0} reservations/s)",
        ticks.len(),
        crate::out::count(u64::from(args.replicas), "replica", "replicas"),
        elapsed.as_secs_f64(),
        ticks.len() as f64 / elapsed.as_secs_f64().max(1e-9),
    )?;
    let rows = read_reservations(admin, policy, start_sequence, end_sequence).await?;
    Ok(FairSide {
        arrivals,
        origin,
        ticks,
        rows,
        start_sequence,
        end_sequence,
        monitor: monitor.report(),
    })
}

/// Reads the reservations `start..end` of the policy's shard back from
/// PostgreSQL, in sequence order.
async fn read_reservations(
    store: &PgStore,
    policy: &WeightedFairnessPolicy,
    start: u64,
    end: u64,
) -> Result<Vec<Reservation>> {
    let mut rows = Vec::new();
    let mut from = start;
    while from < end {
        let page = store.reservations(policy.shard_id(), from, 10_000).await?;
        let Some(last) = page.last() else { break };
        from = last.sequence() + 1;
        rows.extend(page.into_iter().filter(|r| r.sequence() < end));
    }
    Ok(rows)
}

/// Counts the side's reservations in the database (the shard's cursor
/// less `start_sequence`) into `made` every 50 ms and cancels `stop` once
/// they reach `limit`: the outcome collector lags behind the reservations
/// when many replicas tick (32 replicas once made 414,045 reservations
/// against a limit of 60,000 when the collector's count stopped them), so
/// this is the one place that stops the side at its limit. A failed read
/// is retried at the next interval (the side's time limit still holds).
fn limit_watcher(
    admin: PgStore,
    shard: SchedulerShardId,
    start_sequence: u64,
    limit: u64,
    made: Arc<AtomicU64>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.is_cancelled() {
            if let Ok(next) = admin.next_sequence(&shard).await {
                let count = next.saturating_sub(start_sequence);
                made.store(count, Ordering::Relaxed);
                if count >= limit {
                    stop.cancel();
                }
            }
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
            }
        }
    })
}

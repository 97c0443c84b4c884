//! `statek demo` (and `cargo xtask demo`, which provisions PostgreSQL
//! first): a real multi-replica fair-scheduling run on PostgreSQL.
//!
//! Workload (documented in the README): the heaviest tenant of the policy
//! (ties: first by id) starts with a backlog of `--backlog` runs; the
//! lightest tenant (ties: last by id) is registered but never gets a run;
//! every other tenant gets `--trickle` runs that arrive one by one while the
//! demo runs. `--replicas` schedulers, each with its own connection pool,
//! tick the shard concurrently until every run is done or
//! `--max-reservations` is reached. Then the demo reads the reservations
//! back from PostgreSQL and checks the guarantee.

use crate::out::outln;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use statek_policy::policy_file::PolicyFile;
use statek_policy::{ScheduleId, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, RunError, RunHandler,
    SchedulerOptions, TenantTickOutcome, TickOutcome, Worker, WorkerOptions,
};
use statek_store_pg::{ClaimedRun, NewRun, PgStore, StoreConfig};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Options of `statek demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Policy file (TOML; format in deploy/policies/README.md). Default: the
    /// built-in copy of deploy/policies/noisy-neighbour.toml.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Scheduler replicas ticking the shard concurrently, each with its own pool (1..=32).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub replicas: u32,
    /// Stop after this many reservations even if runs remain (1..=10,000,000).
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub max_reservations: u64,
    /// Runs queued for the heaviest tenant before the replicas start (0..=1,000,000).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub backlog: u32,
    /// Directory for the PNG charts (cumulative slots, selection gaps).
    /// Default: `statek-demo-charts` in the current directory
    /// (`target/statek-demo` under `cargo xtask demo`).
    #[arg(long, value_name = "DIR")]
    pub charts_dir: Option<PathBuf>,
    /// Serve Prometheus metrics at this address while the demo runs
    /// (`--metrics-addr` alone: 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:9464")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Runs arriving for each other tenant while the demo runs (0..=10,000).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub trickle: u32,
}

/// What the demo knows about a run it enqueued.
#[derive(Debug, Clone)]
struct Enqueued {
    tenant: TenantId,
    /// The shard's cursor when the run became runnable.
    cursor_at_enqueue: u64,
}

/// A run's claim as seen by the handler.
#[derive(Debug, Clone)]
struct Executed {
    sequence: u64,
    available_at: SystemTime,
    claimed_at: SystemTime,
}

/// The demo's handler: does no work; the demo measures scheduling, not work.
struct NoopHandler;

impl RunHandler for NoopHandler {
    async fn handle(&self, _run: &ClaimedRun, _cancel: CancellationToken) -> Result<(), RunError> {
        Ok(())
    }
}

type Scheduler = DurableFairScheduler<PgRunQueueExecutor<NoopHandler>>;

/// Roles of the policy's tenants in the demo workload.
struct Workload {
    backlog_tenant: TenantId,
    idle_tenant: Option<TenantId>,
    trickle_tenants: Vec<TenantId>,
}

impl Workload {
    fn for_policy(policy: &WeightedFairnessPolicy) -> Self {
        let tenants = policy.tenants();
        // Heaviest, ties to the first by id (tenants are sorted by id).
        let heaviest = tenants.iter().fold(&tenants[0], |best, t| {
            if t.weight() > best.weight() {
                t
            } else {
                best
            }
        });
        let backlog_tenant = heaviest.tenant().clone();
        // Lightest among the rest, ties to the last by id; only with 3+ tenants.
        let idle_tenant = if tenants.len() >= 3 {
            tenants
                .iter()
                .filter(|t| t.tenant() != &backlog_tenant)
                .fold(
                    None,
                    |best: Option<&statek_policy::TenantFairnessWeight>, t| match best {
                        Some(b) if b.weight() < t.weight() => Some(b),
                        _ => Some(t),
                    },
                )
                .map(|t| t.tenant().clone())
        } else {
            None
        };
        let trickle_tenants = tenants
            .iter()
            .map(|t| t.tenant().clone())
            .filter(|t| t != &backlog_tenant && Some(t) != idle_tenant.as_ref())
            .collect();
        Self {
            backlog_tenant,
            idle_tenant,
            trickle_tenants,
        }
    }

    fn role(&self, tenant: &TenantId) -> &'static str {
        if tenant == &self.backlog_tenant {
            "backlog"
        } else if Some(tenant) == self.idle_tenant.as_ref() {
            "no runs"
        } else {
            "trickle"
        }
    }
}

/// Reads and checks the demo's policy file (before anything touches a
/// database).
///
/// # Errors
/// The file cannot be read or is not a valid policy file.
pub fn load_policy(args: &DemoArgs) -> Result<PolicyFile> {
    let Some(path) = &args.policy else {
        return Ok(PolicyFile::parse(
            "noisy-neighbour.toml (built in)",
            DEFAULT_POLICY,
        )?);
    };
    crate::policy_cmd::load_file(path)
}

/// The default demo policy, deploy/policies/noisy-neighbour.toml.
const DEFAULT_POLICY: &str = include_str!("../../../deploy/policies/noisy-neighbour.toml");

/// Runs the demo against `database_url` (migrates, registers, runs the
/// replicas, prints the table and checks).
///
/// # Errors
/// Connection, registration or policy-file errors; [`crate::exit::CheckFailed`]
/// when a check fails.
pub fn run(args: DemoArgs, database_url: &str) -> Result<()> {
    let file = load_policy(&args)?;
    let schedule = file.schedule().cloned();
    let policy = file.into_policy();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    runtime.block_on(run_demo(args, policy, schedule, database_url))
}

async fn run_demo(
    args: DemoArgs,
    policy: WeightedFairnessPolicy,
    schedule: Option<ScheduleId>,
    url: &str,
) -> Result<()> {
    let shard = policy.shard_id().clone();
    let workload = Workload::for_policy(&policy);
    outln!(
        "policy: shard {shard}, {} tenants, cycle length L = {}, digest {}",
        policy.tenants().len(),
        policy.cycle_length(),
        policy.digest()
    )?;
    outln!(
        "workload: {} has a backlog of {} runs; {}; {}",
        workload.backlog_tenant,
        args.backlog,
        match workload.trickle_tenants.len() {
            0 => "no other tenant gets runs while the demo runs".to_owned(),
            n => format!(
                "{n} other tenants get {} runs each while the demo runs",
                args.trickle
            ),
        },
        match &workload.idle_tenant {
            Some(t) => format!("{t} never has a run"),
            None => "no tenant is left without runs".into(),
        }
    )?;

    if let Some(addr) = args.metrics_addr {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            // Histograms (with _bucket series for histogram_quantile), in seconds.
            .set_buckets(&[
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0,
            ])
            .context("histogram buckets")?
            .install()
            .with_context(|| format!("cannot serve metrics on {addr}"))?;
        outln!("metrics: http://{addr}/metrics")?;
    }
    let admin = PgStore::new(demo_store_config(url)?)?;
    let migrated = admin.migrate().await.context("migration failed")?;
    outln!("migrations: {} applied now", migrated.applied().len())?;
    let durability = admin
        .durability_report()
        .await
        .context("durability check failed")?;
    let risks = durability.risks();
    outln!(
        "durability: {durability}{}",
        if risks.is_empty() {
            String::from(" (no risk found)")
        } else {
            format!(
                " - NOT durable ({}): fine for a demo, refused by default in production",
                risks
                    .iter()
                    .map(statek_store_pg::DurabilityRisk::label)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    )?;

    // Every replica registers (the first binds the policy, the rest verify it).
    let mut replicas: Vec<Arc<Scheduler>> = Vec::new();
    for i in 0..args.replicas {
        let store = PgStore::new(demo_store_config(url)?)?;
        let executor = PgRunQueueExecutor::new(store.clone(), NoopHandler, ExecutorOptions::new());
        let scheduler = DurableFairScheduler::register_in(
            store,
            policy.clone(),
            schedule.clone(),
            executor,
            SchedulerOptions::new(),
        )
        .await
        .with_context(|| format!("replica {i} could not register shard {shard}"))?;
        let how = match scheduler.registration() {
            statek_store_pg::Registration::Registered { .. } => "registered the policy",
            _ => "verified the stored policy (idempotent)",
        };
        outln!("replica {i}: {how}")?;
        replicas.push(Arc::new(scheduler));
    }

    let policy_tenants: Vec<TenantId> = policy
        .tenants()
        .iter()
        .map(|t| t.tenant().clone())
        .collect();
    let leftover = admin.count_live_runs_of(&policy_tenants).await?;
    if leftover > 0 {
        outln!("note: {leftover} runs of these tenants are already queued (an earlier demo?); they run too")?;
    }

    let start_sequence = admin.next_sequence(&shard).await?;
    let enqueued: Arc<Mutex<HashMap<Uuid, Enqueued>>> = Arc::default();
    let executed: Arc<Mutex<HashMap<Uuid, Executed>>> = Arc::default();

    // The backlog, queued before any replica ticks.
    let backlog_started = Instant::now();
    for _ in 0..args.backlog {
        let run = admin
            .enqueue(&NewRun::new(workload.backlog_tenant.clone(), Vec::new()))
            .await?;
        lock(&enqueued).insert(
            run.run_id,
            Enqueued {
                tenant: workload.backlog_tenant.clone(),
                cursor_at_enqueue: start_sequence,
            },
        );
    }
    outln!(
        "queued {} backlog runs for {} in {:.1} s; starting {} replicas at sequence {start_sequence}",
        args.backlog,
        workload.backlog_tenant,
        backlog_started.elapsed().as_secs_f64(),
        args.replicas
    )?;

    let stop = CancellationToken::new();
    let started = Instant::now();
    let ticks: Arc<Mutex<Vec<TickOutcome>>> = Arc::default();
    let reserved = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Every replica is a Worker with its defaults (16 runs executing at
    // once, adaptive reservation batches, heartbeats on, idle
    // backoff, woken by LISTEN/NOTIFY); their outcomes meet here.
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
    let collector = {
        let ticks = Arc::clone(&ticks);
        let executed = Arc::clone(&executed);
        let reserved = Arc::clone(&reserved);
        let stop = stop.clone();
        let limit = args.max_reservations;
        let mut monitor = statek_scheduler::FairnessMonitor::with_options(
            &policy,
            start_sequence,
            statek_scheduler::MonitorOptions::new(),
        );
        let shard = shard.clone();
        tokio::spawn(async move {
            let mut seen = 0u64;
            while let Some(outcome) = outcomes.recv().await {
                monitor.observe(&outcome);
                seen += 1;
                if seen % 1000 == 0 {
                    statek_scheduler::metrics::publish_fairness(&shard, &monitor.report());
                }
                if let TenantTickOutcome::Executed(run) = outcome.tenant_outcome() {
                    lock(&executed).insert(
                        run.run_id,
                        Executed {
                            sequence: outcome.reservation().sequence(),
                            available_at: run.available_at,
                            claimed_at: run.claimed_at,
                        },
                    );
                }
                lock(&ticks).push(outcome);
                if reserved.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 >= limit {
                    stop.cancel();
                }
            }
            monitor.flush();
            statek_scheduler::metrics::publish_fairness(&shard, &monitor.report());
            monitor
        })
    };

    // Trickle arrivals: one run every 20 ms, round robin over the tenants.
    let producer = {
        let admin = admin.clone();
        let shard = shard.clone();
        let tenants = workload.trickle_tenants.clone();
        let enqueued = Arc::clone(&enqueued);
        let per_tenant = args.trickle;
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_millis(20));
            for _ in 0..per_tenant {
                for tenant in &tenants {
                    ticker.tick().await;
                    if stop.is_cancelled() {
                        return Ok::<(), anyhow::Error>(());
                    }
                    let cursor = admin.next_sequence(&shard).await?;
                    let run = admin
                        .enqueue(&NewRun::new(tenant.clone(), Vec::new()))
                        .await?;
                    lock(&enqueued).insert(
                        run.run_id,
                        Enqueued {
                            tenant: tenant.clone(),
                            cursor_at_enqueue: cursor,
                        },
                    );
                }
            }
            Ok(())
        })
    };

    // Progress, and the stop condition: all runs done, or the limit hit.
    let mut producer = Some(producer);
    let mut last_report = Instant::now();
    let stop_reason = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Some(p) = producer.as_ref() {
            if p.is_finished() {
                if let Some(p) = producer.take() {
                    p.await.context("producer task")??;
                }
            }
        }
        let done = lock(&executed).len();
        let total = lock(&enqueued).len();
        let reservations = reserved.load(std::sync::atomic::Ordering::Relaxed);
        if last_report.elapsed() >= Duration::from_secs(2) {
            outln!(
                "  {:>5.1} s: {reservations} reservations, {done}/{total} runs executed",
                started.elapsed().as_secs_f64()
            )?;
            last_report = Instant::now();
        }
        if tasks.is_empty() || stop.is_cancelled() {
            break format!("reservation limit {} reached", args.max_reservations);
        }
        if producer.is_none() && admin.count_live_runs_of(&policy_tenants).await? == 0 {
            break "every run was executed".to_owned();
        }
        if let Some(result) = tasks.try_join_next() {
            result.context("replica task")??;
        }
    };
    stop.cancel();
    let mut worker_reports = Vec::new();
    while let Some(result) = tasks.join_next().await {
        worker_reports.push(result.context("replica task")??);
    }
    let monitor = collector.await.context("outcome collector")?;
    if let Some(p) = producer {
        p.await.context("producer task")??;
    }
    let elapsed = started.elapsed();
    let end_sequence = admin.next_sequence(&shard).await?;
    let ticks = std::mem::take(&mut *lock(&ticks));
    for (i, r) in worker_reports.iter().enumerate() {
        outln!(
            "worker {i}: {} ticks, {} executed, {} idle, {} contended, {} idle backoffs, {} wake-ups, {} transient errors",
            r.ticks, r.executed, r.idle, r.contended, r.backoffs, r.wakeups, r.transient_errors
        )?;
    }
    let runs_executed = lock(&executed).len();
    let seconds = elapsed.as_secs_f64().max(1e-9);
    outln!(
        "stopped: {stop_reason}; {} ticks by {} replicas in {:.1} s ({:.0} reservations/s, \
         {runs_executed} runs executed = {:.0} runs/s)",
        ticks.len(),
        args.replicas,
        elapsed.as_secs_f64(),
        ticks.len() as f64 / seconds,
        runs_executed as f64 / seconds
    )?;

    let rows = read_reservations(&admin, &policy, start_sequence, end_sequence).await?;
    let report = Report::build(&policy, &ticks, &rows, &lock(&enqueued), &lock(&executed));
    report.print(&policy, &workload)?;
    let checks = verify(
        &policy,
        &ticks,
        &rows,
        start_sequence,
        end_sequence,
        &report,
        &monitor.report(),
    );
    let selections: Vec<&TenantId> = rows
        .iter()
        .filter_map(|r| policy.tenant_for_slot(u64::from(r.slot())))
        .collect();
    let charts_dir = args
        .charts_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("statek-demo-charts"));
    match crate::charts::write(&charts_dir, &policy, &selections) {
        Ok(paths) => {
            for path in paths {
                outln!("chart: {}", path.display())?;
            }
        }
        Err(e) => outln!("charts not written: {e:#}")?,
    }
    let mut failed = 0;
    outln!()?;
    for (ok, text) in &checks {
        outln!("check {}: {text}", if *ok { "ok  " } else { "FAIL" })?;
        failed += usize::from(!ok);
    }
    if failed > 0 {
        return Err(crate::exit::CheckFailed(format!("{failed} demo checks failed")).into());
    }
    outln!("demo: all {} checks passed", checks.len())?;
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Per-tenant figures.
#[derive(Default)]
struct TenantReport {
    /// Slots of the tenant among the reservations (from PostgreSQL).
    slots: u64,
    executed: u64,
    idle: u64,
    contended: u64,
    /// ExecutionFailed or Cancelled outcomes.
    other: u64,
    /// Reserved slots with no tick outcome (the tick failed after reserving).
    no_outcome: u64,
    /// Largest selection gap, from the reservation rows.
    max_gap: u64,
    lag_reservations: Vec<u64>,
    lag_millis: Vec<u64>,
}

struct Report {
    tenants: BTreeMap<TenantId, TenantReport>,
    total_slots: u64,
}

impl Report {
    fn build(
        policy: &WeightedFairnessPolicy,
        ticks: &[TickOutcome],
        rows: &[statek_store_pg::Reservation],
        enqueued: &HashMap<Uuid, Enqueued>,
        executed: &HashMap<Uuid, Executed>,
    ) -> Self {
        let mut tenants: BTreeMap<TenantId, TenantReport> = policy
            .tenants()
            .iter()
            .map(|t| (t.tenant().clone(), TenantReport::default()))
            .collect();
        // Slots and selection gaps come from the reservations themselves:
        // a tick that failed after reserving still consumed its slot.
        let mut last_seen: HashMap<&TenantId, u64> = HashMap::new();
        for row in rows {
            let Some(tenant) = policy.tenant_for_slot(u64::from(row.slot())) else {
                continue;
            };
            let Some(entry) = tenants.get_mut(tenant) else {
                continue;
            };
            entry.slots += 1;
            entry.no_outcome += 1;
            // Reservations between consecutive selections, counting the
            // selecting slot; the first selection in this run is no gap.
            if let Some(prev) = last_seen.insert(tenant, row.sequence()) {
                entry.max_gap = entry.max_gap.max(row.sequence() - prev);
            }
        }
        for tick in ticks {
            let Some(entry) = tenants.get_mut(tick.tenant()) else {
                continue;
            };
            entry.no_outcome = entry.no_outcome.saturating_sub(1);
            match tick.tenant_outcome() {
                TenantTickOutcome::Executed(_) => entry.executed += 1,
                TenantTickOutcome::Idle => entry.idle += 1,
                TenantTickOutcome::Contended => entry.contended += 1,
                _ => entry.other += 1,
            }
        }
        for (run_id, run) in executed {
            let Some(origin) = enqueued.get(run_id) else {
                continue;
            };
            let Some(entry) = tenants.get_mut(&origin.tenant) else {
                continue;
            };
            entry
                .lag_reservations
                .push(run.sequence.saturating_sub(origin.cursor_at_enqueue));
            let millis = run
                .claimed_at
                .duration_since(run.available_at)
                .unwrap_or(Duration::ZERO)
                .as_millis();
            entry
                .lag_millis
                .push(u64::try_from(millis).unwrap_or(u64::MAX));
        }
        Self {
            tenants,
            total_slots: rows.len() as u64,
        }
    }

    fn print(&self, policy: &WeightedFairnessPolicy, workload: &Workload) -> Result<()> {
        outln!()?;
        outln!(
            "{:<12} {:>6} {:<8} {:>8} {:>8} {:>7} {:>6} {:>15} {:>7} {:>7} {:>15} {:>15}",
            "tenant",
            "weight",
            "workload",
            "entitled",
            "received",
            "slots",
            "runs",
            "idle/cont/other",
            "max gap",
            "bound",
            "lag p50/p99 res",
            "lag p50/p99 ms"
        )?;
        let l = f64::from(policy.cycle_length());
        for t in policy.tenants() {
            let Some(r) = self.tenants.get(t.tenant()) else {
                continue;
            };
            let bound = policy
                .starvation_bound(t.tenant())
                .map(|b| b.maximum_reservations_until_selection())
                .unwrap_or(0);
            outln!(
                "{:<12} {:>6} {:<8} {:>7.2}% {:>7.2}% {:>7} {:>6} {:>15} {:>7} {:>7} {:>15} {:>15}",
                t.tenant().as_str(),
                t.weight(),
                workload.role(t.tenant()),
                100.0 * f64::from(t.weight()) / l,
                100.0 * r.slots as f64 / (self.total_slots.max(1)) as f64,
                r.slots,
                r.executed,
                format!("{}/{}/{}", r.idle, r.contended, r.other + r.no_outcome),
                r.max_gap,
                bound,
                percentiles(&r.lag_reservations),
                percentiles(&r.lag_millis),
            )?;
        }
        outln!(
            "(entitled = weight / L; received = slots / all slots; other = failed, cancelled at shutdown or \
             lost to an error after reserving; max gap and bound in reservations; lag = from runnable to \
             claim, in reservations and in database milliseconds)"
        )?;
        Ok(())
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn percentiles(values: &[u64]) -> String {
    if values.is_empty() {
        return "-".into();
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    format!(
        "{}/{}",
        percentile(&sorted, 50.0),
        percentile(&sorted, 99.0)
    )
}

/// Reads the reservations `start..end` of the policy's shard back from
/// PostgreSQL, in sequence order.
async fn read_reservations(
    store: &PgStore,
    policy: &WeightedFairnessPolicy,
    start: u64,
    end: u64,
) -> Result<Vec<statek_store_pg::Reservation>> {
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

/// Checks the guarantee on the reservations read back.
fn verify(
    policy: &WeightedFairnessPolicy,
    ticks: &[TickOutcome],
    rows: &[statek_store_pg::Reservation],
    start: u64,
    end: u64,
    report: &Report,
    monitor: &statek_scheduler::FairnessReport,
) -> Vec<(bool, String)> {
    let n = end - start;
    let mut checks = Vec::new();

    let contiguous = rows.len() as u64 == n
        && rows
            .iter()
            .enumerate()
            .all(|(i, r)| r.sequence() == start + i as u64);
    checks.push((
        contiguous,
        format!(
            "sequences are exactly {start}..{} ({n} reservations in PostgreSQL, none missing or repeated)",
            end.saturating_sub(1)
        ),
    ));

    // A batch's reservations share its id (one range row): match by sequence.
    let by_sequence: HashMap<u64, Uuid> = rows.iter().map(|r| (r.sequence(), r.id())).collect();
    let ticks_match = ticks
        .iter()
        .all(|t| by_sequence.get(&t.reservation().sequence()) == Some(&t.reservation().id()));
    let without_outcome = n.saturating_sub(ticks.len() as u64);
    checks.push((
        ticks_match && ticks.len() as u64 <= n,
        format!(
            "every tick's reservation id and sequence is in PostgreSQL ({} ticks, {n} rows; \
             {without_outcome} slots consumed by ticks that failed after reserving)",
            ticks.len()
        ),
    ));

    let l = u64::from(policy.cycle_length());
    let slots_ok = rows.iter().all(|r| u64::from(r.slot()) == r.sequence() % l)
        && ticks
            .iter()
            .all(|t| policy.tenant_for_slot(u64::from(t.reservation().slot())) == Some(t.tenant()));
    checks.push((
        slots_ok,
        format!(
            "slot = sequence mod {l} for every reservation, and each tick ran its slot's tenant"
        ),
    ));

    let mut over = Vec::new();
    for t in policy.tenants() {
        let bound = policy
            .starvation_bound(t.tenant())
            .map(|b| u64::from(b.maximum_reservations_until_selection()))
            .unwrap_or(0);
        if let Some(r) = report.tenants.get(t.tenant()) {
            if r.max_gap > bound {
                over.push(format!("{} gap {} > bound {bound}", t.tenant(), r.max_gap));
            }
        }
    }
    checks.push((
        over.is_empty(),
        if over.is_empty() {
            "no selection gap in the reservations exceeds its tenant's starvation bound".to_owned()
        } else {
            format!("selection gaps above the bound: {}", over.join(", "))
        },
    ));

    checks.push((
        monitor.violations.is_empty() && monitor.violations_dropped == 0,
        format!(
            "fairness monitor: no gap above the bound while a tenant had work \
             ({} outcomes observed, {} sequences without an outcome)",
            monitor.observed, monitor.missing
        ),
    ));
    checks
}

/// A demo replica's store: 4 connections, and a durability check that
/// reports without refusing (the demo's throw-away cluster is fast, not
/// durable; production stores keep the default, which refuses).
fn demo_store_config(url: &str) -> Result<StoreConfig> {
    Ok(StoreConfig::from_url(url)?
        .pool_size(4)?
        .durability_policy(statek_store_pg::DurabilityPolicy::AllowNoDurability))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentiles(&[]), "-");
        assert_eq!(percentiles(&[3, 1, 2]), "2/3");
    }
}

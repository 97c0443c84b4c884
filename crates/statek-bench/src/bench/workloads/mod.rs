//! Section `workloads` (issue 12): each workload runs the fair side (one
//! `Worker`, [`fair`]) against two unfair baselines with the same number
//! of executing runs, in the same run: the plain `SKIP LOCKED` claimer
//! ([`crate::bench::plain_claimer`]) and a batched plain queue
//! ([`batched`], River's way). Then `slot-rate`: slots one Worker consumes
//! per second on the sparse policy with one backlogged tenant, and the
//! reservation rows written meanwhile. The caller runs it on the fast
//! settings and again on a durable server.
//!
//! Every side is measured the same way, from the database ([`window`]):
//! the queue is loaded, the side starts, runs unmeasured for a warm-up,
//! then for the window; runs completed and service lag come from the run
//! rows' database times.

mod batch_split;
mod batched;
pub mod cost_skew;
mod db_work;
mod fair;
mod feeder;
pub mod lag;
pub mod results;
pub mod samples;
mod shape;
pub mod table;
pub mod targets;
mod window;

use std::time::Duration;

use anyhow::Result;
use statek_policy::WeightedFairnessPolicy;
use tokio_util::sync::CancellationToken;

use crate::bench::plain_claimer;
pub use results::Workloads;
use results::{Side, SlotRate, WorkloadRun, BATCHED, FAIR, PLAIN};
use shape::Workload;
pub use shape::WorkloadPick;

pub use fair::FairSide;
pub use shape::uniform_policy;

/// Connections the section opens at most at once (the long-runs Worker's
/// pool, its notification connection, the feeder, the harness).
pub const MAX_CONNECTIONS: usize = shape::LONG_EXECUTING_RUNS + 6;

/// Unmeasured time between a side's start and its window.
const WARM_UP: Duration = Duration::from_millis(500);

/// Runs every workload and the slot rate on the server of `url` (a
/// migrated database), `window` seconds each, labelled `setting`: each
/// side `samples` times, sides interleaved (fair, plain, batched, then
/// the next sample), a drained sample run again with twice the backlog
/// (at most [`samples::DRAINED_RETRIES`] times). Only the workloads in
/// `picked` run (the slot rate with [`WorkloadPick::SlotRate`]).
pub async fn run(
    url: &str,
    setting: &str,
    window: Duration,
    samples: u32,
    picked: &[WorkloadPick],
    into: &mut Workloads,
) -> Result<()> {
    let client = crate::bench::connection::connect(url).await?;
    crate::pg::enable_statement_statistics(&client).await;
    for workload in Workload::ALL
        .into_iter()
        .filter(|w| picked.contains(&w.pick()))
    {
        let policy = workload.policy()?;
        let mut all = Vec::new();
        for sample in 0..samples {
            for side in [FAIR, PLAIN, BATCHED] {
                let mut scale = 1;
                for _ in 0..=samples::DRAINED_RETRIES {
                    eprintln!(
                        "==> workloads ({setting}): {}, {side}, sample {} of {samples}, {} executing runs{}",
                        workload.name(),
                        sample + 1,
                        workload.executing_runs(),
                        if scale > 1 { format!(", {scale}x the backlog") } else { String::new() }
                    );
                    let at = Sample {
                        number: sample,
                        backlog_scale: scale,
                    };
                    let measured =
                        measure_side(url, &client, workload, &policy, side, window, at).await?;
                    print_sample(&measured);
                    let drained = measured.drained;
                    all.push(measured);
                    if !drained {
                        break;
                    }
                    scale *= 2;
                    eprintln!("    a backlog ran out inside the window: not judged, run again");
                }
            }
        }
        into.runs.push(WorkloadRun {
            setting: setting.to_owned(),
            workload: workload.name().to_owned(),
            executing_runs: workload.executing_runs(),
            handler_ms: u64::try_from(workload.handler().as_millis())?,
            sides: samples::summarize(&all, &[FAIR, PLAIN, BATCHED]),
            samples: all,
        });
    }
    if !picked.contains(&WorkloadPick::SlotRate) {
        return Ok(());
    }
    eprintln!(
        "==> workloads ({setting}): slot-rate, one Worker, sparse policy, one backlogged tenant"
    );
    let slots = slot_rate(url, &client, setting, window).await?;
    eprintln!(
        "    {:.0} slots/s; {:.1} reservation rows/s, {} batches/s",
        slots.slots_per_second,
        slots.rows_per_second,
        slots
            .batches_per_second
            .map_or_else(|| "not counted".to_owned(), |b| format!("{b:.1}"))
    );
    into.slot_rate.push(slots);
    Ok(())
}

/// Which sample a measurement is, and how large its backlog.
#[derive(Debug, Clone, Copy)]
struct Sample {
    number: u32,
    backlog_scale: u64,
}

/// One line per sample on standard error.
fn print_sample(measured: &Side) {
    eprintln!(
        "    {:.0} runs/s{}{}{}",
        measured.runs_per_second,
        measured
            .slots_per_second
            .map_or_else(String::new, |s| format!(", {s:.0} slots/s")),
        measured.lag.as_ref().map_or_else(String::new, |l| format!(
            ", fed p50 {:.1} ms p99 {:.1} ms ({} runs, {} unclaimed)",
            l.p50_ms, l.p99_ms, l.runs, l.unclaimed
        )),
        measured.work.as_ref().map_or_else(String::new, |w| format!(
            "; per run: {:.0} WAL bytes, {:.2} rows written ({:.2} HOT updates), {:.3} ms client CPU",
            w.wal_bytes,
            w.rows_written(),
            w.hot_updated,
            w.client_cpu_ms
        ))
    );
    for statement in measured.statements.iter().take(3) {
        eprintln!(
            "      {:.3} ms, {:.0} WAL bytes, {:.2} calls per run: {}",
            statement.exec_ms + statement.plan_ms,
            statement.wal_bytes,
            statement.calls,
            statement.query
        );
    }
}

/// `CHECKPOINT`, so no sample pays for the dirty pages of the one before
/// (needs a superuser or `pg_checkpoint`; said once and skipped when
/// refused).
pub(super) async fn checkpoint(client: &tokio_postgres::Client) {
    static REFUSED: std::sync::Once = std::sync::Once::new();
    if let Err(e) = client.batch_execute("CHECKPOINT").await {
        REFUSED
            .call_once(|| eprintln!("xtask: CHECKPOINT refused ({e}); samples not checkpointed"));
    }
}

/// One sample of one side of one workload: load the queue, checkpoint,
/// start the side (and the feeder), warm up, measure the window, stop,
/// wait for the side's sessions to end, read the figures.
async fn measure_side(
    url: &str,
    client: &tokio_postgres::Client,
    workload: Workload,
    policy: &WeightedFairnessPolicy,
    side: &str,
    window: Duration,
    at: Sample,
) -> Result<Side> {
    let backlog: Vec<(String, u64)> = workload
        .backlog(policy)
        .into_iter()
        .map(|(tenant, runs)| (tenant, runs * at.backlog_scale))
        .collect();
    feeder::load(client, &backlog).await?;
    let baseline = side != FAIR;
    if baseline {
        plain_claimer::create_index(url).await?;
    }
    checkpoint(client).await;
    let shard = policy.shard_id().to_string();
    let keep = window::sessions(client).await?;
    let work_before = db_work::read(client).await?;
    let statements_before = db_work::read_statements(client).await;
    let born = window::edge(client, &shard).await?;
    let stop = CancellationToken::new();
    let (executing, handler) = (workload.executing_runs(), workload.handler());
    let running = match side {
        FAIR => Running::Fair(fair::start(url, policy, executing, handler, stop.clone()).await?),
        PLAIN => Running::Plain(
            plain_claimer::start(url, executing, handler, stop.clone())
                .await?
                .0,
        ),
        _ => Running::Batched(
            batched::start(url, executing, handler, stop.clone())
                .await?
                .0,
        ),
    };
    let fed = workload.fed_tenants(policy);
    let feeding = feeder::start(url, fed.clone(), shape::ARRIVAL_EVERY, stop.clone()).await?;
    tokio::time::sleep(WARM_UP).await;
    let from = window::edge(client, &shard).await?;
    tokio::time::sleep(window).await;
    let to = window::edge(client, &shard).await?;
    let tenants: Vec<String> = backlog.iter().map(|(tenant, _)| tenant.clone()).collect();
    let left = window::available_of(client, &tenants).await?;
    let backlog_left = match workload {
        Workload::NoisyNeighbour => left.first().copied(),
        _ => None,
    };
    stop.cancel();
    feeding.await??;
    running.join().await?;
    let stopped = window::edge(client, &shard).await?.at;
    window::sessions_gone(client, &keep).await?;
    let work_after = db_work::read(client).await?;
    let statements_after = db_work::read_statements(client).await;
    let died = window::edge(client, &shard).await?;
    if baseline {
        plain_claimer::drop_index(url).await?;
    }
    let seconds = window::seconds(&from, &to);
    let runs = window::completed(client, &from, &to).await?;
    let lifetime_runs = window::completed(client, &born, &died).await?;
    Ok(Side {
        side: side.to_owned(),
        runs,
        seconds,
        runs_per_second: runs as f64 / seconds.max(1e-9),
        slots_per_second: (!baseline).then(|| (to.cursor - from.cursor) as f64 / seconds.max(1e-9)),
        lag: window::lag(client, &fed, &from, &to, stopped).await?,
        backlog_left,
        sample: at.number,
        drained: samples::drained(&left),
        backlog_scale: at.backlog_scale,
        work: db_work::per_run(&work_before, &work_after, lifetime_runs),
        range: None,
        statements: db_work::top_statements(&statements_before, &statements_after, lifetime_runs),
    })
}

/// A side while it runs.
enum Running {
    Fair(fair::FairSide),
    Plain(tokio::task::JoinSet<Result<()>>),
    Batched(tokio::task::JoinSet<Result<()>>),
}

impl Running {
    async fn join(self) -> Result<()> {
        match self {
            Self::Fair(side) => side.join().await.map(|_| ()),
            Self::Plain(tasks) => plain_claimer::join(tasks, "a plain claimer").await,
            Self::Batched(tasks) => plain_claimer::join(tasks, "the batched queue").await,
        }
    }
}

/// One Worker of [`shape::EXECUTING_RUNS`] on the sparse policy, every
/// queue empty but one backlogged tenant's: slots per second in the window
/// (cursor), reservation rows and batches (function calls) over its life.
async fn slot_rate(
    url: &str,
    client: &tokio_postgres::Client,
    setting: &str,
    window: Duration,
) -> Result<SlotRate> {
    let policy = shape::sparse_policy()?;
    let shard = policy.shard_id().to_string();
    let tenant = shape::sparse_tenant(shape::sparse_backlogged()[3]);
    feeder::load(client, &[(tenant, shape::RUNS_PER_TENANT)]).await?;
    let counting = window::track_functions(client).await?;
    let before_sessions = window::sessions(client).await?;
    let calls_before = window::reserve_calls(client).await?;
    let born = window::edge(client, &shard).await?;
    let stop = CancellationToken::new();
    let concurrency = shape::EXECUTING_RUNS;
    let worker = fair::start(url, &policy, concurrency, Duration::ZERO, stop.clone()).await?;
    tokio::time::sleep(WARM_UP).await;
    let from = window::edge(client, &shard).await?;
    tokio::time::sleep(window).await;
    let to = window::edge(client, &shard).await?;
    stop.cancel();
    worker.join().await?;
    window::sessions_gone(client, &before_sessions).await?;
    let died = window::edge(client, &shard).await?;
    let calls_after = window::reserve_calls(client).await?;
    let seconds = window::seconds(&from, &to).max(1e-9);
    let lifetime = window::seconds(&born, &died).max(1e-9);
    let batches = match (counting, calls_before, calls_after) {
        (true, Some(before), Some(after)) => Some(after - before),
        _ => None,
    };
    let slots = to.cursor - from.cursor;
    Ok(SlotRate {
        setting: setting.to_owned(),
        concurrency,
        seconds,
        slots,
        slots_per_second: slots as f64 / seconds,
        runs: window::completed(client, &from, &to).await?,
        lifetime_seconds: lifetime,
        lifetime_rows: died.rows - born.rows,
        rows_per_second: (died.rows - born.rows) as f64 / lifetime,
        batches,
        batches_per_second: batches.map(|b| b as f64 / lifetime),
    })
}

/// One fair Worker of `concurrency` with a no-op handler on `policy`
/// (the soak's); stops when `stop` fires.
pub async fn start_fair(
    url: &str,
    policy: &WeightedFairnessPolicy,
    concurrency: usize,
    stop: CancellationToken,
) -> Result<FairSide> {
    fair::start(url, policy, concurrency, Duration::ZERO, stop).await
}

/// The batched plain queue with `capacity` executing runs and a no-op
/// handler (section `sustained`'s); stops when `stop` fires.
pub async fn start_batched(
    url: &str,
    capacity: usize,
    stop: CancellationToken,
) -> Result<tokio::task::JoinSet<Result<()>>> {
    Ok(batched::start(url, capacity, Duration::ZERO, stop).await?.0)
}

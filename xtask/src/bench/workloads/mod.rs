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

mod batched;
mod fair;
mod feeder;
pub mod lag;
pub mod results;
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

pub use fair::FairSide;
pub use shape::uniform_policy;

/// Connections the section opens at most at once (the long-runs Worker's
/// pool, its notification connection, the feeder, the harness).
pub const MAX_CONNECTIONS: usize = shape::LONG_EXECUTING_RUNS + 6;

/// Unmeasured time between a side's start and its window.
const WARM_UP: Duration = Duration::from_millis(500);

/// Runs every workload and the slot rate on the server of `url` (a
/// migrated database), `window` seconds each, labelled `setting`.
pub async fn run(url: &str, setting: &str, window: Duration, into: &mut Workloads) -> Result<()> {
    let client = crate::bench::connection::connect(url).await?;
    for workload in Workload::ALL {
        let policy = workload.policy()?;
        let mut sides = Vec::new();
        for side in [FAIR, PLAIN, BATCHED] {
            eprintln!(
                "==> workloads ({setting}): {}, {side}, {} executing runs",
                workload.name(),
                workload.executing_runs()
            );
            let measured = measure_side(url, &client, workload, &policy, side, window).await?;
            eprintln!(
                "    {:.0} runs/s{}{}",
                measured.runs_per_second,
                measured
                    .slots_per_second
                    .map_or_else(String::new, |s| format!(", {s:.0} slots/s")),
                measured.lag.as_ref().map_or_else(String::new, |l| format!(
                    ", fed p50 {:.1} ms p99 {:.1} ms ({} runs, {} unclaimed)",
                    l.p50_ms, l.p99_ms, l.runs, l.unclaimed
                ))
            );
            sides.push(measured);
        }
        into.runs.push(WorkloadRun {
            setting: setting.to_owned(),
            workload: workload.name().to_owned(),
            executing_runs: workload.executing_runs(),
            handler_ms: u64::try_from(workload.handler().as_millis())?,
            sides,
        });
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

/// One side of one workload: load the queue, start the side (and the
/// feeder), warm up, measure the window, stop, read the figures.
async fn measure_side(
    url: &str,
    client: &tokio_postgres::Client,
    workload: Workload,
    policy: &WeightedFairnessPolicy,
    side: &str,
    window: Duration,
) -> Result<Side> {
    feeder::load(client, &workload.backlog(policy)).await?;
    let baseline = side != FAIR;
    if baseline {
        plain_claimer::create_index(url).await?;
    }
    let shard = policy.shard_id().to_string();
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
    let backlog_left = match workload {
        Workload::NoisyNeighbour => Some(window::available(client, "noisy").await?),
        _ => None,
    };
    stop.cancel();
    feeding.await??;
    running.join().await?;
    let stopped = window::edge(client, &shard).await?.at;
    if baseline {
        plain_claimer::drop_index(url).await?;
    }
    let seconds = window::seconds(&from, &to);
    let runs = window::completed(client, &from, &to).await?;
    Ok(Side {
        side: side.to_owned(),
        runs,
        seconds,
        runs_per_second: runs as f64 / seconds.max(1e-9),
        slots_per_second: (!baseline).then(|| (to.cursor - from.cursor) as f64 / seconds.max(1e-9)),
        lag: window::lag(client, &fed, &from, &to, stopped).await?,
        backlog_left,
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

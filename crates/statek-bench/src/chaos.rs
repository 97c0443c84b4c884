//! `cargo xtask chaos`: a Worker fleet under steady load on a durable
//! server (fsync on), through the faults people have: PostgreSQL
//! restarted (fast and immediate), every backend terminated (once, and
//! every second), every connection taken by other clients, a session idle
//! in transaction holding one tenant's rows, another holding the shard
//! row. The cells follow the public PostgreSQL job-queue harness's
//! (hardbyte/postgresql-job-queue-benchmarking: restart, backend kill,
//! pool exhaustion, long transactions).
//!
//! Each cell runs on a fresh database: 3 Workers (16 runs at once, handlers
//! of 5 ms that record each execution in the harness's own table, lease
//! 5 s) and a producer keeping 2,000 runs queued; then the fault; then the
//! producer stops and the fleet drains. A cell passes when throughput is
//! back to 80% of its level before the fault within the bound (15 s after
//! a restarted server accepts connections, 5 s after other faults end),
//! no acknowledged enqueue is left unfinished (0 lost), and no run was
//! executed twice beyond what its lease allows (judged from statek's claim
//! history and the handlers' rows). `--quick` (a step of `cargo xtask
//! test`) runs an immediate restart and one termination of every backend.

use std::time::{Duration, SystemTime};

use anyhow::{bail, ensure, Context, Result};
use statek_store_pg::StoreConfig;

use crate::pg::{self, PgMajor, RunningServer};

mod faults;
mod fleet;
mod judge;

use faults::Fault;
use fleet::{Fleet, FleetShape};

/// Options of `cargo xtask chaos`.
#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    /// Two short cells (an immediate restart, every backend terminated
    /// once): the form `cargo xtask test` runs.
    #[arg(long)]
    pub quick: bool,
    /// Workers in the fleet.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub workers: u32,
    /// PostgreSQL major version.
    #[arg(long, value_enum, default_value_t = PgMajor::V17)]
    pub pg: PgMajor,
}

/// The fleet of every cell.
const SHAPE: FleetShape = FleetShape {
    workers: 3,
    concurrency: 16,
    work: Duration::from_millis(5),
    lease: Duration::from_secs(5),
    depth: 2000,
};

/// One cell's figures.
#[derive(Debug)]
struct CellResult {
    name: String,
    before: f64,
    worst: f64,
    recovered_after: Option<f64>,
    bound: Duration,
    lost: i64,
    doubles: judge::Doubles,
    claims_within_a_lease: i64,
    claims_after_an_expired_lease: i64,
    completed: usize,
    detail: String,
}

impl CellResult {
    fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        match self.recovered_after {
            Some(after) if after <= self.bound.as_secs_f64() => {}
            Some(after) => failures.push(format!(
                "throughput back to 80% after {after:.1} s, bound {} s",
                self.bound.as_secs()
            )),
            None => failures.push(format!(
                "throughput not back to 80% within {} s",
                self.bound.as_secs()
            )),
        }
        if self.lost != 0 {
            failures.push(format!("{} acknowledged runs never finished", self.lost));
        }
        if self.doubles.not_allowed != 0 {
            failures.push(format!(
                "{} executions beyond what the leases allow",
                self.doubles.not_allowed
            ));
        }
        if self.claims_within_a_lease != 0 {
            failures.push(format!(
                "{} claims of a run whose earlier claim's lease held",
                self.claims_within_a_lease
            ));
        }
        failures
    }
}

/// Runs the cells; fails when any cell broke a promise.
pub fn run(args: &ChaosArgs) -> Result<()> {
    let started = std::time::Instant::now();
    let server = pg::Server::provision(args.pg)?.start_durable()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let cells: Vec<Fault> = if args.quick {
        vec![Fault::RestartImmediate, Fault::TerminateOnce]
    } else {
        vec![
            Fault::RestartFast,
            Fault::RestartImmediate,
            Fault::TerminateOnce,
            Fault::TerminateEverySecond(Duration::from_secs(10)),
            Fault::PoolExhausted(Duration::from_secs(10)),
            Fault::TenantRowsLocked(Duration::from_secs(30)),
            Fault::ShardRowLocked(Duration::from_secs(30)),
        ]
    };
    let shape = FleetShape {
        workers: args.workers,
        ..SHAPE
    };
    let timing = if args.quick {
        Timing {
            warm: Duration::from_secs(2),
            before: Duration::from_secs(3),
        }
    } else {
        Timing {
            warm: Duration::from_secs(3),
            before: Duration::from_secs(5),
        }
    };
    let mut results = Vec::new();
    for (index, fault) in cells.iter().enumerate() {
        let result = runtime
            .block_on(cell(&server, index, *fault, shape, timing))
            .with_context(|| format!("chaos cell {}", fault.name()))?;
        println!("chaos: {}: {}", result.name, result.detail);
        results.push(result);
    }
    print_table(&results, shape);
    println!(
        "chaos: {} cells in {:.1} s",
        results.len(),
        started.elapsed().as_secs_f64()
    );
    let failures: Vec<String> = results
        .iter()
        .flat_map(|r| {
            r.failures()
                .into_iter()
                .map(move |f| format!("{}: {f}", r.name))
        })
        .collect();
    if !failures.is_empty() {
        bail!("chaos: {}", failures.join("; "));
    }
    server.stop()
}

#[derive(Debug, Clone, Copy)]
struct Timing {
    warm: Duration,
    before: Duration,
}

async fn cell(
    server: &RunningServer,
    index: usize,
    fault: Fault,
    shape: FleetShape,
    timing: Timing,
) -> Result<CellResult> {
    let admin_url = server.database_url();
    let admin = StoreConfig::from_url(&admin_url)?;
    let database = format!("chaos_{index}");
    admin
        .connect_client()
        .await?
        .batch_execute(&format!("CREATE DATABASE {database}"))
        .await
        .with_context(|| format!("creating database {database}"))?;
    let url = database_url(&admin_url, &database);
    let cell_config = StoreConfig::from_url(&url)?;
    fleet::store(&url, 2)?
        .migrate()
        .await
        .context("migrations")?;
    cell_config
        .connect_client()
        .await?
        .batch_execute(fleet::CREATE_EXECUTIONS)
        .await
        .context("creating the handlers' table")?;

    let mut fleet = Fleet::start(&url, shape).await?;
    tokio::time::sleep(timing.warm + timing.before).await;
    ensure!(fleet.workers_running(), "a worker ended before the fault");
    let injected = faults::inject(fault, server, &admin, &cell_config, &database).await?;
    // Observe until throughput is back (polled on the live database) or
    // the bound has passed, then one second more for the last window.
    let bound = fault.recovery_bound();
    let began = fleet::since_epoch(injected.began);
    let ended = fleet::since_epoch(injected.ended);
    let before_from = began - timing.before.as_secs_f64();
    let observer = cell_config.connect_client().await?;
    let before = {
        let times = finish_times(&observer).await?;
        judge::rate(&times, before_from, began)
    };
    loop {
        let now = fleet::since_epoch(SystemTime::now());
        if now > ended + bound.as_secs_f64() + 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let times = finish_times(&observer).await.unwrap_or_default();
        if judge::recovery(&times, ended, now, 0.8 * before).is_some() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            break;
        }
    }
    ensure!(fleet.workers_running(), "a worker ended after the fault");
    let acknowledged = fleet.stop_producing().await;
    // Drain: every acknowledged run finishes (runs whose claim answer a
    // fault lost wait out their lease first).
    let drain_until = tokio::time::Instant::now() + shape.lease * 4 + Duration::from_secs(10);
    let observer = cell_config.connect_client().await?;
    loop {
        let evidence = judge::read(
            &observer,
            &acknowledged,
            &fleet.failed_executions(),
            shape.lease,
        )
        .await?;
        if evidence.lost == 0 || tokio::time::Instant::now() > drain_until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let failed = fleet.failed_executions();
    let reports = fleet.stop().await?;
    let evidence = judge::read(&observer, &acknowledged, &failed, shape.lease).await?;
    let times = &evidence.finish_times;
    let observed_to = ended + bound.as_secs_f64() + 1.0;
    let outages: u64 = reports.iter().map(|r| r.outages).sum();
    Ok(CellResult {
        name: fault.name(),
        before,
        worst: judge::worst(times, began, ended.max(began + 1.0) + 1.0),
        recovered_after: judge::recovery(times, ended, observed_to, 0.8 * before),
        bound,
        lost: evidence.lost,
        doubles: evidence.doubles,
        claims_within_a_lease: evidence.claims_within_a_lease,
        claims_after_an_expired_lease: evidence.claims_after_an_expired_lease,
        completed: times.len(),
        detail: format!(
            "{}; {} runs acknowledged, {} completed; {outages} outages ridden out by the workers",
            injected.detail,
            acknowledged.len(),
            times.len()
        ),
    })
}

async fn finish_times(client: &tokio_postgres::Client) -> Result<Vec<f64>> {
    Ok(client
        .query(judge::FINISH_TIMES, &[])
        .await?
        .iter()
        .map(|r| r.try_get("at"))
        .collect::<Result<Vec<f64>, _>>()?)
}

/// `postgres://postgres@127.0.0.1:<port>/<database>` from the server's
/// URL (which names the `postgres` database).
fn database_url(admin_url: &str, database: &str) -> String {
    match admin_url.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{database}"),
        None => admin_url.to_owned(),
    }
}

fn print_table(results: &[CellResult], shape: FleetShape) {
    println!(
        "chaos: {} Workers x {} runs at once, handlers of {} ms, lease {} s, {} runs queued, durable server (fsync on)",
        shape.workers,
        shape.concurrency,
        shape.work.as_millis(),
        shape.lease.as_secs(),
        shape.depth
    );
    println!(
        "{:<26} {:>10} {:>10} {:>13} {:>6} {:>5} {:>22} {:>11}",
        "cell",
        "before/s",
        "worst/s",
        "back to 80%",
        "bound",
        "lost",
        "twice: allowed/not",
        "completed"
    );
    for r in results {
        let back = r
            .recovered_after
            .map_or_else(|| "never".to_owned(), |s| format!("{s:.1} s"));
        let allowed = r.doubles.after_expired_lease + r.doubles.after_handler_failure;
        println!(
            "{:<26} {:>10.0} {:>10.0} {:>13} {:>4} s {:>5} {:>18}/{:<3} {:>11}",
            r.name,
            r.before,
            r.worst,
            back,
            r.bound.as_secs(),
            r.lost,
            allowed,
            r.doubles.not_allowed,
            r.completed
        );
    }
    println!("(before: completions/s over the window before the fault; worst: the lowest 1 s window from the fault's start to 1 s after its end; back to 80%: from the end of the fault, for a restart from when the server accepted connections again; twice allowed: after an expired lease or a failed handler)");
    for r in results {
        println!(
            "chaos: {}: executions again after an expired lease {}, after a failed handler {}; claims after an expired lease {}, within a held lease {}",
            r.name,
            r.doubles.after_expired_lease,
            r.doubles.after_handler_failure,
            r.claims_after_an_expired_lease,
            r.claims_within_a_lease
        );
    }
}

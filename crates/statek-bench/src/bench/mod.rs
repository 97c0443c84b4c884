//! `cargo xtask bench`: statek's performance figures, measured side by side
//! with their baselines in one run on one server, written to
//! `target/bench/*.json` and PNG charts (see docs/benchmarks.md).
//!
//! Sections, in order: reservations (statek `reserve` and `reserve_batch`
//! against pgbench running the same transaction), the fairness tax (fair
//! replicas against a plain `SKIP LOCKED` claimer), empty slots, retention
//! (prune throughput, latency while pruning, latency with retained rows),
//! policy compile time (criterion, `cargo bench -p statek-policy`), durable
//! commits, and the workloads of issue 12 (a fair `Worker` against a plain
//! and a batched unfair queue, on the fast settings and durable), enqueue
//! throughput, one run per statement against bulk (issue 14); `soak`
//! (a Worker's memory over 10 minutes) and `sustained` (the fair Worker
//! and the batched queue for 30 minutes at a fixed depth and at a fixed
//! rate) run only when asked for.
//! Nothing here asserts a timing: it measures and reports.

mod args;
mod charts;
mod connection;
mod docs_tables;
mod enqueue;
mod load;
mod plain_claimer;
mod queue;
mod report;
mod reserve;
mod retained;
mod servers;
mod soak;
mod sustained;
mod target;
mod workloads;

use connection::connect;
use load::Until;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use statek_policy::WeightedFairnessPolicy;

use crate::pg::{self, PgMajor};

pub use args::{BenchArgs, Section};
pub use report::Report;

/// Shards of the run (separate cursors, so phases do not share a hot row
/// by accident).
const RESERVE_SHARD: &str = "bench-reserve-v1";
const BATCH_SHARD: &str = "bench-batch-v1";
const PGBENCH_SHARD: &str = "bench-pgbench-v1";
const QUEUE_SHARD: &str = "bench-queue-v1";
const RETAINED_SHARD: &str = "bench-retained-v1";
/// The database the run creates (and drops at the end): one per process,
/// so two runs on one server do not meet.
fn bench_database() -> String {
    format!("statek_bench_{}", std::process::id())
}
/// Fair replicas and plain claimers of the queue comparison.
const QUEUE_WORKERS: usize = 4;
/// Reservers running against the prune.
const PRUNE_CLIENTS: usize = 4;
/// Prune batch size.
const PRUNE_BATCH: u32 = 10_000;

/// Eight tenants of weight 1 (L = 8).
fn policy(shard: &str) -> Result<WeightedFairnessPolicy> {
    workloads::uniform_policy(shard, 8)
}

/// Runs the benchmark against `DATABASE_URL`, or a PostgreSQL 17 that it
/// provisions (and stops afterwards).
pub fn run(args: &BenchArgs) -> Result<()> {
    if args.update_docs {
        let blocks = docs_tables::update(&crate::workspace::root())?;
        eprintln!(
            "xtask: {blocks} generated table block(s) of {} rewritten from their results files",
            docs_tables::DOC
        );
        return Ok(());
    }
    if let Some(saved) = &args.charts_from {
        let text = std::fs::read_to_string(saved)
            .with_context(|| format!("reading {}", saved.display()))?;
        let report: Report = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a bench results.json", saved.display()))?;
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| crate::workspace::target_dir().join("bench"));
        std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        report.print();
        charts::write(&out, &report)?;
        eprintln!("xtask: charts in {}", out.display());
        return Ok(());
    }
    // Checked before the (slow) release build and before any server
    // starts.
    let pgbench = if args.only.contains(&Section::Reservations) {
        let pgbench = reserve::pgbench_binary()?;
        let version = reserve::pgbench_version(&pgbench)?;
        Some((pgbench, version))
    } else {
        None
    };
    let features = args.allocator.features();
    if cfg!(debug_assertions) || !args.allocator.in_effect() {
        // A debug build; the client side of a benchmark must not be one.
        // Re-run this command from a release build of statek-bench
        // (with the allocator asked for).
        return rerun_in_release(features);
    }
    let mut args = args.clone();
    if args.quick {
        args.seconds = args.seconds.min(2);
        args.workload_seconds = args.workload_seconds.min(2);
        args.retained = vec![10_000, 50_000];
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| crate::workspace::target_dir().join("bench"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let compile = if !args.only.contains(&Section::Compile) {
        None
    } else {
        eprintln!("==> policy compile (criterion): cargo bench -p statek-policy --bench compile");
        Some(report::run_criterion(args.quick)?)
    };
    let needs_database = args.only.iter().any(|s| {
        matches!(
            s,
            Section::Reservations
                | Section::Queue
                | Section::Retention
                | Section::Durable
                | Section::Workloads
                | Section::CostSkew
                | Section::Enqueue
                | Section::Soak
        )
    });
    let wants = |s: Section| args.only.contains(&s);
    if !needs_database && !wants(Section::Sustained) {
        let mut report = Report::new(report::Machine::local(), args.seconds, args.batch);
        report.compile = compile;
        report.write(&out, &args.only)?;
        report.print();
        eprintln!("xtask: bench results in {}", out.display());
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let started = Instant::now();
    let mut report = if needs_database {
        let _server;
        let url = if let Some(url) = pg::external_database_url() {
            url
        } else {
            let server = pg::Server::provision_and_start_measured(PgMajor::V17)?;
            let url = server.database_url();
            _server = server;
            url
        };
        runtime.block_on(measure(
            &args,
            &url,
            &out,
            pgbench.as_ref().map(|(path, _)| path.as_path()),
        ))?
    } else {
        Report::new(report::Machine::local(), args.seconds, args.batch)
    };
    report.machine.pgbench = pgbench.map(|(_, version)| version).unwrap_or_default();
    if wants(Section::Durable) || wants(Section::Workloads) {
        if let Some(durable) = servers::Durable::provision("sections durable and workloads")? {
            if wants(Section::Durable) {
                report.durable = durable_section(&args, &runtime, &durable)?;
            }
            if wants(Section::Workloads) && args.settings.contains(&args::Setting::Durable) {
                durable_workloads(&args, &runtime, &durable, &mut report.workloads)?;
            }
        }
    }
    if wants(Section::Sustained) {
        report.sustained = Some(sustained_section(&args, &runtime)?);
    }
    report.compile = compile;
    report.total_seconds = started.elapsed().as_secs_f64();
    report.write(&out, &args.only)?;
    report.print();
    if wants(Section::Reservations) {
        charts::write(&out, &report)?;
    }
    eprintln!("xtask: bench results in {}", out.display());
    Ok(())
}

/// Runs `cargo run --release -p statek-bench [FEATURES] -- <the same arguments>`
/// and returns its result.
fn rerun_in_release(features: &[&str]) -> Result<()> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    eprintln!(
        "xtask: building statek-bench in release mode for the benchmark (cargo run --release -p statek-bench {})",
        features.join(" ")
    );
    let status = crate::workspace::cargo()
        .args(["run", "--release", "--quiet", "--package", "statek-bench"])
        .args(features)
        .arg("--")
        .args(&args)
        .status()
        .context("running the release build of statek-bench")?;
    if status.success() {
        Ok(())
    } else {
        anyhow::bail!("the release benchmark run failed ({status})")
    }
}

/// Fails early if the server cannot take the largest client count (plus
/// the harness's own connections) on top of what it already serves.
async fn check_connections(admin: &tokio_postgres::Client, args: &BenchArgs) -> Result<()> {
    let max: i64 = admin
        .query_one("SELECT current_setting('max_connections')::bigint", &[])
        .await?
        .try_get(0)?;
    let in_use: i64 = admin
        .query_one("SELECT count(*) FROM pg_stat_activity", &[])
        .await?
        .try_get(0)?;
    let wanted = args
        .clients
        .iter()
        .copied()
        .max()
        .map_or(0, i64::from)
        .max(2 * QUEUE_WORKERS as i64)
        .max(workloads::MAX_CONNECTIONS as i64)
        + 8;
    if in_use + wanted > max {
        anyhow::bail!(
            "the server allows max_connections = {max} and {in_use} are in use; this run \
             needs up to {wanted} more (the largest --clients plus the harness's own). \
             Lower --clients or raise max_connections"
        );
    }
    Ok(())
}

/// The URL of database `database` on the server of `url`.
fn bench_url(url: &str, database: &str) -> String {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let (base, query) = url
            .split_once('?')
            .map_or((url, None), |(b, q)| (b, Some(q)));
        let scheme_end = base.find("://").map_or(0, |i| i + 3);
        let without_db = match base[scheme_end..].find('/') {
            Some(slash) => &base[..scheme_end + slash],
            None => base,
        };
        match query {
            Some(q) => format!("{without_db}/{database}?{q}"),
            None => format!("{without_db}/{database}"),
        }
    } else {
        format!("{url} dbname={database}")
    }
}

async fn measure(
    args: &BenchArgs,
    url: &str,
    out: &std::path::Path,
    pgbench: Option<&std::path::Path>,
) -> Result<Report> {
    let admin = connect(url).await?;
    check_connections(&admin, args).await?;
    in_fresh_database(&admin, url, &bench_database(), |url| async move {
        measure_in(args, &url, out, pgbench).await
    })
    .await
}

/// Runs `measure` on a database `database` created empty on the server of
/// `admin` (whose URL is `url`; dropped first if it exists, and dropped
/// again after, whatever `measure` returned).
async fn in_fresh_database<T, F, Fut>(
    admin: &tokio_postgres::Client,
    url: &str,
    database: &str,
    measure: F,
) -> Result<T>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    // Two statements: DROP/CREATE DATABASE refuse to run in one batch
    // (an implicit transaction).
    for statement in [
        format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
        format!("CREATE DATABASE {database}"),
    ] {
        admin
            .batch_execute(&statement)
            .await
            .with_context(|| format!("{statement} (needs CREATEDB)"))?;
    }
    let result = measure(bench_url(url, database)).await;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
        .await
        .ok();
    result
}

/// Empties the reservation table between bench phases, as the superuser:
/// the database refuses TRUNCATE of the evidence to every other role, and a
/// superuser must step around the trigger (`session_replication_role`).
const EMPTY_RESERVATIONS: &str = "SET session_replication_role = replica;
     TRUNCATE statek.scheduler_reservations;
     RESET session_replication_role";

async fn measure_in(
    args: &BenchArgs,
    url: &str,
    out: &std::path::Path,
    pgbench: Option<&std::path::Path>,
) -> Result<Report> {
    let store = reserve::store(url, 4)?;
    store.migrate().await?;
    let client = connect(url).await?;
    let mut report = Report::new(report::machine(&client).await?, args.seconds, args.batch);
    let [reserve_policy, batch_policy, pgbench_policy, queue_policy, retained_policy] = [
        RESERVE_SHARD,
        BATCH_SHARD,
        PGBENCH_SHARD,
        QUEUE_SHARD,
        RETAINED_SHARD,
    ]
    .map(policy);
    let (reserve_policy, batch_policy, pgbench_policy, queue_policy, retained_policy) = (
        reserve_policy?,
        batch_policy?,
        pgbench_policy?,
        queue_policy?,
        retained_policy?,
    );
    for p in [
        &reserve_policy,
        &batch_policy,
        &pgbench_policy,
        &queue_policy,
        &retained_policy,
    ] {
        store.register(p).await?;
    }

    if let (true, Some(pgbench)) = (args.only.contains(&Section::Reservations), pgbench) {
        reservations(
            args,
            url,
            out,
            pgbench,
            &mut report,
            &reserve_policy,
            &batch_policy,
            &pgbench_policy,
        )
        .await?;
    }
    if args.only.contains(&Section::Queue) {
        queue_section(args, url, &client, &mut report, &queue_policy).await?;
    }
    if args.only.contains(&Section::Retention) {
        retention(args, url, &client, &mut report, &retained_policy).await?;
    }
    if args.only.contains(&Section::Workloads) && args.settings.contains(&args::Setting::Fast) {
        report.workloads.window_seconds = args.workload_seconds;
        let window = Duration::from_secs(args.workload_seconds);
        workloads::run(
            url,
            "fast",
            window,
            args.workload_samples(),
            &args.workloads,
            &mut report.workloads,
        )
        .await?;
    }
    if args.only.contains(&Section::CostSkew) {
        report.cost_skew = Some(workloads::cost_skew::run(url, args.workload_samples()).await?);
    }
    if args.only.contains(&Section::Enqueue) {
        report.enqueue = enqueue::run(url, Duration::from_secs(args.seconds)).await?;
    }
    if args.only.contains(&Section::Soak) {
        eprintln!(
            "==> soak: one Worker at full load for {} minutes",
            args.soak_minutes
        );
        report.soak = Some(soak::run(url, args.soak_minutes).await?);
    }
    Ok(report)
}

/// Reservations: statek single, pgbench, statek batch, per client count.
#[allow(clippy::too_many_arguments)]
async fn reservations(
    args: &BenchArgs,
    url: &str,
    out: &std::path::Path,
    pgbench: &std::path::Path,
    report: &mut Report,
    reserve_policy: &WeightedFairnessPolicy,
    batch_policy: &WeightedFairnessPolicy,
    pgbench_policy: &WeightedFairnessPolicy,
) -> Result<()> {
    let window = Duration::from_secs(args.seconds);
    let script = out.join("pgbench-reserve.sql");
    std::fs::write(&script, reserve::pgbench_script(pgbench_policy))
        .with_context(|| format!("writing {}", script.display()))?;
    for clients in args.clients.iter().map(|&c| usize::from(c)) {
        eprintln!("==> reservations, {clients} client(s): statek reserve");
        let single =
            reserve::statek_single(url, reserve_policy, clients, Until::Elapsed(window)).await?;
        eprintln!("    {}", report::line(&single));
        eprintln!("==> reservations, {clients} client(s): pgbench, same transaction");
        let pgbench_url = url.to_owned();
        let (pgbench_path, script_path, work) =
            (pgbench.to_path_buf(), script.clone(), out.to_path_buf());
        let baseline = tokio::task::spawn_blocking(move || {
            reserve::pgbench(
                &pgbench_path,
                &pgbench_url,
                &work,
                &script_path,
                clients,
                window,
            )
        })
        .await??;
        eprintln!("    {}", report::line(&baseline));
        eprintln!(
            "==> reservations, {clients} client(s): statek reserve_batch k = {}",
            args.batch
        );
        let batch = reserve::statek_batch(url, batch_policy, clients, args.batch, window).await?;
        eprintln!("    {}", report::line(&batch));
        report.reservations.push(report::ReservationRow {
            clients,
            statek: single,
            pgbench: baseline,
            batch,
        });
    }

    Ok(())
}

/// Reservations with durable commits: a durable server alone, then a
/// durable primary with a synchronous standby (what an operator sizing a
/// shard sees; the other sections run on the fast development settings).
fn durable_section(
    args: &BenchArgs,
    runtime: &tokio::runtime::Runtime,
    server: &servers::Durable,
) -> Result<Vec<report::DurableRow>> {
    let window = Duration::from_secs(args.seconds);
    let clients: Vec<usize> = args
        .clients
        .iter()
        .map(|&c| usize::from(c))
        .filter(|&c| c <= 16)
        .collect();
    let mut rows = Vec::new();
    for replication in [None, Some(pg::Replication::Synchronous)] {
        let (setup, url, _keep_single, _keep_pair) = match replication {
            None => {
                let (single, url) = server.single()?;
                ("durable".to_owned(), url, Some(single), None)
            }
            Some(replication) => {
                let (pair, url) = server.pair(replication)?;
                (
                    "durable + synchronous standby".to_owned(),
                    url,
                    None,
                    Some(pair),
                )
            }
        };
        let measured: Result<Vec<report::DurableRow>> = runtime.block_on(async {
            let store = reserve::store(&url, 1)?;
            store.migrate().await?;
            let single_policy = policy("bench-durable-v1")?;
            let batch_policy = policy("bench-durable-batch-v1")?;
            store.register(&single_policy).await?;
            store.register(&batch_policy).await?;
            eprintln!("==> durable commits ({setup}): {}", store.durability_report().await?);
            let mut rows = Vec::new();
            for &clients in &clients {
                eprintln!("==> durable commits ({setup}), {clients} client(s): reserve, reserve_batch k = {}", args.batch);
                let single =
                    reserve::statek_single(&url, &single_policy, clients, Until::Elapsed(window))
                        .await?;
                eprintln!("    {}", report::line(&single));
                let batch =
                    reserve::statek_batch(&url, &batch_policy, clients, args.batch, window).await?;
                eprintln!("    {}", report::line(&batch));
                rows.push(report::DurableRow {
                    setup: setup.clone(),
                    clients,
                    single,
                    batch,
                });
            }
            Ok(rows)
        });
        rows.extend(measured?);
    }
    Ok(rows)
}

/// Section `workloads` on a durable server of its own.
fn durable_workloads(
    args: &BenchArgs,
    runtime: &tokio::runtime::Runtime,
    server: &servers::Durable,
    into: &mut workloads::Workloads,
) -> Result<()> {
    let (_keep, url) = server.single()?;
    runtime.block_on(async {
        let store = reserve::store(&url, 1)?;
        store.migrate().await?;
        eprintln!(
            "==> workloads (durable): {}",
            store.durability_report().await?
        );
        into.window_seconds = args.workload_seconds;
        workloads::run(
            &url,
            "durable",
            Duration::from_secs(args.workload_seconds),
            args.workload_samples(),
            &args.workloads,
            into,
        )
        .await
    })
}

/// Section `sustained` on a durable server of its own, or on
/// `DATABASE_URL`'s server when it is set (its durability is printed and
/// recorded).
fn sustained_section(
    args: &BenchArgs,
    runtime: &tokio::runtime::Runtime,
) -> Result<sustained::Sustained> {
    eprintln!(
        "==> sustained: 4 phases of {} min (fair and batched, fixed depth then fixed rate)",
        args.sustained_minutes
    );
    let _keep;
    let url = match pg::external_database_url() {
        Some(url) => url,
        None => {
            let durable = servers::Durable::provision("section sustained")?
                .context("no durable server for section sustained")?;
            let (server, url) = durable.single()?;
            _keep = (durable, server);
            url
        }
    };
    runtime.block_on(sustained::run(&url, args.sustained_minutes))
}

/// The fairness tax and empty slots.
async fn queue_section(
    args: &BenchArgs,
    url: &str,
    client: &tokio_postgres::Client,
    report: &mut Report,
    queue_policy: &WeightedFairnessPolicy,
) -> Result<()> {
    let window = Duration::from_secs(args.seconds);
    eprintln!(
        "==> queue: {QUEUE_WORKERS} fair replicas (k = 1), {} runs per tenant",
        queue::RUNS_PER_TENANT
    );
    queue::refill(client, queue_policy).await?;
    let fair = queue::fair(
        url,
        queue_policy,
        QUEUE_WORKERS,
        1,
        window,
        "fair replicas, k = 1",
    )
    .await?;
    eprintln!("    {:.0} runs/s", fair.runs_per_second);
    eprintln!(
        "==> queue: {QUEUE_WORKERS} fair replicas (k = {})",
        args.batch
    );
    queue::refill(client, queue_policy).await?;
    let fair_batch = queue::fair(
        url,
        queue_policy,
        QUEUE_WORKERS,
        args.batch,
        window,
        &format!("fair replicas, k = {}", args.batch),
    )
    .await?;
    eprintln!("    {:.0} runs/s", fair_batch.runs_per_second);
    eprintln!("==> queue: {QUEUE_WORKERS} plain SKIP LOCKED claimers");
    queue::refill(client, queue_policy).await?;
    plain_claimer::create_index(url).await?;
    let plain = queue::plain(url, QUEUE_WORKERS, window).await?;
    plain_claimer::drop_index(url).await?;
    eprintln!("    {:.0} runs/s", plain.runs_per_second);
    eprintln!("==> queue: {QUEUE_WORKERS} fair replicas, every queue empty");
    queue::empty(client).await?;
    let empty = queue::fair(
        url,
        queue_policy,
        QUEUE_WORKERS,
        1,
        window,
        "fair replicas, empty queues",
    )
    .await?;
    eprintln!("    {:.0} ticks/s", empty.ticks_per_second);
    report.queue = vec![fair, fair_batch, plain, empty];

    Ok(())
}

/// Retention: latency by retained rows, prune throughput, latency while
/// pruning.
async fn retention(
    args: &BenchArgs,
    url: &str,
    client: &tokio_postgres::Client,
    report: &mut Report,
    retained_policy: &WeightedFairnessPolicy,
) -> Result<()> {
    let window = Duration::from_secs(args.seconds);
    client.batch_execute(EMPTY_RESERVATIONS).await?;
    client
        .batch_execute("VACUUM ANALYZE statek.scheduler_reservations")
        .await?;
    eprintln!("==> retained rows: 0");
    let at_zero = reserve::statek_single(url, retained_policy, 1, Until::Elapsed(window)).await?;
    eprintln!("    {}", report::line(&at_zero));
    report.retained.push(report::RetainedRow {
        rows: 0,
        measured: at_zero,
    });
    let prune_rows = args.retained.first().copied().unwrap_or(1_000_000);
    eprintln!("==> inserting {prune_rows} old reservation rows");
    let took = retained::insert_old_rows(client, retained_policy, prune_rows).await?;
    eprintln!("    {:.1} s", took.as_secs_f64());
    eprintln!("==> retained rows: {prune_rows}");
    let at_first = reserve::statek_single(url, retained_policy, 1, Until::Elapsed(window)).await?;
    eprintln!("    {}", report::line(&at_first));
    report.retained.push(report::RetainedRow {
        rows: prune_rows,
        measured: at_first,
    });
    eprintln!("==> {PRUNE_CLIENTS} reservers without a prune");
    let quiet =
        reserve::statek_single(url, retained_policy, PRUNE_CLIENTS, Until::Elapsed(window)).await?;
    eprintln!("    {}", report::line(&quiet));
    eprintln!("==> {PRUNE_CLIENTS} reservers while pruning {prune_rows} rows, batch {PRUNE_BATCH}");
    let (busy, prune) = retained::reserve_while_pruning(
        url,
        retained_policy,
        PRUNE_CLIENTS,
        prune_rows,
        PRUNE_BATCH,
    )
    .await?;
    eprintln!(
        "    prune {:.0} rows/s ({} rows in {:.1} s); reservers {}",
        prune.rows_per_second,
        prune.deleted,
        prune.seconds,
        report::line(&busy)
    );
    report.prune = Some(report::PruneRow {
        prune,
        without: quiet,
        during: busy,
    });
    for &rows in args.retained.iter().skip(1) {
        client.batch_execute(EMPTY_RESERVATIONS).await?;
        eprintln!("==> inserting {rows} old reservation rows");
        let took = retained::insert_old_rows(client, retained_policy, rows).await?;
        eprintln!("    {:.1} s", took.as_secs_f64());
        eprintln!("==> retained rows: {rows}");
        let measured =
            reserve::statek_single(url, retained_policy, 1, Until::Elapsed(window)).await?;
        eprintln!("    {}", report::line(&measured));
        report.retained.push(report::RetainedRow { rows, measured });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_url_replaces_the_database() {
        let db = "statek_bench_7";
        assert_eq!(
            bench_url("postgres://postgres@127.0.0.1:5432/postgres", db),
            "postgres://postgres@127.0.0.1:5432/statek_bench_7"
        );
        assert_eq!(
            bench_url("postgresql://u:p@h/db?sslmode=disable", db),
            "postgresql://u:p@h/statek_bench_7?sslmode=disable"
        );
        assert_eq!(
            bench_url("postgres://h:1", db),
            "postgres://h:1/statek_bench_7"
        );
        assert_eq!(
            bench_url("host=h user=u", db),
            "host=h user=u dbname=statek_bench_7"
        );
    }

    #[test]
    fn pgbench_script_is_the_reserve_transaction() {
        let p = policy("bench-pgbench-v1").unwrap();
        let script = reserve::pgbench_script(&p);
        assert!(script.starts_with("BEGIN;\nSELECT next_sequence FROM statek.scheduler_shards WHERE shard_id = 'bench-pgbench-v1' FOR UPDATE \\gset\n"), "{script}");
        assert!(script.contains(":next_sequence % 8,"), "{script}");
        assert!(
            script.ends_with("WHERE shard_id = 'bench-pgbench-v1';\nEND;\n"),
            "{script}"
        );
    }
}

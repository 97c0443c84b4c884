//! `statek demo` (and `cargo xtask demo`, which provisions PostgreSQL
//! first): what fairness buys, on PostgreSQL. The same workload runs
//! through statek and then through the plain FIFO `SKIP LOCKED` queue
//! (statek-store-pg's baseline), one after the other, with the same
//! number of workers, the same concurrency and the same handler.
//!
//! Workload (documented in the README): the heaviest tenant of the policy
//! (ties: first by id) starts with a backlog of `--backlog` runs; the
//! lightest tenant (ties: last by id) is registered but never gets a run;
//! every other tenant gets `--trickle` runs that arrive one by one while the
//! workers run. Steps: prepare the database (`prepare`), the statek side
//! (`fair_side`: `--replicas` Workers tick one shard until every run is
//! done or `--max-reservations` is reached), the FIFO side (`fifo_side`),
//! the runs read back with their claim history (`service`), the tables
//! (`table`), the charts, the checks (`checks`).
//!
//! Output: the demo's progress (the policy, the workload, each side's
//! start, progress and stop) streams to standard output while it runs, the
//! one exception to "a command returns its output" (see `out.rs`); its
//! result, the tables, charts and checks, is a [`DemoReport`].

mod args;
mod checks;
pub mod cost_skew;
mod db_work;
mod fair_side;
mod fifo_side;
mod lock;
pub(crate) mod service;
mod side;
mod table;
mod workload;

use statek_store_pg::RolloutError;
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use statek_policy::policy_file::PolicyFile;
use statek_policy::{ScheduleId, TenantId, WeightedFairnessPolicy};
use statek_store_pg::PgStore;

pub use args::DemoArgs;
use lock::lock;
use service::SideEvidence;
use side::demo_store_config;
use table::{Comparison, OrderTable};
use workload::Workload;

use crate::out::{outln, Format, Report};

/// Reads and checks the demo's policy file, that the options give the
/// demo runs to compare, and that the charts can be written (before
/// anything touches a database).
///
/// # Errors
/// The file cannot be read or is not a valid policy file;
/// [`crate::exit::InvalidInput`] when the charts directory cannot be
/// created or written, or the policy is in cost mode (before any
/// connection).
pub fn load_policy(args: &DemoArgs) -> Result<PolicyFile> {
    check_charts_dir(&charts_dir(args))?;
    let Some(path) = &args.policy else {
        return Ok(PolicyFile::parse(
            "noisy-neighbour.toml (built in)",
            DEFAULT_POLICY,
        )?);
    };
    let file = crate::policy_cmd::load_file(path)?;
    if file.policy().fairness().cost().is_some() {
        return Err(crate::exit::InvalidInput(format!(
            "{}: the demo compares slot-mode policies with a FIFO queue; for cost fairness \
             ([fairness] unit = \"cost\") run `statek demo --cost-skew` (`cargo xtask demo --cost-skew`)",
            path.display()
        ))
        .into());
    }
    Ok(file)
}

/// `statek demo --cost-skew` ([`cost_skew`]): both sides, the chart in
/// the charts directory, the checks; its progress streams to standard
/// output. Needs no database.
///
/// # Errors
/// [`crate::exit::InvalidInput`] when the charts directory cannot be
/// created or written; a side that failed.
pub fn cost_skew_report(args: &DemoArgs) -> Result<cost_skew::CostSkewReport> {
    let dir = charts_dir(args);
    check_charts_dir(&dir)?;
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the charts directory {}", dir.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    runtime.block_on(cost_skew::run(
        std::time::Duration::from_secs(2),
        std::time::Duration::from_secs(u64::from(args.window_secs)),
        &dir,
    ))
}

/// [`cost_skew_report`], its report printed, a failed check the error.
///
/// # Errors
/// As [`cost_skew_report`]; [`crate::exit::CheckFailed`].
pub fn run_cost_skew(args: &DemoArgs) -> Result<()> {
    let report = cost_skew_report(args)?;
    crate::out::emit(&report, Format::Text)?;
    report.into_result()
}

/// Where the charts go: `--charts-dir`, else `statek-demo-charts`.
fn charts_dir(args: &DemoArgs) -> PathBuf {
    args.charts_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("statek-demo-charts"))
}

/// Refuses a charts directory that cannot be created or written before
/// the demo's minutes of work, not after them: creates the missing
/// directories one path component at a time, writes and removes a probe
/// file, and removes again exactly the directories it created (a demo
/// refused later leaves nothing behind, and a directory that existed is
/// never removed, whatever `..` or symbolic links the path holds).
fn check_charts_dir(dir: &Path) -> Result<()> {
    let mut created: Vec<PathBuf> = Vec::new();
    let mut prefix = PathBuf::new();
    let mut checked = Ok(());
    for component in dir.components() {
        prefix.push(component);
        match std::fs::symlink_metadata(&prefix) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Err(e) = std::fs::create_dir(&prefix) {
                    checked = Err(e);
                    break;
                }
                created.push(prefix.clone());
            }
            Err(e) => {
                checked = Err(e);
                break;
            }
        }
    }
    if checked.is_ok() {
        let probe = dir.join(".statek-demo-write-check");
        checked = std::fs::write(&probe, b"").and_then(|()| std::fs::remove_file(&probe));
    }
    for made in created.iter().rev() {
        // Only directories this check made, deepest first; they are empty.
        let _ = std::fs::remove_dir(made);
    }
    checked.map_err(|e| {
        crate::exit::InvalidInput(format!(
            "--charts-dir {}: cannot write the charts there: {e}",
            dir.display()
        ))
        .into()
    })
}

/// The default demo policy, deploy/policies/noisy-neighbour.toml.
const DEFAULT_POLICY: &str = include_str!("../../../deploy/policies/noisy-neighbour.toml");

/// Runs the demo against `database_url` as `statek demo` does (migrates,
/// registers, runs the replicas, prints its progress, then the tables,
/// charts and checks of its [`DemoReport`]).
///
/// # Errors
/// As [`report`]; writing to standard output; [`crate::exit::CheckFailed`]
/// when a check failed.
pub fn run(args: DemoArgs, database_url: &str) -> Result<()> {
    let report = report(args, database_url)?;
    crate::out::emit(&report, Format::Text)?;
    report.into_result()
}

/// Runs the demo against `database_url`, its progress streaming to
/// standard output, and returns its result.
///
/// # Errors
/// Connection, registration or policy-file errors.
pub fn report(args: DemoArgs, database_url: &str) -> Result<DemoReport> {
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
) -> Result<DemoReport> {
    let workload = Workload::for_policy(&policy);
    describe(&args, &policy, &workload)?;
    let admin = prepare(&args, url).await?;
    let tenants: Vec<TenantId> = policy
        .tenants()
        .iter()
        .map(|t| t.tenant().clone())
        .collect();

    refuse_sealed(&admin, &policy, "before the demo").await?;
    let before_fair = db_work::reading(&admin, "before the statek side").await?;
    let fair = fair_side::run(&args, url, &admin, &policy, schedule.as_ref(), &workload).await?;
    // The checks judge one shard's sequences against its own cycle.
    refuse_sealed(&admin, &policy, "while the demo ran").await?;
    let after_fair = db_work::reading(&admin, "after the statek side").await?;
    let arrivals = lock(&fair.arrivals).clone();
    let statek = SideEvidence::read(&admin, "statek", arrivals, fair.origin).await?;
    let fair_work =
        db_work::SideWork::between_readings(&before_fair, &after_fair, statek.finished_runs());
    let mut fifo_work = Err("the FIFO side did not run");
    let fifo = match fifo_side::refusal(admin.count_live_runs().await?) {
        Some(why) => {
            outln!("{why}")?;
            Err(why)
        }
        None => {
            let before_fifo = db_work::reading(&admin, "before the FIFO side").await?;
            let side = fifo_side::run(&args, url, &admin, &tenants, &workload).await?;
            let after_fifo = db_work::reading(&admin, "after the FIFO side").await?;
            let arrivals = lock(&side.arrivals).clone();
            let evidence = SideEvidence::read(&admin, "FIFO", arrivals, side.origin).await?;
            fifo_work = db_work::SideWork::between_readings(
                &before_fifo,
                &after_fifo,
                evidence.finished_runs(),
            );
            Ok(evidence)
        }
    };

    let statements_unavailable =
        db_work::statements_unavailable(admin.statement_statistics().await?);
    Ok(DemoReport {
        order: OrderTable::new(&policy, &workload, &fair, &statek),
        comparison: fifo
            .as_ref()
            .ok()
            .map(|fifo| Comparison::new(&policy, &workload, &statek, fifo)),
        database_work: fifo.is_ok().then_some(db_work::WorkComparison::new(
            fair_work,
            fifo_work,
            statements_unavailable,
        )),
        charts: write_charts(&args, &policy, &fair, &statek, fifo.as_ref().ok()),
        checks: checks::all(
            &policy,
            &fair,
            &statek,
            fifo.as_ref().map_err(String::as_str),
            &workload.trickle_tenants,
        )
        .into_iter()
        .map(|(ok, text)| DemoCheck { ok, text })
        .collect(),
    })
}

/// Refuses to go on when the policy's shard was rolled out (sealed): its
/// replicas would follow the chain, and the checks, which judge one shard
/// against its own cycle, would report gaps that never happened.
///
/// # Errors
/// [`RolloutError::ShardSealed`](statek_store_pg::RolloutError::ShardSealed) (exit 11) with what to do;
/// errors reading the shard (an unknown shard is fine: the demo registers
/// it).
async fn refuse_sealed(admin: &PgStore, policy: &WeightedFairnessPolicy, when: &str) -> Result<()> {
    let stored = match admin.load_shard(policy.shard_id()).await {
        Ok(stored) => stored,
        Err(statek_store_pg::StoreError::Rollout(RolloutError::UnknownShard { .. })) => {
            return Ok(())
        }
        Err(e) => return Err(e.into()),
    };
    let Some(seal) = stored.seal() else {
        return Ok(());
    };
    Err(anyhow::Error::new(statek_store_pg::StoreError::Rollout(
        RolloutError::ShardSealed {
            shard: policy.shard_id().clone(),
            sealed_at_sequence: seal.sealed_at_sequence(),
            successor: seal.successor().clone(),
        },
    ))
    .context(format!(
        "the demo's shard was rolled out {when}: run the demo on a database of its own, or give \
         --policy a file with a new shard id"
    )))
}

/// The demo's result: the statek side's order table, the comparison with
/// the FIFO queue (when its side ran), the charts and the checks.
#[derive(Serialize)]
pub struct DemoReport {
    order: OrderTable,
    comparison: Option<Comparison>,
    /// Both sides' database work per finished run (when the FIFO side ran).
    database_work: Option<db_work::WorkComparison>,
    charts: Charts,
    checks: Vec<DemoCheck>,
}

/// The PNG charts, or why they were not written (not fatal).
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Charts {
    Written(Vec<PathBuf>),
    NotWritten(String),
}

/// One demo check: whether it held, and what it checked.
#[derive(Serialize)]
struct DemoCheck {
    ok: bool,
    text: String,
}

impl DemoReport {
    fn failed(&self) -> usize {
        self.checks.iter().filter(|c| !c.ok).count()
    }

    /// `Ok` when every check held.
    ///
    /// # Errors
    /// [`crate::exit::CheckFailed`] naming how many checks failed.
    pub fn into_result(self) -> Result<()> {
        match self.failed() {
            0 => Ok(()),
            failed => Err(crate::exit::CheckFailed(format!("{failed} demo checks failed")).into()),
        }
    }
}

impl Report for DemoReport {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        self.order.write_text(w)?;
        if let Some(comparison) = &self.comparison {
            comparison.write_text(w)?;
        }
        if let Some(work) = &self.database_work {
            work.write_text(w)?;
        }
        match &self.charts {
            Charts::Written(paths) => {
                for path in paths {
                    writeln!(w, "chart: {}", path.display())?;
                }
            }
            Charts::NotWritten(e) => writeln!(w, "charts not written: {e}")?,
        }
        writeln!(w)?;
        for check in &self.checks {
            writeln!(
                w,
                "check {}: {}",
                if check.ok { "ok  " } else { "FAIL" },
                check.text
            )?;
        }
        if self.failed() == 0 {
            writeln!(w, "demo: all {} checks passed", self.checks.len())?;
        }
        Ok(())
    }
}

/// Prints the policy and the workload.
fn describe(args: &DemoArgs, policy: &WeightedFairnessPolicy, workload: &Workload) -> Result<()> {
    outln!(
        "policy: shard {}, {}, cycle length L = {}, digest {}",
        policy.shard_id(),
        crate::out::count(policy.tenants().len() as u64, "tenant", "tenants"),
        policy.cycle_length(),
        policy.digest()
    )?;
    outln!(
        "workload: {} has a backlog of {} runs; {}; {}; each run's handler works {} ms; \
         first through statek, then through a plain FIFO queue",
        workload.backlog_tenant,
        args.backlog,
        match workload.trickle_tenants.len() {
            0 => "no other tenant gets runs while the workers run".to_owned(),
            n => format!(
                "{} get {} runs each, one every {} ms in turn, while the workers run",
                crate::out::count(n as u64, "other tenant", "other tenants"),
                args.trickle,
                workload::TRICKLE_EVERY.as_millis()
            ),
        },
        match &workload.idle_tenant {
            Some(t) => format!("{t} never has a run"),
            None => "no tenant is left without runs".into(),
        },
        args.work_ms
    )?;
    Ok(())
}

/// Serves metrics if asked, migrates and prints the durability check;
/// returns the demo's own store.
async fn prepare(args: &DemoArgs, url: &str) -> Result<PgStore> {
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
    Ok(admin)
}

/// Writes the PNG charts (failures are reported, not fatal).
fn write_charts(
    args: &DemoArgs,
    policy: &WeightedFairnessPolicy,
    fair: &fair_side::FairSide,
    statek: &SideEvidence,
    fifo: Option<&SideEvidence>,
) -> Charts {
    let selections: Vec<&TenantId> = fair
        .rows
        .iter()
        .filter_map(|r| policy.tenant_for_slot(u64::from(r.slot())))
        .collect();
    let dir = charts_dir(args);
    let services = fifo.map(|fifo| {
        (
            crate::charts::SideSeries::new(statek),
            crate::charts::SideSeries::new(fifo),
        )
    });
    match crate::charts::write(&dir, policy, &selections, services.as_ref()) {
        Ok(paths) => Charts::Written(paths),
        Err(e) => Charts::NotWritten(format!("{e:#}")),
    }
}

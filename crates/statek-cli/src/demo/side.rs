//! What the statek side and the FIFO side run with: the same handler,
//! the demo's store configuration, and the wait until a side is done.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use statek_policy::TenantId;
use statek_scheduler::{Completed, RunHandler, RunResult};
use statek_store_pg::{PgStore, StoreConfig};
use tokio_util::sync::CancellationToken;

use super::args::DemoArgs;
use super::lock::lock;
use super::workload::Arrivals;
use crate::out::outln;

/// The demo's handler, the same on both sides: it works (sleeps)
/// `--work-ms` per run.
#[derive(Debug, Clone)]
pub(super) struct DemoHandler {
    work: Duration,
}

impl DemoHandler {
    pub(super) fn new(args: &DemoArgs) -> Self {
        Self {
            work: Duration::from_millis(u64::from(args.work_ms)),
        }
    }

    pub(super) async fn work(&self) {
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
    }
}

impl RunHandler for DemoHandler {
    async fn handle(&self, _run: &statek_scheduler::Run, _cancel: CancellationToken) -> RunResult {
        self.work().await;
        Ok(Completed::new())
    }
}

/// Longest a side may run before the demo gives up on it.
const SIDE_LIMIT: Duration = Duration::from_secs(600);

/// Prints progress every 2 s until the trickle is over and no run of
/// `tenants` is live (`Some(reason)`), or `stop` fires, or the workers
/// end, or [`SIDE_LIMIT`] passes (`None`). `progress` adds to each line.
#[allow(clippy::too_many_arguments)]
pub(super) async fn wait_until_done<R, E>(
    admin: &PgStore,
    tenants: &[TenantId],
    producer: tokio::task::JoinHandle<Result<()>>,
    tasks: &mut tokio::task::JoinSet<std::result::Result<R, E>>,
    stop: &CancellationToken,
    started: Instant,
    arrivals: &Arrivals,
    progress: impl Fn() -> String,
) -> Result<Option<String>>
where
    R: 'static,
    E: 'static,
    anyhow::Error: From<E>,
{
    let mut producer = Some(producer);
    let mut last_report = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if producer.as_ref().is_some_and(|p| p.is_finished()) {
            if let Some(p) = producer.take() {
                p.await.context("trickle task")??;
            }
        }
        if last_report.elapsed() >= Duration::from_secs(2) {
            let live = admin.count_live_runs_of(tenants).await?;
            let total = lock(arrivals).len();
            let extra = progress();
            outln!(
                "  {:>5.1} s: {}{}/{total} runs not yet done",
                started.elapsed().as_secs_f64(),
                if extra.is_empty() {
                    String::new()
                } else {
                    format!("{extra}, ")
                },
                live
            )?;
            last_report = Instant::now();
        }
        if tasks.is_empty() || stop.is_cancelled() || started.elapsed() > SIDE_LIMIT {
            stop.cancel();
            break;
        }
        if producer.is_none() && admin.count_live_runs_of(tenants).await? == 0 {
            return Ok(Some("every run was executed".to_owned()));
        }
        if let Some(result) = tasks.try_join_next() {
            result.context("worker task")??;
        }
    }
    if let Some(p) = producer {
        p.await.context("trickle task")??;
    }
    Ok(None)
}

/// A demo store: 4 connections, and a durability check that reports
/// without refusing (the demo's throw-away cluster is fast, not durable;
/// production stores keep the default, which refuses).
pub(super) fn demo_store_config(url: &str) -> Result<StoreConfig> {
    Ok(StoreConfig::from_url(url)?
        .pool_size(4)?
        .durability_policy(statek_store_pg::DurabilityPolicy::AllowNoDurability))
}

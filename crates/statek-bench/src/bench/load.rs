//! Closed-loop load: `clients` tasks, each repeating one operation for a
//! fixed time, with every latency in an HDR histogram (microseconds).

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use hdrhistogram::Histogram;
use serde::Serialize;

/// Throughput and latency of one measured load.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Measured {
    /// Concurrent clients.
    pub clients: usize,
    /// Operations completed in the window.
    pub operations: u64,
    /// Units of work per operation (k for a batch of k reservations).
    pub units_per_operation: u64,
    /// Wall-clock window, seconds.
    pub seconds: f64,
    /// Units per second.
    pub units_per_second: f64,
    /// Operation latency percentiles, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// Largest latency, milliseconds.
    pub max_ms: f64,
}

impl Measured {
    /// Builds the figures from a merged histogram of microseconds.
    pub fn from_histogram(
        clients: usize,
        units_per_operation: u64,
        seconds: f64,
        histogram: &Histogram<u64>,
    ) -> Self {
        let operations = histogram.len();
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            clients,
            operations,
            units_per_operation,
            seconds,
            units_per_second: (operations * units_per_operation) as f64 / seconds.max(1e-9),
            p50_ms: ms(histogram.value_at_quantile(0.50)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            max_ms: ms(histogram.max()),
        }
    }
}

/// A histogram of 1 µs ..= 60 s at 3 significant figures.
pub fn histogram() -> Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000, 3).map_err(|e| anyhow!("histogram: {e}"))
}

/// Records one latency (saturating at the histogram's top).
pub fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    let us = u64::try_from(elapsed.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, 60_000_000);
    histogram.saturating_record(us);
}

/// Unmeasured warm-up before each load: connections opened, statements
/// prepared, caches warm.
pub const WARM_UP: Duration = Duration::from_millis(500);

/// How long a measured load runs.
#[derive(Debug, Clone)]
pub enum Until {
    /// [`WARM_UP`] (unmeasured), then this long.
    Elapsed(Duration),
    /// From the start, no warm-up, until the token fires (a load that runs
    /// alongside something else and ends with it).
    Cancelled(tokio_util::sync::CancellationToken),
}

/// Runs `op(client)` in a loop on `clients` tasks for as long as `until`
/// says; every error ends the measurement with that error.
pub async fn closed_loop<F, Fut>(
    clients: usize,
    units_per_operation: u64,
    until: Until,
    op: F,
) -> Result<Measured>
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let (warm_until, stop) = match until {
        Until::Elapsed(duration) => {
            let warm_until = Instant::now() + WARM_UP;
            let stop = tokio_util::sync::CancellationToken::new();
            let timer = stop.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until((warm_until + duration).into()).await;
                timer.cancel();
            });
            (warm_until, stop)
        }
        Until::Cancelled(stop) => (Instant::now(), stop),
    };
    let started = warm_until;
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let (op, stop) = (op.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < warm_until {
                op(client).await?;
            }
            let mut h = histogram()?;
            while !stop.is_cancelled() {
                let t = Instant::now();
                op(client).await?;
                record(&mut h, t.elapsed());
            }
            Ok::<_, anyhow::Error>(h)
        }));
    }
    let mut merged = histogram()?;
    for task in tasks {
        let h = task.await.context("a load task panicked")??;
        merged
            .add(&h)
            .map_err(|e| anyhow!("merging histograms: {e}"))?;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(Measured::from_histogram(
        clients,
        units_per_operation,
        seconds,
        &merged,
    ))
}

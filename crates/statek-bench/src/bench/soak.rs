//! Section `soak` (opt-in, `--only soak`): one `Worker` at full load for
//! `--soak-minutes` (default 10), in THIS process, its resident set size
//! read from `/proc/self/status` (`VmRSS`) after one minute and at the
//! end. The process does nothing else meanwhile but keep the queue from
//! running dry (a top-up task, one connection) and sample, so its growth
//! is the Worker's. The target: RSS at the end within 10% of RSS at one
//! minute.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::target::Target;

/// Executing runs of the soak's Worker.
const CONCURRENCY: usize = 16;
/// The queue is topped up when fewer runs than this are available…
const LOW_WATER: i64 = 20_000;
/// …by this many (spread over the 8 tenants).
const TOP_UP: i64 = 50_000;
/// RSS is sampled this often.
const SAMPLE_EVERY: Duration = Duration::from_secs(30);
/// The first reference point.
const FIRST_MINUTE: Duration = Duration::from_secs(60);

/// The bench process's allocator (`--allocator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Allocator {
    /// The system's malloc (glibc): `MALLOC_ARENA_MAX` from the environment.
    System,
    /// mimalloc as Rust's global allocator (statek-bench's feature `mimalloc`).
    Mimalloc,
}

impl Allocator {
    /// Whether this process runs with it.
    pub fn in_effect(self) -> bool {
        match self {
            Self::System => !cfg!(feature = "mimalloc"),
            Self::Mimalloc => cfg!(feature = "mimalloc"),
        }
    }

    /// The cargo arguments that build xtask with it.
    pub fn features(self) -> &'static [&'static str] {
        match self {
            Self::System => &[],
            Self::Mimalloc => &["--features", "mimalloc"],
        }
    }
}

/// The allocator this process runs with, as the results name it.
pub fn allocator_in_effect() -> String {
    if cfg!(feature = "mimalloc") {
        return "mimalloc (global allocator)".to_owned();
    }
    match std::env::var("MALLOC_ARENA_MAX") {
        Ok(arenas) => format!("glibc malloc, MALLOC_ARENA_MAX={arenas}"),
        Err(_) => "glibc malloc, defaults (MALLOC_ARENA_MAX unset)".to_owned(),
    }
}

/// The soak's figures.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Soak {
    /// Minutes at full load.
    pub minutes: u64,
    /// The allocator the process ran with ([`allocator_in_effect`]).
    #[serde(default)]
    pub allocator: String,
    /// Runs executed per second over the whole soak.
    #[serde(default)]
    pub runs_per_second: f64,
    /// Where the Worker ran and how RSS was read.
    pub how: String,
    /// VmRSS after one minute, KiB.
    pub rss_first_minute_kib: u64,
    /// VmRSS at the end, KiB.
    pub rss_end_kib: u64,
    /// `(seconds since start, VmRSS KiB)` every 30 s.
    pub samples: Vec<(u64, u64)>,
    /// `Executed` outcomes the Worker sent to its sink.
    pub executed: u64,
}

/// `VmRSS` of a `/proc/<pid>/status` text, KiB.
pub fn vm_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn rss_now() -> Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    vm_rss_kib(&status).context("no VmRSS in /proc/self/status")
}

/// The soak target: end RSS ≤ 1.10 × RSS after one minute.
pub fn target(soak: &Soak) -> Target {
    Target::ratio_at_most(
        format!("soak: Worker RSS after {} min vs after 1 min", soak.minutes),
        soak.rss_end_kib as f64,
        soak.rss_first_minute_kib as f64,
        1.10,
    )
}

/// Runs the soak on the migrated database of `url`.
pub async fn run(url: &str, minutes: u64) -> Result<Soak> {
    let policy = super::workloads::uniform_policy("bench-soak-v1", 8)?;
    let tenants: Vec<String> = policy
        .tenants()
        .iter()
        .map(|t| t.tenant().to_string())
        .collect();
    let client = super::connection::connect(url).await?;
    let stop = CancellationToken::new();
    let top_up = {
        let stop = stop.clone();
        tokio::spawn(async move {
            loop {
                let available: i64 = client
                    .query_one(
                        "SELECT count(*) AS n FROM statek.runs WHERE state = 'available'",
                        &[],
                    )
                    .await?
                    .try_get("n")?;
                if available < LOW_WATER {
                    client
                        .execute(
                            "INSERT INTO statek.runs (run_id, tenant_id, payload)
                             SELECT gen_random_uuid(), ($1::text[])[1 + g % array_length($1::text[], 1)], ''::bytea
                             FROM generate_series(0, $2::bigint - 1) AS g",
                            &[&tenants, &TOP_UP],
                        )
                        .await?;
                }
                tokio::select! {
                    _ = stop.cancelled() => return Ok::<_, anyhow::Error>(()),
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        })
    };
    let worker = super::workloads::start_fair(url, &policy, CONCURRENCY, stop.clone()).await?;
    let started = Instant::now();
    let end = started + Duration::from_secs(minutes * 60);
    let mut samples = Vec::new();
    let mut first_minute = None;
    let mut next_sample = started + SAMPLE_EVERY;
    while Instant::now() < end {
        let wake = next_sample.min(end).min(if first_minute.is_none() {
            started + FIRST_MINUTE
        } else {
            end
        });
        tokio::time::sleep_until(wake.into()).await;
        let now = Instant::now();
        if first_minute.is_none() && now >= started + FIRST_MINUTE {
            first_minute = Some(rss_now()?);
        }
        if now >= next_sample {
            samples.push((started.elapsed().as_secs(), rss_now()?));
            eprintln!(
                "    soak: {} s, VmRSS {} KiB",
                started.elapsed().as_secs(),
                rss_now()?
            );
            next_sample += SAMPLE_EVERY;
        }
        if top_up.is_finished() {
            break;
        }
    }
    let rss_end = rss_now()?;
    stop.cancel();
    let executed = worker.join().await?.executed;
    top_up.await.context("the top-up task panicked")??;
    Ok(Soak {
        minutes,
        allocator: allocator_in_effect(),
        runs_per_second: executed as f64 / started.elapsed().as_secs_f64().max(1e-9),
        how: "one Worker in the bench process (concurrency 16, no-op handler, LISTEN/NOTIFY, executed runs from its report); VmRSS of /proc/self/status".to_owned(),
        rss_first_minute_kib: first_minute.context("the soak ended before its first minute")?,
        rss_end_kib: rss_end,
        samples,
        executed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vm_rss() {
        let status = "Name:\txtask\nVmPeak:\t  999 kB\nVmRSS:\t   51234 kB\nThreads:\t3\n";
        assert_eq!(vm_rss_kib(status), Some(51_234));
        assert_eq!(vm_rss_kib("Name:\tx\n"), None);
    }

    #[test]
    fn judges_growth() {
        let soak = |first, end| Soak {
            minutes: 10,
            allocator: String::new(),
            runs_per_second: 0.0,
            how: String::new(),
            rss_first_minute_kib: first,
            rss_end_kib: end,
            samples: Vec::new(),
            executed: 0,
        };
        let t = target(&soak(100_000, 110_000));
        assert_eq!((t.ratio, t.met), (Some(1.1), true));
        let t = target(&soak(100_000, 110_001));
        assert!(!t.met);
        assert_eq!(t.what, "soak: Worker RSS after 10 min vs after 1 min");
    }
}

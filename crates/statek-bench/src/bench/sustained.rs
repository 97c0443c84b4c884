//! Section `sustained` (opt-in, `--only sustained`): a steady rate for
//! hours? Each side runs `--sustained-minutes` (default 30) on a durable
//! server with autovacuum at PostgreSQL's defaults, twice:
//!
//! 1. **fixed depth**: a producer keeps [`DEPTH`] runs available (one
//!    statement every [`FEED_EVERY`] tops the queue up);
//! 2. **fixed offered rate**: a producer enqueues at half the rate the fair
//!    side completed at fixed depth (its mean over the whole phase), so
//!    the queue is near empty and the claim latency is the Worker's own.
//!
//! The sides are the fair side of section `workloads` (one `Worker`,
//! concurrency [`CONCURRENCY`], no-op handler, LISTEN/NOTIFY) and its
//! batched plain queue (River's way), in that order, each phase in a fresh
//! database. Every minute the harness reads each statek table's live and
//! dead tuples, heap and index bytes and autovacuum count; after a phase
//! it reads, per minute and per judged window, the completed runs (by
//! `finished_at`) and the claim latency (`claimed_at - available_at`,
//! nearest rank) from the run rows. Nothing is pruned: run and reservation
//! retention keep at least an hour (`RunRetentionPolicy`), longer than a
//! phase, so the tables hold the phase's history and grow with it; what
//! must level off is the space per retained row, not the size.
//!
//! Targets (issue 23, item 4), judged on the fair side; the windows are
//! minutes 2-5 ("early") and the last 10 minutes ("late"; a run shorter
//! than 15 minutes takes the minutes after the fifth):
//! - fixed depth: late runs/s ≥ 0.9 × early runs/s;
//! - fixed rate: late p99 claim latency ≤ 2 × early p99;
//! - fixed depth: `statek.runs` heap + index bytes per live row at the end
//!   ≤ 1.10 × at the end of minute 5.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::target::Target;

/// Runs kept available by the fixed-depth producer (the depth of the
/// issue's own trial).
pub const DEPTH: i64 = 4_000;
/// Executing runs of each side.
pub const CONCURRENCY: usize = 64;
/// The producers' tick.
const FEED_EVERY: Duration = Duration::from_millis(100);
/// Table statistics are sampled this often (and at the start).
const TABLES_EVERY: Duration = Duration::from_secs(60);
/// The shortest run the section takes, minutes: minutes 2-5 and at least
/// one minute after them.
pub const MIN_MINUTES: u64 = 6;
/// Tenants of the policy (weight 1 each) and of the producers.
const TENANTS: usize = 8;

/// The fair side's label.
pub const FAIR: &str = "fair Worker";
/// The batched queue's label.
pub const BATCHED: &str = "batched queue";

/// A phase's load.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub enum Load {
    /// Keep this many runs available.
    Depth(i64),
    /// Enqueue this many runs per second.
    Rate(f64),
}

/// One minute of a phase.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Minute {
    /// 0-based: minute `m` covers seconds `60 m .. 60 (m + 1)` of the phase.
    pub minute: u32,
    /// Runs completed in it.
    pub completed: u64,
    /// Of the runs claimed in it, the median claim latency, milliseconds.
    pub claim_p50_ms: Option<f64>,
    /// …and the 99th percentile.
    pub claim_p99_ms: Option<f64>,
}

/// The figures of a window of whole minutes `[from, to)`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Window {
    /// First minute (0-based).
    pub from: u32,
    /// One past the last.
    pub to: u32,
    /// Runs completed per second over the window.
    pub runs_per_second: f64,
    /// Claim latency of the runs claimed in it (exact, not merged from
    /// minutes), milliseconds.
    pub claim_p50_ms: Option<f64>,
    /// …99th percentile.
    pub claim_p99_ms: Option<f64>,
}

/// One table at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct TableSample {
    /// Seconds since the phase started.
    pub at_seconds: u64,
    /// `statek.<name>`.
    pub table: String,
    /// `n_live_tup`.
    pub live: i64,
    /// `n_dead_tup`.
    pub dead: i64,
    /// `pg_table_size` (heap, TOAST, free space and visibility maps).
    pub table_bytes: i64,
    /// `pg_indexes_size`.
    pub index_bytes: i64,
    /// `autovacuum_count` so far.
    pub autovacuums: i64,
}

/// One side under one load.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Phase {
    /// [`FAIR`] or [`BATCHED`].
    pub side: String,
    /// Its load.
    pub load: Load,
    /// Every whole minute.
    pub minutes: Vec<Minute>,
    /// Minutes 2-5.
    pub early: Window,
    /// The last 10 minutes (or those after the fifth).
    pub late: Window,
    /// Every statek table, every minute.
    pub tables: Vec<TableSample>,
}

/// The section's figures.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Sustained {
    /// Minutes per phase.
    pub minutes: u64,
    /// The server's durability (`PgStore::durability_report`).
    pub server: String,
    /// The fixed-rate phases' offered rate, runs/s.
    pub offered_per_second: f64,
    /// Fair then batched at fixed depth, then both at the fixed rate.
    pub phases: Vec<Phase>,
    /// What ran.
    pub how: String,
}

/// The judged windows of a run of `minutes`: minutes 2-5 (`[1, 5)`) and the
/// last 10 (`[minutes - 10, minutes)`), the late one starting no earlier
/// than minute 6 (`[5, ..)`).
pub fn windows(minutes: u64) -> ((u32, u32), (u32, u32)) {
    let n = u32::try_from(minutes).unwrap_or(u32::MAX);
    ((1, 5), (n.saturating_sub(10).max(5), n))
}

/// `statek.runs`' heap plus index bytes per live row in the last sample
/// taken at or before `at_seconds`; `None` without one or without live
/// rows.
pub fn bytes_per_live_row(tables: &[TableSample], at_seconds: u64) -> Option<f64> {
    let sample = last_runs_sample(tables, at_seconds)?;
    (sample.live > 0).then(|| (sample.table_bytes + sample.index_bytes) as f64 / sample.live as f64)
}

/// The last sample of `statek.runs` taken at or before `at_seconds`.
fn last_runs_sample(tables: &[TableSample], at_seconds: u64) -> Option<&TableSample> {
    tables
        .iter()
        .filter(|t| t.table == "runs" && t.at_seconds <= at_seconds)
        .max_by_key(|t| t.at_seconds)
}

/// The section's targets (on the fair side's phases).
pub fn targets(sustained: &Sustained) -> Vec<Target> {
    let fair = |depth: bool| {
        sustained
            .phases
            .iter()
            .find(|p| p.side == FAIR && matches!(p.load, Load::Depth(_)) == depth)
    };
    let mut targets = Vec::new();
    if let Some(depth) = fair(true) {
        let (e, l) = (&depth.early, &depth.late);
        targets.push(Target::ratio_at_least(
            format!(
                "sustained, fixed depth: fair runs/s, minutes {}-{} vs 2-5",
                l.from + 1,
                l.to
            ),
            l.runs_per_second,
            e.runs_per_second,
            0.9,
        ));
        let what = "sustained, fixed depth: statek.runs bytes per live row, end vs minute 5";
        let end = 60 * sustained.minutes;
        match (
            bytes_per_live_row(&depth.tables, end),
            bytes_per_live_row(&depth.tables, 300),
        ) {
            (Some(end), Some(five)) => {
                targets.push(Target::ratio_at_most(what.to_owned(), end, five, 1.10));
            }
            _ => targets.push(Target::not_measured(
                what.to_owned(),
                "<= 1.10x",
                "no sample with live rows",
            )),
        }
    }
    if let Some(rate) = fair(false) {
        let what = format!(
            "sustained, fixed rate: fair p99 claim latency, minutes {}-{} vs 2-5",
            rate.late.from + 1,
            rate.late.to
        );
        match (rate.late.claim_p99_ms, rate.early.claim_p99_ms) {
            (Some(late), Some(early)) if early > 0.0 => {
                targets.push(Target::ratio_at_most(what, late, early, 2.0));
            }
            _ => targets.push(Target::not_measured(
                what,
                "<= 2.00x",
                "no claims in a window",
            )),
        }
    }
    targets
}

/// Runs the section on the server of `url` (needs CREATEDB): four phases
/// of `minutes` each.
pub async fn run(url: &str, minutes: u64) -> Result<Sustained> {
    anyhow::ensure!(
        minutes >= MIN_MINUTES,
        "section sustained needs at least {MIN_MINUTES} minutes per phase, got {minutes}"
    );
    let policy = super::workloads::uniform_policy("bench-sustained-v1", TENANTS)?;
    let tenants: Vec<String> = policy
        .tenants()
        .iter()
        .map(|t| t.tenant().to_string())
        .collect();
    let server = {
        let store = super::reserve::store(url, 1)?;
        store.durability_report().await?.to_string()
    };
    let mut phases = Vec::new();
    for side in [FAIR, BATCHED] {
        phases.push(phase(url, side, Load::Depth(DEPTH), minutes, &policy, &tenants).await?);
    }
    let fair_rate =
        phases[0].minutes.iter().map(|m| m.completed).sum::<u64>() as f64 / (60 * minutes) as f64;
    let offered = (fair_rate / 2.0).max(1.0);
    for side in [FAIR, BATCHED] {
        phases.push(phase(url, side, Load::Rate(offered), minutes, &policy, &tenants).await?);
    }
    Ok(Sustained {
        minutes,
        server,
        offered_per_second: offered,
        phases,
        how: format!(
            "each phase in a fresh database; {TENANTS} tenants of weight 1; {CONCURRENCY} executing runs per side, no-op handler; \
             the fair side is one Worker (LISTEN/NOTIFY), the batched side one fetcher and one batch completer; \
             producers tick every {} ms; nothing pruned (retention keeps at least an hour); autovacuum at the server's settings",
            FEED_EVERY.as_millis()
        ),
    })
}

/// One side under one load, in a database of its own (dropped after).
async fn phase(
    url: &str,
    side: &str,
    load: Load,
    minutes: u64,
    policy: &statek_policy::WeightedFairnessPolicy,
    tenants: &[String],
) -> Result<Phase> {
    let database = format!("statek_sustained_{}", std::process::id());
    let admin = super::connect(url).await?;
    super::in_fresh_database(&admin, url, &database, |url| async move {
        phase_in(&url, side, load, minutes, policy, tenants).await
    })
    .await
}

async fn phase_in(
    url: &str,
    side: &str,
    load: Load,
    minutes: u64,
    policy: &statek_policy::WeightedFairnessPolicy,
    tenants: &[String],
) -> Result<Phase> {
    super::reserve::store(url, 1)?.migrate().await?;
    let client = super::connect(url).await?;
    eprintln!(
        "==> sustained: {side}, {}, {minutes} min",
        match load {
            Load::Depth(d) => format!("{d} runs kept available"),
            Load::Rate(r) => format!("{r:.0} runs/s offered"),
        }
    );
    if let Load::Depth(depth) = load {
        client.execute(ENQUEUE, &[&tenants, &depth, &0_i64]).await?;
    }
    if side == BATCHED {
        super::plain_claimer::create_index(url).await?;
    }
    client.batch_execute("VACUUM ANALYZE statek.runs").await?;
    let stop = CancellationToken::new();
    let running = match side {
        FAIR => Running::Fair(
            super::workloads::start_fair(url, policy, CONCURRENCY, stop.clone()).await?,
        ),
        _ => {
            Running::Batched(super::workloads::start_batched(url, CONCURRENCY, stop.clone()).await?)
        }
    };
    let producer = produce(url, tenants.to_vec(), load, stop.clone()).await?;
    let start: f64 = client
        .query_one("SELECT extract(epoch FROM now())::float8 AS t", &[])
        .await?
        .try_get("t")?;
    let started = Instant::now();
    let end = started + Duration::from_secs(60 * minutes);
    let mut tables = Vec::new();
    let mut next = started;
    while next <= end {
        tokio::time::sleep_until(next.into()).await;
        let at = started.elapsed().as_secs_f64().round() as u64;
        tables.extend(sample_tables(&client, at).await?);
        if let Some(runs) = tables.iter().rev().find(|t| t.table == "runs") {
            eprintln!(
                "    {at:>5} s: statek.runs {} live, {} dead, {:.1} MiB heap + {:.1} MiB indexes, {} autovacuums",
                runs.live,
                runs.dead,
                runs.table_bytes as f64 / 1_048_576.0,
                runs.index_bytes as f64 / 1_048_576.0,
                runs.autovacuums
            );
        }
        if producer.is_finished() {
            break;
        }
        next += TABLES_EVERY;
    }
    stop.cancel();
    producer.await.context("the producer panicked")??;
    running.join().await?;
    let per_minute = per_minute(&client, start, minutes).await?;
    let ((ef, et), (lf, lt)) = windows(minutes);
    let early = window(&client, start, ef, et).await?;
    let late = window(&client, start, lf, lt).await?;
    eprintln!(
        "    minutes 2-5: {:.0} runs/s, claim p99 {}; minutes {}-{}: {:.0} runs/s, claim p99 {}",
        early.runs_per_second,
        ms(early.claim_p99_ms),
        lf + 1,
        lt,
        late.runs_per_second,
        ms(late.claim_p99_ms)
    );
    Ok(Phase {
        side: side.to_owned(),
        load,
        minutes: per_minute,
        early,
        late,
        tables,
    })
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.1} ms"))
}

/// A started side.
enum Running {
    Fair(super::workloads::FairSide),
    Batched(tokio::task::JoinSet<Result<()>>),
}

impl Running {
    async fn join(self) -> Result<()> {
        match self {
            Self::Fair(fair) => {
                fair.join().await?;
            }
            Self::Batched(mut tasks) => {
                while let Some(done) = tasks.join_next().await {
                    done.context("a batched queue task panicked")??;
                }
            }
        }
        Ok(())
    }
}

/// `$2` runs spread round-robin over the tenants of `$1`, starting at
/// tenant `$3` (mod their count), available now.
const ENQUEUE: &str = "INSERT INTO statek.runs (run_id, tenant_id, payload)
    SELECT gen_random_uuid(), ($1::text[])[1 + (g + $3) % cardinality($1::text[])], ''::bytea
    FROM generate_series(0, $2::bigint - 1) AS g";

/// Runs available now.
const AVAILABLE: &str = "SELECT count(*) AS n FROM statek.runs WHERE state = 'available'";

/// Starts the producer of `load` (one connection); it stops when `stop`
/// fires and returns the runs it enqueued.
async fn produce(
    url: &str,
    tenants: Vec<String>,
    load: Load,
    stop: CancellationToken,
) -> Result<tokio::task::JoinHandle<Result<i64>>> {
    let client = super::connect(url).await?;
    Ok(tokio::spawn(async move {
        let enqueue = client.prepare(ENQUEUE).await?;
        let mut ticks = tokio::time::interval(FEED_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let started = Instant::now();
        let mut enqueued = 0_i64;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return Ok(enqueued),
                _ = ticks.tick() => {}
            }
            let due = match load {
                Load::Depth(depth) => {
                    let available: i64 = client.query_one(AVAILABLE, &[]).await?.try_get("n")?;
                    (depth - available).max(0)
                }
                // The rate holds even when a tick is late: what is due by
                // now, less what was sent.
                Load::Rate(rate) => (rate * started.elapsed().as_secs_f64()) as i64 - enqueued,
            };
            if due > 0 {
                client
                    .execute(&enqueue, &[&tenants, &due, &enqueued])
                    .await?;
                enqueued += due;
            }
        }
    }))
}

/// Every statek table's statistics now.
async fn sample_tables(client: &tokio_postgres::Client, at: u64) -> Result<Vec<TableSample>> {
    let rows = client
        .query(
            "SELECT relname::text AS name, n_live_tup, n_dead_tup, pg_table_size(relid) AS t,
                    pg_indexes_size(relid) AS i, autovacuum_count
             FROM pg_stat_user_tables WHERE schemaname = 'statek' ORDER BY relname",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(TableSample {
                at_seconds: at,
                table: r.try_get("name")?,
                live: r.try_get("n_live_tup")?,
                dead: r.try_get("n_dead_tup")?,
                table_bytes: r.try_get("t")?,
                index_bytes: r.try_get("i")?,
                autovacuums: r.try_get("autovacuum_count")?,
            })
        })
        .collect()
}

/// Completed runs and claim latency per whole minute since `start`
/// (epoch seconds, database time).
async fn per_minute(
    client: &tokio_postgres::Client,
    start: f64,
    minutes: u64,
) -> Result<Vec<Minute>> {
    let n = i32::try_from(minutes)?;
    let completed = client
        .query(
            "SELECT floor(extract(epoch FROM finished_at - to_timestamp($1)) / 60)::int AS m,
                    count(*) AS n
             FROM statek.runs
             WHERE state = 'completed' AND finished_at >= to_timestamp($1)
               AND finished_at < to_timestamp($1) + make_interval(mins => $2)
             GROUP BY 1 ORDER BY 1",
            &[&start, &n],
        )
        .await?;
    let latency = client
        .query(
            "SELECT floor(extract(epoch FROM claimed_at - to_timestamp($1)) / 60)::int AS m,
                    percentile_disc(0.5) WITHIN GROUP (ORDER BY lag) AS p50,
                    percentile_disc(0.99) WITHIN GROUP (ORDER BY lag) AS p99
             FROM (SELECT claimed_at, extract(epoch FROM claimed_at - available_at)::float8 * 1000 AS lag
                   FROM statek.runs
                   WHERE claimed_at >= to_timestamp($1)
                     AND claimed_at < to_timestamp($1) + make_interval(mins => $2)) AS c
             GROUP BY 1 ORDER BY 1",
            &[&start, &n],
        )
        .await?;
    (0..n)
        .map(|m| {
            let count = completed
                .iter()
                .find(|r| r.get::<_, i32>("m") == m)
                .map_or(Ok(0), |r| r.try_get::<_, i64>("n"))?;
            let lat = latency.iter().find(|r| r.get::<_, i32>("m") == m);
            Ok(Minute {
                minute: u32::try_from(m)?,
                completed: u64::try_from(count)?,
                claim_p50_ms: lat.map(|r| r.try_get("p50")).transpose()?,
                claim_p99_ms: lat.map(|r| r.try_get("p99")).transpose()?,
            })
        })
        .collect()
}

/// The figures of minutes `[from, to)` since `start`.
async fn window(client: &tokio_postgres::Client, start: f64, from: u32, to: u32) -> Result<Window> {
    let (f, t) = (i32::try_from(from)?, i32::try_from(to)?);
    let row = client
        .query_one(
            "WITH w AS (SELECT to_timestamp($1) + make_interval(mins => $2) AS a,
                               to_timestamp($1) + make_interval(mins => $3) AS b)
             SELECT (SELECT count(*) FROM statek.runs, w
                     WHERE state = 'completed' AND finished_at >= w.a AND finished_at < w.b) AS completed,
                    percentile_disc(0.5) WITHIN GROUP (ORDER BY lag) AS p50,
                    percentile_disc(0.99) WITHIN GROUP (ORDER BY lag) AS p99
             FROM (SELECT extract(epoch FROM claimed_at - available_at)::float8 * 1000 AS lag
                   FROM statek.runs, w WHERE claimed_at >= w.a AND claimed_at < w.b) AS c",
            &[&start, &f, &t],
        )
        .await?;
    let completed: i64 = row.try_get("completed")?;
    Ok(Window {
        from,
        to,
        runs_per_second: completed as f64 / (60.0 * f64::from(to - from)),
        claim_p50_ms: row.try_get("p50")?,
        claim_p99_ms: row.try_get("p99")?,
    })
}

/// The section as text: a line per minute of each phase.
pub fn print(sustained: &Sustained) {
    println!();
    println!(
        "sustained ({} min per phase; {}; offered rate {:.0} runs/s)",
        sustained.minutes, sustained.server, sustained.offered_per_second
    );
    for phase in &sustained.phases {
        let load = match phase.load {
            Load::Depth(d) => format!("depth {d}"),
            Load::Rate(r) => format!("rate {r:.0}/s"),
        };
        println!(
            "{:<14} {:<12} | {:>6} | {:>8} | {:>11} | {:>11} | {:>11} | {:>9}",
            phase.side, load, "minute", "runs/s", "claim p50", "claim p99", "runs dead", "runs MiB"
        );
        for m in &phase.minutes {
            let at = 60 * (u64::from(m.minute) + 1);
            let runs = last_runs_sample(&phase.tables, at);
            println!(
                "{:<27} | {:>6} | {:>8.0} | {:>11} | {:>11} | {:>11} | {:>9.1}",
                "",
                m.minute + 1,
                m.completed as f64 / 60.0,
                ms(m.claim_p50_ms),
                ms(m.claim_p99_ms),
                runs.map_or(0, |r| r.dead),
                runs.map_or(0.0, |r| (r.table_bytes + r.index_bytes) as f64
                    / 1_048_576.0)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window_of(from: u32, to: u32, rate: f64, p99: Option<f64>) -> Window {
        Window {
            from,
            to,
            runs_per_second: rate,
            claim_p50_ms: p99.map(|p| p / 2.0),
            claim_p99_ms: p99,
        }
    }

    fn runs_at(at_seconds: u64, live: i64, bytes: i64) -> TableSample {
        TableSample {
            at_seconds,
            table: "runs".to_owned(),
            live,
            dead: 0,
            table_bytes: bytes,
            index_bytes: bytes / 2,
            autovacuums: 0,
        }
    }

    fn phase(
        side: &str,
        load: Load,
        early: Window,
        late: Window,
        tables: Vec<TableSample>,
    ) -> Phase {
        Phase {
            side: side.to_owned(),
            load,
            minutes: Vec::new(),
            early,
            late,
            tables,
        }
    }

    #[test]
    fn windows_are_minutes_two_to_five_and_the_last_ten() {
        assert_eq!(windows(30), ((1, 5), (20, 30)));
        assert_eq!(windows(15), ((1, 5), (5, 15)));
        assert_eq!(windows(16), ((1, 5), (6, 16)));
        assert_eq!(windows(8), ((1, 5), (5, 8)));
        assert_eq!(windows(6), ((1, 5), (5, 6)));
    }

    #[test]
    fn bytes_per_live_row_takes_the_last_runs_sample_at_or_before() {
        let tables = vec![
            runs_at(0, 0, 8192),
            TableSample {
                table: "run_claims".to_owned(),
                ..runs_at(300, 10, 1)
            },
            runs_at(300, 1000, 200_000),
            runs_at(360, 1200, 600_000),
        ];
        assert_eq!(bytes_per_live_row(&tables, 0), None, "no live rows");
        assert_eq!(bytes_per_live_row(&tables, 359), Some(300.0));
        assert_eq!(bytes_per_live_row(&tables, 360), Some(750.0));
        assert_eq!(bytes_per_live_row(&[], 360), None);
    }

    #[test]
    fn judges_the_fair_phases_only() {
        let sustained = |late_rate: f64, late_p99: Option<f64>, end_bytes: i64| Sustained {
            minutes: 30,
            server: String::new(),
            offered_per_second: 500.0,
            phases: vec![
                phase(
                    BATCHED,
                    Load::Depth(DEPTH),
                    window_of(1, 5, 9999.0, None),
                    window_of(20, 30, 1.0, None),
                    Vec::new(),
                ),
                phase(
                    FAIR,
                    Load::Depth(DEPTH),
                    window_of(1, 5, 1000.0, None),
                    window_of(20, 30, late_rate, None),
                    vec![runs_at(300, 1000, 200_000), runs_at(1800, 1000, end_bytes)],
                ),
                phase(
                    FAIR,
                    Load::Rate(500.0),
                    window_of(1, 5, 500.0, Some(10.0)),
                    window_of(20, 30, 500.0, late_p99),
                    Vec::new(),
                ),
            ],
            how: String::new(),
        };
        let t = targets(&sustained(900.0, Some(20.0), 220_000));
        let got: Vec<(&str, Option<f64>, bool)> = t
            .iter()
            .map(|t| (t.what.as_str(), t.ratio, t.met))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "sustained, fixed depth: fair runs/s, minutes 21-30 vs 2-5",
                    Some(0.9),
                    true
                ),
                (
                    "sustained, fixed depth: statek.runs bytes per live row, end vs minute 5",
                    Some(1.1),
                    true
                ),
                (
                    "sustained, fixed rate: fair p99 claim latency, minutes 21-30 vs 2-5",
                    Some(2.0),
                    true
                ),
            ]
        );
        let t = targets(&sustained(899.0, Some(20.5), 221_000));
        assert_eq!(
            t.iter().map(|t| t.met).collect::<Vec<_>>(),
            [false, false, false]
        );
        let t = targets(&sustained(900.0, None, 200_000));
        assert_eq!(t[2].measured, "not measured: no claims in a window");
        assert!(!t[2].met);
    }
}

//! `cargo xtask ha-layouts`: the durability check judges real standby
//! layouts by what a failover keeps, run by `cargo xtask test` on
//! PostgreSQL 17.
//!
//! One durable primary with two streaming standbys (`standby1`,
//! `standby2`, from `pg/replication.rs`); for each layout the primary's
//! `synchronous_standby_names` is set with `ALTER SYSTEM` and a reload,
//! and once `pg_stat_replication` shows the layout's `sync_state`s, a
//! fresh store with the default `DurabilityPolicy::Require` reads the
//! report and registers a shard of its own:
//!
//! - `FIRST 1 (standby1, standby2)` (`sync`, `potential`), `ANY 1
//!   (standby1, standby2)` (`quorum`, `quorum`) and `FIRST 2 (standby1,
//!   standby2)` (`sync`, `sync`): no risk, the report states the failover
//!   condition, registration and a reservation succeed (its commit waited
//!   for the standbys);
//! - `FIRST 1 (standby1)` (`sync`, `async`): `standby2` is the risk
//!   `asynchronous_standbys`, registration is refused and writes no shard.

use statek_store_pg::DurabilityError;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::{DurabilityPolicy, DurabilityRisk, PgStore, StoreConfig, StoreError};
use uuid::Uuid;

use crate::pg::{self, PgMajor, ReplicaSet};

/// Options of `cargo xtask ha-layouts`.
#[derive(Debug, Clone, clap::Args)]
pub struct HaLayoutsArgs {
    /// PostgreSQL major version.
    #[arg(long, value_enum, default_value_t = PgMajor::V17)]
    pub pg: PgMajor,
}

/// The standbys' `application_name`s.
const STANDBYS: [&str; 2] = ["standby1", "standby2"];

/// One layout and what the check must find on it.
struct Layout {
    /// `synchronous_standby_names`.
    names: &'static str,
    /// `pg_stat_replication`'s `sync_state` of `standby1` and `standby2`.
    states: [&'static str; 2],
    /// The standbys reported as `asynchronous_standbys` (refused).
    asynchronous: &'static [&'static str],
    /// The report's failover condition.
    condition: &'static str,
}

const LAYOUTS: [Layout; 4] = [
    Layout {
        names: "FIRST 1 (standby1, standby2)",
        states: ["sync", "potential"],
        asynchronous: &[],
        condition: "durable if a failover promotes a standby that was synchronous \
                    (FIRST 1: standby1), never a potential one (standby2)",
    },
    Layout {
        names: "ANY 1 (standby1, standby2)",
        states: ["quorum", "quorum"],
        asynchronous: &[],
        condition: "durable if a failover promotes the most advanced standby of the quorum \
                    (ANY 1: standby1, standby2)",
    },
    Layout {
        names: "FIRST 1 (standby1)",
        states: ["sync", "async"],
        asynchronous: &["standby2"],
        condition: "durable if a failover promotes a standby that was synchronous \
                    (FIRST 1: standby1)",
    },
    Layout {
        names: "FIRST 2 (standby1, standby2)",
        states: ["sync", "sync"],
        asynchronous: &[],
        condition: "durable if a failover promotes a standby that was synchronous \
                    (FIRST 2: standby1, standby2)",
    },
];

/// Starts the primary and its standbys and judges every layout; fails on
/// the first layout judged otherwise.
pub fn run(args: &HaLayoutsArgs) -> Result<()> {
    let started = Instant::now();
    let server = pg::Server::provision(args.pg)?;
    let set = server.start_replicas(&STANDBYS)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(judge_all(&set));
    set.stop()?;
    result?;
    println!(
        "ha-layouts: {} layouts judged as expected on PostgreSQL {} in {:.1} s",
        LAYOUTS.len(),
        args.pg,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn judge_all(set: &ReplicaSet) -> Result<()> {
    let url = set.primary_url();
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    store(&url)?.migrate().await.context("migrations")?;
    for (index, layout) in LAYOUTS.iter().enumerate() {
        judge(&admin, &url, index, layout)
            .await
            .with_context(|| format!("layout {:?}", layout.names))?;
    }
    Ok(())
}

fn store(url: &str) -> Result<PgStore> {
    Ok(PgStore::new(
        StoreConfig::from_url(url)?
            .pool_size(1)?
            // A synchronous commit on a loaded machine can take seconds.
            .response_timeout(Duration::from_secs(60))?
            .durability_policy(DurabilityPolicy::Require),
    )?)
}

fn policy(shard: &str) -> Result<WeightedFairnessPolicy> {
    Ok(WeightedFairnessPolicy::new(
        SchedulerShardId::try_from(shard)?,
        [
            TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?,
            TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?,
        ],
    )?)
}

/// `(application_name, sync_state)` of every walsender, by name.
async fn states(admin: &tokio_postgres::Client) -> Result<Vec<(String, String)>> {
    Ok(admin
        .query(
            "SELECT application_name, sync_state FROM pg_stat_replication
             ORDER BY application_name",
            &[],
        )
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect())
}

async fn judge(
    admin: &tokio_postgres::Client,
    url: &str,
    index: usize,
    layout: &Layout,
) -> Result<()> {
    // The names hold no quote; ALTER SYSTEM takes no parameters, and no
    // transaction block (one statement per call).
    admin
        .batch_execute(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{}'",
            layout.names
        ))
        .await?;
    admin.batch_execute("SELECT pg_reload_conf()").await?;
    let expected: Vec<(String, String)> = STANDBYS
        .iter()
        .zip(layout.states)
        .map(|(name, state)| ((*name).to_owned(), state.to_owned()))
        .collect();
    let waiting = Instant::now();
    loop {
        let now = states(admin).await?;
        if now == expected {
            break;
        }
        if waiting.elapsed() > Duration::from_secs(20) {
            bail!("pg_stat_replication shows {now:?} 20 s after the reload, expected {expected:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let store = store(url)?;
    let report = store.durability_report().await?;
    let seen: Vec<(String, String)> = report
        .standbys
        .iter()
        .map(|s| (s.application_name.clone(), s.sync_state.clone()))
        .collect();
    ensure!(seen == expected, "the report shows {seen:?}: {report}");
    ensure!(
        report.synchronous_standby_names == layout.names,
        "the report read synchronous_standby_names {:?}",
        report.synchronous_standby_names
    );
    let risks = if layout.asynchronous.is_empty() {
        vec![]
    } else {
        vec![DurabilityRisk::AsynchronousStandbys {
            standbys: layout.asynchronous.iter().map(|&s| s.to_owned()).collect(),
        }]
    };
    ensure!(
        report.risks() == risks,
        "risks {:?}: {report}",
        report.risks()
    );
    let condition = report
        .failover_condition()
        .map(|c| c.to_string())
        .unwrap_or_default();
    ensure!(
        condition == layout.condition,
        "failover condition {condition:?}, expected {:?}",
        layout.condition
    );

    let policy = policy(&format!("ha-layout-{}-v1", index + 1))?;
    let verdict = match store.register(&policy).await {
        Ok(_) if risks.is_empty() => {
            // The reservation's commit waited for the synchronous standbys.
            let r = store
                .reserve(policy.shard_id(), &policy.digest(), Uuid::now_v7())
                .await?;
            ensure!(
                (r.sequence(), r.timeline()) == (0, Some(1)),
                "reserved sequence {} on timeline {:?}",
                r.sequence(),
                r.timeline()
            );
            "accepted by Require, reserved sequence 0"
        }
        Err(StoreError::Durability(DurabilityError::Refused { risks: refused, .. }))
            if !risks.is_empty() =>
        {
            ensure!(refused == risks, "refused {refused:?}");
            let shards: i64 = admin
                .query_one(
                    "SELECT count(*) FROM statek.scheduler_shards WHERE shard_id = $1",
                    &[&policy.shard_id().as_str()],
                )
                .await?
                .get(0);
            ensure!(
                shards == 0,
                "a refused registration wrote {shards} shard row(s)"
            );
            "refused by Require, no shard written"
        }
        other => bail!("registration under Require: {other:?} ({report})"),
    };
    println!("ha-layouts: {}: {verdict}: {report}", layout.names);
    Ok(())
}

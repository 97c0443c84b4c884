//! Every series an alert reads is in the scrape from a Worker's start, at 0
//! (the timestamps with their values), before any reservation: read from
//! the Prometheus exporter's own text, as Prometheus would scrape it. (Recorded
//! by a recorder of this test's thread.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use statek_policy::{SchedulerShardId, WeightedFairnessPolicy};
use statek_scheduler::metrics::zero_at_start;
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerOptions, Worker, WorkerOptions, WorkerReport,
};
use statek_store_pg::testing::TestDatabase;
use tokio_util::sync::CancellationToken;

struct Done;

impl RunHandler for Done {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        Ok(Completed::new())
    }
}

fn policy(shard: &str) -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy(shard, &[("tenant-a", 3), ("tenant-b", 1)])
}

/// `name{k="v",...}` (labels sorted) -> value, from the exporter's text.
fn scrape(handle: &PrometheusHandle) -> BTreeMap<String, f64> {
    handle
        .render()
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let value: f64 = value.parse().unwrap();
            let series = match series.split_once('{') {
                None => series.to_owned(),
                Some((name, labels)) => {
                    let mut labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                    labels.sort_unstable();
                    format!("{name}{{{}}}", labels.join(","))
                }
            };
            (series, value)
        })
        .collect()
}

/// The series `zero_series` creates for `shard` with tenants a and b, at 0.
fn zero(shard: &str) -> BTreeMap<String, f64> {
    let mut expected = BTreeMap::new();
    for name in [
        "statek_reservations_total",
        "statek_reservation_retries_total",
        "statek_reservations_lost_total",
        "statek_timeline_changes_total",
        "statek_slot_outcome_records_failed_total",
        "statek_shard_sealed",
        "statek_shard_halted",
    ] {
        expected.insert(format!("{name}{{shard=\"{shard}\"}}"), 0.0);
    }
    for kind in ["corrupt_data", "executor", "policy_conflict", "store"] {
        expected.insert(
            format!("statek_tick_errors_total{{kind=\"{kind}\",shard=\"{shard}\"}}"),
            0.0,
        );
    }
    for tenant in ["tenant-a", "tenant-b"] {
        expected.insert(
            format!("statek_gap_above_bound_total{{shard=\"{shard}\",tenant=\"{tenant}\"}}"),
            0.0,
        );
        for outcome in ["cancelled", "completed", "failed", "lease_lost", "retrying"] {
            expected.insert(
                format!("statek_run_outcomes_total{{outcome=\"{outcome}\",tenant=\"{tenant}\"}}"),
                0.0,
            );
        }
        for counter in [
            "statek_run_cost_clamped_total",
            "statek_cost_over_max_total",
        ] {
            expected.insert(format!("{counter}{{tenant=\"{tenant}\"}}"), 0.0);
        }
    }
    expected
}

/// Only the series of `statek_*` metrics named in `names`.
fn only(scraped: &BTreeMap<String, f64>, names: &[&str]) -> BTreeMap<String, f64> {
    scraped
        .iter()
        .filter(|(series, _)| {
            let name = series.split('{').next().unwrap();
            names.contains(&name)
        })
        .map(|(series, value)| (series.clone(), *value))
        .collect()
}

#[tokio::test]
async fn a_worker_exports_every_alert_series_from_its_start() {
    let db = TestDatabase::create().await;
    let store = db.store();
    // Registered and one slot reserved before any recorder exists: what the
    // scrape shows below is the Worker's own doing.
    let executor = PgRunQueueExecutor::new(store.clone(), Done, ExecutorOptions::new());
    let scheduler = Arc::new(
        DurableFairScheduler::register(
            store.clone(),
            policy("primary-v1"),
            executor,
            SchedulerOptions::new(),
        )
        .await
        .unwrap(),
    );
    let shutdown = CancellationToken::new();
    scheduler.tick(&shutdown).await.unwrap();
    let oldest = store
        .oldest_reservation(&SchedulerShardId::try_from("primary-v1").unwrap())
        .await
        .unwrap()
        .unwrap()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();

    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    assert_eq!(scrape(&handle), BTreeMap::new());
    // A Worker told to stop before it starts: it runs its start (durability
    // check, series, first housekeeping) and reserves nothing.
    shutdown.cancel();
    let report = Worker::new(Arc::clone(&scheduler), WorkerOptions::new())
        .run(shutdown)
        .await
        .unwrap();
    assert_eq!(report, WorkerReport::default());

    let mut expected = zero("primary-v1");
    // The durability check of the Worker's start, on the fast test server.
    for (risk, value) in [
        ("asynchronous_standbys", 0.0),
        ("fsync", 1.0),
        ("full_page_writes", 1.0),
        ("standbys_not_visible", 0.0),
        ("synchronous_commit", 0.0),
    ] {
        expected.insert(format!("statek_durability_risk{{risk=\"{risk}\"}}"), value);
    }
    // The first housekeeping pass: nothing executing, the one retained
    // reservation's time (no finished run is kept, so no run gauges).
    expected.insert(
        "statek_worker_runs_executing{shard=\"primary-v1\"}".to_owned(),
        0.0,
    );
    expected.insert(
        "statek_worker_runs_awaiting_record{shard=\"primary-v1\"}".to_owned(),
        0.0,
    );
    expected.insert(
        "statek_retained_oldest_timestamp_seconds{shard=\"primary-v1\"}".to_owned(),
        oldest,
    );
    let scraped = scrape(&handle);
    assert_eq!(scraped, expected);
    // Every metric of the list deploy-check holds the alerts to is there.
    for name in zero_at_start() {
        assert!(
            scraped
                .keys()
                .any(|series| series.split('{').next() == Some(name)),
            "{name} is missing"
        );
    }

    // A scheduler registered while the recorder is installed has its
    // shard's series from `register` on, before its first tick; the other
    // shard's series keep their values.
    let executor = PgRunQueueExecutor::new(store.clone(), Done, ExecutorOptions::new());
    DurableFairScheduler::register(
        store.clone(),
        policy("secondary-v1"),
        executor,
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    let after = scrape(&handle);
    let mut zero_secondary = zero("secondary-v1");
    // Run outcomes, clamped costs and costs over C_max are per tenant,
    // shared by both shards' tenants.
    zero_secondary.retain(|series, _| {
        !series.starts_with("statek_run_outcomes_total")
            && !series.starts_with("statek_run_cost_clamped_total")
            && !series.starts_with("statek_cost_over_max_total")
    });
    let secondary: BTreeMap<String, f64> = after
        .iter()
        .filter(|(series, _)| series.contains("shard=\"secondary-v1\""))
        .filter(|(series, _)| !series.starts_with("statek_starvation_bound_reservations"))
        .map(|(series, value)| (series.clone(), *value))
        .collect();
    assert_eq!(secondary, zero_secondary);
    assert_eq!(
        only(&after, &zero_at_start())
            .into_iter()
            .filter(|(series, _)| !series.contains("secondary-v1"))
            .collect::<BTreeMap<_, _>>(),
        only(&scraped, &zero_at_start())
    );
}

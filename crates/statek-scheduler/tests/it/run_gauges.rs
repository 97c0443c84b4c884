//! The run-table gauges the PostgreSQL executor's housekeeping publishes,
//! with exact values against a real PostgreSQL: `statek_runs{tenant,state}`
//! and `statek_runs_finished_oldest_timestamp_seconds` (which feeds the run
//! retention alert). (Recorded by a recorder of this
//! test's thread.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use statek_policy::TenantId;
use statek_scheduler::metrics::{RUNS, RUNS_FINISHED_OLDEST_TIMESTAMP_SECONDS};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerOptions, TenantExecutor,
};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::NewRun;
use tokio_util::sync::CancellationToken;

struct Done;

impl RunHandler for Done {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        Ok(Completed::new())
    }
}

/// Every series of `name` in the exporter's text, as Prometheus would
/// scrape it: its labels (as rendered) and value.
fn scrape(handle: &PrometheusHandle, name: &str) -> BTreeMap<String, f64> {
    handle
        .render()
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let labels = match series.split_once('{') {
                None if series == name => String::new(),
                Some((n, labels)) if n == name => labels.trim_end_matches('}').to_owned(),
                _ => return None,
            };
            Some((labels, value.parse().unwrap()))
        })
        .collect()
}

fn runs(pairs: &[(&str, &str, f64)]) -> BTreeMap<String, f64> {
    pairs
        .iter()
        .map(|(state, tenant, n)| (format!("tenant=\"{tenant}\",state=\"{state}\""), *n))
        .collect()
}

#[tokio::test]
async fn housekeeping_publishes_exact_run_counts_and_the_oldest_finished_run() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);

    let db = TestDatabase::create().await;
    let store = db.store();
    let (a, b) = (
        TenantId::try_from("tenant-a").unwrap(),
        TenantId::try_from("tenant-b").unwrap(),
    );
    for _ in 0..3 {
        store
            .enqueue(&NewRun::new(a.clone(), vec![]))
            .await
            .unwrap();
    }
    store
        .enqueue(&NewRun::new(b.clone(), vec![]))
        .await
        .unwrap();
    let policy =
        statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let executor = PgRunQueueExecutor::new(store.clone(), Done, ExecutorOptions::new());
    let scheduler =
        DurableFairScheduler::register(store.clone(), policy, executor, SchedulerOptions::new())
            .await
            .unwrap();

    // Before any run finished: the counts, and no oldest-finished gauge (a
    // Unix time of 0 would read as 1970 and fire the backlog alert).
    scheduler.executor().maintain().await;
    assert_eq!(
        scrape(&handle, RUNS),
        runs(&[
            ("available", "tenant-a", 3.0),
            ("available", "tenant-b", 1.0)
        ])
    );
    assert_eq!(
        scrape(&handle, RUNS_FINISHED_OLDEST_TIMESTAMP_SECONDS),
        BTreeMap::new()
    );

    // Cycle [a, a, b, a]: slot 0 runs one of tenant-a's runs.
    let shutdown = CancellationToken::new();
    scheduler.tick(&shutdown).await.unwrap();
    scheduler.executor().maintain().await;
    assert_eq!(
        scrape(&handle, RUNS),
        runs(&[
            ("available", "tenant-a", 2.0),
            ("available", "tenant-b", 1.0),
            ("completed", "tenant-a", 1.0),
        ])
    );
    let client = db.client().await;
    let first_finished: f64 = client
        .query_one(
            "SELECT extract(epoch FROM min(finished_at))::float8 AS at FROM statek.runs",
            &[],
        )
        .await
        .unwrap()
        .get("at");
    assert_eq!(
        scrape(&handle, RUNS_FINISHED_OLDEST_TIMESTAMP_SECONDS),
        BTreeMap::from([(String::new(), first_finished)])
    );

    // Slots 1..=3 run the rest: the emptied pairs read 0 (not their last
    // value), the oldest finished run is still the first.
    for _ in 0..3 {
        scheduler.tick(&shutdown).await.unwrap();
    }
    scheduler.executor().maintain().await;
    assert_eq!(
        scrape(&handle, RUNS),
        runs(&[
            ("available", "tenant-a", 0.0),
            ("available", "tenant-b", 0.0),
            ("completed", "tenant-a", 3.0),
            ("completed", "tenant-b", 1.0),
        ])
    );
    assert_eq!(
        scrape(&handle, RUNS_FINISHED_OLDEST_TIMESTAMP_SECONDS),
        BTreeMap::from([(String::new(), first_finished)])
    );
}

//! Faults the tests inflict on a real PostgreSQL, shared: a client the
//! faults spare, backends terminated on a timer (lost acknowledgements),
//! and waiting until every run completed.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use statek_store_pg::testing::TestDatabase;
use tokio_util::sync::CancellationToken;

/// A client named `observer`, which [`terminate_others`] spares.
pub(crate) async fn observer(db: &TestDatabase) -> tokio_postgres::Client {
    let client = db.client().await;
    client
        .batch_execute("SET application_name = 'observer'")
        .await
        .unwrap();
    client
}

/// Terminates every client backend of the test's database but `client`'s
/// and the observers'; how many.
pub(crate) async fn terminate_others(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
             FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND backend_type = 'client backend'
               AND application_name <> 'observer'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// [`terminate_others`] every `every` until `stop`; the task returns how
/// many backends it terminated.
pub(crate) async fn terminate_every(
    db: &TestDatabase,
    every: Duration,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<i64> {
    let client = observer(db).await;
    tokio::spawn(async move {
        let mut terminated = 0;
        while !stop.is_cancelled() {
            tokio::time::sleep(every).await;
            terminated += terminate_others(&client).await;
        }
        terminated
    })
}

/// How many runs are completed.
pub(crate) async fn completed(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM statek.runs WHERE state = 'completed'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Waits until `total` runs are completed, failing after `within`.
pub(crate) async fn wait_until_completed(
    client: &tokio_postgres::Client,
    total: i64,
    within: Duration,
) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let done = completed(client).await;
        if done == total {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{done} of {total} runs completed in {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

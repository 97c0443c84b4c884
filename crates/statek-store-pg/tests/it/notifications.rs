//! Run notifications (`LISTEN statek_runs`) against a real PostgreSQL: at
//! most `BUFFERED_WAKEUPS` wait unread; more are dropped, and the stream
//! says so once (`take_missed`), so that a consumer tracking which tenant
//! was notified can treat every tenant as notified.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use statek_core::BUFFERED_WAKEUPS;
use statek_store_pg::testing::TestDatabase;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeups_beyond_the_buffer_are_dropped_and_said_so() {
    let db = TestDatabase::create().await;
    let mut notifications = db.store().listen_for_runs().await.unwrap();
    assert!(!notifications.take_missed());
    let total = BUFFERED_WAKEUPS + 44;
    db.client()
        .await
        .batch_execute(&format!(
            "SELECT pg_notify('statek_runs', 'tenant-' || i) FROM generate_series(1, {total}) AS i"
        ))
        .await
        .unwrap();
    // Every notification reaches the listening connection before any is
    // read here.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut read = Vec::new();
    for _ in 0..BUFFERED_WAKEUPS {
        let tenant = tokio::time::timeout(Duration::from_secs(10), notifications.recv())
            .await
            .expect("a buffered wake-up")
            .expect("the stream is open")
            .expect("no error");
        read.push(tenant.as_str().to_owned());
    }
    let expected: Vec<String> = (1..=BUFFERED_WAKEUPS)
        .map(|i| format!("tenant-{i}"))
        .collect();
    assert_eq!(read, expected);
    assert!(notifications.take_missed());
    assert!(!notifications.take_missed());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), notifications.recv())
            .await
            .is_err(),
        "the {} beyond the buffer were dropped",
        total - BUFFERED_WAKEUPS
    );
}

//! Lost acknowledgements through a fault proxy, against a real PostgreSQL
//! (16 and 17 via `cargo xtask test`).
//!
//! Each round reserves through a relay that cuts the connection at the
//! `COMMIT`, then retries the same reservation id through a healthy
//! connection:
//! - (a) cut after the `COMMIT` reached the server (committed, reply lost):
//!   the retry returns the original sequence and slot, `replayed() == true`;
//! - (b) cut before the `COMMIT` reached the server (rolled back): the retry
//!   reserves the next sequence, `replayed() == false`.
//!
//! Either way the caller sees an error that `is_retryable()`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::print_stderr)]

use statek_store_pg::ConnectionError;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use statek_policy::WeightedFairnessPolicy;
use statek_store_pg::testing::fault_proxy::{Fault, FaultProxy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{PgStore, StoreError};
use uuid::Uuid;

/// Rounds of each variant.
const ROUNDS: u64 = 200;
/// Cycle length of the policy below (3 + 1 + 3).
const CYCLE: u64 = 7;

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy(
        "primary-v1",
        &[("tenant-a", 3), ("tenant-b", 1), ("tenant-c", 3)],
    )
}

/// The stored `(sequence, slot)` of a reservation id, if any.
async fn stored(client: &tokio_postgres::Client, id: Uuid) -> Option<(u64, u32)> {
    client
        .query_opt(
            "SELECT sequence, slot FROM statek.scheduler_reservations WHERE reservation_id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .map(|row| {
            (
                u64::try_from(row.get::<_, i64>(0)).unwrap(),
                u32::try_from(row.get::<_, i32>(1)).unwrap(),
            )
        })
}

async fn cursor(client: &tokio_postgres::Client) -> u64 {
    let row = client
        .query_one(
            "SELECT next_sequence FROM statek.scheduler_shards WHERE shard_id = 'primary-v1'",
            &[],
        )
        .await
        .unwrap();
    u64::try_from(row.get::<_, i64>(0)).unwrap()
}

/// Reserves `id` through the proxy with `fault` armed; returns the error.
async fn reserve_with_fault(
    proxy: &FaultProxy,
    through_proxy: &PgStore,
    p: &WeightedFairnessPolicy,
    id: Uuid,
    fault: Fault,
) -> StoreError {
    let fired = proxy.fired();
    proxy.arm(fault);
    let err = through_proxy
        .reserve(p.shard_id(), &p.digest(), id)
        .await
        .expect_err("the proxy cuts the connection at COMMIT");
    assert_eq!(proxy.fired(), fired + 1, "{fault:?} fired once");
    assert!(!proxy.is_armed());
    assert!(err.is_retryable(), "{fault:?}: {err:?} must be retryable");
    assert!(
        matches!(err, StoreError::Connection(ConnectionError::Lost(_))),
        "{fault:?}: {err:?}"
    );
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_acknowledgements_retry_to_the_original_or_the_next_sequence() {
    let started = Instant::now();
    let db = TestDatabase::create().await;
    let proxy = FaultProxy::start(db.pg_config()).await;
    let through_proxy = PgStore::new(
        statek_store_pg::testing::test_store_config(proxy.pg_config())
            .pool_size(1)
            .unwrap(),
    )
    .unwrap();
    let direct = PgStore::new(db.store_config().pool_size(1).unwrap()).unwrap();
    let outside = db.client().await;
    let p = policy();
    assert_eq!(u64::from(p.cycle_length()), CYCLE);
    direct.register(&p).await.unwrap();

    // The relay passes traffic untouched while disarmed.
    let warm_up = through_proxy
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!((warm_up.sequence(), warm_up.replayed()), (0, false));

    let mut ids = vec![warm_up.id()];
    let mut next = 1u64;
    let (mut time_a, mut time_b) = (Duration::ZERO, Duration::ZERO);
    for round in 0..ROUNDS {
        // Odd rounds retry through the proxied pool itself (now disarmed): it
        // must drop the cut connection and open a healthy one.
        let retry_store = if round % 2 == 0 {
            &direct
        } else {
            &through_proxy
        };

        // (a) committed, acknowledgement lost.
        let t = Instant::now();
        let id = Uuid::now_v7();
        reserve_with_fault(&proxy, &through_proxy, &p, id, Fault::AfterCommit).await;
        let original = (next, u32::try_from(next % CYCLE).unwrap());
        assert_eq!(
            stored(&outside, id).await,
            Some(original),
            "round {round} (a)"
        );
        assert_eq!(cursor(&outside).await, next + 1);
        let retry = retry_store
            .reserve(p.shard_id(), &p.digest(), id)
            .await
            .unwrap();
        assert_eq!(
            (retry.id(), retry.sequence(), retry.slot(), retry.replayed()),
            (id, original.0, original.1, true),
            "round {round} (a)"
        );
        ids.push(id);
        next += 1;
        time_a += t.elapsed();

        // (b) never committed.
        let t = Instant::now();
        let id = Uuid::now_v7();
        reserve_with_fault(&proxy, &through_proxy, &p, id, Fault::BeforeCommit).await;
        assert_eq!(stored(&outside, id).await, None, "round {round} (b)");
        assert_eq!(cursor(&outside).await, next);
        let retry = retry_store
            .reserve(p.shard_id(), &p.digest(), id)
            .await
            .unwrap();
        assert_eq!(
            (retry.id(), retry.sequence(), retry.slot(), retry.replayed()),
            (id, next, u32::try_from(next % CYCLE).unwrap(), false),
            "round {round} (b)"
        );
        ids.push(id);
        next += 1;
        time_b += t.elapsed();
    }
    assert_eq!(proxy.fired(), 2 * ROUNDS);

    // Contiguous 0..N-1, no duplicates, exactly one row per id.
    let total = 2 * ROUNDS + 1;
    let rows = outside
        .query(
            "SELECT reservation_id, sequence FROM statek.scheduler_reservations
             WHERE shard_id = 'primary-v1' ORDER BY sequence",
            &[],
        )
        .await
        .unwrap();
    let sequences: Vec<i64> = rows.iter().map(|r| r.get(1)).collect();
    let expected: Vec<i64> = (0..i64::try_from(total).unwrap()).collect();
    assert_eq!(sequences, expected);
    let stored_ids: Vec<Uuid> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(stored_ids, ids, "row k holds the k-th reserved id");
    assert_eq!(
        stored_ids.iter().collect::<BTreeSet<_>>().len(),
        usize::try_from(total).unwrap()
    );
    assert_eq!(cursor(&outside).await, total);
    let all_rows: i64 = outside
        .query_one("SELECT count(*) FROM statek.scheduler_reservations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(all_rows, i64::try_from(total).unwrap());

    eprintln!(
        "lost_ack: {ROUNDS} rounds x 2 variants, {total} rows; (a) {:.2} s, (b) {:.2} s, \
         whole test {:.2} s",
        time_a.as_secs_f64(),
        time_b.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

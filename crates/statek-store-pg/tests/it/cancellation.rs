//! Cancellation and pool safety against a real PostgreSQL (16 and 17 via
//! `cargo xtask test`): reserve futures dropped at arbitrary points, and
//! reserves that hit `lock_timeout` / `statement_timeout`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::print_stderr)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use statek_policy::WeightedFairnessPolicy;
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{PgStore, StoreConfig, StoreError};
use uuid::Uuid;

/// Reserve attempts in the cancellation test.
const ATTEMPTS: u32 = 1_000;
/// How long a backend seen idle in a transaction may take to leave it on its
/// own (a `ROLLBACK` queued by a dropped transaction may still be in flight
/// when the checker looks). The pool is not used meanwhile, so a backend
/// that stays idle in its transaction this long was left there.
const SETTLE: Duration = Duration::from_secs(5);

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy(
        "primary-v1",
        &[("tenant-a", 3), ("tenant-b", 1), ("tenant-c", 3)],
    )
}

/// A store on `db` with a pool of one connection, its backends tagged with
/// `application_name` so that they can be found in `pg_stat_activity`.
fn tagged_store(db: &TestDatabase, application_name: &str) -> StoreConfig {
    let mut pg = db.pg_config().clone();
    pg.application_name(application_name);
    statek_store_pg::testing::test_store_config(pg)
        .pool_size(1)
        .unwrap()
}

/// xorshift64*: a fixed-seed stream of timeouts, no extra crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// An outside connection that looks for backends of the test database left
/// `idle in transaction` or `idle in transaction (aborted)`.
struct Checker {
    client: tokio_postgres::Client,
    database: String,
    /// Backends that hold a transaction open on purpose (a lock holder).
    ignore: Vec<i32>,
    /// Checks that first saw a backend idle in a transaction that then left
    /// it on its own (a queued `ROLLBACK` in flight).
    transient: u32,
    /// The longest such a sighting took to clear.
    longest_settle: Duration,
}

impl Checker {
    async fn new(db: &TestDatabase) -> Self {
        Self {
            client: db.client().await,
            database: db.name().to_owned(),
            ignore: Vec::new(),
            transient: 0,
            longest_settle: Duration::ZERO,
        }
    }

    /// `(pid, state, application_name, last query)` of each backend idle in
    /// a transaction.
    async fn idle_in_transaction(&self) -> Vec<(i32, String, String, String)> {
        self.client
            .query(
                "SELECT pid, state, coalesce(application_name, ''), coalesce(query, '')
                 FROM pg_stat_activity
                 WHERE datname = $1
                   AND pid <> pg_backend_pid()
                   AND pid <> ALL($2)
                   AND state IN ('idle in transaction', 'idle in transaction (aborted)')",
                &[&self.database, &self.ignore],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect()
    }

    /// Asserts that no backend is (left) idle in a transaction.
    async fn assert_none(&mut self, context: &str) {
        let first = self.idle_in_transaction().await;
        if first.is_empty() {
            return;
        }
        let seen = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let now = self.idle_in_transaction().await;
            if now.is_empty() {
                self.transient += 1;
                self.longest_settle = self.longest_settle.max(seen.elapsed());
                return;
            }
            assert!(
                seen.elapsed() < SETTLE,
                "{context}: backends left idle in a transaction: {now:?} (first seen: {first:?})"
            );
        }
    }
}

/// Distinct backends (pids) that have served `application_name`, as far as
/// `pg_stat_activity` shows the live ones.
async fn backends(client: &tokio_postgres::Client, db: &TestDatabase, app: &str) -> Vec<i32> {
    client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = $2
             ORDER BY pid",
            &[&db.name(), &app],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Waits (at most 60 s) until no backend of application `app` is running a
/// statement, seen twice 100 ms apart.
async fn wait_until_no_statement_runs(
    client: &tokio_postgres::Client,
    db: &TestDatabase,
    app: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut quiet_checks = 0;
    while quiet_checks < 2 {
        assert!(
            Instant::now() < deadline,
            "a statement of {app} still runs after 60 s"
        );
        let active: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = $1 AND application_name = $2 AND state <> 'idle'",
                &[&db.name(), &app],
            )
            .await
            .unwrap()
            .get(0);
        quiet_checks = if active == 0 { quiet_checks + 1 } else { 0 };
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The probe itself: it sees a transaction left open and an aborted one,
/// from another connection, on this server version.
#[tokio::test]
async fn the_checker_sees_connections_idle_in_a_transaction() {
    let db = TestDatabase::create().await;
    let checker = Checker::new(&db).await;
    assert_eq!(checker.idle_in_transaction().await, vec![]);
    let left_open = db.client().await;
    let pid: i32 = left_open
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    left_open.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let found = checker.idle_in_transaction().await;
    assert_eq!(
        found
            .iter()
            .map(|(pid, state, ..)| (*pid, state.as_str()))
            .collect::<Vec<_>>(),
        vec![(pid, "idle in transaction")]
    );
    let err = left_open.batch_execute("SELECT 1/0").await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("22012"));
    // The client has the error before the backend reports its new state
    // (ErrorResponse precedes ReadyForQuery): poll briefly for it.
    let mut found = checker.idle_in_transaction().await;
    let asked = Instant::now();
    while found
        .iter()
        .all(|(_, state, ..)| state != "idle in transaction (aborted)")
        && asked.elapsed() < SETTLE
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
        found = checker.idle_in_transaction().await;
    }
    assert_eq!(
        found
            .iter()
            .map(|(pid, state, ..)| (*pid, state.as_str()))
            .collect::<Vec<_>>(),
        vec![(pid, "idle in transaction (aborted)")]
    );
    left_open.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(checker.idle_in_transaction().await, vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_reserve_futures_never_leave_a_connection_in_a_transaction() {
    let started = Instant::now();
    let db = TestDatabase::create().await;
    let store = PgStore::new(tagged_store(&db, "statek-cancellation")).unwrap();
    let p = policy();
    store.register(&p).await.unwrap();
    let mut checker = Checker::new(&db).await;
    checker.assert_none("before").await;

    let mut rng = Rng(0x5EED_0F57_A7E4);
    let mut attempted = BTreeSet::new();
    let mut completed = BTreeMap::new();
    let mut backend_pids = BTreeSet::new();
    for attempt in 0..ATTEMPTS {
        // 0..=2000 µs; tokio's timer rounds up to whole milliseconds, and a
        // zero timeout still polls the reserve once.
        let timeout = Duration::from_micros(rng.next() % 2_001);
        let id = Uuid::now_v7();
        attempted.insert(id);
        match tokio::time::timeout(timeout, store.reserve(p.shard_id(), &p.digest(), id)).await {
            Ok(Ok(r)) => {
                assert_eq!((r.id(), r.replayed()), (id, false));
                completed.insert(id, (r.sequence(), r.slot()));
            }
            Ok(Err(e)) => panic!("attempt {attempt}: reserve failed: {e:?}"),
            Err(_elapsed) => {}
        }
        checker
            .assert_none(&format!("after attempt {attempt}"))
            .await;
        if attempt % 50 == 0 {
            backend_pids.extend(backends(&checker.client, &db, "statek-cancellation").await);
        }
    }

    // A reserve whose future was dropped may still be running on the
    // server (its statement was sent) and commit after this point: wait
    // until no backend of the store is active, twice in a row, before the
    // evidence is read (seen once on a loaded machine: 999 rows read, then
    // a cursor of 1,000).
    wait_until_no_statement_runs(&checker.client, &db, "statek-cancellation").await;

    // Rows equal the cursor, sequences contiguous, and each completed
    // reserve's answer is what is stored.
    let rows = checker
        .client
        .query(
            "SELECT reservation_id, sequence, slot FROM statek.scheduler_reservations
             WHERE shard_id = 'primary-v1' ORDER BY sequence",
            &[],
        )
        .await
        .unwrap();
    let cursor: i64 = checker
        .client
        .query_one(
            "SELECT next_sequence FROM statek.scheduler_shards WHERE shard_id = 'primary-v1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(i64::try_from(rows.len()).unwrap(), cursor);
    let sequences: Vec<i64> = rows.iter().map(|r| r.get(1)).collect();
    assert_eq!(sequences, (0..cursor).collect::<Vec<_>>());
    let stored: BTreeMap<Uuid, (u64, u32)> = rows
        .iter()
        .map(|r| {
            (
                r.get(0),
                (
                    u64::try_from(r.get::<_, i64>(1)).unwrap(),
                    u32::try_from(r.get::<_, i32>(2)).unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(stored.len(), rows.len(), "one row per id");
    assert!(stored.keys().all(|id| attempted.contains(id)));
    for (id, answer) in &completed {
        assert_eq!(stored.get(id), Some(answer), "completed reserve {id}");
    }

    // The same pool still works.
    let last = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(
        (last.sequence(), last.replayed()),
        (u64::try_from(cursor).unwrap(), false)
    );
    checker.assert_none("after the last reserve").await;

    eprintln!(
        "cancellation: {ATTEMPTS} attempts, {} completed, {} cancelled, {} rows \
         (cancelled after COMMIT was sent: {}); transient idle-in-transaction sightings {} \
         (longest {:.1} ms to clear); pool backends seen {}; whole test {:.2} s",
        completed.len(),
        ATTEMPTS as usize - completed.len(),
        rows.len(),
        rows.len() - completed.len(),
        checker.transient,
        checker.longest_settle.as_secs_f64() * 1e3,
        backend_pids.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Starts an outside transaction holding the shard row lock.
async fn lock_shard(client: &mut tokio_postgres::Client) -> tokio_postgres::Transaction<'_> {
    let tx = client.transaction().await.unwrap();
    tx.query_one(
        "SELECT next_sequence FROM statek.scheduler_shards WHERE shard_id = 'primary-v1' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    tx
}

/// A reserve blocked on the shard lock past `lock_timeout` (55P03) or
/// `statement_timeout` (57014) fails retryably; the pooled connection is
/// rolled back, not left in its transaction, and serves the next reserve.
#[tokio::test]
async fn timed_out_reserves_are_retryable_and_keep_the_connection() {
    let started = Instant::now();
    let db = TestDatabase::create().await;
    let p = policy();
    db.store().register(&p).await.unwrap();
    let mut holder = db.client().await;
    let mut checker = Checker::new(&db).await;
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    checker.ignore.push(holder_pid);

    let cases = [
        (
            "statek-lock-timeout",
            tagged_store(&db, "statek-lock-timeout")
                .lock_timeout(Duration::from_millis(100))
                .unwrap(),
            "55P03",
        ),
        (
            "statek-statement-timeout",
            tagged_store(&db, "statek-statement-timeout")
                .lock_timeout(Duration::from_secs(30))
                .unwrap()
                // Not shorter: it also bounds the healthy reserves (the
                // warm-up's first statement on a new backend, the retry).
                .statement_timeout(Duration::from_secs(1))
                .unwrap(),
            "57014",
        ),
    ];
    let mut next = 0u64;
    for (app, config, sqlstate) in cases {
        let store = PgStore::new(config).unwrap();
        // Open the pooled connection first, to know its backend.
        let warm = store
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
        assert_eq!(warm.sequence(), next);
        next += 1;
        let pids = backends(&checker.client, &db, app).await;
        assert_eq!(pids.len(), 1, "{app}: {pids:?}");

        let tx = lock_shard(&mut holder).await;
        let id = Uuid::now_v7();
        let err = store
            .reserve(p.shard_id(), &p.digest(), id)
            .await
            .expect_err("the shard row is locked");
        assert!(
            matches!(&err, StoreError::Database { code, .. } if code == sqlstate),
            "{app}: {err:?}"
        );
        assert_eq!(err.sqlstate(), Some(sqlstate));
        assert!(err.is_retryable(), "{app}: {err:?}");
        checker.assert_none(app).await;
        tx.rollback().await.unwrap();

        // Same id again, through the same pool and the same backend.
        let retry = store.reserve(p.shard_id(), &p.digest(), id).await.unwrap();
        assert_eq!((retry.sequence(), retry.replayed()), (next, false), "{app}");
        next += 1;
        assert_eq!(backends(&checker.client, &db, app).await, pids, "{app}");
        checker.assert_none(app).await;
    }

    // A reserve dropped while it waits for the lock. Its one statement was
    // already sent, so the server runs it to the end once the lock is
    // released, in its own autocommit transaction: exactly a reservation
    // whose acknowledgement was lost. The backend is never left in a
    // transaction, the pool's next reserve runs on the same backend after
    // it, and a retry with the dropped id returns the committed sequence.
    let app = "statek-dropped-while-waiting";
    let store = PgStore::new(tagged_store(&db, app)).unwrap();
    let warm = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(warm.sequence(), next);
    next += 1;
    let pids = backends(&checker.client, &db, app).await;
    assert_eq!(pids.len(), 1, "{app}: {pids:?}");
    let tx = lock_shard(&mut holder).await;
    let dropped_id = Uuid::now_v7();
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        store.reserve(p.shard_id(), &p.digest(), dropped_id),
    )
    .await;
    assert!(dropped.is_err(), "still waiting for the lock: {dropped:?}");
    checker.assert_none(app).await;
    tx.rollback().await.unwrap();
    let after = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!((after.sequence(), after.replayed()), (next + 1, false));
    assert_eq!(backends(&checker.client, &db, app).await, pids);
    checker.assert_none(app).await;
    let retried = store
        .reserve(p.shard_id(), &p.digest(), dropped_id)
        .await
        .unwrap();
    assert_eq!(
        (retried.sequence(), retried.replayed()),
        (next, true),
        "the dropped reserve committed, as after a lost acknowledgement"
    );
    next += 2;
    let cursor: i64 = checker
        .client
        .query_one(
            "SELECT next_sequence FROM statek.scheduler_shards WHERE shard_id = 'primary-v1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(u64::try_from(cursor).unwrap(), next);

    eprintln!(
        "timeouts: 55P03 and 57014 cases plus a reserve dropped while waiting, {next} rows; \
         transient idle-in-transaction sightings {}; whole test {:.2} s",
        checker.transient,
        started.elapsed().as_secs_f64()
    );
}

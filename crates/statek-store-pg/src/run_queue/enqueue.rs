//! Enqueue in the caller's transaction, and many runs in one statement
//! ([`PgStore::enqueue_in`], [`PgStore::enqueue_many`],
//! [`PgStore::enqueue_many_in`]).
//!
//! A bulk enqueue is one `INSERT … SELECT FROM unnest(…)` over arrays of
//! every column, in the order given (so the per-insert sequence, and with
//! it FIFO, follows the caller's order). The insert trigger of migration
//! V9 notifies once per tenant per statement, at commit.

use crate::RunQueueError;
use std::collections::HashMap;
use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;
use uuid::Uuid;

use super::NewRun;
use crate::{PgStore, StoreError};
use statek_core::EnqueuedRun;

/// Most runs one bulk enqueue takes.
pub const MAX_ENQUEUE_BATCH: usize = 100_000;
/// Most payload bytes one bulk enqueue takes, over all its runs: 256 MiB.
pub const MAX_ENQUEUE_BATCH_BYTES: usize = 256 * 1024 * 1024;

/// `$1..$7` one array per column, one element per run, in the caller's
/// order; a run whose idempotency key the tenant already used (or an
/// earlier run of the same call used) is not inserted.
const INSERT_RUNS: &str = "
    INSERT INTO statek.runs
        (run_id, tenant_id, payload, max_attempts, available_at, idempotency_key, priority)
    SELECT i.run_id, i.tenant_id, i.payload, i.max_attempts,
           clock_timestamp() + make_interval(secs => i.delay_secs), i.idempotency_key, i.priority
    FROM unnest($1::uuid[], $2::text[], $3::bytea[], $4::int4[], $5::float8[], $6::text[],
                $7::int4[])
         WITH ORDINALITY AS i(run_id, tenant_id, payload, max_attempts, delay_secs,
                              idempotency_key, priority, ord)
    ORDER BY i.ord
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING run_id, enqueued_at, available_at";

/// The runs already holding the (tenant, key) pairs $1/$2.
const SELECT_BY_KEYS: &str = "
    SELECT k.tenant_id, k.idempotency_key, r.run_id, r.payload, r.enqueued_at, r.available_at
    FROM unnest($1::text[], $2::text[]) AS k(tenant_id, idempotency_key)
    JOIN statek.runs AS r
      ON r.tenant_id = k.tenant_id AND r.idempotency_key = k.idempotency_key";

/// The run holding a (tenant, key): id, payload, enqueued and available
/// times.
type Existing = (Uuid, Vec<u8>, SystemTime, SystemTime);

/// Checks a batch before anything is sent.
fn check_batch(runs: &[NewRun]) -> Result<(), StoreError> {
    let bytes: usize = runs.iter().map(|r| r.payload.len()).sum();
    if runs.len() > MAX_ENQUEUE_BATCH || bytes > MAX_ENQUEUE_BATCH_BYTES {
        return Err(StoreError::RunQueue(RunQueueError::EnqueueBatchTooLarge {
            runs: runs.len(),
            bytes,
            max_runs: MAX_ENQUEUE_BATCH,
            max_bytes: MAX_ENQUEUE_BATCH_BYTES,
        }));
    }
    runs.iter().try_for_each(NewRun::check)
}

/// The bulk insert on any client: a connection (its own transaction) or
/// the caller's transaction.
async fn insert_runs<C: GenericClient + Sync>(
    client: &C,
    runs: &[NewRun],
) -> Result<Vec<EnqueuedRun>, StoreError> {
    check_batch(runs)?;
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = runs.iter().map(|_| Uuid::now_v7()).collect();
    let tenants: Vec<&str> = runs.iter().map(|r| r.tenant.as_str()).collect();
    let payloads: Vec<&[u8]> = runs.iter().map(|r| r.payload.as_slice()).collect();
    let attempts: Vec<i32> = runs
        .iter()
        .map(|r| i32::try_from(r.max_attempts).unwrap_or(i32::MAX))
        .collect();
    let delays: Vec<f64> = runs.iter().map(|r| r.delay.as_secs_f64()).collect();
    let keys: Vec<Option<&str>> = runs.iter().map(|r| r.idempotency_key.as_deref()).collect();
    let priorities: Vec<i32> = runs.iter().map(|r| r.priority).collect();
    let rows = client
        .query_typed(
            INSERT_RUNS,
            &[
                (&ids, Type::UUID_ARRAY),
                (&tenants, Type::TEXT_ARRAY),
                (&payloads, Type::BYTEA_ARRAY),
                (&attempts, Type::INT4_ARRAY),
                (&delays, Type::FLOAT8_ARRAY),
                (&keys, Type::TEXT_ARRAY),
                (&priorities, Type::INT4_ARRAY),
            ],
        )
        .await?;
    let mut inserted: HashMap<Uuid, (SystemTime, SystemTime)> = HashMap::with_capacity(rows.len());
    for row in &rows {
        inserted.insert(
            row.try_get("run_id")?,
            (row.try_get("enqueued_at")?, row.try_get("available_at")?),
        );
    }
    // Runs not inserted hold a key already taken: read the runs holding it.
    let mut existing: HashMap<(String, String), Existing> = HashMap::new();
    if inserted.len() < runs.len() {
        let (wanted_tenants, wanted_keys): (Vec<&str>, Vec<&str>) = runs
            .iter()
            .zip(&ids)
            .filter(|(_, id)| !inserted.contains_key(id))
            .filter_map(|(r, _)| Some((r.tenant.as_str(), r.idempotency_key.as_deref()?)))
            .unzip();
        for row in client
            .query_typed(
                SELECT_BY_KEYS,
                &[
                    (&wanted_tenants, Type::TEXT_ARRAY),
                    (&wanted_keys, Type::TEXT_ARRAY),
                ],
            )
            .await?
        {
            existing.insert(
                (row.try_get("tenant_id")?, row.try_get("idempotency_key")?),
                (
                    row.try_get("run_id")?,
                    row.try_get("payload")?,
                    row.try_get("enqueued_at")?,
                    row.try_get("available_at")?,
                ),
            );
        }
    }
    runs.iter()
        .zip(ids)
        .map(|(run, id)| {
            if let Some((enqueued_at, available_at)) = inserted.get(&id) {
                return Ok(EnqueuedRun {
                    run_id: id,
                    enqueued_at: *enqueued_at,
                    available_at: *available_at,
                    deduplicated: false,
                });
            }
            let key = run.idempotency_key.clone().ok_or_else(|| {
                StoreError::corrupt("run", "a run without a key was not inserted")
            })?;
            let (run_id, payload, enqueued_at, available_at) = existing
                .get(&(run.tenant.as_str().to_owned(), key))
                .ok_or_else(|| StoreError::corrupt("run", "idempotency key vanished"))?;
            if *payload != run.payload {
                return Err(StoreError::RunQueue(RunQueueError::IdempotencyConflict {
                    run_id: *run_id,
                }));
            }
            Ok(EnqueuedRun {
                run_id: *run_id,
                enqueued_at: *enqueued_at,
                available_at: *available_at,
                deduplicated: true,
            })
        })
        .collect()
}

impl PgStore {
    /// Adds a run inside the caller's transaction (or on the caller's
    /// connection): pass a `tokio_postgres::Transaction`, or any client
    /// implementing `GenericClient`. The run commits or rolls back with
    /// that transaction: it is invisible to claims, and its wake-up
    /// notification is not sent, until the caller commits; a rollback
    /// leaves nothing. The commit follows the caller's session settings,
    /// `synchronous_commit` included (statek sets nothing on a connection
    /// it does not own). An error of this call aborts the caller's
    /// transaction, as any failed statement does (use a savepoint to
    /// continue after one).
    ///
    /// The caller's role needs what the role profile grants the runtime
    /// role for enqueueing: `USAGE` on schema `statek`, `SELECT, INSERT` on
    /// `statek.runs` and `USAGE` on its sequence. The statement is sent
    /// unnamed (no prepared statement outlives it), so it works through
    /// PgBouncer in transaction mode too.
    ///
    /// # Errors
    /// As [`PgStore::enqueue`], and [`RunQueueError::IdempotencyConflict`](crate::RunQueueError::IdempotencyConflict).
    pub async fn enqueue_in<C: GenericClient + Sync>(
        client: &C,
        run: &NewRun,
    ) -> Result<EnqueuedRun, StoreError> {
        insert_runs(client, std::slice::from_ref(run))
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::corrupt("run", "enqueue answered nothing"))
    }

    /// Adds up to [`MAX_ENQUEUE_BATCH`] runs (of any tenants, at most
    /// [`MAX_ENQUEUE_BATCH_BYTES`] of payload) in the caller's transaction,
    /// in ONE statement, as [`PgStore::enqueue_in`] does for one. Runs of
    /// one tenant and priority are claimed in the order given (FIFO). A
    /// run whose idempotency key is taken (by an existing run, or by an
    /// earlier run of the same call) is not added: the run holding the key
    /// is returned with `deduplicated: true`. One wake-up notification per
    /// tenant with a run claimable now, sent at commit.
    ///
    /// Returns one [`EnqueuedRun`] per run, in the order given.
    ///
    /// # Errors
    /// [`RunQueueError::EnqueueBatchTooLarge`](crate::RunQueueError::EnqueueBatchTooLarge); any run's
    /// [`PgStore::enqueue`] error (nothing is sent then);
    /// [`RunQueueError::IdempotencyConflict`](crate::RunQueueError::IdempotencyConflict) for a key already used with
    /// another payload; connection and server errors.
    pub async fn enqueue_many_in<C: GenericClient + Sync>(
        client: &C,
        runs: &[NewRun],
    ) -> Result<Vec<EnqueuedRun>, StoreError> {
        insert_runs(client, runs).await
    }

    /// [`PgStore::enqueue_many_in`] on a pooled connection, in one
    /// transaction of its own (one statement, committed at once), under the
    /// response timeout.
    ///
    /// # Errors
    /// As [`PgStore::enqueue_many_in`], and [`ConnectionError::ResponseTimeout`](crate::ConnectionError::ResponseTimeout).
    pub async fn enqueue_many(&self, runs: &[NewRun]) -> Result<Vec<EnqueuedRun>, StoreError> {
        check_batch(runs)?;
        self.in_generic_transaction(
            self.config().effective_response_timeout(),
            async |tx: &tokio_postgres::Transaction<'_>| insert_runs(tx, runs).await,
        )
        .await
    }
}

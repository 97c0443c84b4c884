//! Test fixtures (feature `test-support`): a fresh, migrated database per
//! test, created on the server named by `STATEK_TEST_DATABASE_URL`.
//!
//! A missing `STATEK_TEST_DATABASE_URL` is a loud failure, never a skip:
//! run the suite through `cargo xtask test`, which provisions PostgreSQL 16
//! and 17 and sets it, or point it at a server where the role may
//! `CREATE DATABASE`.

// Standard error is where a test names the database it keeps.
#![allow(clippy::panic, clippy::expect_used, clippy::print_stderr)]

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use uuid::Uuid;

use crate::{DurabilityPolicy, PgStore, StoreConfig};

pub mod fault_proxy;

/// Environment variable naming the server used by database tests.
pub const TEST_DATABASE_URL_ENV: &str = "STATEK_TEST_DATABASE_URL";

/// Environment variable naming a PgBouncer in transaction pooling mode in
/// front of the server of [`TEST_DATABASE_URL_ENV`], with a wildcard
/// database entry (`* = host=... port=...`), for the tests that run through
/// it. `cargo xtask test` starts one and sets it.
pub const TEST_PGBOUNCER_URL_ENV: &str = "STATEK_TEST_PGBOUNCER_URL";

/// Environment variable that keeps every test database (set to any
/// value): by default a test database is dropped when its test passes and
/// kept, with its name on standard error, when the test fails.
pub const TEST_KEEP_DATABASES_ENV: &str = "STATEK_TEST_KEEP_DATABASES";

/// A database created for one test. Clones share it; when the last clone
/// goes away at the end of a passing test, the database is dropped
/// (`DROP DATABASE ... WITH (FORCE)`), so a suite run against a long-lived
/// server does not pile up databases. A failing (panicking) test keeps its
/// database for inspection and names it on standard error.
#[derive(Debug, Clone)]
pub struct TestDatabase {
    name: String,
    config: tokio_postgres::Config,
    _dropper: Arc<DropAtLastUse>,
}

/// Drops the database when the last [`TestDatabase`] clone is dropped.
#[derive(Debug)]
struct DropAtLastUse {
    name: String,
    admin: StoreConfig,
}

impl Drop for DropAtLastUse {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("statek test database {} kept for inspection", self.name);
            return;
        }
        if std::env::var_os(TEST_KEEP_DATABASES_ENV).is_some() {
            return;
        }
        let (name, admin) = (self.name.clone(), self.admin.clone());
        // A runtime of its own on a thread of its own: this may run inside
        // the test's runtime, which cannot be blocked on from within.
        let dropped = std::thread::spawn(move || -> Result<(), String> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let client = admin.connect_client().await.map_err(|e| chain(&e))?;
                client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .map_err(|e| chain(&e))
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("statek test database {} not dropped: {e}", self.name),
            Err(_) => eprintln!("statek test database {} not dropped", self.name),
        }
    }
}

impl TestDatabase {
    /// Creates a uniquely named empty database (not yet migrated).
    ///
    /// # Panics
    /// When `STATEK_TEST_DATABASE_URL` is unset or the server cannot be
    /// reached: database tests fail loudly, they never skip.
    pub async fn create_empty() -> Self {
        let url = std::env::var(TEST_DATABASE_URL_ENV).unwrap_or_else(|_| {
            panic!(
                "{TEST_DATABASE_URL_ENV} is not set: database tests need PostgreSQL. \
                 Run `cargo xtask test` (it provisions PostgreSQL 16 and 17), or \
                 `cargo xtask pg start --version 17` and export the URL it prints as \
                 {TEST_DATABASE_URL_ENV}"
            )
        });
        let admin = StoreConfig::from_url(&url)
            .unwrap_or_else(|e| panic!("{TEST_DATABASE_URL_ENV} does not parse: {e}"));
        let client = admin.connect_client().await.unwrap_or_else(|e| {
            panic!(
                "cannot connect to the test server named by {TEST_DATABASE_URL_ENV}: {}",
                chain(&e)
            )
        });
        let name = format!("statek_test_{}", Uuid::now_v7().simple());
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name} failed: {e}"));
        drop(client);
        let mut config = admin.pg_config().clone();
        config.dbname(&name);
        let dropper = Arc::new(DropAtLastUse {
            name: name.clone(),
            admin,
        });
        Self {
            name,
            config,
            _dropper: dropper,
        }
    }

    /// Creates a database and applies all migrations.
    pub async fn create() -> Self {
        let db = Self::create_empty().await;
        db.store().migrate().await.expect("migrations apply");
        db
    }

    /// Creates a database migrated only up to `version` (to test upgrades
    /// from an older schema).
    pub async fn create_at_version(version: u32) -> Self {
        let db = Self::create_empty().await;
        db.store()
            .migrate_to(refinery::Target::Version(version))
            .await
            .expect("migrations up to the version apply");
        db
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connection settings for the database.
    pub fn pg_config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// Store settings for the database: the defaults, except that the
    /// durability check only reports (the test servers run with `fsync`,
    /// `synchronous_commit` and `full_page_writes` off for speed; statek's
    /// own sessions still commit with `synchronous_commit = on`).
    pub fn store_config(&self) -> StoreConfig {
        test_store_config(self.config.clone())
    }

    /// A new store (its own pool) on the database.
    pub fn store(&self) -> PgStore {
        PgStore::new(self.store_config()).expect("pool builds")
    }

    /// A key-value connection string for the database (for child
    /// processes in tests).
    pub fn connection_string(&self) -> String {
        let mut parts = Vec::new();
        if let Some(tokio_postgres::config::Host::Tcp(host)) = self.config.get_hosts().first() {
            parts.push(format!("host={host}"));
        }
        if let Some(port) = self.config.get_ports().first() {
            parts.push(format!("port={port}"));
        }
        if let Some(user) = self.config.get_user() {
            parts.push(format!("user={user}"));
        }
        if let Some(password) = self.config.get_password() {
            parts.push(format!("password={}", String::from_utf8_lossy(password)));
        }
        parts.push(format!("dbname={}", self.name));
        parts.join(" ")
    }

    /// Store settings that reach this database through the PgBouncer named
    /// by `STATEK_TEST_PGBOUNCER_URL`, in transaction pooling mode, with
    /// this database's direct connection for `LISTEN` and migrations.
    ///
    /// # Panics
    /// When `STATEK_TEST_PGBOUNCER_URL` is unset or does not parse: the
    /// tests through PgBouncer fail loudly, they never skip.
    pub fn pgbouncer_store_config(&self) -> StoreConfig {
        let url = std::env::var(TEST_PGBOUNCER_URL_ENV).unwrap_or_else(|_| {
            panic!(
                "{TEST_PGBOUNCER_URL_ENV} is not set: this test runs through PgBouncer in \
                 transaction pooling mode. Run `cargo xtask test` (it starts one; install \
                 Debian's package `pgbouncer` or set STATEK_PGBOUNCER), or start one with a \
                 wildcard database entry in front of {TEST_DATABASE_URL_ENV} and export its URL"
            )
        });
        let bouncer = tokio_postgres::Config::from_str(&url)
            .unwrap_or_else(|e| panic!("{TEST_PGBOUNCER_URL_ENV} does not parse: {e}"));
        let mut pg = tokio_postgres::Config::new();
        for host in bouncer.get_hosts() {
            if let tokio_postgres::config::Host::Tcp(host) = host {
                pg.host(host);
            }
        }
        for port in bouncer.get_ports() {
            pg.port(*port);
        }
        if let Some(user) = bouncer.get_user().or(self.config.get_user()) {
            pg.user(user);
        }
        if let Some(password) = bouncer.get_password().or(self.config.get_password()) {
            pg.password(password);
        }
        pg.dbname(&self.name).application_name("statek-test");
        test_store_config(pg)
            .transaction_pooling(true)
            .direct_pg_config(self.config.clone())
    }

    /// Sets `config`'s session settings (`lock_timeout`,
    /// `statement_timeout`, `synchronous_commit`) on this database (`ALTER DATABASE ... SET`), as
    /// an operator does for the runtime role under transaction pooling.
    /// Server connections opened afterwards use them.
    pub async fn set_session_settings(&self, config: &StoreConfig) {
        let client = self.client().await;
        for (name, value) in config.session_settings() {
            client
                .batch_execute(&format!(
                    "ALTER DATABASE {} SET {name} = '{value}'",
                    self.name
                ))
                .await
                .unwrap_or_else(|e| panic!("ALTER DATABASE ... SET {name} failed: {e}"));
        }
    }

    /// A plain client for assertions and tampering, outside any pool.
    pub async fn client(&self) -> tokio_postgres::Client {
        self.store_config()
            .connect_client()
            .await
            .unwrap_or_else(|e| panic!("connect: {}", chain(&e)))
    }
}

/// A policy for tests: shard `shard` with the `(tenant, weight)` pairs of
/// `weights` (any order; the policy sorts them), compiled with the default
/// algorithm. The one policy builder of statek's test suites.
///
/// # Panics
/// On an invalid shard id, tenant id or weight, or a policy
/// [`WeightedFairnessPolicy::new`] refuses (for example no tenants, or one
/// tenant twice), naming which.
pub fn policy(shard: &str, weights: &[(&str, u32)]) -> WeightedFairnessPolicy {
    let shard_id = SchedulerShardId::try_from(shard)
        .unwrap_or_else(|e| panic!("test policy: shard id {shard:?}: {e}"));
    let weights = weights.iter().map(|(tenant, weight)| {
        let id = TenantId::try_from(*tenant)
            .unwrap_or_else(|e| panic!("test policy: tenant id {tenant:?}: {e}"));
        TenantFairnessWeight::new(id, *weight)
            .unwrap_or_else(|e| panic!("test policy: weight {weight} of {tenant}: {e}"))
    });
    WeightedFairnessPolicy::new(shard_id, weights)
        .unwrap_or_else(|e| panic!("test policy for {shard}: {e}"))
}

/// Store settings for a test server: defaults, with
/// [`DurabilityPolicy::AllowNoDurability`] (the test servers are not
/// durable by design).
pub fn test_store_config(pg: tokio_postgres::Config) -> StoreConfig {
    StoreConfig::from_pg_config(pg).durability_policy(DurabilityPolicy::AllowNoDurability)
}

fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A TCP relay on 127.0.0.1 to `upstream` (`host:port`) that can go
/// silent: setting the returned flag freezes the connections open at that
/// moment (they stay open and forward nothing, like a link whose peer
/// vanished without closing it); connections accepted later relay
/// normally. Returns the relay's port. For dead-link tests.
pub async fn freezing_relay(upstream: String) -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the relay");
    let port = listener.local_addr().expect("relay address").port();
    let current = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&current);
    tokio::spawn(async move {
        let mut freeze = flag;
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            // A frozen epoch ends at the next accept: later connections
            // get a fresh flag.
            if freeze.load(Ordering::SeqCst) {
                freeze = Arc::new(AtomicBool::new(false));
            }
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(pump(cr, sw, Arc::clone(&freeze)));
            tokio::spawn(pump(sr, cw, Arc::clone(&freeze)));
        }
    });
    (port, current)
}

/// Copies `from` to `to` until `freeze` is set; then swallows everything,
/// keeping both sockets open.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    freeze: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if freeze.load(Ordering::SeqCst) {
            // Keep `to` (and so the socket) alive, forward nothing.
            let _keep = to;
            std::future::pending::<()>().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The prune batch statement (parameters: `$1` retention in seconds as
/// float8, `$2` batch size as int8), for plan checks with `EXPLAIN`.
pub const PRUNE_BATCH_SQL: &str = crate::retention::PRUNE_BATCH;

/// The claim statement for a batch of slots (parameters: `$1` sequences
/// int8[], `$2` tenants text[], `$3` lease tokens uuid[], `$4` lease in
/// seconds float8, `$5` shard text, `$6` most runs to claim int8), for
/// plan checks with `EXPLAIN`.
pub const CLAIM_FOR_SLOTS_SQL: &str = crate::run_queue::CLAIM_FOR_SLOTS;

/// Reserves, on `policy`'s registered shard, the sequences from its cursor
/// through the first slots whose cycle tenants are `tenants` in this order
/// (the next slot of the first tenant at or after the cursor, then the
/// next slot of the second after it, ...), and returns those slots as
/// `(sequence, tenant)`: what a claim may name since migration V11, which
/// refuses a slot that is not reserved or not its cycle tenant's. The
/// sequences skipped in between are reserved and left unclaimed.
pub async fn reserved_slots(
    store: &PgStore,
    policy: &statek_policy::WeightedFairnessPolicy,
    tenants: &[&statek_policy::TenantId],
) -> Vec<(u64, statek_policy::TenantId)> {
    let shard = policy.shard_id();
    let cursor = store
        .next_sequence(shard)
        .await
        .expect("read the shard's cursor");
    let length = u64::from(policy.cycle_length());
    let mut slots = Vec::with_capacity(tenants.len());
    let mut next = cursor;
    for &tenant in tenants {
        let sequence = (next..next + length)
            .find(|sequence| policy.tenant_for_slot(sequence % length) == Some(tenant))
            .unwrap_or_else(|| panic!("tenant {tenant} has no slot in policy {shard}"));
        slots.push((sequence, tenant.clone()));
        next = sequence + 1;
    }
    reserve_sequences(store, policy, next - cursor).await;
    slots
}

/// Reserves `count` sequences of `policy`'s shard from its cursor, in
/// batches of at most [`statek_core::MAX_RESERVATION_BATCH`].
async fn reserve_sequences(
    store: &PgStore,
    policy: &statek_policy::WeightedFairnessPolicy,
    count: u64,
) {
    let mut reserved = 0;
    while reserved < count {
        let k =
            u32::try_from((count - reserved).min(u64::from(statek_core::MAX_RESERVATION_BATCH)))
                .expect("at most MAX_RESERVATION_BATCH");
        store
            .reserve_batch(policy.shard_id(), &policy.digest(), Uuid::now_v7(), k)
            .await
            .expect("reserve the slots");
        reserved += u64::from(k);
    }
}

/// Reserves the next `count` sequences of `policy`'s shard (from its
/// cursor) and returns them with their cycle tenants, in order.
pub async fn reserve_next_slots(
    store: &PgStore,
    policy: &statek_policy::WeightedFairnessPolicy,
    count: u64,
) -> Vec<(u64, statek_policy::TenantId)> {
    let shard = policy.shard_id();
    let cursor = store
        .next_sequence(shard)
        .await
        .expect("read the shard's cursor");
    let length = u64::from(policy.cycle_length());
    reserve_sequences(store, policy, count).await;
    (cursor..cursor + count)
        .map(|sequence| {
            let tenant = policy
                .tenant_for_slot(sequence % length)
                .expect("every slot has a tenant")
                .clone();
            (sequence, tenant)
        })
        .collect()
}

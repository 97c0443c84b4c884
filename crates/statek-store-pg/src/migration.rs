//! Schema migrations, embedded from the workspace's `/migrations` folder
//! with refinery and applied under a PostgreSQL advisory lock, so that
//! concurrent callers wait for each other. Forward only; a landed
//! migration file is never edited (its SHA-256 is pinned in
//! `migrations/MANIFEST.sha256`).

use crate::ConnectionError;
use crate::{PgStore, StoreError};

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// Advisory lock key held while migrating ("STATEK" + 1), so that many
/// processes may call [`PgStore::migrate`] at once.
const MIGRATION_LOCK_KEY: i64 = 0x5354_4154_454B_0001;

/// Where refinery records applied migrations.
const HISTORY_TABLE: &str = "statek.refinery_schema_history";

/// What [`PgStore::migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    applied: Vec<(u32, String)>,
}

impl MigrationReport {
    /// Migrations applied by this call, as (version, name), in order. Empty
    /// when the schema was already current.
    pub fn applied(&self) -> &[(u32, String)] {
        &self.applied
    }
}

/// The migrations compiled into this crate, as (version, name), in order.
pub fn embedded_migrations() -> Vec<(u32, String)> {
    let mut all: Vec<(u32, String)> = embedded::migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| (m.version(), m.name().to_owned()))
        .collect();
    all.sort();
    all
}

/// The newest migration compiled into this crate.
pub(crate) fn latest_version() -> u32 {
    embedded_migrations()
        .last()
        .map_or(0, |(version, _)| *version)
}

impl PgStore {
    /// Creates or upgrades the `statek` schema.
    ///
    /// Runs on a dedicated connection (not the pool) holding a session-level
    /// advisory lock, so concurrent callers wait for each other and each
    /// migration is applied once. Dropping the future closes that connection,
    /// which releases the lock. Needs the owner role (DDL privileges). The
    /// connection is the direct one ([`crate::StoreConfig::direct_url`])
    /// when given; the whole call runs under the maintenance timeout
    /// ([`crate::StoreConfig::maintenance_timeout`]).
    ///
    /// # Errors
    /// [`MigrationError::Divergent`](crate::MigrationError::Divergent) when an applied migration differs
    /// from this crate's of the same version (name or checksum);
    /// [`MigrationError::Missing`](crate::MigrationError::Missing) when the database has a migration
    /// this crate does not know (a newer statek migrated it);
    /// [`MigrationError::Failed`](crate::MigrationError::Failed) when a migration fails otherwise;
    /// [`ConnectionError::ResponseTimeout`](crate::ConnectionError::ResponseTimeout) after the maintenance timeout;
    /// [`ConnectionError::DirectConnectionRequired`](crate::ConnectionError::DirectConnectionRequired) under transaction pooling
    /// without a direct connection; connection and server errors as usual.
    pub async fn migrate(&self) -> Result<MigrationReport, StoreError> {
        self.migrate_to(refinery::Target::Latest).await
    }

    /// Migrates up to `target` (tests use it to build older schemas).
    pub(crate) async fn migrate_to(
        &self,
        target: refinery::Target,
    ) -> Result<MigrationReport, StoreError> {
        let mut pg = self.config().session_pg_config("migrations")?;
        // DDL may legitimately wait or run long; no pooled timeouts here,
        // only the maintenance timeout around the whole call.
        let mut options = pg.get_options().unwrap_or_default().to_owned();
        options.push_str(" -c lock_timeout=0 -c statement_timeout=0");
        pg.options(options.trim_start());
        let after = self.config().effective_maintenance_timeout();
        // Dropping the unfinished future closes the connection, which
        // releases the advisory lock and rolls back a half-applied migration.
        let connector = self.config().tls_connector()?;
        tokio::time::timeout(after, migrate_on(pg, connector, target))
            .await
            .map_err(|_| StoreError::Connection(ConnectionError::ResponseTimeout { after }))?
    }
}

/// Migrates on a dedicated connection opened with `pg`.
async fn migrate_on(
    pg: tokio_postgres::Config,
    connector: tokio_postgres_rustls::MakeRustlsConnect,
    target: refinery::Target,
) -> Result<MigrationReport, StoreError> {
    let (mut client, connection) = pg
        .connect(connector)
        .await
        .map_err(StoreError::from_connect)?;
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "migration connection ended with an error");
        }
    });
    let result = async {
        client
            .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
            .await?;
        // Only create the schema when it is missing: CREATE SCHEMA IF NOT
        // EXISTS needs the CREATE privilege on the database even when
        // the schema exists, which an owner role need not have.
        let missing: bool = client
            .query_one("SELECT to_regnamespace('statek') IS NULL AS missing", &[])
            .await?
            .try_get("missing")?;
        if missing {
            client.batch_execute("CREATE SCHEMA statek").await?;
        }
        let mut runner = embedded::migrations::runner()
            .set_abort_divergent(true)
            .set_abort_missing(true)
            .set_target(target);
        runner.set_migration_table_name(HISTORY_TABLE);
        let report = runner.run_async(&mut client).await?;
        client
            .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY])
            .await?;
        Ok::<_, StoreError>(report)
    }
    .await;
    drop(client);
    let _ = driver.await;
    let report = result?;
    let applied = report
        .applied_migrations()
        .iter()
        .map(|m| (m.version(), m.name().to_owned()))
        .collect::<Vec<_>>();
    for (version, name) in &applied {
        tracing::info!(version, name = %name, "applied migration");
    }
    Ok(MigrationReport { applied })
}

//! [`PgStore`]: the connection pool every store operation runs on.

use std::time::Duration;

use crate::acknowledged_log::AcknowledgedLog;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::IsolationLevel;

use crate::statement::Db;
use crate::{StoreConfig, StoreError};

/// A handle to statek's tables in one PostgreSQL database, with its own
/// connection pool. Cheap to clone (the pool is shared by clones).
///
/// Every operation takes one pooled connection for one short transaction.
/// A future dropped half way (cancellation) drops its transaction, which
/// queues a `ROLLBACK` on that connection before the connection can be
/// handed out again; a reservation is one autocommit statement, so it
/// leaves no transaction behind. Closed connections are discarded at
/// checkout; a call that gets no answer within the response timeout
/// discards its connection ([`StoreConfig::response_timeout`]; migrations,
/// pruning and the role profile use [`StoreConfig::maintenance_timeout`]).
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    config: StoreConfig,
    failover: std::sync::Arc<AcknowledgedLog>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.pool.status();
        f.debug_struct("PgStore")
            .field("pool_size", &status.size)
            .field("pool_available", &status.available)
            .field("pool_max_size", &status.max_size)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Builds the pool. No connection is opened until first use.
    ///
    /// # Errors
    /// [`StoreError::Pool`] if the pool cannot be built;
    /// [`StoreError::TlsConfiguration`] if rustls refuses the TLS settings.
    pub fn new(config: StoreConfig) -> Result<Self, StoreError> {
        let manager = Manager::from_config(
            config.pooled_pg_config(),
            config.tls_connector()?,
            ManagerConfig {
                recycling_method: if config.verifies_on_checkout() {
                    // An empty query on every checkout (one round trip).
                    RecyclingMethod::Verified
                } else {
                    // Closed connections are discarded; an unfinished
                    // transaction was already rolled back when its
                    // `Transaction` was dropped (tokio-postgres queues the
                    // ROLLBACK ahead of any later statement).
                    RecyclingMethod::Fast
                },
            },
        );
        let (wait, create, recycle) = config.timeouts();
        let pool = Pool::builder(manager)
            .max_size(config.max_pool_size())
            .wait_timeout(Some(wait))
            .create_timeout(Some(create))
            .recycle_timeout(Some(recycle))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Pool(e.to_string()))?;
        let failover = std::sync::Arc::new(AcknowledgedLog::new(config.failover_ring_capacity()));
        Ok(Self {
            pool,
            config,
            failover,
        })
    }

    /// The ring of recently acknowledged reservations (see `failover.rs`).
    pub(crate) fn failover_log(&self) -> &AcknowledgedLog {
        &self.failover
    }

    /// Shorthand for `PgStore::new(StoreConfig::from_url(url)?)`.
    ///
    /// # Errors
    /// As [`StoreConfig::from_url`] and [`PgStore::new`].
    pub fn connect(url: &str) -> Result<Self, StoreError> {
        Self::new(StoreConfig::from_url(url)?)
    }

    /// The settings this store was built with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Runs `call` on a pooled connection (autocommit) with the response
    /// timeout: if the server does not answer in time, the connection is
    /// taken out of the pool and closed (a dead link must not serve the
    /// next caller), and the call fails with the retryable
    /// [`StoreError::ResponseTimeout`]. Every store call goes through this
    /// or [`in_transaction`](Self::in_transaction), which also pick the
    /// statement mode ([`StoreConfig::transaction_pooling`]).
    pub(crate) async fn with_response_timeout<T>(
        &self,
        call: impl AsyncFnOnce(&Db<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let after = self.config.effective_response_timeout();
        let client = self.client().await?;
        let unnamed = self.config.uses_transaction_pooling();
        let answered = tokio::time::timeout(after, async {
            let db = Db::client(&client, unnamed);
            call(&db).await
        })
        .await;
        match answered {
            Ok(result) => result,
            Err(_) => {
                drop(deadpool_postgres::Object::take(client));
                Err(StoreError::ResponseTimeout { after })
            }
        }
    }

    /// Runs `call` in one READ COMMITTED transaction on a pooled
    /// connection, committing when it returns `Ok`; the whole transaction
    /// (begin, statements, commit) runs under `after`, as
    /// [`with_response_timeout`](Self::with_response_timeout) describes.
    pub(crate) async fn in_transaction<T>(
        &self,
        after: Duration,
        call: impl AsyncFnOnce(&Db<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.client().await?;
        let unnamed = self.config.uses_transaction_pooling();
        let answered = tokio::time::timeout(after, async {
            let tx = PgStore::begin(&mut client).await?;
            let out = {
                let db = Db::transaction(&tx, unnamed);
                call(&db).await?
            };
            tx.commit().await?;
            Ok(out)
        })
        .await;
        match answered {
            Ok(result) => result,
            Err(_) => {
                drop(deadpool_postgres::Object::take(client));
                Err(StoreError::ResponseTimeout { after })
            }
        }
    }

    /// [`in_transaction`](Self::in_transaction) for code written against
    /// `tokio_postgres::GenericClient` (the enqueue functions that also
    /// run in a caller's transaction): `call` gets the transaction itself.
    /// Its statements must be sent unnamed (`query_typed`), as they are
    /// under transaction pooling.
    pub(crate) async fn in_generic_transaction<T>(
        &self,
        after: Duration,
        call: impl AsyncFnOnce(&tokio_postgres::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.client().await?;
        let answered = tokio::time::timeout(after, async {
            let tx = PgStore::begin(&mut client).await?;
            let out = call(&tx).await?;
            tx.commit().await?;
            Ok(out)
        })
        .await;
        match answered {
            Ok(result) => result,
            Err(_) => {
                drop(deadpool_postgres::Object::take(client));
                Err(StoreError::ResponseTimeout { after })
            }
        }
    }

    /// Starts a READ COMMITTED transaction on a pooled connection.
    async fn begin<'c>(
        client: &'c mut deadpool_postgres::Object,
    ) -> Result<deadpool_postgres::Transaction<'c>, StoreError> {
        Ok(client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start()
            .await?)
    }
}

//! [`PgStore`]: the connection pool every store operation runs on.

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::IsolationLevel;

use crate::{StoreConfig, StoreError};

/// A handle to statek's tables in one PostgreSQL database, with its own
/// connection pool. Cheap to clone (the pool is shared by clones).
///
/// Every operation takes one pooled connection for one short transaction.
/// A future dropped half way (cancellation) drops its transaction, which
/// queues a `ROLLBACK` on that connection before the connection can be
/// handed out again; a reservation is one autocommit statement, so it
/// leaves no transaction behind. Closed connections are discarded at
/// checkout; a reservation that gets no answer within the response timeout
/// discards its connection ([`StoreConfig::response_timeout`]).
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    config: StoreConfig,
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
        Ok(Self { pool, config })
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

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Runs `call` on a pooled connection with the response timeout: if the
    /// server does not answer in time, the connection is taken out of the
    /// pool and closed (a dead link must not serve the next caller), and the
    /// call fails with the retryable [`StoreError::ResponseTimeout`].
    pub(crate) async fn with_response_timeout<T>(
        &self,
        call: impl AsyncFnOnce(&deadpool_postgres::Object) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let client = self.client().await?;
        let after = self.config.effective_response_timeout();
        let answered = tokio::time::timeout(after, call(&client)).await;
        match answered {
            Ok(result) => result,
            Err(_) => {
                drop(deadpool_postgres::Object::take(client));
                Err(StoreError::ResponseTimeout { after })
            }
        }
    }

    /// Opens a pooled connection and starts a READ COMMITTED transaction.
    pub(crate) async fn begin<'c>(
        client: &'c mut deadpool_postgres::Object,
    ) -> Result<deadpool_postgres::Transaction<'c>, StoreError> {
        Ok(client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start()
            .await?)
    }
}

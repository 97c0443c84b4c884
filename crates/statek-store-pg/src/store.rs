//! [`PgStore`]: the connection pool every store operation runs on, and
//! the three wrappers every call goes through to reach a pooled
//! connection: `with_response_timeout` (a deadline on the server's answer,
//! or the longer maintenance timeout), `with_durable_write` (a run-queue
//! write; under transaction pooling, in a transaction with the store's
//! `synchronous_commit`) and `in_transaction`. None waits on a silent
//! connection without a deadline; `tests/it/tidy.rs` fails on a call that
//! takes a connection another way.

use crate::ConnectionError;
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
    /// [`ConnectionError::Pool`](crate::ConnectionError::Pool) if the pool cannot be built;
    /// [`ConnectionError::TlsConfiguration`](crate::ConnectionError::TlsConfiguration) if rustls refuses the TLS settings.
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
            .map_err(|e| StoreError::Connection(ConnectionError::Pool(e.to_string())))?;
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

    /// Closes the pool's idle connections (the ones in use stay); the
    /// next call opens new ones.
    #[cfg(feature = "baseline")]
    pub(crate) fn close_idle_connections(&self) {
        self.pool.retain(|_, _| false);
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Runs `call` on a pooled connection (autocommit) with the response
    /// timeout: if the server does not answer in time, the connection is
    /// taken out of the pool and closed (a dead link must not serve the
    /// next caller), and the call fails with the retryable
    /// [`ConnectionError::ResponseTimeout`](crate::ConnectionError::ResponseTimeout). Every store call goes through this
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
                Err(StoreError::Connection(ConnectionError::ResponseTimeout {
                    after,
                }))
            }
        }
    }

    /// Runs a run-queue write (enqueue, claim, heartbeat, completion,
    /// failure, release, cancel, retry) as
    /// [`with_response_timeout`](Self::with_response_timeout) does, with
    /// the store's `synchronous_commit` in force for its transaction.
    ///
    /// Outside transaction pooling the session carries it (a startup
    /// option of every pooled connection), so this is
    /// `with_response_timeout` itself and costs nothing. Under transaction
    /// pooling a server connection is shared, and its session setting is
    /// whatever the role's default or the last client's `SET` left there;
    /// so the call runs in an explicit transaction: the simple query
    /// `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit
    /// = <level>` is pipelined with the call's first statement (sent
    /// without waiting for its answer: no round trip of its own), and a
    /// `COMMIT` ends it, which is the one extra round trip per write (see
    /// docs/operations.md for the figure). A call dropped half way (its
    /// future cancelled) leaves its transaction open on the connection, so
    /// that connection is closed, never handed out again.
    pub(crate) async fn with_durable_write<T>(
        &self,
        call: impl AsyncFnOnce(&Db<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if !self.config.uses_transaction_pooling() {
            return self.with_response_timeout(call).await;
        }
        let after = self.config.effective_response_timeout();
        let begin = format!(
            "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit = {}",
            self.config.synchronous_commit_level().as_str()
        );
        let mut open = OpenTransaction {
            client: Some(self.client().await?),
            ended: false,
        };
        let answered = tokio::time::timeout(after, async {
            let Some(client) = open.client.as_ref() else {
                return (
                    Err(StoreError::Connection(ConnectionError::Pool(
                        "no pooled connection".into(),
                    ))),
                    false,
                );
            };
            let db = Db::client(client, true);
            let (began, out) =
                futures_util::future::join(client.batch_execute(&begin), call(&db)).await;
            let end = if began.is_ok() && out.is_ok() {
                "COMMIT"
            } else {
                "ROLLBACK"
            };
            let ended = client.batch_execute(end).await;
            let ended_cleanly = ended.is_ok();
            let result = match (began, out, ended) {
                (Err(e), _, _) => Err(StoreError::from(e)),
                (Ok(()), Err(e), _) => Err(e),
                (Ok(()), Ok(_), Err(e)) => Err(StoreError::from(e)),
                (Ok(()), Ok(out), Ok(())) => Ok(out),
            };
            (result, ended_cleanly)
        })
        .await;
        match answered {
            Ok((result, ended_cleanly)) => {
                // A transaction whose end failed leaves the connection in
                // an unknown state: it is closed when `open` drops.
                open.ended = ended_cleanly;
                result
            }
            Err(_) => Err(StoreError::Connection(ConnectionError::ResponseTimeout {
                after,
            })),
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
        let set_local = self.set_local_synchronous_commit();
        let answered = tokio::time::timeout(after, async {
            let tx = PgStore::begin(&mut client).await?;
            if let Some(set_local) = &set_local {
                tx.batch_execute(set_local).await?;
            }
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
                Err(StoreError::Connection(ConnectionError::ResponseTimeout {
                    after,
                }))
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
        let set_local = self.set_local_synchronous_commit();
        let answered = tokio::time::timeout(after, async {
            let tx = PgStore::begin(&mut client).await?;
            if let Some(set_local) = &set_local {
                tx.batch_execute(set_local).await?;
            }
            let out = call(&tx).await?;
            tx.commit().await?;
            Ok(out)
        })
        .await;
        match answered {
            Ok(result) => result,
            Err(_) => {
                drop(deadpool_postgres::Object::take(client));
                Err(StoreError::Connection(ConnectionError::ResponseTimeout {
                    after,
                }))
            }
        }
    }

    /// Under transaction pooling, the statement that puts the store's
    /// `synchronous_commit` in force for one transaction (the session's is
    /// the shared server connection's, not this store's); `None` otherwise.
    /// One round trip at the start of each transaction of
    /// [`in_transaction`](Self::in_transaction) and
    /// [`in_generic_transaction`](Self::in_generic_transaction).
    fn set_local_synchronous_commit(&self) -> Option<String> {
        self.config.uses_transaction_pooling().then(|| {
            format!(
                "SET LOCAL synchronous_commit = {}",
                self.config.synchronous_commit_level().as_str()
            )
        })
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

/// A pooled connection with an explicit transaction begun by a simple
/// query: closed when dropped before the transaction ended (never handed
/// back to the pool inside it).
struct OpenTransaction {
    client: Option<deadpool_postgres::Object>,
    ended: bool,
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            if !self.ended {
                drop(deadpool_postgres::Object::take(client));
            }
        }
    }
}

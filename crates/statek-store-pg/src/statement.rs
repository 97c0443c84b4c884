//! How every store statement is sent, chosen in one place.
//!
//! Normally a statement is prepared once per connection and cached
//! (`prepare_typed_cached`): later calls skip the parse. Under transaction
//! pooling (PgBouncer `pool_mode = transaction`,
//! [`crate::StoreConfig::transaction_pooling`]) consecutive statements of
//! one client connection may reach different server connections, so no
//! named prepared statement may outlive its transaction: every statement
//! is then sent unnamed, parse, bind and execute in one exchange
//! (tokio-postgres `query_typed`). Both routes take the same explicit
//! parameter types, so a statement behaves the same either way.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error, Row, Statement};

/// One parameter with its PostgreSQL type.
pub(crate) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// Where statements go: a pooled connection (autocommit) or a transaction
/// on one.
enum Target<'a> {
    Client(&'a deadpool_postgres::ClientWrapper),
    Transaction(&'a deadpool_postgres::Transaction<'a>),
}

/// A pooled connection or transaction plus the statement mode of the
/// store. Built only by [`crate::PgStore`]'s call wrappers, which also
/// apply the response timeout.
pub(crate) struct Db<'a> {
    target: Target<'a>,
    unnamed: bool,
}

impl<'a> Db<'a> {
    pub(crate) fn client(client: &'a deadpool_postgres::ClientWrapper, unnamed: bool) -> Self {
        Self {
            target: Target::Client(client),
            unnamed,
        }
    }

    pub(crate) fn transaction(tx: &'a deadpool_postgres::Transaction<'a>, unnamed: bool) -> Self {
        Self {
            target: Target::Transaction(tx),
            unnamed,
        }
    }

    async fn prepared(&self, sql: &str, params: &[Param<'_>]) -> Result<Statement, Error> {
        let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
        match &self.target {
            Target::Client(c) => c.prepare_typed_cached(sql, &types).await,
            Target::Transaction(t) => t.prepare_typed_cached(sql, &types).await,
        }
    }

    fn values<'p>(params: &'p [Param<'_>]) -> Vec<&'p (dyn ToSql + Sync)> {
        params.iter().map(|(v, _)| *v).collect()
    }

    /// All rows of `sql`.
    pub(crate) async fn query(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, Error> {
        if self.unnamed {
            return match &self.target {
                Target::Client(c) => c.query_typed(sql, params).await,
                Target::Transaction(t) => t.query_typed(sql, params).await,
            };
        }
        let statement = self.prepared(sql, params).await?;
        let values = Self::values(params);
        match &self.target {
            Target::Client(c) => c.query(&statement, &values).await,
            Target::Transaction(t) => t.query(&statement, &values).await,
        }
    }

    /// Exactly one row of `sql` (an error otherwise).
    pub(crate) async fn query_one(&self, sql: &str, params: &[Param<'_>]) -> Result<Row, Error> {
        if self.unnamed {
            return match &self.target {
                Target::Client(c) => c.query_typed_one(sql, params).await,
                Target::Transaction(t) => t.query_typed_one(sql, params).await,
            };
        }
        let statement = self.prepared(sql, params).await?;
        let values = Self::values(params);
        match &self.target {
            Target::Client(c) => c.query_one(&statement, &values).await,
            Target::Transaction(t) => t.query_one(&statement, &values).await,
        }
    }

    /// At most one row of `sql` (an error for more).
    pub(crate) async fn query_opt(
        &self,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Option<Row>, Error> {
        if self.unnamed {
            return match &self.target {
                Target::Client(c) => c.query_typed_opt(sql, params).await,
                Target::Transaction(t) => t.query_typed_opt(sql, params).await,
            };
        }
        let statement = self.prepared(sql, params).await?;
        let values = Self::values(params);
        match &self.target {
            Target::Client(c) => c.query_opt(&statement, &values).await,
            Target::Transaction(t) => t.query_opt(&statement, &values).await,
        }
    }

    /// The number of rows `sql` changed.
    pub(crate) async fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<u64, Error> {
        if self.unnamed {
            let params = params.iter().map(|(v, t)| (*v, t.clone()));
            let stream = match &self.target {
                Target::Client(c) => c.query_typed_raw(sql, params).await?,
                Target::Transaction(t) => t.query_typed_raw(sql, params).await?,
            };
            let mut stream = std::pin::pin!(stream);
            while futures_util::TryStreamExt::try_next(&mut stream)
                .await?
                .is_some()
            {}
            return Ok(stream.rows_affected().unwrap_or(0));
        }
        let statement = self.prepared(sql, params).await?;
        let values = Self::values(params);
        match &self.target {
            Target::Client(c) => c.execute(&statement, &values).await,
            Target::Transaction(t) => t.execute(&statement, &values).await,
        }
    }

    /// Statements without parameters, sent as one simple query (never
    /// prepared, so the same in both modes).
    pub(crate) async fn batch_execute(&self, sql: &str) -> Result<(), Error> {
        match &self.target {
            Target::Client(c) => c.batch_execute(sql).await,
            Target::Transaction(t) => t.batch_execute(sql).await,
        }
    }
}

//! Connection and pool settings for [`crate::PgStore`].

use std::str::FromStr;
use std::time::Duration;

use crate::conninfo::{self, SslMode};
use crate::tls::TlsSettings;
use crate::StoreError;

/// How a [`crate::PgStore`] connects and how long it waits.
///
/// Defaults suit a scheduler replica: a pool of 8 connections, 5 s to wait
/// for a pooled connection, 5 s to open one, 5 s to recycle one, and
/// per-transaction `lock_timeout` 5 s and `statement_timeout` 10 s. Each
/// timeout must lie in 1 ms..=10 minutes; the pool size in 1..=1024.
/// Connections are not verified with a query on checkout (see
/// [`verify_on_checkout`](Self::verify_on_checkout)).
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pg: tokio_postgres::Config,
    tls: TlsSettings,
    pool_size: usize,
    wait_timeout: Duration,
    create_timeout: Duration,
    recycle_timeout: Duration,
    lock_timeout: Duration,
    statement_timeout: Duration,
    verify_on_checkout: bool,
    response_timeout: Option<Duration>,
}

const MIN_TIMEOUT: Duration = Duration::from_millis(1);
const MAX_TIMEOUT: Duration = Duration::from_secs(600);

impl StoreConfig {
    /// Settings for a libpq-style connection string or URL
    /// (`postgres://user@host:port/db?sslmode=verify-full&sslrootcert=ca.crt`,
    /// or `host=... user=... sslmode=...`). The string is never logged.
    ///
    /// TLS follows libpq: `sslmode` disable, prefer (the default), require,
    /// verify-ca or verify-full; `sslrootcert` (a PEM file, or `system` for
    /// the operating system's roots; default `~/.postgresql/root.crt` when
    /// it exists), `sslcert` and `sslkey` (a client certificate; default
    /// `~/.postgresql/postgresql.crt`/`.key` when the certificate exists),
    /// `sslsni`. `require` encrypts without checking the certificate
    /// (unless a root file exists, then like verify-ca, as libpq);
    /// verify-ca checks the chain, verify-full also the host name. Over
    /// Unix sockets TLS is never used. Certificate files are read here.
    ///
    /// # Errors
    /// [`StoreError::InvalidConnectionString`] if the string does not
    /// parse, has an unknown parameter or value, or names no host or no
    /// user; [`StoreError::TlsConfiguration`] if a TLS file cannot be read
    /// or used. Neither repeats the string (it may hold a password).
    pub fn from_url(url: &str) -> Result<Self, StoreError> {
        let split = conninfo::split(url)?;
        let mut pg = tokio_postgres::Config::from_str(&split.rest).map_err(|e| {
            // tokio-postgres names the parameter, never its value.
            let cause = std::error::Error::source(&e)
                .map(|cause| format!(": {cause}"))
                .unwrap_or_default();
            StoreError::InvalidConnectionString(format!("it does not parse: {e}{cause}"))
        })?;
        if pg.get_hosts().is_empty() && pg.get_hostaddrs().is_empty() {
            return Err(StoreError::InvalidConnectionString(
                "it names no host (postgres://HOST/DB or host=HOST)".to_owned(),
            ));
        }
        if pg.get_user().is_none_or(str::is_empty) {
            return Err(StoreError::InvalidConnectionString(
                "it names no user (postgres://USER@HOST/DB or user=USER)".to_owned(),
            ));
        }
        let only_unix_sockets = !pg.get_hosts().is_empty()
            && pg.get_hostaddrs().is_empty()
            && pg
                .get_hosts()
                .iter()
                .all(|host| !matches!(host, tokio_postgres::config::Host::Tcp(_)));
        let tls = TlsSettings::from_params(&split.tls, only_unix_sockets)?;
        pg.ssl_mode(tls.mode().for_tokio_postgres());
        if pg.get_application_name().is_none() {
            pg.application_name("statek");
        }
        Ok(Self::with_tls(pg, tls))
    }

    /// Settings for an already built `tokio_postgres::Config`. TLS follows
    /// its `ssl_mode` (disable, prefer, require) without checking the
    /// server's certificate; use [`from_url`](Self::from_url) with
    /// `sslmode=verify-full` to check it.
    pub fn from_pg_config(pg: tokio_postgres::Config) -> Self {
        let mode = match pg.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => SslMode::Disable,
            tokio_postgres::config::SslMode::Require => SslMode::Require,
            _ => SslMode::Prefer,
        };
        Self::with_tls(pg, TlsSettings::unverified(mode))
    }

    fn with_tls(pg: tokio_postgres::Config, tls: TlsSettings) -> Self {
        Self {
            pg,
            tls,
            pool_size: 8,
            wait_timeout: Duration::from_secs(5),
            create_timeout: Duration::from_secs(5),
            recycle_timeout: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            verify_on_checkout: false,
            response_timeout: None,
        }
    }

    /// The effective `sslmode` (`disable` over Unix sockets; `verify-full`
    /// with `sslrootcert=system` and no explicit mode).
    pub fn ssl_mode(&self) -> SslMode {
        self.tls.mode()
    }

    /// Opens one plain connection outside any pool, with these settings
    /// (TLS included) but without the pool's `lock_timeout` and
    /// `statement_timeout`. The connection is driven by a spawned task and
    /// closes when the client is dropped. For tools that run their own SQL
    /// (benchmarks, test fixtures).
    ///
    /// # Errors
    /// As opening a pooled connection: [`StoreError::Connection`]
    /// (retryable), or a configuration error
    /// ([`StoreError::is_configuration`]).
    pub async fn connect_client(&self) -> Result<tokio_postgres::Client, StoreError> {
        let (client, connection) = self
            .pg
            .connect(self.tls_connector()?)
            .await
            .map_err(StoreError::from_connect)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "unpooled connection ended with an error");
            }
        });
        Ok(client)
    }

    /// The TLS connector for every connection of this configuration.
    pub(crate) fn tls_connector(
        &self,
    ) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
        self.tls.connector()
    }

    /// Whether a pooled connection is checked with an empty query before
    /// each use (default: no). Off, a connection whose socket is closed is
    /// discarded at checkout, and one that is open but dead (a peer that
    /// stopped answering without closing the socket) fails the reservation
    /// after the [`response_timeout`](Self::response_timeout) with a
    /// retryable error and is discarded; the scheduler retries with the same
    /// id. On, a dead connection is usually caught at checkout instead, at
    /// the price of one extra round trip per transaction.
    pub fn verify_on_checkout(mut self, verify: bool) -> Self {
        self.verify_on_checkout = verify;
        self
    }

    pub(crate) fn verifies_on_checkout(&self) -> bool {
        self.verify_on_checkout
    }

    /// Maximum number of pooled connections (1..=1024).
    pub fn pool_size(mut self, size: usize) -> Result<Self, StoreError> {
        if !(1..=1024).contains(&size) {
            return Err(StoreError::InvalidArgument(format!(
                "pool size must be 1..=1024, got {size}"
            )));
        }
        self.pool_size = size;
        Ok(self)
    }

    /// How long a caller waits for a free pooled connection.
    pub fn wait_timeout(mut self, timeout: Duration) -> Result<Self, StoreError> {
        self.wait_timeout = check_timeout("wait timeout", timeout)?;
        Ok(self)
    }

    /// How long opening a new connection may take.
    pub fn create_timeout(mut self, timeout: Duration) -> Result<Self, StoreError> {
        self.create_timeout = check_timeout("create timeout", timeout)?;
        Ok(self)
    }

    /// How long verifying a returned connection before reuse may take.
    pub fn recycle_timeout(mut self, timeout: Duration) -> Result<Self, StoreError> {
        self.recycle_timeout = check_timeout("recycle timeout", timeout)?;
        Ok(self)
    }

    /// `lock_timeout` set on every store transaction (SQLSTATE 55P03 when hit,
    /// retryable).
    pub fn lock_timeout(mut self, timeout: Duration) -> Result<Self, StoreError> {
        self.lock_timeout = check_timeout("lock timeout", timeout)?;
        Ok(self)
    }

    /// `statement_timeout` set on every store transaction (SQLSTATE 57014
    /// when hit, retryable).
    pub fn statement_timeout(mut self, timeout: Duration) -> Result<Self, StoreError> {
        self.statement_timeout = check_timeout("statement timeout", timeout)?;
        Ok(self)
    }

    /// How long the calls on a scheduler's hot path (`reserve`,
    /// `reserve_batch`, `claim_run`, `heartbeat_run`, `complete_run`,
    /// `fail_run`) wait for the server's answer before they give up on the
    /// connection: it is discarded (never returned to the pool) and the call
    /// fails with the retryable [`StoreError::ResponseTimeout`]. The
    /// statement may still commit on the server, exactly as after a lost
    /// acknowledgement: retry a reservation with the same id; a claim whose
    /// answer was lost expires with its lease. Default: `statement_timeout` + 5 s (the server gives up
    /// first on a slow statement; this catches a silent network).
    pub fn response_timeout(mut self, timeout: Duration) -> Result<Self, StoreError> {
        self.response_timeout = Some(check_timeout("response timeout", timeout)?);
        Ok(self)
    }

    /// The effective response timeout (see
    /// [`response_timeout`](Self::response_timeout)).
    pub fn effective_response_timeout(&self) -> Duration {
        self.response_timeout
            .unwrap_or(self.statement_timeout + Duration::from_secs(5))
    }

    /// The connection settings.
    pub fn pg_config(&self) -> &tokio_postgres::Config {
        &self.pg
    }

    /// Maximum number of pooled connections.
    pub fn max_pool_size(&self) -> usize {
        self.pool_size
    }

    pub(crate) fn timeouts(&self) -> (Duration, Duration, Duration) {
        (self.wait_timeout, self.create_timeout, self.recycle_timeout)
    }

    /// The connection settings for pooled connections: the configured ones
    /// plus `lock_timeout` and `statement_timeout`, sent as startup options so
    /// that they hold for every transaction without an extra round trip.
    pub(crate) fn pooled_pg_config(&self) -> tokio_postgres::Config {
        let mut pg = self.pg.clone();
        let mut options = pg.get_options().unwrap_or_default().to_owned();
        if !options.is_empty() {
            options.push(' ');
        }
        options.push_str(&format!(
            "-c lock_timeout={} -c statement_timeout={}",
            self.lock_timeout.as_millis(),
            self.statement_timeout.as_millis()
        ));
        pg.options(&options);
        pg
    }
}

fn check_timeout(what: &str, timeout: Duration) -> Result<Duration, StoreError> {
    if timeout < MIN_TIMEOUT || timeout > MAX_TIMEOUT {
        return Err(StoreError::InvalidArgument(format!(
            "{what} must be 1 ms..=600 s, got {timeout:?}"
        )));
    }
    Ok(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_values_without_echoing_the_url() {
        let err = StoreConfig::from_url("postgres://u:sekret@host:notaport/db").unwrap_err();
        assert!(!err.to_string().contains("sekret"), "{err}");
        assert_eq!(
            err.to_string(),
            "invalid connection string: it does not parse: invalid connection string: invalid value for option `port`"
        );
        assert!(err.is_configuration() && !err.is_retryable());
        let cfg = StoreConfig::from_url("postgres://u@localhost/db").unwrap();
        assert!(cfg.clone().pool_size(0).is_err());
        assert!(cfg.clone().pool_size(1025).is_err());
        assert_eq!(cfg.clone().pool_size(1024).unwrap().max_pool_size(), 1024);
        assert!(cfg.clone().lock_timeout(Duration::ZERO).is_err());
        assert!(cfg
            .clone()
            .statement_timeout(Duration::from_secs(601))
            .is_err());
        assert_eq!(
            cfg.lock_timeout(Duration::from_millis(250))
                .unwrap()
                .pooled_pg_config()
                .get_options(),
            Some("-c lock_timeout=250 -c statement_timeout=10000")
        );
        let with_options =
            StoreConfig::from_url("postgres://u@localhost/db?options=-c%20search_path%3Dx")
                .unwrap()
                .pooled_pg_config();
        assert_eq!(
            with_options.get_options(),
            Some("-c search_path=x -c lock_timeout=5000 -c statement_timeout=10000")
        );
    }

    fn refused(url: &str, message: &str) {
        let err = StoreConfig::from_url(url).unwrap_err();
        assert_eq!(err.to_string(), message, "{url}");
        assert!(err.is_configuration() && !err.is_retryable(), "{url}");
    }

    #[test]
    fn unusable_strings_are_configuration_errors() {
        refused(
            "",
            "invalid connection string: the connection string is empty",
        );
        refused(
            "postgres://",
            "invalid connection string: it names no host (postgres://HOST/DB or host=HOST)",
        );
        refused(
            "postgres://h/db",
            "invalid connection string: it names no user (postgres://USER@HOST/DB or user=USER)",
        );
        refused(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent/statek-ca.crt",
            "tls configuration: cannot read the root certificate (sslrootcert) file \"/nonexistent/statek-ca.crt\"",
        );
        refused(
            "postgres://u@h/db?sslmode=require&sslrootcert=system",
            "tls configuration: weak sslmode require may not be used with sslrootcert=system (use verify-full)",
        );
    }

    #[test]
    fn ssl_modes_as_libpq() {
        let mode = |url: &str| StoreConfig::from_url(url).unwrap().ssl_mode();
        assert_eq!(mode("postgres://u@h/db?sslmode=disable"), SslMode::Disable);
        assert_eq!(mode("host=h user=u sslmode=require"), SslMode::Require);
        // Over a Unix socket libpq never uses TLS.
        assert_eq!(
            mode("host=/run/postgresql user=u sslmode=require"),
            SslMode::Disable
        );
        let pg = StoreConfig::from_url("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(
            pg.pg_config().get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
    }
}

//! Connection and pool settings for [`crate::PgStore`].

use crate::ConnectionError;
use std::str::FromStr;
use std::time::Duration;

use crate::conninfo::{self, SslMode};
use crate::durability_report::{DurabilityPolicy, SynchronousCommit};
use crate::lost_reservations::LostReservationAction;
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
///
/// Durability defaults are the safe ones: every statek session commits with
/// `synchronous_commit = on` whatever the server's default
/// ([`synchronous_commit`](Self::synchronous_commit)), unsafe server settings
/// and asynchronous standbys are refused
/// ([`durability_policy`](Self::durability_policy)), and a shard on which a
/// failover lost acknowledged reservations stops
/// ([`on_lost_reservations`](Self::on_lost_reservations)).
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
    maintenance_timeout: Duration,
    transaction_pooling: bool,
    direct: Option<tokio_postgres::Config>,
    listen_probe_interval: Duration,
    synchronous_commit: SynchronousCommit,
    durability_policy: DurabilityPolicy,
    failover_ring: usize,
    on_lost_reservations: LostReservationAction,
}

/// The default number of recently acknowledged reservations a store keeps
/// per shard to detect a failover that lost them.
pub const DEFAULT_FAILOVER_RING: usize = 10_000;

const MIN_TIMEOUT: Duration = Duration::from_millis(1);
const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// The longest maintenance timeout: 1 hour.
const MAX_MAINTENANCE_TIMEOUT: Duration = Duration::from_secs(3600);

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
    /// [`ConnectionError::InvalidConnectionString`](crate::ConnectionError::InvalidConnectionString) if the string does not
    /// parse, has an unknown parameter or value, or names no host or no
    /// user; [`ConnectionError::TlsConfiguration`](crate::ConnectionError::TlsConfiguration) if a TLS file cannot be read
    /// or used. Neither repeats the string (it may hold a password).
    pub fn from_url(url: &str) -> Result<Self, StoreError> {
        let split = conninfo::split(url)?;
        let mut pg = tokio_postgres::Config::from_str(&split.rest).map_err(|e| {
            // tokio-postgres names the parameter, never its value.
            let cause = std::error::Error::source(&e)
                .map(|cause| format!(": {cause}"))
                .unwrap_or_default();
            StoreError::Connection(ConnectionError::InvalidConnectionString(format!(
                "it does not parse: {e}{cause}"
            )))
        })?;
        if pg.get_hosts().is_empty() && pg.get_hostaddrs().is_empty() {
            return Err(StoreError::Connection(
                ConnectionError::InvalidConnectionString(
                    "it names no host (postgres://HOST/DB or host=HOST)".to_owned(),
                ),
            ));
        }
        if pg.get_user().is_none_or(str::is_empty) {
            return Err(StoreError::Connection(
                ConnectionError::InvalidConnectionString(
                    "it names no user (postgres://USER@HOST/DB or user=USER)".to_owned(),
                ),
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
            maintenance_timeout: Duration::from_secs(600),
            transaction_pooling: false,
            direct: None,
            listen_probe_interval: Duration::from_secs(30),
            synchronous_commit: SynchronousCommit::On,
            durability_policy: DurabilityPolicy::Require,
            failover_ring: DEFAULT_FAILOVER_RING,
            on_lost_reservations: LostReservationAction::Halt,
        }
    }

    /// The `synchronous_commit` every statek session and every reservation
    /// transaction commits with, whatever the server's or the role's default
    /// (default: [`SynchronousCommit::On`]). It is sent as a startup option
    /// of every pooled connection and set again by the reservation
    /// functions for their own transaction, so it also holds behind
    /// PgBouncer in transaction mode. See [`SynchronousCommit`] for what
    /// each level survives; [`SynchronousCommit::Off`] and
    /// [`SynchronousCommit::Local`] are refused by
    /// [`DurabilityPolicy::Require`] when they do not wait for the
    /// standbys a failover could promote.
    pub fn synchronous_commit(mut self, level: SynchronousCommit) -> Self {
        self.synchronous_commit = level;
        self
    }

    /// The configured `synchronous_commit`.
    pub fn synchronous_commit_level(&self) -> SynchronousCommit {
        self.synchronous_commit
    }

    /// What the durability check at `register` and at Worker start does
    /// with what it finds (default: [`DurabilityPolicy::Require`]).
    pub fn durability_policy(mut self, policy: DurabilityPolicy) -> Self {
        self.durability_policy = policy;
        self
    }

    /// The configured durability policy.
    pub fn configured_durability_policy(&self) -> DurabilityPolicy {
        self.durability_policy
    }

    /// How many recently acknowledged reservations (a batch counts once)
    /// the store remembers per shard, 1..=1,000,000 (default
    /// [`DEFAULT_FAILOVER_RING`]). When the server's timeline changes (a
    /// promotion), the store re-reads them before it reserves again; a loss
    /// older than the ring cannot be seen.
    pub fn failover_ring(mut self, reservations: usize) -> Result<Self, StoreError> {
        if !(1..=1_000_000).contains(&reservations) {
            return Err(StoreError::InvalidArgument(format!(
                "failover ring must hold 1..=1000000 reservations, got {reservations}"
            )));
        }
        self.failover_ring = reservations;
        Ok(self)
    }

    pub(crate) fn failover_ring_capacity(&self) -> usize {
        self.failover_ring
    }

    /// What a reservation does after the store found acknowledged
    /// reservations lost in a failover (default:
    /// [`LostReservationAction::Halt`]: every later reservation on that
    /// shard fails with the same error).
    pub fn on_lost_reservations(mut self, action: LostReservationAction) -> Self {
        self.on_lost_reservations = action;
        self
    }

    pub(crate) fn lost_reservation_action(&self) -> LostReservationAction {
        self.on_lost_reservations
    }

    /// Transaction pooling mode (default: off): set it when the URL points
    /// at a pooler in transaction mode (PgBouncer `pool_mode = transaction`),
    /// which may hand consecutive statements of one connection to different
    /// server connections. Then:
    ///
    /// - every statement is sent unnamed (parse, bind, execute in one
    ///   exchange) instead of as a cached prepared statement, which works
    ///   with PgBouncer versions without `max_prepared_statements` (before
    ///   1.21);
    /// - no `options` startup parameter is sent (PgBouncer before 1.20
    ///   refuses it unless `ignore_startup_parameters` lists it), so
    ///   `lock_timeout` and `statement_timeout` must come from the role or
    ///   database (`ALTER ROLE ... SET lock_timeout = '5000ms'`);
    ///   [`crate::PgStore::register`] checks that the server's values equal
    ///   this configuration's and refuses with
    ///   [`ConnectionError::SessionSettingMismatch`](crate::ConnectionError::SessionSettingMismatch) otherwise, naming the
    ///   statement to run;
    /// - `LISTEN` ([`crate::PgStore::listen_for_runs`]) and migrations need
    ///   a session of their own: they use the [`direct_url`](Self::direct_url)
    ///   and fail with [`ConnectionError::DirectConnectionRequired`](crate::ConnectionError::DirectConnectionRequired) without one
    ///   (a worker then relies on its idle probe instead of notifications).
    pub fn transaction_pooling(mut self, on: bool) -> Self {
        self.transaction_pooling = on;
        self
    }

    /// Whether [`transaction_pooling`](Self::transaction_pooling) is on.
    pub fn uses_transaction_pooling(&self) -> bool {
        self.transaction_pooling
    }

    /// A direct connection (to PostgreSQL itself, or through a pool in
    /// session mode) to the same database, for what needs a session of its
    /// own: the `LISTEN` connection and migrations. Without it they use the
    /// main URL (which must then not be a transaction-mode pool). The
    /// string is never logged.
    ///
    /// It uses the TLS settings of the main connection string.
    ///
    /// # Errors
    /// [`ConnectionError::InvalidConnectionString`](crate::ConnectionError::InvalidConnectionString) if the string does not parse
    /// or carries TLS parameters of its own.
    pub fn direct_url(self, url: &str) -> Result<Self, StoreError> {
        let split = conninfo::split(url)?;
        if split.tls != conninfo::TlsParams::default() {
            return Err(StoreError::Connection(
                ConnectionError::InvalidConnectionString(
                    "the direct connection uses the main connection string's TLS settings: \
                 give sslmode, sslrootcert, sslcert and sslkey there only"
                        .to_owned(),
                ),
            ));
        }
        let mut pg = tokio_postgres::Config::from_str(&split.rest).map_err(|e| {
            StoreError::Connection(ConnectionError::InvalidConnectionString(format!(
                "the direct one does not parse: {e}"
            )))
        })?;
        pg.ssl_mode(self.tls.mode().for_tokio_postgres());
        if pg.get_application_name().is_none() {
            pg.application_name("statek");
        }
        Ok(self.direct_pg_config(pg))
    }

    /// As [`direct_url`](Self::direct_url), from a built config.
    pub fn direct_pg_config(mut self, pg: tokio_postgres::Config) -> Self {
        self.direct = Some(pg);
        self
    }

    /// The direct connection's settings, if one was given.
    pub fn direct_connection(&self) -> Option<&tokio_postgres::Config> {
        self.direct.as_ref()
    }

    /// How long migrations ([`crate::PgStore::migrate`]), one prune batch
    /// and applying the role profile may wait for the server before they
    /// give up with the retryable [`ConnectionError::ResponseTimeout`](crate::ConnectionError::ResponseTimeout) (the
    /// connection is closed; a migration's advisory lock is released with
    /// it). Default 600 s; 1 ms..=3600 s. Migrations run without
    /// `lock_timeout` and `statement_timeout`, so this is their only bound.
    pub fn maintenance_timeout(mut self, timeout: Duration) -> Result<Self, StoreError> {
        if timeout < MIN_TIMEOUT || timeout > MAX_MAINTENANCE_TIMEOUT {
            return Err(StoreError::InvalidArgument(format!(
                "maintenance timeout must be 1 ms..=3600 s, got {timeout:?}"
            )));
        }
        self.maintenance_timeout = timeout;
        Ok(self)
    }

    /// The maintenance timeout (see
    /// [`maintenance_timeout`](Self::maintenance_timeout)).
    pub fn effective_maintenance_timeout(&self) -> Duration {
        self.maintenance_timeout
    }

    /// How often the `LISTEN` connection ([`crate::PgStore::listen_for_runs`])
    /// sends an empty query to prove the link alive (default 30 s; 1 ms..=600 s).
    /// A probe unanswered within the [`response_timeout`](Self::response_timeout)
    /// ends the connection and reports [`ConnectionError::ResponseTimeout`](crate::ConnectionError::ResponseTimeout) on the
    /// notification stream. The connection also uses TCP keepalives (idle
    /// 30 s, then every 10 s, 3 probes).
    pub fn listen_probe_interval(mut self, every: Duration) -> Result<Self, StoreError> {
        self.listen_probe_interval = check_timeout("listen probe interval", every)?;
        Ok(self)
    }

    /// The `LISTEN` probe interval (see
    /// [`listen_probe_interval`](Self::listen_probe_interval)).
    pub fn effective_listen_probe_interval(&self) -> Duration {
        self.listen_probe_interval
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
    /// As opening a pooled connection: [`ConnectionError::Lost`](crate::ConnectionError::Lost)
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

    /// How long every store call except maintenance waits for the server's
    /// answer before it gives up on the connection: reservations (one slot
    /// and batches, with the re-check of acknowledged reservations after a
    /// failover), registration, shard reads and status, rollouts and the
    /// reads of a schedule's live shard and seams, the durability check,
    /// tenant limits (set, show, clear), the whole run queue (the store's
    /// own enqueue; one on the caller's client runs under the caller's rules;
    /// claims for a batch's slots, heartbeats, completions and their
    /// batches, the idle probe `any_claimable_runs`, the lease expiry pass,
    /// and the operator calls list, look up, cancel, retry and count), and
    /// the count of finished runs awaiting retention. The connection is
    /// discarded (never returned to the pool) and the call fails with the
    /// retryable [`ConnectionError::ResponseTimeout`](crate::ConnectionError::ResponseTimeout). Migrations, pruning of
    /// reservations and of finished runs, and the role profile have their
    /// own, longer [`maintenance_timeout`](Self::maintenance_timeout). The
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

    /// The settings every pooled session of statek runs with, as
    /// (name, value) pairs: one list, sent as startup options normally and
    /// expected from the role or database under transaction pooling
    /// ([`transaction_pooling`](Self::transaction_pooling)). A value is
    /// written in the setting's base unit (`5000ms`) or without one (`on`),
    /// as `pg_settings.setting || unit` shows it, so the pooling check can
    /// compare it exactly.
    pub(crate) fn session_settings(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "lock_timeout",
                format!("{}ms", self.lock_timeout.as_millis()),
            ),
            (
                "statement_timeout",
                format!("{}ms", self.statement_timeout.as_millis()),
            ),
            (
                "synchronous_commit",
                self.synchronous_commit.as_str().to_owned(),
            ),
        ]
    }

    /// The connection settings for pooled connections: the configured ones
    /// plus [`session_settings`](Self::session_settings), sent as startup
    /// options so that they hold for every transaction without an extra
    /// round trip. Under transaction pooling nothing is added (the pooler
    /// may refuse the `options` parameter).
    pub(crate) fn pooled_pg_config(&self) -> tokio_postgres::Config {
        let mut pg = self.pg.clone();
        if self.transaction_pooling {
            return pg;
        }
        let mut options = pg.get_options().unwrap_or_default().to_owned();
        for (name, value) in self.session_settings() {
            if !options.is_empty() {
                options.push(' ');
            }
            options.push_str(&format!("-c {name}={value}"));
        }
        pg.options(&options);
        pg
    }

    /// The settings of a connection that needs a session of its own
    /// (`LISTEN`, migrations): the direct connection if given, else the
    /// main one.
    ///
    /// # Errors
    /// [`ConnectionError::DirectConnectionRequired`](crate::ConnectionError::DirectConnectionRequired) under transaction pooling
    /// without a direct connection.
    pub(crate) fn session_pg_config(
        &self,
        what: &'static str,
    ) -> Result<tokio_postgres::Config, StoreError> {
        match (&self.direct, self.transaction_pooling) {
            (Some(direct), _) => Ok(direct.clone()),
            (None, false) => Ok(self.pg.clone()),
            (None, true) => Err(StoreError::Connection(
                ConnectionError::DirectConnectionRequired { what },
            )),
        }
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

    fn cfg_ring_rejects(size: usize) -> bool {
        StoreConfig::from_url("postgres://u@localhost/db")
            .unwrap()
            .failover_ring(size)
            .is_err()
    }

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
            Some("-c lock_timeout=250ms -c statement_timeout=10000ms -c synchronous_commit=on")
        );
        let with_options =
            StoreConfig::from_url("postgres://u@localhost/db?options=-c%20search_path%3Dx")
                .unwrap()
                .pooled_pg_config();
        assert_eq!(
            with_options.get_options(),
            Some(
                "-c search_path=x -c lock_timeout=5000ms -c statement_timeout=10000ms \
                 -c synchronous_commit=on"
            )
        );
        assert_eq!(
            StoreConfig::from_url("postgres://u@localhost/db")
                .unwrap()
                .synchronous_commit(SynchronousCommit::RemoteApply)
                .pooled_pg_config()
                .get_options(),
            Some(
                "-c lock_timeout=5000ms -c statement_timeout=10000ms \
                 -c synchronous_commit=remote_apply"
            )
        );
        assert!(cfg_ring_rejects(0));
        assert!(cfg_ring_rejects(1_000_001));
        assert!(!cfg_ring_rejects(1));
    }

    #[test]
    fn maintenance_and_probe_limits() {
        let cfg = StoreConfig::from_url("postgres://u@localhost/db").unwrap();
        assert_eq!(
            cfg.effective_maintenance_timeout(),
            Duration::from_secs(600)
        );
        assert!(cfg.clone().maintenance_timeout(Duration::ZERO).is_err());
        assert!(cfg
            .clone()
            .maintenance_timeout(Duration::from_secs(3601))
            .is_err());
        assert_eq!(
            cfg.clone()
                .maintenance_timeout(Duration::from_secs(3600))
                .unwrap()
                .effective_maintenance_timeout(),
            Duration::from_secs(3600)
        );
        assert_eq!(
            cfg.effective_listen_probe_interval(),
            Duration::from_secs(30)
        );
        assert!(cfg.clone().listen_probe_interval(Duration::ZERO).is_err());
        assert!(cfg
            .clone()
            .listen_probe_interval(Duration::from_secs(601))
            .is_err());
    }

    #[test]
    fn transaction_pooling_sends_no_options_and_needs_a_direct_connection() {
        let cfg = StoreConfig::from_url("postgres://u@localhost/db").unwrap();
        assert!(!cfg.uses_transaction_pooling());
        assert!(cfg.session_pg_config("LISTEN").is_ok());
        let pooled = cfg.clone().transaction_pooling(true);
        assert!(pooled.uses_transaction_pooling());
        assert_eq!(pooled.pooled_pg_config().get_options(), None);
        assert_eq!(
            pooled.session_settings(),
            vec![
                ("lock_timeout", "5000ms".to_owned()),
                ("statement_timeout", "10000ms".to_owned()),
                ("synchronous_commit", "on".to_owned())
            ]
        );
        assert!(matches!(
            pooled.session_pg_config("LISTEN"),
            Err(StoreError::Connection(
                ConnectionError::DirectConnectionRequired { what: "LISTEN" }
            ))
        ));
        let direct = pooled
            .direct_url("postgres://u@direct-host:5433/db")
            .unwrap();
        let session = direct.session_pg_config("migrations").unwrap();
        assert_eq!(session.get_ports(), &[5433]);
        assert!(cfg
            .direct_url("postgres://u:sekret@h:notaport/db")
            .is_err_and(|e| !e.to_string().contains("sekret")));
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
